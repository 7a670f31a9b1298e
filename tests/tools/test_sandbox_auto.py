"""`--sandbox auto`, the default: what runs without asking runs inside bubblewrap (so a command the
permission parser misjudged stays contained); what the user approved runs as approved; one notice and
today's behaviour where bwrap cannot run."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import running, sent_tool_results

from kimicode.events import Notice
from kimicode.testing import FakeServer, Reply, ToolCall
from kimicode.tools.sandbox import probe

MakeAgent = Callable[..., Any]
STATUS = probe()
needs_bwrap = pytest.mark.skipif(not STATUS.available, reason=f"bubblewrap cannot run here: {STATUS.reason}")


def outside_path(tag: str) -> Path:
    """A writable place outside the workspace and outside /tmp; the sandbox's /var/tmp is private (a
    write there lands in the sandbox's own tmpfs, never on the host)."""
    path = Path("/var/tmp") / f"kimicode-auto-{tag}-{os.getpid()}"
    path.unlink(missing_ok=True)
    return path


# -- hostile: what runs unasked cannot reach outside -------------------------------------------------------


@needs_bwrap
def test_yolo_commands_cannot_write_outside_or_reach_the_network(
    server: FakeServer, make_agent: MakeAgent, workspace: Path
) -> None:
    outside = outside_path("yolo")
    port = server.base_url.split(":")[2].split("/")[0]
    steps = [
        f"echo pwned > {outside}",
        f"cd / && sh -c 'echo pwned > {outside}'",  # a shell in the shell is no way out
        f"echo > /dev/tcp/127.0.0.1/{port} && echo connected",
        "echo fine > inside.txt && cat inside.txt",
    ]
    server.add(Reply(tool_calls=[ToolCall("bash", {"command": c}) for c in steps]), Reply(content="ok"))
    agent = make_agent(permission_mode="yolo")
    assert agent.sandbox is not None and agent.sandbox.auto and not agent.policy.sandboxed
    agent.run_sync("x")
    direct, nested, net, inside = sent_tool_results(server)
    assert not outside.exists()
    assert "pwned" not in direct and "pwned" not in nested  # written to the sandbox's private /var/tmp
    assert "connected" not in net and "[exit code: 1]" in net
    assert inside == "fine\n[exit code: 0]" and (workspace / "inside.txt").read_text() == "fine\n"


@needs_bwrap
@pytest.mark.parametrize("where", ["/run", "env"])
def test_host_unix_sockets_are_out_of_reach(
    server: FakeServer, make_agent: MakeAgent, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """A read-only mount does not stop connect(2): docker's socket under /run would be root, an
    ssh-agent named by SSH_AUTH_SOCK would sign with the user's keys. Both are hidden."""
    import socket

    base = Path("/run") if where == "/run" else Path("/var/tmp")
    if not os.access(base, os.W_OK):
        pytest.skip(f"cannot create a socket in {base} here")
    path = base / f"kimicode-sock-{where.strip('/')}-{os.getpid()}"
    path.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen(1)
    if where == "env":
        monkeypatch.setenv("SSH_AUTH_SOCK", str(path))
    probe_cmd = (
        f"python3 -c \"import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect('{path}'); print('CONNECTED')\""
    )
    server.add(Reply(tool_calls=[ToolCall("bash", {"command": probe_cmd})]), Reply(content="ok"))
    try:
        make_agent(permission_mode="yolo").run_sync("x")
    finally:
        listener.close()
        path.unlink(missing_ok=True)
    (text,) = sent_tool_results(server)
    assert "CONNECTED" not in text and "[exit code: 1]" in text


@needs_bwrap
def test_a_command_admitted_by_a_rule_runs_confined(server: FakeServer, make_agent: MakeAgent, workspace: Path) -> None:
    """The parser may judge `touch` harmless; whatever it decides, the file outside is never made."""
    outside = outside_path("rule")
    server.add(Reply(tool_calls=[ToolCall("bash", {"command": f"touch {outside}"})]), Reply(content="ok"))
    make_agent(allow=["bash(touch*)"], permission_mode="accept-edits").run_sync("x")
    assert not outside.exists()  # touched in the sandbox's private /var/tmp, or refused
    (text,) = sent_tool_results(server)
    assert "[exit code: 0]" in text or "denied" in text.lower() or "not allowed" in text.lower()


@needs_bwrap
def test_a_command_the_user_approved_runs_unconfined(server: FakeServer, make_agent: MakeAgent) -> None:
    outside = outside_path("approved")
    seen: list[str] = []

    def approve(request: Any) -> bool:
        seen.append(request.arguments["command"])
        return True

    server.add(Reply(tool_calls=[ToolCall("bash", {"command": f"echo ok > {outside}"})]), Reply(content="ok"))
    make_agent(approve=approve).run_sync("x")
    try:
        assert seen == [f"echo ok > {outside}"]
        assert outside.read_text() == "ok\n"
    finally:
        outside.unlink(missing_ok=True)


@needs_bwrap
def test_auto_changes_no_permission_decision(server: FakeServer, make_agent: MakeAgent, workspace: Path) -> None:
    """Unlike workspace-write, auto does not let commands run unasked: headless default mode still refuses."""
    server.add(Reply(tool_calls=[ToolCall("bash", {"command": "touch made"})]), Reply(content="ok"))
    result = make_agent().run_sync("x")
    assert [d["tool_name"] for d in result.permission_denials] == ["bash"]
    assert not (workspace / "made").exists()


@needs_bwrap
def test_off_never_wraps(server: FakeServer, make_agent: MakeAgent) -> None:
    outside = outside_path("off")
    server.add(Reply(tool_calls=[ToolCall("bash", {"command": f"echo x > {outside}"})]), Reply(content="ok"))
    agent = make_agent(permission_mode="yolo", sandbox="off")
    assert agent.sandbox is None and agent.sandbox_warning is None
    agent.run_sync("x")
    try:
        assert outside.exists()
    finally:
        outside.unlink(missing_ok=True)


# -- without bwrap: one notice, then today's behaviour ----------------------------------------------------


def test_auto_without_bwrap_says_so_once_and_runs_as_before(
    server: FakeServer, make_agent: MakeAgent, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KIMICODE_BWRAP", "")
    events: list[Any] = []
    agent = make_agent(permission_mode="yolo", on_event=events.append)
    assert agent.sandbox is None and agent.sandbox_warning is not None
    assert "not installed" in agent.sandbox_warning and "--sandbox off" in agent.sandbox_warning
    server.add(
        Reply(tool_calls=[ToolCall("bash", {"command": "echo hi"})]), Reply(content="ok"), Reply(content="again")
    )
    agent.run_sync("x")
    agent.run_sync("y")
    assert sent_tool_results(server) == ["hi\n[exit code: 0]"]
    assert sum("sandbox is not available" in e.text for e in events if isinstance(e, Notice)) == 1


def test_off_without_bwrap_says_nothing(make_agent: MakeAgent, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KIMICODE_BWRAP", "")
    agent = make_agent(sandbox="off")
    assert agent.sandbox is None and agent.sandbox_warning is None


def test_an_unknown_mode_is_refused(make_agent: MakeAgent) -> None:
    with pytest.raises(ValueError, match="off, auto, workspace-write"):
        make_agent(sandbox="none")


@pytest.mark.prepush
@needs_bwrap
def test_nothing_a_sandboxed_command_starts_outlives_it(
    server: FakeServer, make_agent: MakeAgent, workspace: Path
) -> None:
    """Its own session, ignoring SIGTERM, double-forked: the PID namespace ends with the command."""
    import time

    marker = f"77.{os.getpid()}"  # this run's sleeps, not another test run's
    cmd = f"trap '' TERM; setsid sleep {marker} & (nohup sleep {marker} &) ; sleep 60"
    server.add(Reply(tool_calls=[ToolCall("bash", {"command": cmd, "timeout": 1})]), Reply(content="ok"))
    make_agent(permission_mode="yolo").run_sync("x")
    (text,) = sent_tool_results(server)
    assert "timed out after 1 s" in text
    deadline = time.monotonic() + 5
    while running(f"sleep\x00{marker}\x00".encode()):
        assert time.monotonic() < deadline, "a sandboxed background job survived its command"
        time.sleep(0.05)


@needs_bwrap
def test_other_sessions_logs_are_hidden_and_this_sessions_spill_is_not(
    server: FakeServer, make_agent: MakeAgent, tmp_path: Path
) -> None:
    """Every project's history lives in KIMICODE_HOME/sessions: a sandboxed command sees none of it but
    the current session's spilled outputs (which the model is told to read)."""
    sessions = tmp_path / "home" / "sessions"
    sessions.mkdir(parents=True)
    (sessions / "other.jsonl").write_text('{"content": "another project\'s history"}\n')
    agent = make_agent(permission_mode="yolo")
    agent.log.spill_dir.mkdir(parents=True)
    (agent.log.spill_dir / "bash-1.txt").write_text("spilled output\n")
    server.add(
        Reply(
            tool_calls=[
                ToolCall("bash", {"command": f"cat {sessions / 'other.jsonl'}"}),
                ToolCall("bash", {"command": f"ls {sessions}"}),
                ToolCall("bash", {"command": f"cat {agent.log.spill_dir / 'bash-1.txt'}"}),
                ToolCall("bash", {"command": f"echo x > {agent.log.spill_dir / 'planted'}"}),
            ]
        ),
        Reply(content="ok"),
    )
    agent.run_sync("x")
    other, listing, spill, planted = sent_tool_results(server)
    assert "another project" not in other and "No such file" in other
    assert "other.jsonl" not in listing
    assert spill == "spilled output\n[exit code: 0]"
    assert "Read-only file system" in planted and not (agent.log.spill_dir / "planted").exists()
