"""The optional bubblewrap sandbox for bash: its fallback (always tested) and its confinement (with bwrap)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import TEST_KEY, headless_json, kimicode_command, sent_tool_results

from kimicode.events import Notice
from kimicode.testing import FakeServer, Reply, ToolCall
from kimicode.tools.sandbox import Sandbox, probe
from kimicode.tools.shell import BASH

pytestmark = pytest.mark.prepush  # the sandbox boundary (bubblewrap): the pre-push tier (README)

MakeAgent = Callable[..., Any]


# -- without bwrap: say so once, then the permission rules apply -----------------------------------------


def test_missing_bwrap_is_reported_once_and_the_policy_applies(
    server: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    server.add(Reply(tool_calls=[ToolCall("bash", {"command": "touch made"})]), Reply(content="ok"))
    code, result, stderr = headless_json(
        server, tmp_path / "home", workspace, "--sandbox", "workspace-write", KIMICODE_BWRAP=""
    )
    assert code == 0 and result["status"] == "success"
    assert stderr.count("sandbox is not available") == 1
    assert "bubblewrap (bwrap) is not installed" in stderr and "follow the permission rules" in stderr
    assert [d["tool_name"] for d in result["permission_denials"]] == ["bash"]  # default mode, headless: denied
    assert not (workspace / "made").exists()


def test_a_bwrap_that_cannot_create_namespaces_counts_as_unavailable(
    server: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    server.add(Reply(tool_calls=[ToolCall("bash", {"command": "echo hi"})]), Reply(content="ok"))
    code, _, stderr = headless_json(
        server, tmp_path / "home", workspace, "--sandbox", "workspace-write", "--yolo", KIMICODE_BWRAP=str(fake)
    )
    assert code == 0
    assert "cannot create its namespaces here (bwrap: No permissions to create new namespace)" in stderr
    assert sent_tool_results(server) == ["hi\n[exit code: 0]"]  # yolo, unconfined: it ran


def test_the_agent_emits_the_fallback_notice_and_keeps_plain_bash(
    server: FakeServer, make_agent: MakeAgent, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KIMICODE_BWRAP", "")
    home = workspace.parent / "home"  # the user's own config (a project's workspace-write would be ignored)
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text('[sandbox]\nmode = "workspace-write"\n')
    agent = make_agent()
    assert agent.sandbox is None and agent.sandbox_warning and "not installed" in agent.sandbox_warning
    assert agent.tools.get("bash") is BASH and not agent.policy.sandboxed
    server.add(Reply(content="hi"), Reply(content="again"))
    events: list[Any] = []
    agent.on_event = events.append
    agent.run_sync("x")
    notices = [e for e in events if isinstance(e, Notice)]
    assert len(notices) == 1 and notices[0].level == "warning" and "sandbox" in notices[0].text
    with pytest.raises(ValueError, match="sandbox must be one of"):
        make_agent(sandbox="everything")


def test_an_unknown_sandbox_flag_is_a_usage_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [*kimicode_command(), "-p", "x", "--sandbox", "full"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "KIMI_API_KEY": "k"},
        cwd=tmp_path,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr


def test_the_wrapper_arguments(tmp_path: Path) -> None:
    """Nothing of the host is bound as a whole: system roots read-only, a private home and /tmp, the
    workspace, git's code-running parts read-only, no capabilities, the limits before the command."""
    ws = tmp_path / "ws"
    (ws / ".git" / "hooks").mkdir(parents=True)
    (ws / ".git" / "config").write_text("[core]\n")
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".gitconfig").write_text("[user]\n")
    kc = tmp_path / "kc"
    kc.mkdir()
    ws_real, home_real = os.path.realpath(ws), os.path.realpath(home)
    args = Sandbox(ws, "/usr/bin/bwrap", kimicode_home=kc, user_home=home).wrap(["/bin/bash", "-c", "ls"])
    joined = " ".join(args)
    assert args[0] == "/usr/bin/bwrap" and args[-3:] == ["/bin/bash", "-c", "ls"]
    assert "--ro-bind / /" not in joined and "--ro-bind /usr /usr" in joined
    assert "--unshare-net" in joined and "--tmpfs /tmp" in joined and "--cap-drop ALL" in joined
    assert "--unshare-user-try" in joined and "ulimit -u" in joined
    assert f"--tmpfs {home_real}" in joined and f"{home_real}/.ssh" not in joined
    assert f"--ro-bind {home_real}/.gitconfig {home_real}/.gitconfig" in joined
    assert f"--bind {ws_real} {ws_real}" in joined
    assert f"--ro-bind {ws_real}/.git/config {ws_real}/.git/config" in joined
    assert f"--ro-bind {ws_real}/.git/hooks {ws_real}/.git/hooks" in joined
    assert str(kc) not in joined  # KIMICODE_HOME is simply not there
    assert joined.index("--tmpfs /tmp") < joined.index(f"--bind {ws_real}")  # the workspace survives /tmp's tmpfs
    read_only = " ".join(Sandbox(ws, "bwrap", user_home=home).wrap(["x"], "read-only"))
    assert f"--ro-bind {ws_real} {ws_real}" in read_only and f"--bind {ws_real}" not in read_only
    assert "--unshare-net" not in Sandbox(ws, "bwrap", network=True).wrap(["x"])


# -- with bwrap ------------------------------------------------------------------------------------------

STATUS = probe()
needs_bwrap = pytest.mark.skipif(not STATUS.available, reason=f"sandbox unavailable here: {STATUS.reason}")


@needs_bwrap
def test_the_sandbox_confines_commands(server: FakeServer, workspace: Path, tmp_path: Path) -> None:
    outside = Path("/var/tmp") / f"kimicode-sandbox-outside-{os.getpid()}"  # writable here, not below /tmp
    outside.unlink(missing_ok=True)
    (workspace / ".git").mkdir()
    home = tmp_path / "user"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("PRIVATE KEY")
    host_tmp = Path("/tmp") / f"kimicode-sandbox-probe-{os.getpid()}"
    host_tmp.unlink(missing_ok=True)
    port = server.base_url.split(":")[2].split("/")[0]
    steps = [
        "echo in > in.txt && cat in.txt",
        f"echo out > {outside}",
        "echo hook > .git/hooks-evil",
        f"touch {host_tmp} && ls {host_tmp}",
        "cat ~/.ssh/id_rsa",
        f"echo > /dev/tcp/127.0.0.1/{port}",
        f"env | grep -c {TEST_KEY}",
        "sleep 60",
    ]
    calls = [ToolCall("bash", {"command": c, "timeout": 1} if c == "sleep 60" else {"command": c}) for c in steps]
    server.add(Reply(tool_calls=calls), Reply(content="ok"))
    code, result, stderr = headless_json(
        server, tmp_path / "home", workspace, "--sandbox", "workspace-write", HOME=str(home)
    )
    assert code == 0 and result["permission_denials"] == []  # default mode: ran
    assert "sandbox blocked: writing " in stderr and ".ssh/id_rsa is not visible in the sandbox" in stderr
    inside, out, git, tmp, key, net, env, sleep = sent_tool_results(server)
    assert inside == "in\n[exit code: 0]" and (workspace / "in.txt").read_text() == "in\n"
    assert not outside.exists() and "exit code: 0" in out  # written to the sandbox's private /var/tmp
    assert "Read-only file system" in git and not (workspace / ".git" / "hooks-evil").exists()
    assert tmp.endswith("[exit code: 0]") and not host_tmp.exists()  # a private /tmp
    assert "PRIVATE KEY" not in key and "No such file" in key
    assert "[exit code: 1]" in net and ("unreachable" in net.lower() or "refused" in net.lower())
    assert env.startswith("0\n")
    assert "timed out after 1 s" in sleep


@needs_bwrap
def test_sandbox_network_can_be_allowed(server: FakeServer, workspace: Path, tmp_path: Path) -> None:
    port = server.base_url.split(":")[2].split("/")[0]
    server.add(
        Reply(tool_calls=[ToolCall("bash", {"command": f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo up"})]),
        Reply(content="ok"),
    )
    code, _, _ = headless_json(
        server, tmp_path / "home", workspace, "--sandbox", "workspace-write", "--sandbox-network"
    )
    assert code == 0 and sent_tool_results(server) == ["up\n[exit code: 0]"]


@needs_bwrap
def test_plan_mode_still_asks_inside_the_sandbox(server: FakeServer, workspace: Path, tmp_path: Path) -> None:
    server.add(Reply(tool_calls=[ToolCall("bash", {"command": "touch made"})]), Reply(content="ok"))
    code, result, _ = headless_json(
        server, tmp_path / "home", workspace, "--sandbox", "workspace-write", "--permission-mode", "plan"
    )
    assert code == 0 and [d["tool_name"] for d in result["permission_denials"]] == ["bash"]
    assert not (workspace / "made").exists()
