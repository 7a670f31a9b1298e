"""Tests for the bash tool: real processes, real process groups, real timeouts and cancellation."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import ROOT

from kimicode.tools.base import ToolContext, ToolError, ToolResult
from kimicode.tools.shell import BASH, SHELL_ENV, OutputBuffer, scrub_env


async def invoke(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    result = await BASH.fn(args, ctx)
    assert isinstance(result, ToolResult)
    return result


def run(command: str, workspace: Path, **extra: Any) -> ToolResult:
    ctx = ToolContext(workspace=workspace, env=extra.pop("env", None))
    return asyncio.run(invoke({"command": command, **extra}, ctx))


def live_members(pgid: int) -> list[int]:
    """Processes (zombies excluded: PID 1 may not reap orphans here) in process group `pgid`."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_bytes()
        except OSError:
            continue
        state, _ppid, pgrp = stat[stat.rfind(b")") + 2 :].split()[:3]
        if int(pgrp) == pgid and state not in (b"Z", b"X"):
            pids.append(int(entry))
    return pids


def test_output_and_exit_code(workspace: Path) -> None:
    ok = run("echo out; echo err >&2; echo again", workspace)
    assert ok.content == "out\nerr\nagain\n[exit code: 0]"
    assert not ok.is_error
    assert ok.summary == "bash: echo out; echo err >&2; echo again (exit 0, 3 lines)"
    failed = run("printf 'no newline'; exit 3", workspace)
    assert failed.content == "no newline\n[exit code: 3]"
    assert failed.is_error
    assert failed.summary.endswith("(exit 3, 1 line)")
    assert run("true", workspace).content == "(no output)\n[exit code: 0]"


def test_runs_in_the_workspace(workspace: Path) -> None:
    assert run("pwd", workspace).content.splitlines()[0] == str(workspace.resolve())


def test_killed_by_signal_is_reported(workspace: Path) -> None:
    result = run("kill -9 $$", workspace)
    assert result.content.endswith("[killed by signal SIGKILL]")
    assert result.is_error


def test_stdin_is_closed(workspace: Path) -> None:
    start = time.monotonic()
    result = run("cat; read x; echo read=$?", workspace, timeout=10)
    assert time.monotonic() - start < 5
    assert result.content == "read=1\n[exit code: 0]"


def test_pager_and_terminal_variables(workspace: Path) -> None:
    out = run('echo "$PAGER|$GIT_PAGER|$MANPAGER|$GIT_TERMINAL_PROMPT|$TERM|$NO_COLOR"', workspace).content
    assert out.splitlines()[0] == "cat|cat|cat|0|dumb|1"


def test_secrets_are_not_inherited(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KIMI_API_KEY", "sk-kimi-secret")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-secret")
    monkeypatch.setenv("DB_PASSWORD", "hunter2")
    monkeypatch.setenv("KIMICODE_VISIBLE", "plain-value")
    out = run("env", workspace).content
    assert "sk-kimi-secret" not in out and "KIMI_API_KEY" not in out
    assert "ghp-secret" not in out and "hunter2" not in out
    assert "KIMICODE_VISIBLE=plain-value" in out


def test_scrub_env_and_explicit_env() -> None:
    env = {
        "PATH": "/bin",
        "OPENAI_API_KEY": "x",
        "ANTHROPIC_API_KEY": "x",
        "MY_SERVICE_API_KEY": "x",
        "npm_token": "x",
        "APP_SECRET": "x",
        "SMTP_PASSWORD": "x",
        "TOKENIZERS_PARALLELISM": "false",
    }
    assert scrub_env(env) == {"PATH": "/bin", "TOKENIZERS_PARALLELISM": "false"}


def test_context_env_is_used_as_given(workspace: Path) -> None:
    out = run("echo $ONLY_THIS,$HOME_MISSING,$PAGER", workspace, env={"ONLY_THIS": "yes", "PATH": os.defpath})
    assert out.content.splitlines()[0] == "yes,,cat"
    assert SHELL_ENV["PAGER"] == "cat"


def test_argument_validation(workspace: Path) -> None:
    with pytest.raises(ToolError, match="non-empty"):
        run("   ", workspace)
    with pytest.raises(ToolError, match="at most 600"):
        run("true", workspace, timeout=601)
    with pytest.raises(ToolError, match="at least 1"):
        run("true", workspace, timeout=0)
    with pytest.raises(ToolError, match="cannot run"):
        run("true", workspace / "missing")


@pytest.mark.prepush
def test_timeout_kills_the_whole_process_group(workspace: Path) -> None:
    start = time.monotonic()
    result = run("echo pgid=$$; sleep 100 & sleep 101 & wait", workspace, timeout=1)
    elapsed = time.monotonic() - start
    assert 0.9 < elapsed < 4
    assert result.is_error
    assert result.content.startswith("pgid=")
    assert "timed out after 1 s" in result.content
    assert "timed out after 1 s" in result.summary
    pgid = int(result.content.split("\n")[0].removeprefix("pgid="))
    assert live_members(pgid) == []


@pytest.mark.prepush
def test_timeout_kills_commands_that_ignore_sigterm(workspace: Path) -> None:
    start = time.monotonic()
    result = run("trap '' TERM; echo pgid=$$; sleep 100 & sleep 100; wait", workspace, timeout=1)
    elapsed = time.monotonic() - start
    assert 2.5 < elapsed < 6  # 1 s timeout + ~2 s grace before SIGKILL
    assert "timed out after 1 s" in result.content
    pgid = int(result.content.split("\n")[0].removeprefix("pgid="))
    assert live_members(pgid) == []


@pytest.mark.prepush
def test_grandchild_holding_stdout_does_not_hang(workspace: Path) -> None:
    start = time.monotonic()
    result = run("(sleep 30 &) ; echo done", workspace, timeout=60)
    assert time.monotonic() - start < 3
    assert result.content == "done\n[exit code: 0]"


def test_background_job_with_redirected_output_is_not_waited_for(workspace: Path) -> None:
    start = time.monotonic()
    result = run("sleep 2 > /dev/null 2>&1 & echo started", workspace)
    assert time.monotonic() - start < 1
    assert result.content == "started\n[exit code: 0]"


@pytest.mark.prepush
def test_output_flood_stays_bounded(workspace: Path) -> None:
    # In a child interpreter, so the peak RSS measured is this command's alone.
    code = (
        "import asyncio, resource, sys\n"
        "from pathlib import Path\n"
        "from kimicode.tools.base import ToolContext\n"
        "from kimicode.tools.shell import BASH\n"
        "ctx = ToolContext(workspace=Path(sys.argv[1]))\n"
        "r = asyncio.run(BASH.fn({'command': 'yes | head -c 200000000'}, ctx))\n"
        "sys.stdout.write(r.content)\n"
        # VmHWM is this process's own peak (ru_maxrss would include the forking parent's peak)
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0].split()[1]\n"
        "sys.stderr.write(hwm)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", code, str(workspace)], capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "\n… [199960000 bytes / 99980000 lines elided; the full output was not saved: no session directory" in out
    assert out.startswith("y\ny\n") and out.endswith("y\n[exit code: 0]")
    assert len(out) < 45_000
    assert int(proc.stderr) < 150_000  # KiB: the 200 MB never sit in memory


def test_output_buffer_keeps_head_and_tail() -> None:
    buf = OutputBuffer(head=10, tail=10)
    for i in range(100):
        buf.feed(f"{i:03d}\n".encode())
    text = buf.render()
    assert text.startswith("000\n001\n00")
    assert text.endswith("\n098\n099\n")
    assert "[380 bytes / 95 lines elided; the full output was not saved" in text
    assert buf.lines == 100
    small = OutputBuffer(head=10, tail=10)
    small.feed(b"exactly twenty bytes")
    assert small.render() == "exactly twenty bytes"


def test_cancellation_kills_the_process_group(workspace: Path) -> None:
    pidfile = workspace / "pgid"

    async def scenario() -> None:
        ctx = ToolContext(workspace=workspace)
        command = f"echo $$ > {pidfile}; sleep 100 & sleep 100; wait"
        task = asyncio.create_task(invoke({"command": command}, ctx))
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    start = time.monotonic()
    asyncio.run(scenario())
    assert time.monotonic() - start < 4
    pgid = int(pidfile.read_text())
    assert live_members(pgid) == []
