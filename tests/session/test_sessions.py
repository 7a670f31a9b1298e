"""Session logs, resume, fork, listing and export through the library (in process, against the fake server)."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import assert_valid_history

from kimicode import Agent, tool
from kimicode.events import Event, Notice, TurnFinished
from kimicode.session.export import fence, to_json, to_markdown, to_text
from kimicode.session.log import INTERRUPTED, SCHEMA_VERSION, SessionLog, iter_records, load
from kimicode.session.replay import replay
from kimicode.session.store import (
    SessionError,
    delete_session,
    find_session,
    latest_session,
    list_sessions,
    load_session,
    session_info,
)
from kimicode.testing import FakeServer, Reply, ToolCall

MakeAgent = Callable[..., Agent]
SECRET = "sk-test-secret-key"  # the key make_agent uses


@pytest.fixture
def opts(server: FakeServer, tmp_path: Path) -> dict[str, Any]:
    """What Agent.resume needs besides the log: the endpoint and the same home as make_agent."""
    return {"base_url": server.base_url, "api_key": SECRET, "home": tmp_path / "home", "retry_base_delay": 0.01}


def types(agent: Agent) -> list[str]:
    assert agent.log is not None
    return [r["type"] for r in iter_records(agent.log.path)]


@tool(kind="read")
def produce(n: int) -> str:
    """Produce a few hundred lines of output."""
    return "\n".join(f"line {i} of output {n}: some words to make it long enough" for i in range(200))


# -- the log ------------------------------------------------------------------------------------------


def test_log_records_messages_settings_usage_and_turn_ends_but_never_the_key(
    server: FakeServer, make_agent: MakeAgent, tmp_path: Path
) -> None:
    server.add(
        Reply(reasoning="look", tool_calls=[ToolCall("glob", {"pattern": "*"})]),
        Reply(content="done"),
        Reply(content="again"),
    )
    agent = make_agent()
    agent.run_sync("first")
    agent.set_model("kimi-k3-mini")
    agent.set_thinking("low")
    agent.run_sync("second")
    assert agent.log is not None
    records = list(iter_records(agent.log.path))
    assert all(r["v"] == SCHEMA_VERSION and isinstance(r["ts"], float) for r in records)
    assert records[0]["type"] == "meta" and records[0]["model"] == "kimi-k3"
    assert records[0]["workspace"] == str(agent.workspace)
    assert types(agent) == [
        "meta", "message", "message",  # system, user
        "usage", "calibration", "message", "message",  # assistant with a call, its result
        "usage", "message", "turn_end",
        "settings", "prune", "settings",  # model (kimi-k3's reasoning left out for kimi-k3-mini), thinking
        "message", "usage", "message", "turn_end",
    ]  # fmt: skip
    changes = [r for r in records if r["type"] == "settings"]
    assert [(r["reason"], r["model"], r["thinking"]) for r in changes] == [
        ("model", "kimi-k3-mini", None),
        ("thinking", "kimi-k3-mini", "low"),
    ]
    assert load(agent.log.path).model == "kimi-k3-mini"
    assert [r["status"] for r in records if r["type"] == "turn_end"] == ["success", "success"]
    assert load(agent.log.path).messages == agent.messages
    assert [r.get("model") for r in records if r["type"] == "message"] == [
        None,
        None,
        "kimi-k3",
        None,
        "kimi-k3",
        None,
        "kimi-k3-mini",  # who wrote each assistant message
    ]
    for path in (tmp_path / "home").rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes()


def test_load_replays_prunes_and_compactions_and_repairs_open_calls(tmp_path: Path) -> None:
    log = SessionLog(tmp_path, "s1")
    sys_msg = {"role": "system", "content": "sys"}
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    log.append({"type": "meta", "model": "kimi-k3", "workspace": str(tmp_path)})
    for msg in (
        sys_msg,
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "two"},
        {"role": "assistant", "content": "a2"},
    ):
        log.message(msg)
    summary = {"role": "user", "content": "[summary] one and two"}
    log.append({"type": "compaction", "start": 1, "end": 5, "messages": [summary]})
    log.message({"role": "user", "content": "three"})
    log.message({"role": "assistant", "content": "", "tool_calls": [call]})
    log.append({"type": "prune", "replace": [[2, {"role": "user", "content": "three (pruned)"}]]})
    log.append({"type": "unknown-future-record", "x": 1})
    log.close()
    with log.path.open("a") as fh:
        fh.write('{"v": 1, "type": "message", "message": {"role": "tool", "tool_call_id": "c1", "cont')  # torn
    loaded = load(log.path)
    assert loaded.replayed == [sys_msg, summary, {"role": "user", "content": "three (pruned)"},
                               {"role": "assistant", "content": "", "tool_calls": [call]}]  # fmt: skip
    assert loaded.messages == [*loaded.replayed, {"role": "tool", "tool_call_id": "c1", "content": INTERRUPTED}]
    assert loaded.repaired == 1
    assert loaded.repair_records() == [{"type": "message", "message": loaded.messages[-1]}]
    # appending after the torn line starts a fresh line, so no later record is lost
    log2 = SessionLog(tmp_path, "s1")
    log2.message({"role": "user", "content": "four"})
    log2.close()
    assert [r["message"]["content"] for r in iter_records(log.path) if r["type"] == "message"][-1] == "four"


def test_a_repair_in_the_middle_is_logged_as_a_compaction_that_replays_exactly(
    server: FakeServer, opts: dict[str, Any], workspace: Path, tmp_path: Path
) -> None:
    log = SessionLog(tmp_path / "home" / "sessions", "20250101-000000-aaaaaa")
    call = {"id": "c1", "type": "function", "function": {"name": "glob", "arguments": '{"pattern": "*"}'}}
    log.append({"type": "meta", "model": "kimi-k3", "workspace": str(workspace)})
    for msg in (
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "user", "content": "two"},  # the call's result is missing in the middle
        {"role": "tool", "tool_call_id": "orphan", "content": "no call for this"},
        {"role": "assistant", "content": "a2"},
    ):
        log.message(msg)
    log.close()
    server.add(Reply(content="fine"))
    agent = Agent.resume("20250101", **opts)
    assert agent.session_id == "20250101-000000-aaaaaa"
    assert [m["role"] for m in agent.messages] == ["system", "user", "assistant", "tool", "user", "assistant"]
    assert_valid_history(agent.messages, system_first=True)
    assert types(agent)[-2:] == ["compaction", "settings"]
    assert replay(iter_records(log.path)) == agent.messages
    agent.run_sync("three")
    assert server.requests[0].body["messages"][:-1] == agent.messages[:-2]
    assert load(log.path).repaired == 0 and replay(iter_records(log.path)) == agent.messages


# -- resume -------------------------------------------------------------------------------------------


def test_resume_continues_the_same_session_and_cache_key(
    server: FakeServer, make_agent: MakeAgent, opts: dict[str, Any], workspace: Path
) -> None:
    server.add(Reply(content="one"), Reply(content="two"))
    first = make_agent(thinking="high", permission_mode="yolo")
    first.run_sync("hello")
    size = first.log.path.stat().st_size if first.log else 0
    events: list[Event] = []
    agent = Agent.resume(first.session_id, on_event=events.append, **opts)
    assert first.log is not None and agent.log is not None
    assert agent.session_id == first.session_id and agent.log.path == first.log.path
    assert agent.messages == first.messages
    assert agent.endpoint.model == "kimi-k3" and agent.thinking == "high"  # recorded settings
    assert agent.permission_mode == "default"  # never carried over
    assert agent.workspace == workspace.resolve()  # the recorded workspace
    assert agent.resume_warning is None
    assert agent.context.used > 0
    result = agent.run_sync("more")
    assert result.result == "two"
    assert not any(isinstance(e, Notice) and e.level == "warning" for e in events)
    a, b = (r.body for r in server.requests)
    assert a["prompt_cache_key"] == b["prompt_cache_key"] == first.session_id
    assert b["messages"][: len(a["messages"]) + 1] == [*a["messages"], first.messages[-1]]
    assert first.messages[-1]["content"] == "one"
    assert first.log is not None and first.log.path.stat().st_size > size  # the same log grew
    assert load(first.log.path).settings["thinking"] == "high"


def test_resuming_with_another_model_warns(server: FakeServer, make_agent: MakeAgent, opts: dict[str, Any]) -> None:
    server.add(Reply(reasoning="k3 thoughts", content="one"), Reply(content="two"))
    first = make_agent()
    first.run_sync("hello")
    events: list[Event] = []
    agent = Agent.resume(first.session_id, model="other-model", on_event=events.append, **opts)
    assert agent.resume_warning is not None
    assert "kimi-k3" in agent.resume_warning and "other-model" in agent.resume_warning
    assert "reasoning history" in agent.resume_warning
    agent.run_sync("more")
    warnings = [e for e in events if isinstance(e, Notice) and e.level == "warning"]
    assert [w.text for w in warnings] == [agent.resume_warning]  # once, at the start of the next turn
    assert server.requests[1].body["model"] == "other-model"
    again = Agent.resume(first.session_id, **opts)  # now recorded with other-model
    assert again.endpoint.model == "other-model" and again.resume_warning is None


def test_resume_errors_are_clear(make_agent: MakeAgent, opts: dict[str, Any], tmp_path: Path) -> None:
    with pytest.raises(SessionError, match="no session 'nope'"):
        Agent.resume("nope", **opts)
    with pytest.raises(ValueError, match="not a session id"):
        Agent.resume("../etc/passwd", **opts)
    a, b = make_agent(session_id="20250101-000000-aaaaaa"), make_agent(session_id="20250101-000001-bbbbbb")
    assert a.log and b.log
    for agent in (a, b):  # a session is saved once it has a prompt
        agent.log.message({"role": "user", "content": "hi"})
    with pytest.raises(SessionError, match="matches 2 sessions"):
        Agent.resume("20250101", **opts)
    with pytest.raises(TypeError, match="messages"):
        Agent.resume(a.session_id, messages=[], **opts)
    with pytest.raises(ValueError, match="system prompt"):
        Agent.resume(a.session_id, system_prompt="x", **opts)
    gone = tmp_path / "gone"
    gone.mkdir()
    c = make_agent(workspace=gone, session_id="20250102-000000-cccccc")
    assert c.log
    c.log.message({"role": "user", "content": "hi"})
    c.log.close()  # one writer per session, in this process too
    gone.rmdir()
    with pytest.raises(SessionError, match="no longer exists"):
        Agent.resume(c.session_id, **opts)
    assert Agent.resume(c.session_id, workspace=tmp_path, **opts).workspace == tmp_path.resolve()


def test_resume_after_compaction_sends_the_compacted_history(
    server: FakeServer, make_agent: MakeAgent, opts: dict[str, Any]
) -> None:
    server.add(*[Reply(tool_calls=[ToolCall("produce", {"n": i})]) for i in range(6)], Reply(content="read"))
    server.add(Reply(content="## Summary\nSix outputs were produced."), Reply(content="after"))
    agent = make_agent(tools=[produce])
    agent.run_sync("produce six outputs")

    async def compact() -> Any:
        try:
            return await agent.compact()
        finally:
            await agent.aclose()

    assert asyncio.run(compact()) is not None
    assert "compaction" in types(agent)
    resumed = Agent.resume(agent.session_id, tools=[produce], **opts)
    assert resumed.messages == agent.messages and len(resumed.messages) < 10
    resumed.run_sync("next")
    assert server.requests[-1].body["messages"][:-1] == agent.messages


def test_resuming_a_killed_turn_adds_interrupted_results_and_logs_them(
    server: FakeServer, make_agent: MakeAgent, opts: dict[str, Any]
) -> None:
    server.add(Reply(content="ok"))
    agent = make_agent()
    assert agent.log is not None
    call = {"id": "functions.bash:0", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    agent.log.message({"role": "user", "content": "run"})  # what a process killed mid-tool leaves behind
    agent.log.message({"role": "assistant", "content": "", "tool_calls": [call]})
    agent.log.close()
    resumed = Agent.resume(agent.session_id, **opts)
    assert resumed.messages[-1] == {"role": "tool", "tool_call_id": "functions.bash:0", "content": INTERRUPTED}
    assert load(agent.log.path).repaired == 0  # the synthetic result is in the log now
    events: list[Event] = []
    resumed.on_event = events.append
    resumed.run_sync("go on")
    assert [m["role"] for m in server.requests[0].body["messages"]] == ["system", "user", "assistant", "tool", "user"]
    notices = [e.text for e in events if isinstance(e, Notice)]
    assert "the session was cut off: 1 tool call without a result marked interrupted" in notices


# -- fork ---------------------------------------------------------------------------------------------


def test_fork_copies_the_conversation_and_leaves_the_original_untouched(
    server: FakeServer, make_agent: MakeAgent, opts: dict[str, Any]
) -> None:
    @tool
    def added_later() -> str:
        """A tool added between turns."""
        return "ok"

    server.add(Reply(content="one"))
    events: list[Event] = []
    agent = make_agent(on_event=events.append, thinking="low")
    agent.run_sync("hello")

    @tool(kind="read")
    def glob(pattern: str) -> str:
        """A replacement glob."""
        return "mine"

    agent.tools.add(added_later)
    agent.tools.add(glob)  # replaces the built-in one
    agent.tools.remove("grep")
    assert agent.log is not None
    digest = hashlib.sha256(agent.log.path.read_bytes()).hexdigest()
    child = agent.fork()
    assert child.session_id != agent.session_id and child.log and child.log.path != agent.log.path
    assert child.messages == agent.messages and child.messages is not agent.messages
    assert child.thinking == "low" and child.on_event is agent.on_event
    assert child.tools.names == agent.tools.names  # the tools as they are now, in the same order
    assert child.tools.get("added_later") is added_later and child.tools.get("glob") is glob
    if "todo_write" in child.tools.names:  # a tool bound to its agent's state is the fork's own
        assert child.tools.get("todo_write") is not agent.tools.get("todo_write")
        todos = [{"id": "1", "content": "fork work", "status": "pending"}]
        server.add(Reply(tool_calls=[ToolCall("todo_write", {"todos": todos})]))
    server.add(Reply(content="forked answer"), Reply(content="original answer"))
    before = len(server.requests)
    child.run_sync("in the fork")
    assert hashlib.sha256(agent.log.path.read_bytes()).hexdigest() == digest  # the original is untouched
    agent.run_sync("in the original")
    fork_req, orig_req = server.requests[before].body, server.requests[-1].body
    assert fork_req["prompt_cache_key"] == child.session_id != orig_req["prompt_cache_key"]
    assert fork_req["messages"][-1]["content"] == "in the fork"
    assert orig_req["messages"][-1]["content"] == "in the original"
    assert all(m.get("content") != "in the fork" for m in agent.messages)
    forked = load(child.log.path)
    assert forked.messages == child.messages
    assert forked.records[0]["type"] == "meta"
    info = session_info(child.log.path)
    assert info.forked_from == agent.session_id and info.first_prompt == "hello" and info.turns == 2
    # Agent.resume(..., fork=True) does the same from a saved session
    server.add(Reply(content="third"))
    again = Agent.resume(agent.session_id, fork=True, **opts)
    assert again.session_id not in (agent.session_id, child.session_id)
    assert again.messages == agent.messages


def test_fork_can_change_settings_and_refuses_during_a_turn(server: FakeServer, make_agent: MakeAgent) -> None:
    server.add(Reply(content="a", chunk_delay=0.2, chunk_size=1))
    agent = make_agent()
    child = agent.fork(model="kimi-k3-mini", permission_mode="yolo")
    assert child.endpoint.model == "kimi-k3-mini" and child.permission_mode == "yolo"

    async def go() -> None:
        stream = agent.stream("x")
        await anext(stream)
        with pytest.raises(RuntimeError, match="running"):
            agent.fork()
        async for ev in stream:
            if isinstance(ev, TurnFinished):
                break
        await agent.aclose()

    asyncio.run(go())


# -- listing, export, delete --------------------------------------------------------------------------


def test_list_find_and_delete_sessions(
    server: FakeServer, make_agent: MakeAgent, workspace: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    server.add(Reply(content="1"), Reply(content="2"), Reply(content="3"), Reply(content="4"))
    a = make_agent()
    a.run_sync("first prompt in ws\nwith a second line")
    a.run_sync("second prompt")
    b = make_agent(workspace=other)
    b.run_sync("prompt in other")
    c = make_agent()
    c.run_sync("latest in ws")
    home = tmp_path / "home"
    everything = list_sessions(home)
    assert [s.id for s in everything] == [c.session_id, b.session_id, a.session_id]
    mine = list_sessions(home, workspace)
    assert [s.id for s in mine] == [c.session_id, a.session_id]
    info = mine[1]
    assert info.turns == 2 and info.first_prompt.startswith("first prompt in ws")
    assert info.workspace == str(workspace.resolve()) and info.model == "kimi-k3" and info.size > 0
    assert info.id in str(info) and "2 turns" in str(info) and "\n" not in str(info)
    latest = latest_session(home, workspace)
    assert latest is not None and latest.id == c.session_id
    assert latest_session(home, tmp_path) is None
    assert find_session(home, a.session_id[:-2]) == a.log.path  # type: ignore[union-attr]
    spill = home / "sessions" / b.session_id
    spill.mkdir(exist_ok=True)
    (spill / "out.txt").write_text("spilled")
    assert delete_session(home, b.session_id) == b.session_id
    assert not spill.exists() and [s.id for s in list_sessions(home)] == [c.session_id, a.session_id]
    with pytest.raises(SessionError):
        delete_session(home, b.session_id)
    assert list_sessions(tmp_path / "nowhere") == []


def test_export_markdown_json_and_text(server: FakeServer, make_agent: MakeAgent, workspace: Path) -> None:
    (workspace / "f.md").write_text("```python\nprint(1)\n```\n")
    server.add(
        Reply(reasoning="I should read it", content="Reading.", tool_calls=[ToolCall("read_file", {"path": "f.md"})]),
        Reply(content="It is a **code block**."),
    )
    agent = make_agent()
    agent.run_sync("what is in f.md?")
    assert agent.log is not None
    session = load_session(agent.home, agent.session_id)
    info = session_info(agent.log.path)
    md = to_markdown(session, info)
    assert md.startswith(f"# Session {agent.session_id}\n")
    assert f"- Workspace: {workspace.resolve()}" in md and "- Model: kimi-k3" in md
    assert "## User\n\nwhat is in f.md?" in md
    assert "<details><summary>Reasoning</summary>\n\nI should read it" in md
    assert "**Tool call** `read_file` (functions.read_file:0)" in md and '"path": "f.md"' in md
    assert "````\n" in md  # the file's own ``` fence is wrapped in a longer one
    assert "It is a **code block**." in md and "You are kimicode" not in md
    assert "You are kimicode" in to_markdown(session, info, system=True)
    data = to_json(session, info)
    assert json.loads(json.dumps(data)) == data
    assert data["session_id"] == agent.session_id and data["messages"] == agent.messages
    assert data["usage"]["prompt_tokens"] > 0 and data["turns"] == 1
    text = to_text(session)
    assert text.splitlines()[0] == "› what is in f.md?" and "→ read_file" in text and "← read_file:" in text
    assert fence("a ```` b") == "`````\na ```` b\n`````"


def test_resume_flag_may_stand_without_an_id() -> None:
    import typer

    from kimicode.cli.app import app
    from kimicode.cli.firstprompt import value_options
    from kimicode.cli.sessions import optional_resume_value

    takes = value_options(typer.main.get_command(app))

    def normalize(argv: list[str]) -> list[str]:
        return optional_resume_value(argv, takes)

    assert normalize(["-r"]) == ["--resume="]  # "pick one"
    assert normalize(["-r", "-p", "x"]) == ["--resume=", "-p", "x"]
    assert normalize(["-p", "x", "--resume"]) == ["-p", "x", "--resume="]
    assert normalize(["--deny", "bash(rm*)", "-r"]) == ["--deny", "bash(rm*)", "--resume="]
    assert normalize(["-r", "abc", "--fork", "-p", "x"]) == ["-r", "abc", "--fork", "-p", "x"]
    assert normalize(["-p", "-r"]) == ["-p", "-r"]  # the prompt is "-r"
    assert normalize(["sessions", "rm", "-r"]) == ["sessions", "rm", "-r"]  # a subcommand's own arguments
