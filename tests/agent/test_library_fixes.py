"""The rest of what a library user hit (issue 24): costs, a session lock inside one process, forks that edit
their own trees, typed rewind errors, strict tool arguments, results that are not text, a fake server that
takes 100 parallel clients. Each test failed before its fix."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import pydantic
import pytest
from helpers import assert_valid_history, lib_agent

import kimicode
from kimicode import Agent, tool
from kimicode.testing import FakeServer, Reply, ToolCall

USAGE = {"prompt_tokens": 10_000, "completion_tokens": 1_000, "prompt_tokens_details": {"cached_tokens": 0}}


def test_run_result_has_the_turns_cost_at_the_prices_given(server: FakeServer, tmp_path: Path) -> None:
    server.add(Reply(content="one", usage=USAGE), Reply(content="two", usage=USAGE))
    agent = lib_agent(server, tmp_path, prices={"input": 2.0, "output": 10.0})
    first = agent.run_sync("a")
    second = agent.run_sync("b")
    assert first.cost == pytest.approx(0.03)  # 10k input at $2 per million + 1k output at $10 per million
    assert second.cost == pytest.approx(0.03) and second.total_cost == pytest.approx(0.06)


def test_without_prices_an_unknown_endpoints_cost_is_none(server: FakeServer, tmp_path: Path) -> None:
    server.add(Reply(content="one", usage=USAGE))
    result = lib_agent(server, tmp_path).run_sync("a")
    assert result.cost is None and result.total_cost is None


@pytest.mark.parametrize("bad", [{"inptu": 1.0}, {"input": -1}, {"input": "3"}, {"cached_input": 1.0}, [1.0]])
def test_bad_prices_are_refused_naming_the_problem(bad: Any) -> None:
    with pytest.raises((TypeError, ValueError), match="prices"):
        kimicode.AgentOptions(prices=bad)


def test_two_agents_of_one_process_cannot_resume_one_session(server: FakeServer, tmp_path: Path) -> None:
    """The lock was per process (POSIX): a second agent resuming the session appended to the same log."""
    server.add(Reply(content="first"))
    home = tmp_path / "home"
    agent = lib_agent(server, tmp_path)
    agent.run_sync("hello")
    one = Agent.resume(agent.session_id, home=home, base_url=server.base_url, api_key="sk-test")
    with pytest.raises(kimicode.SessionError, match="another agent in this process"):
        Agent.resume(agent.session_id, home=home, base_url=server.base_url, api_key="sk-test")
    asyncio.run(one.aclose())
    two = Agent.resume(agent.session_id, home=home, base_url=server.base_url, api_key="sk-test")  # freed
    asyncio.run(two.aclose())


def git_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "a.txt").write_text("original\n")
    for args in (["init", "-q"], ["add", "."], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"]):
        subprocess.run(["git", *args], cwd=path, check=True, capture_output=True)
    return path


@pytest.mark.parametrize("kind", ["copy", "worktree"])
def test_a_fork_edits_its_own_tree_without_an_approve_callback(server: FakeServer, tmp_path: Path, kind: str) -> None:
    """The fork's tree lives under KIMICODE_HOME/worktrees; every write there used to count as touching
    kimicode's own state and asked, so an accept-edits fork without `approve` could not edit its own files."""
    ws = git_repo(tmp_path / "ws")
    server.add(
        Reply(content="parent"),
        Reply(tool_calls=[ToolCall("write_file", {"path": "a.txt", "content": "forked\n"})]),
        Reply(content="edited"),
    )
    parent = lib_agent(server, tmp_path, permission_mode="accept-edits")
    parent.run_sync("hello")
    child = parent.fork(workspace=kind)
    assert child.workspace != parent.workspace
    result = child.run_sync("edit")
    assert result.status == "success" and not result.permission_denials, result.permission_denials
    assert (child.workspace / "a.txt").read_text() == "forked\n"
    assert (ws / "a.txt").read_text() == "original\n"
    assert_valid_history(child.messages)


def test_a_fork_still_asks_to_write_kimicode_state_outside_its_tree(server: FakeServer, tmp_path: Path) -> None:
    git_repo(tmp_path / "ws")
    server.add(Reply(content="parent"))
    parent = lib_agent(server, tmp_path, permission_mode="accept-edits")
    parent.run_sync("hello")
    child = parent.fork(workspace="copy")
    target = str(tmp_path / "home" / "config.toml")
    server.add(
        Reply(tool_calls=[ToolCall("write_file", {"path": target, "content": "x = 1\n"})]), Reply(content="refused")
    )
    result = child.run_sync("edit config")
    assert result.permission_denials and not (tmp_path / "home" / "config.toml").exists()


def test_rewind_errors_are_kimicode_errors(server: FakeServer, tmp_path: Path) -> None:
    server.add(Reply(content="hi"))
    agent = lib_agent(server, tmp_path)
    with pytest.raises(kimicode.KimicodeError):
        asyncio.run(agent.rewind())  # nothing to rewind yet
    agent.run_sync("hello")
    with pytest.raises(kimicode.CheckpointError):
        asyncio.run(agent.rewind(7))
    assert issubclass(kimicode.CheckpointError, RuntimeError)  # older `except RuntimeError` still works


class Point(pydantic.BaseModel):
    x: int
    y: int


def test_pydantic_tool_arguments_refuse_unknown_keys(server: FakeServer, tmp_path: Path) -> None:
    """A nested model ignored an unknown key (pydantic's default), so a misspelt argument was silently lost."""
    seen: list[Point] = []

    @tool
    def plot(point: Point) -> str:
        """Plot a point."""
        seen.append(point)
        return "plotted"

    assert plot.parameters["properties"]["point"]["additionalProperties"] is False
    server.add(Reply(tool_calls=[ToolCall("plot", {"point": {"x": 1, "y": 2, "z": 3}})]), Reply(content="ok"))
    result = lib_agent(server, tmp_path, tools=[plot]).run_sync("go")
    content = next(m for m in result.messages if m["role"] == "tool")["content"]
    assert not seen and "Invalid arguments" in content and "z" in content


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({3, 1, 2}, "[1, 2, 3]"),
        (b"caf\xc3\xa9", "café"),
        (bytearray(b"raw"), "raw"),
        ({"tags": {"b", "a"}}, '{"tags": ["a", "b"]}'),
        ({"blob": b"x"}, '{"blob": "x"}'),
    ],
)
def test_set_and_bytes_results_are_sent_as_data_not_their_repr(
    server: FakeServer, tmp_path: Path, value: Any, expected: str
) -> None:
    @tool
    def give() -> Any:
        """Return a value that is not a string."""
        return value

    server.add(Reply(tool_calls=[ToolCall("give", {})]), Reply(content="ok"))
    result = lib_agent(server, tmp_path, tools=[give]).run_sync("go")
    assert next(m for m in result.messages if m["role"] == "tool")["content"] == expected


def test_the_fake_server_takes_a_hundred_parallel_clients() -> None:
    """Its listen backlog was socketserver's 5: under 100 parallel clients the kernel dropped connection
    attempts (clients with a short connect timeout failed; others waited for SYN retries)."""
    import shutil
    import socket

    with FakeServer([Reply(content=f"r{i}") for i in range(100)]) as server:
        if shutil.which("ss"):  # the backlog as the kernel reports it (Send-Q of a listening socket)
            out = subprocess.run(["ss", "-ltnH", f"sport = :{server.port}"], capture_output=True, text=True).stdout
            assert int(out.split()[2]) >= 100, out
        socks = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(100)]
        try:
            body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}]}).encode()
            request = (
                f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            ).encode() + body
            for s in socks:
                s.sendall(request)
            answers = []
            for s in socks:
                chunks = []
                while data := s.recv(65536):
                    chunks.append(data)
                answers.append(b"".join(chunks))
        finally:
            for s in socks:
                s.close()
    assert all(a.startswith(b"HTTP/1.") and b" 200 " in a.split(b"\r\n", 1)[0] for a in answers)


@pytest.mark.parametrize("asked", [False, True])
def test_batch_reads_a_task_repositorys_configuration_only_when_asked(tmp_path: Path, asked: bool) -> None:
    """Without `model=`, each task used to take its model and AGENTS.md from the repository it ran in; now
    only with project_config=True, and then as an untrusted project (kimicode/config/trust.py)."""
    from kimicode.batch import run

    repo = tmp_path / "repo"
    (repo / ".kimicode").mkdir(parents=True)
    (repo / ".kimicode" / "config.toml").write_text(
        '[defaults]\nmodel = "repo-chosen-model"\n[context]\nmax_tokens = 321\n'
    )
    (repo / "AGENTS.md").write_text("REPO-INSTRUCTIONS: always answer in French\n")

    async def main(server: FakeServer) -> list[Any]:
        return [
            r
            async for r in run(
                [{"id": "t", "prompt": "hi", "workspace": str(repo)}],
                base_url=server.base_url,
                api_key="sk-test",
                root=tmp_path / "batch",
                retry_base_delay=0.01,
                project_config=asked,
            )
        ]

    with FakeServer([Reply(content="ok")]) as server:
        results = asyncio.run(main(server))
        body = server.requests[0].body
    assert results[0].status == "success", results[0].error
    assert body["model"] != "repo-chosen-model"  # read as untrusted: a repository never picks the model
    assert (body.get("max_completion_tokens", body.get("max_tokens")) == 321) is asked  # a lower limit applies
    assert ("REPO-INSTRUCTIONS" in json.dumps(body["messages"])) is asked
