"""The branches' process tree in a PID namespace of its own: nothing a branch started outlives it (a SIGKILL
of the process, with the sandbox off or on, background commands included); SIGTERM and a closed stdin
still stop it; a branch's commands see a /proc of their own, and the bash tool's timeout kill works there.

Real processes, found by a name of their own (`exec -a <token>`), killed in a finally when a test fails."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from branches_helpers import Router, explore_and_close, git_project

from kimicode import Agent
from kimicode.branches.overlay import unavailable
from kimicode.branches.overlay_engine import _BOOT
from kimicode.testing import FakeServer, Reply, ToolCall
from kimicode.testing.replies import RecordedRequest

pytestmark = pytest.mark.prepush  # the branches process (a worker), its overlay and sandbox: the pre-push tier

MakeAgent = Callable[..., Agent]
GONE_WITHIN = 30.0
"""Seconds a killed process tree gets to disappear (polled: a bound for a loaded machine, not a speed)."""


@pytest.fixture(autouse=True)
def _needs_overlays(tmp_path: Path) -> None:
    why = unavailable(tmp_path / "probe-home", tmp_path / "probe-ws")
    if why is not None:
        pytest.fail(f"overlay branches are not available on this machine: {why}")


@pytest.fixture
def token() -> Iterator[str]:
    """A process name for this test's commands; whatever still bears it at the end is killed."""
    name = f"kimicode-pidns-{uuid.uuid4().hex[:12]}"
    try:
        yield name
    finally:
        for pid in named(name):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def named(prefix: str) -> list[int]:
    """Live processes whose name (argv[0]) starts with `prefix`, in any namespace."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv0 = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0", 1)[0]
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if argv0.startswith(prefix.encode()) and state not in ("Z", "X"):
            found.append(int(entry))
    return found


def wait_for(names: list[str], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not all(named(n) for n in names):
        assert time.monotonic() < deadline, f"{names} never started"
        time.sleep(0.05)


def gone(prefix: str) -> bool:
    """Whether every process named `prefix…` is gone (polled up to GONE_WITHIN seconds)."""
    deadline = time.monotonic() + GONE_WITHIN
    while named(prefix):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def branches_process() -> int:
    """The branches' process: the child of this process running `kimicode.branches.child`."""
    me = os.getpid()
    for entry in os.listdir("/proc"):
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == me and b"kimicode.branches.child" in cmdline:
            return int(entry)
    raise AssertionError("no branches' process")


def signal_when_running(names: list[str], sig: signal.Signals) -> threading.Thread:
    """Send `sig` to the branches' process once every process of `names` runs (from a thread)."""

    def watch() -> None:
        wait_for(names)
        os.kill(branches_process(), sig)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def bash(command: str, timeout: int | None = None) -> Reply:
    args: dict[str, Any] = {"command": command}
    if timeout is not None:
        args["timeout"] = timeout
    return Reply(tool_calls=[ToolCall("bash", args)])


def background(name: str) -> str:
    """A command line leaving `sleep 300` named `name` running in a session of its own (`setsid … &`)."""
    return f"setsid bash -c 'exec -a {name} sleep 300' </dev/null >/dev/null 2>&1 &"


def test_a_background_command_dies_with_the_branches_process_with_the_sandbox_off(
    server: FakeServer, make_agent: MakeAgent, workspace: Path, token: str
) -> None:
    git_project(workspace)
    parent = make_agent(permission_mode="yolo", sandbox="off")

    def kill(request: RecordedRequest) -> Reply:  # the branch's next request: its command returned
        wait_for([token])
        os.kill(branches_process(), signal.SIGKILL)
        return Reply(content="never delivered")

    Router(server, {"1": [bash(background(token)), kill]})
    ex = asyncio.run(explore_and_close(parent, n=1))
    b = ex.branches[0]
    assert b.status == "crashed" and "killed by signal 9" in str(b.error)
    assert gone(token), "the branch's background command outlived the branches' process"


def test_a_running_command_dies_with_the_branches_process_with_the_sandbox_off(
    server: FakeServer, make_agent: MakeAgent, workspace: Path, token: str
) -> None:
    git_project(workspace)
    parent = make_agent(permission_mode="yolo", sandbox="off")
    Router(server, {"1": [bash(f"{background(token + '-bg')} exec -a {token} sleep 300", timeout=600)]})
    watcher = signal_when_running([token, token + "-bg"], signal.SIGKILL)
    ex = asyncio.run(explore_and_close(parent, n=1))
    watcher.join(5)
    assert ex.branches[0].status == "crashed"
    assert gone(token), "the branch's commands outlived the branches' process"


def test_sandboxed_commands_die_with_the_branches_process(
    server: FakeServer, make_agent: MakeAgent, workspace: Path, token: str
) -> None:
    git_project(workspace)
    parent = make_agent(permission_mode="accept-edits", sandbox="workspace-write", allow=("bash(*)",))
    Router(server, {"1": [bash(f"{background(token + '-bg')} exec -a {token} sleep 300", timeout=600)]})
    watcher = signal_when_running([token, token + "-bg"], signal.SIGKILL)
    ex = asyncio.run(explore_and_close(parent, n=1))
    watcher.join(5)
    assert ex.branches[0].status == "crashed"
    assert gone(token), "the branch's sandboxed commands outlived the branches' process"


def test_sigterm_interrupts_the_branches_and_ends_what_they_started(
    server: FakeServer, make_agent: MakeAgent, workspace: Path, token: str
) -> None:
    git_project(workspace)
    parent = make_agent(permission_mode="yolo", sandbox="off")
    Router(server, {"1": [bash(f"{background(token + '-bg')} exec -a {token} sleep 300", timeout=600)]})
    watcher = signal_when_running([token, token + "-bg"], signal.SIGTERM)
    ex = asyncio.run(explore_and_close(parent, n=1))
    watcher.join(5)
    b = ex.branches[0]
    assert b.status == "interrupted", b.error  # saved as such by the branches' process, not crashed
    assert gone(token), "a command outlived the interrupted branches"


def test_a_branch_sees_its_own_proc_and_the_bash_timeout_still_kills(
    server: FakeServer, make_agent: MakeAgent, workspace: Path, tmp_path: Path, token: str
) -> None:
    git_project(workspace)
    out = tmp_path / "out"
    out.mkdir()
    parent = make_agent(permission_mode="yolo", sandbox="off")
    look = (
        f"tr '\\0' ' ' < /proc/1/cmdline > {out}/init.txt; ls /proc > {out}/proc.txt; echo $$ > {out}/shell.txt; "
        f"cut -d' ' -f5 /proc/$$/stat > {out}/pgrp.txt; setsid sleep 0.1 </dev/null >/dev/null 2>&1 &"
    )
    # shell builtins only (no child of its own to catch unreaped): the orphaned `sleep 0.1` was reaped by PID 1
    zombies = (
        f'for s in /proc/[0-9]*/stat; do read -r l < "$s" && case "${{l##*) }}" in Z*) echo "$l";; esac; '
        f"done > {out}/zombies.txt"
    )
    seen: list[str] = []

    def timed_out(request: RecordedRequest) -> Reply:
        seen.append(json.dumps(request.body["messages"][-1]))
        return bash(zombies)

    # a command that ignores SIGTERM: the timeout kill waits for the group (read from /proc), then SIGKILLs it
    Router(
        server,
        {
            "1": [
                bash(look),
                bash(f"trap '' TERM; exec -a {token} sleep 300", timeout=1),
                timed_out,
                Reply(content="done"),
            ]
        },
    )
    ex = asyncio.run(explore_and_close(parent, n=1))
    assert ex.branches[0].status == "done", ex.branches[0].error
    assert "kimicode.branches.child" in (out / "init.txt").read_text()  # PID 1: the branches' own init
    shell = (out / "shell.txt").read_text().strip()
    assert shell in (out / "proc.txt").read_text().split()  # the shell's pid as this /proc numbers it
    assert (out / "pgrp.txt").read_text().strip() == shell  # and its process group (the bash tool's session)
    assert (out / "zombies.txt").read_text() == ""
    assert "timed out after 1 s" in seen[0]
    assert gone(token)


def _start_child() -> subprocess.Popen[bytes]:
    """The branches' process as the overlay engine starts it (its orders never sent)."""
    return subprocess.Popen(
        [sys.executable, "-c", _BOOT, json.dumps(sys.path), "kimicode:Agent"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def _descendants(pid: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        try:
            parents[int(entry)] = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    out, frontier = [], {pid}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier}
        out.extend(frontier)
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def test_an_early_sigterm_ends_the_branches_process_and_its_namespace() -> None:
    proc = _start_child()
    try:
        deadline = time.monotonic() + GONE_WITHIN
        while len(_descendants(proc.pid)) < 2:  # its namespace's init, and the worker below it
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        inner = _descendants(proc.pid)
        proc.send_signal(signal.SIGTERM)  # before the branches' handlers exist: it dies of it, as before
        assert proc.wait(GONE_WITHIN) == -signal.SIGTERM
        assert not [p for p in inner if _alive(p)]  # the waiter exits after its namespace is gone
    finally:
        proc.kill()
        proc.wait()


def test_a_closed_stdin_ends_the_branches_process() -> None:
    proc = _start_child()
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.close()  # the parent gone before its orders
        assert proc.wait(GONE_WITHIN) == 3
        assert "cannot read the orders" in proc.stdout.read().decode()
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap to mask a file of /proc")
def test_without_a_proc_of_its_own_the_branches_process_runs_as_before_and_says_why() -> None:
    """A partly masked /proc (as containers have) refuses a new procfs: no PID namespace then, a notice."""
    argv = [
        "bwrap",
        "--dev-bind",
        "/",
        "/",
        "--unshare-user",
        "--unshare-pid",
        "--proc",
        "/proc",
        "--ro-bind",
        "/dev/null",
        "/proc/version",
        "--",
        sys.executable,
        "-c",
        _BOOT,
        json.dumps(sys.path),
        "kimicode:Agent",
    ]
    done = subprocess.run(argv, input=b"", capture_output=True, timeout=GONE_WITHIN * 2, check=False)
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert done.returncode == 3, done.stderr  # it went on, and found its stdin closed
    assert "no PID namespace (cannot mount a /proc of its own" in lines[0]["notice"]
    assert "cannot read the orders" in lines[1]["fatal"]
