"""Bad input gets a clear error and loses nothing (issue 10): special files, locked sessions, newer logs,
an unwritable home, deeply nested arguments, and processes that would outlive the session."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import command_env, kimicode_command, sent_tool_results

from kimicode import Agent
from kimicode.session.lock import SessionBusyError, SessionLock
from kimicode.session.log import NewerLogError, SessionWriteError
from kimicode.testing import FakeServer, Reply, ToolCall
from kimicode.tools.registry import MAX_ARGUMENT_DEPTH, parse_arguments

MakeAgent = Callable[..., Any]
linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs Linux (/proc, FIFOs, prctl)")


# -- special files never block -------------------------------------------------------------------------


@linux
def test_read_file_refuses_a_fifo_a_device_and_an_image_named_fifo_without_blocking(
    server: FakeServer, make_agent: MakeAgent, workspace: Path
) -> None:
    os.mkfifo(workspace / "pipe.txt")
    os.mkfifo(workspace / "pic.png")
    (workspace / "zero").symlink_to("/dev/zero")
    calls = [ToolCall("read_file", {"path": p}) for p in ("pipe.txt", "pic.png", "zero")]
    server.add(Reply(tool_calls=calls), Reply(content="ok"))
    started = time.monotonic()
    result = make_agent().run_sync("read them")
    assert time.monotonic() - started < 20
    assert result.status == "success"
    texts = sent_tool_results(server)
    assert len(texts) == 3
    assert all("not a regular file" in t for t in texts), texts


# -- deeply nested arguments -----------------------------------------------------------------------------


def test_deeply_nested_arguments_are_an_error_the_model_sees(server: FakeServer, make_agent: MakeAgent) -> None:
    deep = '{"path": ' + "[" * 5_000 + "]" * 5_000 + "}"  # json.loads alone: RecursionError
    server.add(Reply(tool_calls=[ToolCall("read_file", deep)]), Reply(content="sorry"))
    result = make_agent().run_sync("x")
    assert result.status == "success" and result.result == "sorry"
    (text,) = sent_tool_results(server)
    assert "nested 5001 levels deep" in text and str(MAX_ARGUMENT_DEPTH) in text


def test_nesting_is_counted_outside_strings_only() -> None:
    brackets = "[" * 200
    assert parse_arguments(json.dumps({"s": brackets})) == {"s": brackets}
    ok = '{"a": ' + "[" * (MAX_ARGUMENT_DEPTH - 1) + "]" * (MAX_ARGUMENT_DEPTH - 1) + "}"
    assert parse_arguments(ok)
    with pytest.raises(ValueError, match="nested"):
        parse_arguments('{"a": ' + "[" * MAX_ARGUMENT_DEPTH + "]" * MAX_ARGUMENT_DEPTH + "}")


# -- newer log versions ------------------------------------------------------------------------------------


def test_a_log_from_a_newer_kimicode_is_refused_naming_its_version(
    server: FakeServer, make_agent: MakeAgent, tmp_path: Path
) -> None:
    server.add(Reply(content="hi"))
    agent = make_agent()
    agent.run_sync("x")
    log = tmp_path / "home" / "sessions" / f"{agent.session_id}.jsonl"
    with log.open("a") as fh:
        fh.write(json.dumps({"v": 7, "type": "message", "message": {"role": "user", "content": "future"}}) + "\n")
    before = log.read_bytes()
    with pytest.raises(NewerLogError, match=r"log version 7; this kimicode reads version 1"):
        Agent.resume(agent.session_id, base_url=server.base_url, api_key="k" * 10, home=tmp_path / "home")
    assert log.read_bytes() == before  # nothing lost, nothing appended


# -- one writer per session -------------------------------------------------------------------------------


HOLD = (
    "import sys, time; from pathlib import Path; from kimicode.session.lock import SessionLock\n"
    "lock = SessionLock.acquire(Path(sys.argv[1]), sys.argv[2]); print('held', flush=True)\n"
    "sys.stdin.readline(); lock.release(); print('released', flush=True); time.sleep(60)\n"
)


@linux
def test_a_second_writer_is_refused_with_a_fork_hint_and_a_fork_still_works(
    server: FakeServer, make_agent: MakeAgent, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    server.add(Reply(content="one"))
    first = make_agent()
    first.run_sync("x")
    opts: dict[str, Any] = {"base_url": server.base_url, "api_key": "sk-test-secret-key", "home": home}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(home / "sessions"), first.session_id],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdin is not None and holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        log = home / "sessions" / f"{first.session_id}.jsonl"
        before = log.read_bytes()
        with pytest.raises(SessionBusyError, match=rf"in use by process {holder.pid}: .*--fork"):
            Agent.resume(first.session_id, **opts)
        assert log.read_bytes() == before  # the refused resume wrote nothing
        fork = Agent.resume(first.session_id, fork=True, **opts)
        assert fork.session_id != first.session_id
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "released"
        again = Agent.resume(first.session_id, **opts)  # free again
        assert again.log is not None and again.log.lock is not None and again.log.lock.held
    finally:
        holder.kill()
        holder.wait(10)


@linux
def test_a_lock_left_by_a_killed_process_is_taken_over(tmp_path: Path) -> None:
    directory = tmp_path / "sessions"
    script = (
        "import sys, time; from pathlib import Path; from kimicode.session.lock import SessionLock\n"
        "lock = SessionLock.acquire(Path(sys.argv[1]), 'sid'); print('held', flush=True); time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script, str(directory)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        with pytest.raises(SessionBusyError, match=f"process {proc.pid}"):
            SessionLock.acquire(directory, "sid")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    lock = SessionLock.acquire(directory, "sid")  # the kernel dropped the dead holder's lock
    assert lock.held
    lock.release()


@pytest.mark.slow
@linux
def test_the_command_line_refuses_a_busy_session_with_exit_2(
    server: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    server.add(Reply(content="first"))
    env = command_env(home, server)
    done = subprocess.run(
        [*kimicode_command(), "-p", "x", "--output-format", "json"],
        env=env,
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    sid = json.loads(done.stdout)["session_id"]
    script = (
        "import sys, time; from pathlib import Path; from kimicode.session.lock import SessionLock\n"
        "lock = SessionLock.acquire(Path(sys.argv[1]), sys.argv[2]); print('held', flush=True); time.sleep(60)\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", script, str(home / "sessions"), sid], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        busy = subprocess.run(
            [*kimicode_command(), "-p", "y", "-r", sid],
            env=env,
            cwd=workspace,
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
    finally:
        holder.kill()
        holder.wait(10)
    assert busy.returncode == 2, busy.stderr
    assert f"session {sid} is in use by process {holder.pid}" in busy.stderr and "--fork" in busy.stderr
    assert "Traceback" not in busy.stderr


# -- an unwritable or full KIMICODE_HOME ------------------------------------------------------------------


def test_an_unusable_home_ends_the_turn_with_one_clear_error(
    server: FakeServer, make_agent: MakeAgent, tmp_path: Path
) -> None:
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "sessions").write_text("a file where the sessions directory should be")
    server.add(Reply(content="never asked"))
    result = make_agent().run_sync("x")
    assert result.status == "error"
    assert result.error is not None and "cannot write the session log" in result.error
    assert "KIMICODE_HOME" in result.error
    assert not server.requests  # stopped before spending a request that could not be recorded


@linux
def test_a_full_disk_is_one_clear_error(make_agent: MakeAgent, tmp_path: Path) -> None:
    sessions = tmp_path / "home" / "sessions"
    sessions.mkdir(parents=True)
    (sessions / "full-session.jsonl").symlink_to("/dev/full")  # an existing log: every write fails, ENOSPC
    with pytest.raises(SessionWriteError, match="No space left on device"):
        make_agent(session_id="full-session")


@pytest.mark.slow
def test_an_unwritable_home_gives_exit_2_and_stream_json_ends_with_its_result(
    server: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home-is-a-file"
    home.write_text("not a directory")
    server.add(Reply(content="hi"))
    done = subprocess.run(
        [*kimicode_command(), "-p", "x", "--output-format", "stream-json"],
        env=command_env(home, server),
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    last = json.loads(done.stdout.strip().splitlines()[-1])
    assert last["type"] == "result" and last["status"] == "error" and "cannot write the session log" in last["error"]


# -- processes started by the bash tool end with the session --------------------------------------------


def _alive(pid: int, marker: str) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    return marker in cmdline and stat[stat.rfind(")") + 2] not in "ZX"


@pytest.mark.slow
@linux
@pytest.mark.parametrize("sandbox", ["off", "auto"])
def test_setsid_background_jobs_do_not_outlive_kimicode(
    server: FakeServer, workspace: Path, tmp_path: Path, sandbox: str
) -> None:
    marker = f"1000{len(sandbox)}"
    cmd = f"setsid sleep {marker} >/dev/null 2>&1 & echo PID=$!; nohup sleep {marker} >/dev/null 2>&1 & echo PID=$!"
    server.add(Reply(tool_calls=[ToolCall("bash", {"command": cmd})]), Reply(content="done"))
    done = subprocess.run(
        [*kimicode_command(), "-p", "x", "--yolo", "--sandbox", sandbox, "--output-format", "json"],
        env=command_env(tmp_path / "home", server),
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    time.sleep(0.3)
    leftovers = subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True, text=True).stdout.split()
    alive = [int(p) for p in leftovers if _alive(int(p), f"sleep\0{marker}")]
    for pid in alive:  # never leave them behind, even when the test fails
        os.kill(pid, signal.SIGKILL)
    assert not alive


def test_a_command_nested_too_deeply_to_check_is_refused_and_the_run_goes_on(
    server: FakeServer, make_agent: MakeAgent, workspace: Path
) -> None:
    deep = "echo " + "$(" * 5000 + "touch pwned" + ")" * 5000
    server.add(Reply(tool_calls=[ToolCall("bash", {"command": deep})]), Reply(content="ok"))
    result = make_agent(permission_mode="yolo", allow=["bash(echo*)"], deny=["bash(rm*)"], sandbox="off").run_sync("x")
    assert result.status == "success" and result.result == "ok"
    assert not (workspace / "pwned").exists()
    (text,) = sent_tool_results(server)
    assert "nested too deeply" in text or "Permission" in text or "denied" in text.lower()


@linux
def test_a_session_in_use_by_another_process_is_not_deleted(
    server: FakeServer, make_agent: MakeAgent, tmp_path: Path
) -> None:
    from kimicode.session.store import SessionError, delete_session

    home = tmp_path / "home"
    server.add(Reply(content="one"))
    agent = make_agent()
    agent.run_sync("x")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(home / "sessions"), agent.session_id],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdin is not None and holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(SessionError, match=rf"in use by process {holder.pid}: wait for it to finish"):
            delete_session(home, agent.session_id)
        assert (home / "sessions" / f"{agent.session_id}.jsonl").exists()
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "released"
    finally:
        holder.kill()
        holder.wait(10)
    assert delete_session(home, agent.session_id) == agent.session_id
    assert not list((home / "sessions").glob(f"{agent.session_id}*"))  # log, spill dir and lock file gone
