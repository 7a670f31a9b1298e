"""Spill: any tool output over the cap is saved whole in the session directory, within a disk bound.

Real tools run in temp dirs against the fake server; the spilled file is compared byte for byte with
what the command or tool really produced, and read back in pieces the way the marker tells the model.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import MCP_DEMO

from kimicode import tool
from kimicode.context.output import cap_output, save_spill, set_spill_limit, spill_limit
from kimicode.session.store import delete_session
from kimicode.testing import FakeServer, Reply, ToolCall
from kimicode.tools.base import ToolContext, ToolResult
from kimicode.tools.shell import BASH, OutputBuffer

MakeAgent = Callable[..., Any]
SAVED = re.compile(r"is saved at (/\S+?\.txt)")


def tool_contents(messages: list[dict[str, Any]]) -> list[str]:
    return [str(m["content"]) for m in messages if m["role"] == "tool"]


def saved_path(content: str) -> Path:
    found = SAVED.search(content)
    assert found, f"no saved path in the marker: {content[-600:]!r}"
    return Path(found.group(1))


def test_bash_printing_3mb_keeps_the_middle_recoverable(
    server: FakeServer, make_agent: MakeAgent, workspace: Path, tmp_path: Path
) -> None:
    server.add(Reply(tool_calls=[ToolCall("bash", {"command": "seq 1 450000"})]))

    def read_middle(request: Any) -> Reply:
        result = tool_contents(request.body["messages"])[-1]
        path = saved_path(result)
        return Reply(tool_calls=[ToolCall("read_file", {"path": str(path), "offset": 225_000, "limit": 2})])

    server.add(read_middle, Reply(content="done"))
    agent = make_agent(permission_mode="yolo")
    result = agent.run_sync("print a lot")
    first, middle = tool_contents(result.messages)
    path = saved_path(first)
    assert path.parent == tmp_path / "home" / "sessions" / agent.session_id
    expected = "".join(f"{i}\n" for i in range(1, 450_001)).encode()
    assert path.read_bytes() == expected  # every byte, the middle included
    assert "\n225000\n" not in first and len(first) < 60_000
    assert f"({len(expected):,} bytes, 450,000 lines)" in first
    start = int(re.search(r"elided part starts at line ([\d,]+)", first).group(1).replace(",", ""))  # type: ignore[union-attr]
    assert first.startswith("1\n2\n") and f"\n{start - 1}\n" in first and f"\n{start + 1}\n" not in first
    assert "225000" in middle and "225001" in middle  # the model read the middle back with read_file


def test_binary_and_invalid_utf8_output_is_saved_raw(workspace: Path, tmp_path: Path) -> None:
    payload = bytes(range(256)) * 1000 + b"\xff\xfe\xc3(" * 10_000
    (workspace / "blob.bin").write_bytes(payload)
    ctx = ToolContext(workspace=workspace, session_dir=tmp_path / "session")

    async def go() -> str:
        result = await BASH.fn({"command": "cat blob.bin"}, ctx)
        assert isinstance(result, ToolResult)
        return result.content

    content = asyncio.run(go())
    path = saved_path(content)
    assert path.read_bytes() == payload
    assert "\ufffd" in content  # the model sees a lenient decoding, the file keeps the bytes


def test_every_tool_spills_through_one_place(server: FakeServer, make_agent: MakeAgent, workspace: Path) -> None:
    """grep, glob and a custom @tool: the agent's one cap spills each, whatever produced it."""
    for i in range(300):
        (workspace / f"file_{i:03d}.py").write_text("needle = 1\n" * 3)
    big = "".join(f"custom line {i}\n" for i in range(5_000))

    @tool(kind="read")
    def custom() -> str:
        """A custom tool with a lot to say."""
        return big

    server.add(
        Reply(
            tool_calls=[
                ToolCall("grep", {"pattern": "needle", "output_mode": "content"}),
                ToolCall("glob", {"pattern": "*.py"}),
                ToolCall("custom", ""),
            ]
        ),
        Reply(content="ok"),
    )
    result = make_agent(extra_tools=[custom], tool_output_cap=2_000).run_sync("look")
    grep_out, glob_out, custom_out = tool_contents(result.messages)
    for content, must in (
        (grep_out, "file_150.py:1:needle = 1"),
        (glob_out, "file_150.py"),
        (custom_out, "custom line 2500\n"),
    ):
        assert len(content) < 3_000
        assert must not in content
        assert must in saved_path(content).read_text()
    assert saved_path(custom_out).read_text() == big


def test_zero_cap_spills_everything_and_empty_output_stays_empty(tmp_path: Path) -> None:
    text = "abc\n" * 10
    out = cap_output(text, 0, tmp_path, "zero")
    assert "abc" not in out.replace(str(tmp_path), "")
    assert saved_path(out).read_text() == text
    assert cap_output("", 0, tmp_path, "empty") == ""


def test_lone_surrogates_and_escaped_bytes_do_not_break_the_spill(tmp_path: Path) -> None:
    text = "\ud800 lone" * 50 + b"\xff\xfe".decode("utf-8", "surrogateescape") * 50
    out = cap_output(text, 40, tmp_path, "weird")
    data = saved_path(out).read_bytes()
    assert data.endswith(b"\xff\xfe" * 50)  # surrogate-escaped bytes come back as the original bytes
    assert len(data) > 40


def test_disk_bound_drops_the_oldest_spill_and_says_so(tmp_path: Path) -> None:
    spill_dir = tmp_path / "s"
    set_spill_limit(spill_dir, 2_500)
    outs = [cap_output(f"{n}:" + "x" * 1_000, 100, spill_dir, f"t{n}") for n in range(3)]
    paths = [saved_path(o) for o in outs]
    assert not paths[0].exists() and paths[1].exists() and paths[2].exists()
    assert f"older saved outputs were deleted: {paths[0].name}" in outs[2]
    assert "deleted" not in outs[1]
    assert sum(p.stat().st_size for p in spill_dir.iterdir()) <= 2_500
    too_big = cap_output("y" * 5_000, 100, spill_dir, "huge")
    assert "full output is not available: it is larger (5,000 bytes) than the session's limit" in too_big
    assert paths[2].exists()  # a refused spill deletes nothing


def test_bash_spool_stops_at_the_bound_and_says_what_it_kept(tmp_path: Path) -> None:
    spill_dir = tmp_path / "s"
    set_spill_limit(spill_dir, 5_000)
    buf = OutputBuffer(head=100, tail=100, spill_dir=spill_dir)
    for i in range(2_000):
        buf.feed(f"{i:05d}\n".encode())
    text = buf.render()
    assert buf.spill_path is not None and buf.spill_path.stat().st_size == 5_000
    assert "the first 5,000 bytes of the output (12,000 bytes, 2,000 lines) is saved at" in text
    assert "(the session's limit for saved outputs was reached)" in text


def test_unwritable_session_dir_is_reported_not_raised(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    buf = OutputBuffer(head=10, tail=10, spill_dir=blocker / "sub")
    for _ in range(50):
        buf.feed(b"0123456789\n")
    text = buf.render()
    assert "the full output was not saved: it could not be saved" in text
    saved = save_spill("z" * 10, blocker / "sub", "x")
    assert saved.path is None and "could not be saved" in saved.reason


def test_spill_limit_is_configurable_and_spills_go_with_sessions_rm(
    server: FakeServer, make_agent: MakeAgent, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text("[context]\nspill_max_bytes = 123456\n")
    server.add(Reply(tool_calls=[ToolCall("bash", {"command": "seq 1 30000"})]), Reply(content="ok"))
    agent = make_agent(permission_mode="yolo")
    agent.run_sync("go")
    spill_dir = home / "sessions" / agent.session_id
    assert spill_limit(spill_dir) == 123_456
    assert any(spill_dir.iterdir())
    delete_session(home, agent.session_id)
    assert not spill_dir.exists()


@pytest.mark.parametrize("size", [0, 1, 39_999, 40_000])
def test_small_outputs_are_not_spilled(tmp_path: Path, size: int) -> None:
    buf = OutputBuffer(spill_dir=tmp_path)
    buf.feed(b"a" * size)
    assert buf.render() == "a" * size
    assert buf.spill_path is None and list(tmp_path.iterdir()) == []


def test_a_subagents_big_output_is_saved_in_the_parents_session(
    server: FakeServer, make_agent: MakeAgent, tmp_path: Path
) -> None:
    task = {"description": "count", "prompt": "print numbers", "tools": ["bash"]}
    server.add(
        Reply(tool_calls=[ToolCall("task", task)]),  # parent
        Reply(tool_calls=[ToolCall("bash", {"command": "seq 1 200000"})]),  # child
        Reply(content="printed"),  # child's answer
        Reply(content="done"),  # parent
    )
    agent = make_agent(permission_mode="yolo")
    assert agent.run_sync("delegate").status == "success"
    child_result = tool_contents(server.requests[2].body["messages"])[-1]
    path = saved_path(child_result)
    assert path.parent == tmp_path / "home" / "sessions" / agent.session_id
    assert path.read_bytes() == "".join(f"{i}\n" for i in range(1, 200_001)).encode()


@pytest.mark.prepush
def test_an_mcp_tools_big_result_is_spilled(
    server: FakeServer, make_agent: MakeAgent, workspace: Path, tmp_path: Path
) -> None:
    """A real stdio MCP server (tests/mcp/demo_server.py) echoing 200k characters."""
    import json
    import sys

    demo = str(MCP_DEMO)
    (workspace / ".mcp.json").write_text(
        json.dumps({"mcpServers": {"demo": {"command": sys.executable, "args": [demo]}}})
    )
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text(f"[trust]\nworkspaces = [{json.dumps(str(workspace))}]\n")
    text = "".join(f"mcp line {i}\n" for i in range(2_000))
    server.add(Reply(tool_calls=[ToolCall("mcp__demo__echo", {"text": text})]), Reply(content="ok"))
    result = make_agent(permission_mode="yolo", tool_output_cap=2_000).run_sync("echo")
    content = tool_contents(result.messages)[0]
    assert len(content) < 3_000 and "mcp line 1000\n" not in content
    assert saved_path(content).read_text() == "echo: " + text  # the demo server prefixes its echo


def test_a_running_commands_spool_is_never_dropped_to_make_room(tmp_path: Path) -> None:
    spill_dir = tmp_path / "s"
    set_spill_limit(spill_dir, 3_000)
    running = OutputBuffer(head=10, tail=10, spill_dir=spill_dir)
    for _ in range(100):
        running.feed(b"0123456789\n")  # 1,100 bytes, still being written
    assert running.spill_path is not None
    later = cap_output("z" * 2_500, 10, spill_dir, "other")  # needs room: only older, finished files may go
    assert running.spill_path.exists()
    running.feed(b"last\n")
    assert "the full output" in running.render()  # render() closes the spool
    assert running.spill_path.read_bytes() == b"0123456789\n" * 100 + b"last\n"
    assert "is saved at" in later


def test_hostile_labels_stay_inside_the_session_directory(tmp_path: Path) -> None:
    out = cap_output("q" * 500, 10, tmp_path / "s", "../../../etc/passwd\x00" * 20)
    path = saved_path(out)
    assert path.parent == tmp_path / "s" and len(path.name) < 80


def test_a_zero_disk_bound_saves_nothing_and_says_why(tmp_path: Path) -> None:
    spill_dir = tmp_path / "s"
    set_spill_limit(spill_dir, 0)
    buf = OutputBuffer(head=10, tail=10, spill_dir=spill_dir)
    for _ in range(30):
        buf.feed(b"0123456789\n")
    assert "the full output was not saved: the session's limit for saved outputs" in buf.render()
    assert not spill_dir.exists() or list(spill_dir.iterdir()) == []
    assert "not available: it is larger (10 bytes) than the session's limit" in cap_output("x" * 10, 2, spill_dir, "t")


def test_the_model_may_read_its_spills_in_default_mode(server: FakeServer, make_agent: MakeAgent) -> None:
    """The marker's advice works without approval: reading the session directory is a plain read."""
    big = "".join(f"row {i}\n" for i in range(3_000))

    @tool(kind="read")
    def flood() -> str:
        """Lots of rows."""
        return big

    def read_back(request: Any) -> Reply:
        path = saved_path(tool_contents(request.body["messages"])[-1])
        return Reply(
            tool_calls=[
                ToolCall("read_file", {"path": str(path), "offset": 1500, "limit": 1}),
                ToolCall("grep", {"pattern": "^row 2999$", "path": str(path), "output_mode": "content"}),
            ]
        )

    server.add(Reply(tool_calls=[ToolCall("flood", "")]), read_back, Reply(content="ok"))
    result = make_agent(extra_tools=[flood], tool_output_cap=1_000, permission_mode="default").run_sync("go")
    assert result.status == "success" and not result.permission_denials
    _, read, grep = tool_contents(result.messages)
    assert "row 1499" in read and "row 2999" in grep
