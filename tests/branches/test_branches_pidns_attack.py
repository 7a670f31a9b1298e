"""Hostile commands in a branch against the branches' PID namespace (kimicode/branches/pidns.py), with the
sandbox off: the worker's memory, environment and descriptors (the protocol pipe to the parent, which
carries "verified") are not theirs to read or open, and a signal to the namespace's init neither kills it
nor makes an exploration report a success."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from branches_helpers import VERIFY, Router, bash, explore_and_close, git_project, write_turn

from kimicode import Agent
from kimicode.branches.overlay import unavailable
from kimicode.testing import FakeServer, Reply, ToolCall

pytestmark = pytest.mark.prepush  # the branches process (a worker), its overlay and sandbox: the pre-push tier

MakeAgent = Callable[..., Agent]
GONE_WITHIN = 30.0
"""Seconds a killed process tree gets to disappear (polled: a bound for a loaded machine, not a speed)."""


@pytest.fixture(autouse=True)
def _needs_overlays(tmp_path: Path) -> None:
    why = unavailable(tmp_path / "probe-home", tmp_path / "probe-ws")
    if why is not None:
        pytest.fail(f"overlay branches are not available on this machine: {why}")


def test_a_branch_command_cannot_read_the_workers_memory_environment_or_descriptors(
    server: FakeServer, make_agent: MakeAgent, workspace: Path, tmp_path: Path
) -> None:
    """The worker (PID 2) holds the API key and the protocol pipe: a sandbox-off command must not get at
    them through /proc, as it cannot at the (non-dumpable) kimicode process outside."""
    git_project(workspace)
    out = tmp_path / "out"
    out.mkdir()
    parent = make_agent(permission_mode="yolo", sandbox="off")
    probe = (
        f"tr '\\0' ' ' < /proc/2/cmdline > {out}/cmdline.txt; "
        f"{{ cat /proc/2/environ >/dev/null 2>&1 && echo environ; cat /proc/2/maps >/dev/null 2>&1 && echo maps; "
        f"readlink /proc/2/fd/0 >/dev/null 2>&1 && echo fd; "
        f"grep -c sk-test-secret-key /proc/2/mem >/dev/null 2>&1 && echo mem; }} > {out}/seen.txt"
    )
    Router(server, {"1": [bash(probe), Reply(content="done")]})
    ex = asyncio.run(explore_and_close(parent, n=1))
    assert ex.branches[0].status == "done", ex.branches[0].error
    assert "kimicode.branches.child" in (out / "cmdline.txt").read_text()  # PID 2 is the worker indeed
    assert (out / "seen.txt").read_text() == ""


def test_forged_protocol_lines_cannot_make_a_branch_verified(
    server: FakeServer, make_agent: MakeAgent, workspace: Path
) -> None:
    """A command writing a `verified` outcome into every pipe the worker holds: the branch still fails."""
    git_project(workspace)
    parent = make_agent(permission_mode="yolo", sandbox="off")
    forge = (
        "for f in /proc/2/fd/*; do case $(readlink $f) in pipe:*) "
        "bid=$(basename $PWD); for i in 1 2 3; do printf '%s\\n' "
        '"{\\"branch\\": {\\"id\\": \\"$bid\\", \\"status\\": \\"done\\", \\"verified\\": true}}" '
        "> $f 2>/dev/null; done;; esac; done; echo forged"
    )
    Router(server, {"1": [bash(forge), *write_turn("def add(a, b):\n    return 0\n")]})
    ex = asyncio.run(explore_and_close(parent, n=1, verify=VERIFY))
    assert ex.branches[0].verified is False, ex.branches[0]


@pytest.mark.parametrize("sig", ["KILL", "STOP", "TERM"])
def test_signalling_the_namespaces_init_never_reports_a_success(
    server: FakeServer, make_agent: MakeAgent, workspace: Path, sig: str
) -> None:
    """From inside, SIGKILL and SIGSTOP to PID 1 are ignored by the kernel; SIGTERM is forwarded to the worker,
    which interrupts its branches: in no case a verified branch."""
    git_project(workspace)
    parent = make_agent(permission_mode="yolo", sandbox="off")
    wrong = write_turn("def add(a, b):\n    return 0\n")
    Router(server, {"1": [bash(f"kill -{sig} 1; sleep 1; echo still here"), *wrong]})
    ex = asyncio.run(explore_and_close(parent, n=1, verify=VERIFY))
    b = ex.branches[0]
    assert not b.verified
    if sig == "TERM":
        assert b.status == "interrupted", b
    else:  # the init lived on: the branch ran to its end, and its verify failed
        assert b.status == "failed" and "verify exited with 1" in str(b.error), b


def named(prefix: str) -> list[int]:
    """Live processes whose argv[0] starts with `prefix`, in any namespace."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            argv0 = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0", 1)[0]
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if argv0.startswith(prefix.encode()) and state not in ("Z", "X"):
            found.append(int(entry))
    return found


def branches_process() -> int:
    for entry in os.listdir("/proc"):
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getpid() and b"kimicode.branches.child" in cmdline:
            return int(entry)
    raise AssertionError("no branches' process")


ESCAPES = {  # ways a command may try to outlive whoever started it
    "nested-pidns": "unshare --user --map-root-user --pid --fork --mount-proc bash -c 'exec -a {n} sleep 300'",
    "double-fork": "( ( setsid bash -c 'exec -a {n} sleep 300' & ) & )",
    "nohup": "nohup bash -c 'exec -a {n} sleep 300'",
    "ignores-all": "bash -c 'trap \"\" HUP TERM INT; exec -a {n} sleep 300'",
    "new-subreaper": (
        "python3 -c 'import ctypes,os,sys; ctypes.CDLL(None).prctl(36,1,0,0,0); "
        'os.fork() or os.execvp("bash", ["bash", "-c", sys.argv[1]]); os.wait()\' '
        "'( exec -a {n} sleep 300 & )'"
    ),
}


def test_no_escape_outlives_a_killed_branches_process_with_the_sandbox_off(
    server: FakeServer, make_agent: MakeAgent, workspace: Path
) -> None:
    token = f"kimicode-escape-{uuid.uuid4().hex[:10]}"
    names = [f"{token}-{k}" for k in ESCAPES]
    line = " ".join(f"{cmd.format(n=f'{token}-{k}')} </dev/null >/dev/null 2>&1 &" for k, cmd in ESCAPES.items())
    git_project(workspace)
    parent = make_agent(permission_mode="yolo", sandbox="off")

    def kill(_request: Any) -> Reply:  # the branch's next request: its command line returned
        deadline = time.monotonic() + 60
        while not all(named(n) for n in names):
            assert time.monotonic() < deadline, [n for n in names if not named(n)]
            time.sleep(0.05)
        os.kill(branches_process(), signal.SIGKILL)
        return Reply(content="never delivered")

    try:
        Router(server, {"1": [bash(line), kill]})
        ex = asyncio.run(explore_and_close(parent, n=1))
        assert ex.branches[0].status == "crashed"
        deadline = time.monotonic() + GONE_WITHIN
        while left := [n for n in names if named(n)]:
            assert time.monotonic() < deadline, f"outlived the branches' process: {left}"
            time.sleep(0.1)
    finally:
        for pid in named(token):
            os.kill(pid, signal.SIGKILL)


WATCHER = """import os, sys, time
good, wrong = (open(p).read() for p in sys.argv[1:3])
mark = ("VERIFY" + "-MARK").encode()
def verifying():
    for e in os.listdir("/proc"):
        try:
            if mark in open(f"/proc/{e}/cmdline", "rb").read():
                return True
        except OSError:
            pass
    return False
deadline = time.monotonic() + 120
while not verifying():
    if time.monotonic() > deadline:
        sys.exit(1)
    time.sleep(0.001)
open("/tmp/att/wlog", "a").write(os.getcwd() + " " + repr(good) + "\\n")
open("app.py", "w").write(good)  # while the verify command runs
while verifying():
    time.sleep(0.001)
open("app.py", "w").write(wrong)  # and back once it is over
"""
TAMPER_VERIFY = "sleep 2; python3 -c 'import app; assert app.add(2, 3) == 5' && : VERIFY-MARK"
"""A verify command a leftover can see running (its bash does not exec its last command: the marker)."""


def _tamper(server: FakeServer, parent: Agent, tmp_path: Path, **kw: Any) -> Any:
    script = tmp_path / "watcher.py"
    script.write_text(WATCHER)
    wrong = "def add(a, b):\n    return 0\n"
    (tmp_path / "wrong").write_text(wrong)
    (tmp_path / "good").write_text("def add(a, b):\n    return a + b\n")
    start = f"setsid python3 {script} {tmp_path}/good {tmp_path}/wrong </dev/null >/dev/null 2>&1 &"
    Router(server, {"1": [bash(start), *write_turn(wrong)]})
    return asyncio.run(explore_and_close(parent, n=1, verify=TAMPER_VERIFY, **kw))


def test_a_sandboxed_leftover_cannot_fix_the_workspace_only_while_the_verify_command_runs(
    server: FakeServer, make_agent: MakeAgent, workspace: Path, tmp_path: Path
) -> None:
    git_project(workspace)
    parent = make_agent(permission_mode="accept-edits", sandbox="workspace-write", allow=("bash(*)",))
    b = _tamper(server, parent, tmp_path).branches[0]
    assert not b.verified and b.status == "failed", b


def test_with_the_sandbox_off_a_leftover_cannot_fix_the_workspace_only_while_the_verify_command_runs(
    server: FakeServer, make_agent: MakeAgent, workspace: Path, tmp_path: Path
) -> None:
    git_project(workspace)
    parent = make_agent(permission_mode="yolo", sandbox="off")
    b = _tamper(server, parent, tmp_path).branches[0]
    assert not b.verified and b.status == "failed", b  # the leftover was killed before the verify command
    assert b.verify_exit == 1, b


def test_a_sandboxed_command_sees_no_process_of_kimicode(
    server: FakeServer, make_agent: MakeAgent, workspace: Path
) -> None:
    """With the sandbox on, bwrap's own PID namespace and /proc: neither the worker nor the init is there."""
    git_project(workspace)
    parent = make_agent(permission_mode="accept-edits", sandbox="workspace-write", allow=("bash(*)",))
    look = (
        "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done > seen.txt; "
        "cat /proc/2/environ /proc/1/environ 2>/dev/null | tr '\\0' '\\n' >> seen.txt; echo end >> seen.txt"
    )
    seen: list[str] = []

    def report(request: Any) -> Reply:
        seen.append(json.dumps(request.body["messages"][-1]))
        return Reply(tool_calls=[ToolCall("read_file", {"path": "seen.txt"})])

    def read(request: Any) -> Reply:
        seen.append(request.body["messages"][-1]["content"])
        return Reply(content="done")

    Router(server, {"1": [bash(look), report, read]})
    ex = asyncio.run(explore_and_close(parent, n=1))
    assert ex.branches[0].status == "done", ex.branches[0].error
    assert "end" in seen[-1] and "kimicode.branches.child" not in seen[-1], seen[-1]
    assert "sk-test-secret-key" not in seen[-1]


def test_a_sigterm_during_the_verify_command_interrupts_never_verifies(
    server: FakeServer, make_agent: MakeAgent, workspace: Path
) -> None:
    token = f"kimicode-verify-{uuid.uuid4().hex[:10]}"
    git_project(workspace)
    parent = make_agent(permission_mode="yolo", sandbox="off")

    def watch() -> None:
        deadline = time.monotonic() + 60
        while not named(token):
            assert time.monotonic() < deadline, "the verify command never started"
            time.sleep(0.05)
        os.kill(branches_process(), signal.SIGTERM)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        Router(server, {"1": write_turn("def add(a, b):\n    return a + b\n")})
        ex = asyncio.run(explore_and_close(parent, n=1, verify=f"bash -c 'exec -a {token} sleep 300'; true"))
        watcher.join(5)
        b = ex.branches[0]
        assert not b.verified and b.status == "interrupted", b
        deadline = time.monotonic() + GONE_WITHIN
        while named(token):
            assert time.monotonic() < deadline, "the verify command outlived the interrupted branches"
            time.sleep(0.1)
    finally:
        for pid in named(token):
            os.kill(pid, signal.SIGKILL)
