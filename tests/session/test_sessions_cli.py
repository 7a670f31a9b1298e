"""`kimicode -c/-r/--fork` and `kimicode sessions ...` as the installed command, against the fake server."""

from __future__ import annotations

import hashlib
import json
import os
import pty
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import kimicode_command

from kimicode import Agent
from kimicode.session.log import load
from kimicode.testing import FakeServer, Reply, ToolCall

pytestmark = pytest.mark.slow
MakeAgent = Callable[..., Agent]


def env_for(home: Path, server: FakeServer | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI_", "MOONSHOT_", "OPENAI_", "KIMICODE_"))}
    env.update(KIMICODE_HOME=str(home), KIMICODE_RETRY_BASE_DELAY="0.01", KIMI_API_KEY="sk-cli-sessions-secret")
    if server is not None:
        env["KIMI_BASE_URL"] = server.base_url
    return env


def run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*kimicode_command(), *args], env=env, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=30,
    )  # fmt: skip


def result_of(out: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert out.returncode == 0, out.stderr
    last: dict[str, object] = json.loads(out.stdout.splitlines()[-1])
    return last


def test_continue_resume_and_fork_with_print(server: FakeServer, workspace: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = env_for(home, server)
    server.add(
        Reply(reasoning="k3", tool_calls=[ToolCall("glob", {"pattern": "*"})]),
        Reply(content="first answer"),
        Reply(content="second answer"),
        Reply(content="forked answer"),
        Reply(content="third answer"),
        Reply(content="other model answer"),
    )
    first = result_of(run(["-p", "start", "--output-format", "json"], env, workspace))
    sid = str(first["session_id"])
    log = home / "sessions" / f"{sid}.jsonl"

    second = result_of(run(["-c", "-p", "go on", "--output-format", "json"], env, workspace))
    assert second["session_id"] == sid and second["result"] == "second answer"
    req = server.requests[2].body
    assert req["prompt_cache_key"] == sid
    assert [m["role"] for m in req["messages"]] == ["system", "user", "assistant", "tool", "assistant", "user"]

    digest = hashlib.sha256(log.read_bytes()).hexdigest()
    forked = result_of(run(["-r", sid[:12], "--fork", "-p", "in a fork", "--output-format", "json"], env, workspace))
    fork_id = str(forked["session_id"])
    assert fork_id != sid and server.requests[3].body["prompt_cache_key"] == fork_id
    assert server.requests[3].body["messages"][:-1] == server.requests[2].body["messages"] + [load(log).messages[-1]]
    assert hashlib.sha256(log.read_bytes()).hexdigest() == digest  # the original is untouched

    # -r ID from another directory keeps the recorded workspace; -c would now pick the fork (latest)
    out = run(["-r", sid, "-p", "third", "--output-format", "stream-json"], env, tmp_path)
    init = json.loads(out.stdout.splitlines()[0])
    assert init["session_id"] == sid and init["cwd"] == str(workspace.resolve())
    assert result_of(out)["result"] == "third answer"

    out = run(["-r", sid, "-p", "switch", "-m", "kimi-k3-mini"], env, workspace)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "other model answer\n"
    assert "warning" in out.stderr and "recorded with model kimi-k3" in out.stderr and "kimi-k3-mini" in out.stderr
    assert server.requests[5].body["model"] == "kimi-k3-mini"
    for path in home.rglob("*"):
        if path.is_file():
            assert b"sk-cli-sessions-secret" not in path.read_bytes()


def test_resume_flag_errors_are_one_line_usage_errors(server: FakeServer, workspace: Path, tmp_path: Path) -> None:
    env = env_for(tmp_path / "home", server)
    cases = {
        ("-c", "-p", "x"): "no session to continue",
        ("--fork", "-p", "x"): "--fork needs -c/--continue or -r/--resume",
        ("-r", "nope", "-p", "x"): "no session 'nope'",
        ("-c", "-r", "abc", "-p", "x"): "either -c/--continue or -r/--resume",
        ("-r", "-p", "x"): "needs a session id when not run in a terminal",
    }
    for args, message in cases.items():
        out = run(list(args), env, workspace)
        assert out.returncode == 2, (args, out.stderr)
        assert message in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert server.requests == []


def test_sessions_subcommands(server: FakeServer, make_agent: MakeAgent, workspace: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = env_for(home, server)
    server.add(Reply(content="the answer"), Reply(content="other"))
    sid = make_agent().run_sync("what is it?").session_id  # sessions made in process, in the same home
    other = make_agent().run_sync("another task").session_id

    out = run(["sessions", "list"], env, workspace)
    assert out.returncode == 0, out.stderr
    header, *rows = out.stdout.splitlines()
    assert header.split()[:4] == ["ID", "STARTED", "TURNS", "SIZE"] and "FIRST PROMPT" in header
    assert rows[0].startswith(other) and rows[1].startswith(sid)
    assert "what is it?" in rows[1] and str(workspace.resolve())[-20:] in rows[1]
    listed = [json.loads(line) for line in run(["sessions", "list", "--json"], env, workspace).stdout.splitlines()]
    assert [s["id"] for s in listed] == [other, sid] and listed[1]["turns"] == 1
    assert run(["sessions", "list", "--here"], env, tmp_path).stdout.startswith("No saved sessions in")

    out = run(["sessions", "show", sid], env, workspace)
    assert out.returncode == 0, out.stderr
    assert f"Session:    {sid}" in out.stdout and "Model:      kimi-k3" in out.stdout
    assert "› what is it?" in out.stdout and "the answer" in out.stdout

    out = run(["sessions", "export", sid, "--format", "markdown"], env, workspace)
    assert out.stdout.startswith(f"# Session {sid}") and "## Assistant\n\nthe answer" in out.stdout
    target = tmp_path / "export.json"
    out = run(["sessions", "export", sid, "--format", "json", "-o", str(target)], env, workspace)
    assert out.returncode == 0, out.stderr
    exported = json.loads(target.read_text())
    assert exported["session_id"] == sid and exported["messages"][-1]["content"] == "the answer"

    for args in (["sessions", "show", "nope"], ["sessions", "export", "nope"], ["sessions", "rm", "nope"]):
        out = run(args, env, workspace)
        assert out.returncode == 1 and "no session 'nope'" in out.stderr and "Traceback" not in out.stderr
    out = run(["sessions", "export", sid, "--format", "pdf"], env, workspace)
    assert out.returncode == 2 and "Traceback" not in out.stderr

    out = run(["sessions", "rm", sid], env, workspace)
    assert out.returncode == 0 and out.stdout == f"deleted {sid}\n"
    assert not (home / "sessions" / f"{sid}.jsonl").exists()
    remaining = run(["sessions", "list", "--json"], env, workspace).stdout.splitlines()
    assert [json.loads(line)["id"] for line in remaining] == [other]


def test_resume_without_an_id_in_a_terminal_opens_a_picker(
    server: FakeServer, make_agent: MakeAgent, workspace: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    env = env_for(home, server)
    server.add(Reply(content="a"), Reply(content="b"), Reply(content="picked"))
    older = make_agent().run_sync("older task").session_id
    make_agent().run_sync("newer task")
    master, slave = pty.openpty()
    try:
        os.write(master, b"7\n2\n")  # out of range, then the second (older) session
        proc = subprocess.run(
            [*kimicode_command(), "-r", "-p", "continue", "--output-format", "json"],
            env=env, cwd=workspace, stdin=slave, capture_output=True, text=True, timeout=30,
        )  # fmt: skip
    finally:
        os.close(slave)
        os.close(master)
    assert proc.returncode == 0, proc.stderr
    assert "newer task" in proc.stderr and "older task" in proc.stderr  # the list, on stderr
    assert "Type a number from 1 to 2" in proc.stderr
    assert json.loads(proc.stdout)["session_id"] == older
    assert server.requests[2].body["messages"][1]["content"] == "older task"
