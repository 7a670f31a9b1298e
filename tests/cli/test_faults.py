"""The fault matrix: the installed `kimicode -p` against a misbehaving server and misbehaving commands.

Every case asserts the outcome (status, result or error text), the exit code, and that the session log
afterwards holds a valid history: strict UTF-8 JSON lines, every tool call answered right after its
assistant message, nothing to repair, and exactly the messages the server was last sent.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from helpers import assert_valid_history, command_env, kimicode_command

from kimicode.session.log import LoadedSession, load
from kimicode.testing import ErrorReply, FakeServer, RecordedRequest, Reply, ScriptItem, ToolCall

pytestmark = pytest.mark.slow

FAST = ["--max-retries", "2", "--request-timeout", "2"]


@dataclass
class Run:
    code: int
    result: dict[str, Any]
    lines: list[dict[str, Any]]
    stderr: str
    seconds: float
    log: LoadedSession
    requests: list[RecordedRequest] = field(default_factory=list)

    def tool_results(self) -> list[str]:
        return [m["content"] for m in self.log.messages if m["role"] == "tool"]


def run(
    server: FakeServer,
    home: Path,
    cwd: Path,
    *args: str,
    env: dict[str, str] | None = None,
    prefix: list[str] | None = None,
) -> Run:
    """`kimicode -p x --output-format stream-json ARGS`; parse its output and check its session log."""
    start = time.monotonic()
    done = subprocess.run(
        [*(prefix or []), *kimicode_command(), "-p", "x", "--output-format", "stream-json", *args],
        env=env or command_env(home, server),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    seconds = time.monotonic() - start
    assert "Traceback" not in done.stderr, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines and lines[-1]["type"] == "result", (done.stdout, done.stderr)
    return Run(done.returncode, lines[-1], lines, done.stderr, seconds, checked_log(home, server), server.requests)


def checked_log(home: Path, server: FakeServer) -> LoadedSession:
    """The session log, after checking it holds a valid history (see the module docstring)."""
    (path,) = (home / "sessions").glob("*.jsonl")
    records = [json.loads(line) for line in path.read_bytes().decode("utf-8").splitlines()]  # strict
    assert records[-1]["type"] == "turn_end"
    loaded = load(path)
    assert loaded.repaired == 0, "the log left a tool call without a result"
    messages = loaded.messages
    assert [m["role"] for m in messages[:2]] == ["system", "user"]
    assert_valid_history(messages, system_first=True)
    sent = server.requests[-1].body["messages"] if server.requests else []
    assert messages[: len(sent)] == sent, "the log does not hold what was sent"
    assert all(m["role"] == "assistant" for m in messages[len(sent) :])
    return loaded


# -- the model endpoint -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    script: list[ScriptItem]
    code: int
    status: str
    check: Callable[[Run], None]
    args: tuple[str, ...] = ()


def _retry_after(r: Run) -> None:
    retries = [line for line in r.lines if line["type"] == "retry"]
    assert [x["delay"] for x in retries] == [1.0] and r.seconds >= 1.0
    assert "rate_limit_reached_error" in retries[0]["error"] and r.result["result"] == "ok"


def _retried_once(r: Run) -> None:
    assert len(r.requests) == 2 and r.result["result"] == "ok"
    assert [m["content"] for m in r.log.messages if m["role"] == "assistant"] == ["ok"]  # no partial answer kept


def _quota(r: Run) -> None:
    assert len(r.requests) == 1  # not retried
    assert "exceeded_current_quota_error" in r.result["error"] and "not retried" in r.result["error"]


def _gave_up(needle: str, attempts: int) -> Callable[[Run], None]:
    def check(r: Run) -> None:
        assert len(r.requests) == attempts
        assert needle in r.result["error"] and f"gave up after {attempts} attempts" in r.result["error"]
        assert r.seconds < 15

    return check


def _auth(r: Run) -> None:
    assert len(r.requests) == 1 and "check the API key in KIMI_API_KEY" in r.result["error"]


def _complete_without_done(r: Run) -> None:
    assert len(r.requests) == 1 and r.result["result"] == "every word arrived"


def _cut_off_arguments(r: Run) -> None:
    (result,) = r.tool_results()
    assert "cut off" in result and "max_completion_tokens" in result
    assert r.result["result"] == "ok"


def _filtered(r: Run) -> None:
    assert "content filter" in r.result["error"] and r.result["result"] == "partial"
    assert r.log.messages[-1] == {"role": "assistant", "reasoning_content": "", "content": "partial"}


def _filtered_400(r: Run) -> None:
    assert len(r.requests) == 1 and "considered high risk" in r.result["error"]


def _fails_after_a_tool(r: Run) -> None:
    assert r.tool_results() == ["ran\n[exit code: 0]"] and len(r.requests) == 3


def _empty_answer(r: Run) -> None:
    assert r.result["result"] == "" and len(r.requests) == 1


def _text(content: str, **faults: Any) -> Reply:
    return Reply(content=content, chunk_size=3, **faults)


LLM_CASES: dict[str, Case] = {
    "429-retry-after": Case(
        [
            ErrorReply(429, "Rate limit reached", "rate_limit_reached_error", headers={"Retry-After": "1"}),
            Reply(content="ok"),
        ],
        0,
        "success",
        _retry_after,
    ),
    "429-engine-overloaded": Case(
        [ErrorReply(429, "The engine is currently overloaded", "engine_overloaded_error"), Reply(content="ok")],
        0,
        "success",
        _retried_once,
    ),
    "429-quota": Case(
        [ErrorReply(429, "You exceeded your current quota", "exceeded_current_quota_error")], 1, "error", _quota
    ),
    "500": Case([ErrorReply(500, "internal", "server_error"), Reply(content="ok")], 0, "success", _retried_once),
    "502": Case([ErrorReply(502, "bad gateway"), Reply(content="ok")], 0, "success", _retried_once),
    "503": Case([ErrorReply(503, "unavailable"), Reply(content="ok")], 0, "success", _retried_once),
    "503-exhausted": Case([ErrorReply(503, "unavailable")] * 3, 75, "error", _gave_up("HTTP 503", 3)),
    "401": Case([ErrorReply(401, "Invalid Authentication", "invalid_authentication_error")], 1, "error", _auth),
    "cut-mid-stream": Case([_text("a long answer", cut_after=2), Reply(content="ok")], 0, "success", _retried_once),
    "malformed-chunk": Case(
        [_text("a long answer", malformed_after=2), Reply(content="ok")], 0, "success", _retried_once
    ),
    "error-event-mid-stream": Case(
        [_text("a long answer", error_after=2), Reply(content="ok")], 0, "success", _retried_once
    ),
    "never-answers": Case(
        [Reply(content="late", first_delay=30)] * 2,
        75,
        "error",
        _gave_up("did not answer within 1 s", 2),
        ("--max-retries", "1", "--request-timeout", "1"),
    ),
    "stalls-mid-stream": Case(
        [_text("slow", chunk_delay=30)] * 2,
        75,
        "error",
        _gave_up("stream stalled", 2),
        ("--max-retries", "1", "--request-timeout", "1"),
    ),
    "no-done-but-complete": Case(
        [Reply(content="every word arrived", omit_done=True)], 0, "success", _complete_without_done
    ),
    "no-done-cut-short": Case(
        [_text("a long answer", cut_after=2, omit_done=True), Reply(content="ok")], 0, "success", _retried_once
    ),
    "empty-body": Case([ErrorReply(200, body=""), Reply(content="ok")], 0, "success", _retried_once),
    "empty-stream": Case([ErrorReply(200, body="data: [DONE]\n\n")] * 3, 75, "error", _gave_up("empty response", 3)),
    "empty-answer": Case([Reply(content="")], 0, "success", _empty_answer),
    "length-in-tool-arguments": Case(
        [
            Reply(tool_calls=[ToolCall("write_file", '{"path": "cut.txt", "content": "abc')], finish_reason="length"),
            Reply(content="ok"),
        ],
        0,
        "success",
        _cut_off_arguments,
    ),
    "content-filter": Case([Reply(content="partial", finish_reason="content_filter")], 1, "error", _filtered),
    "content-filter-400": Case(
        [ErrorReply(400, "The request was rejected because it was considered high risk", "content_filter")],
        1,
        "error",
        _filtered_400,
    ),
    "503-after-a-tool-ran": Case(
        [Reply(tool_calls=[ToolCall("bash", {"command": "echo ran"})]), *[ErrorReply(503, "down")] * 2],
        75,
        "error",
        _fails_after_a_tool,
        ("--max-retries", "1"),
    ),
}


@pytest.mark.parametrize("name", list(LLM_CASES))
def test_endpoint_faults(name: str, server: FakeServer, workspace: Path, tmp_path: Path) -> None:
    case = LLM_CASES[name]
    server.add(*case.script)
    r = run(server, tmp_path / "home", workspace, "--yolo", *FAST, *case.args)
    assert (r.code, r.result["status"]) == (case.code, case.status), (r.result, r.stderr)
    case.check(r)
    assert not (workspace / "cut.txt").exists()


def test_failures_are_explained_in_one_line_on_stderr(server: FakeServer, workspace: Path, tmp_path: Path) -> None:
    server.add(ErrorReply(401, "Invalid Authentication", "invalid_authentication_error"))
    env = command_env(
        tmp_path / "home", server, OPENAI_API_KEY="sk-openai", KIMI_API_KEY="", OPENAI_BASE_URL=server.base_url
    )
    done = subprocess.run(
        [*kimicode_command(), "-p", "x"],
        env=env,
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "check the API key in OPENAI_API_KEY" in done.stderr
    checked_log(tmp_path / "home", server)


# -- tools ----------------------------------------------------------------------------------------------


def _tool_run(server: FakeServer, workspace: Path, tmp_path: Path, calls: list[ScriptItem], **kw: Any) -> Run:
    server.add(*calls, Reply(content="done"))
    # unconfined: these faults are about the bash tool's own process-group handling (the PIDs the
    # commands record are host PIDs only outside the sandbox's PID namespace)
    r = run(server, tmp_path / "home", workspace, "--yolo", "--sandbox", "off", *FAST, **kw)
    assert (r.code, r.result["status"], r.result["result"]) == (0, "success", "done"), (r.result, r.stderr)
    return r


def _bash(command: str, **extra: Any) -> Reply:
    return Reply(tool_calls=[ToolCall("bash", {"command": command, **extra})])


def _gone(pid_file: Path) -> bool:
    try:
        os.kill(int(pid_file.read_text()), 0)
    except ProcessLookupError:
        return True
    with open(f"/proc/{int(pid_file.read_text())}/stat") as fh:  # a zombie waiting for a reaper is gone too
        return fh.read().rsplit(")", 1)[1].split()[0] == "Z"


def test_a_command_that_ignores_sigterm_is_killed(server: FakeServer, workspace: Path, tmp_path: Path) -> None:
    r = _tool_run(server, workspace, tmp_path, [_bash("trap '' TERM; echo $$ > shell.pid; sleep 60", timeout=1)])
    (result,) = r.tool_results()
    assert "timed out after 1 s" in result and r.seconds < 15
    assert _gone(workspace / "shell.pid")


def test_a_grandchild_holding_stdout_does_not_hang_the_call(
    server: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    r = _tool_run(server, workspace, tmp_path, [_bash("(sleep 60 & echo $! > gc.pid); echo parent done")])
    assert r.tool_results() == ["parent done\n[exit code: 0]"] and r.seconds < 15
    assert _gone(workspace / "gc.pid")


def test_a_gigabyte_of_output_keeps_memory_bounded(server: FakeServer, workspace: Path, tmp_path: Path) -> None:
    measure = [
        sys.executable,
        "-c",
        "import resource, subprocess, sys; subprocess.run(sys.argv[1:]); "
        "sys.stderr.write(f'MAXRSS={resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}\\n')",
    ]
    line = "x" * 99
    r = _tool_run(server, workspace, tmp_path, [_bash(f"yes {line} | head -c 1000000000")], prefix=measure)
    (result,) = r.tool_results()
    assert len(result) < 60_000 and "elided" in result and result.endswith("[exit code: 0]")
    max_rss_kb = int(r.stderr.rsplit("MAXRSS=", 1)[1].split()[0])
    assert max_rss_kb < 300 * 1024, f"kimicode peaked at {max_rss_kb // 1024} MB"
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss < 1024 * 1024  # nor did this test buffer it


def test_a_command_waiting_for_input_gets_end_of_file(server: FakeServer, workspace: Path, tmp_path: Path) -> None:
    r = _tool_run(server, workspace, tmp_path, [_bash('read x; echo "got:[$x]"; cat; echo end')])
    assert r.tool_results() == ["got:[]\nend\n[exit code: 0]"] and r.seconds < 15


def test_a_file_deleted_between_read_and_edit(server: FakeServer, workspace: Path, tmp_path: Path) -> None:
    target = workspace / "notes.txt"
    target.write_text("hello\n")

    def delete_then_edit(_request: RecordedRequest) -> Reply:
        target.unlink()  # someone else removes it while the model is thinking
        return Reply(
            tool_calls=[ToolCall("edit_file", {"path": "notes.txt", "old_string": "hello", "new_string": "bye"})]
        )

    r = _tool_run(
        server,
        workspace,
        tmp_path,
        [Reply(tool_calls=[ToolCall("read_file", {"path": "notes.txt"})]), delete_then_edit],
    )
    read, edit = r.tool_results()
    assert "hello" in read and "deleted since you last read it" in edit
    assert not target.exists()


def test_a_directory_passed_as_a_file(server: FakeServer, workspace: Path, tmp_path: Path) -> None:
    (workspace / "adir").mkdir()
    calls = [
        ToolCall("read_file", {"path": "adir"}),
        ToolCall("write_file", {"path": "adir", "content": "x"}),
        ToolCall("edit_file", {"path": "adir", "old_string": "a", "new_string": "b"}),
    ]
    r = _tool_run(server, workspace, tmp_path, [Reply(tool_calls=calls)])
    results = r.tool_results()
    assert len(results) == 3 and all("is a directory" in text for text in results)
    assert (workspace / "adir").is_dir()


def test_a_path_with_invalid_utf8(server: FakeServer, workspace: Path, tmp_path: Path) -> None:
    name = os.fsdecode(b"caf\xe9.txt")  # latin-1 bytes: not UTF-8
    (workspace / name).write_text("bonjour\n")
    calls = [
        ToolCall("glob", {"pattern": "*.txt"}),
        ToolCall("grep", {"pattern": "bonjour"}),
        ToolCall("read_file", '{"path": "caf\\udce9.txt"}'),  # the model names the file by its escaped bytes
        ToolCall("read_file", '{"path": "missing-\\udce9.txt"}'),  # echoed back in an error
        ToolCall("bash", {"command": "ls; cat caf*"}),
    ]
    r = _tool_run(server, workspace, tmp_path, [Reply(tool_calls=calls)])
    globbed, grepped, read, missing, listed = r.tool_results()
    assert globbed == "caf\ufffd.txt" and grepped == "caf\ufffd.txt"
    assert "bonjour" in read and "missing-\ufffd.txt" in missing
    assert "caf\ufffd.txt" in listed and "bonjour" in listed


def test_a_ten_megabyte_single_line_file(server: FakeServer, workspace: Path, tmp_path: Path) -> None:
    (workspace / "big.min.js").write_text("y" * 10_000_000)
    calls = [
        ToolCall("read_file", {"path": "big.min.js"}),
        ToolCall("grep", {"pattern": "y+", "output_mode": "content"}),
        ToolCall("edit_file", {"path": "big.min.js", "old_string": "yyyy", "new_string": "z"}),
    ]
    r = _tool_run(server, workspace, tmp_path, [Reply(tool_calls=calls)])
    read, grepped, edited = r.tool_results()
    assert len(read) < 20_000 and "10000000" in read.replace(",", "")
    assert len(grepped) < 20_000 and grepped.startswith("big.min.js:1:")
    assert len(edited) < 20_000  # an error (not unique) or a success: either way bounded and recorded
    total = sum(len(m.raw) for m in r.requests)
    assert total < 2_000_000, "the 10 MB line reached the model"
