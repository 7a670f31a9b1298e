"""`kimicode plugin add|list|remove|enable|disable`: a folder or git repository in Claude Code's plugin
format, shown before it is installed, its commands namespaced, its hooks and MCP servers used while enabled."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import FIXTURES, MCP_DEMO, run_app

from kimicode.testing import FakeServer, Reply, ToolCall

HOOK = FIXTURES / "hooks" / "hook.py"


def make_plugin(root: Path, name: str = "guard") -> Path:
    """A plugin with a command, a skill, an agent, a PreToolUse hook and an MCP server."""
    plugin = root / name
    (plugin / ".claude-plugin").mkdir(parents=True)
    (plugin / ".claude-plugin" / "plugin.json").write_text(
        json.dumps({"name": name, "version": "1.2.0", "description": "Guards the shell."})
    )
    files = {
        "commands/check.md": "---\ndescription: Run the checks\n---\nRun the checks on $ARGUMENTS.\n",
        "skills/triage/SKILL.md": "---\nname: triage\ndescription: Triage a bug.\n---\nSteps.\n",
        "agents/auditor.md": "---\nname: auditor\ndescription: Audits.\ntools: Read\n---\nAudit.\n",
    }
    for rel, text in files.items():
        (plugin / rel).parent.mkdir(parents=True, exist_ok=True)
        (plugin / rel).write_text(text)
    (plugin / "hooks").mkdir()
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(HOOK))} ok"
    (plugin / "hooks" / "hooks.json").write_text(
        json.dumps({"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": command}]}]}})
    )
    (plugin / ".mcp.json").write_text(
        json.dumps({"mcpServers": {"tracker": {"command": "${CLAUDE_PLUGIN_ROOT}/bin/tracker", "args": ["--stdio"]}}})
    )
    return plugin


@pytest.mark.prepush
def test_add_shows_what_it_runs_then_installs_and_everything_it_brings_works(
    make_agent: Callable[..., Any],
    server: FakeServer,
    workspace: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    source = make_plugin(tmp_path / "src")
    code, out, err = run_app(["plugin", "add", str(source)], capsys)
    assert code == 1 and "pass --yes" in err  # no terminal to ask in: not installed
    code, out, _ = run_app(["plugin", "add", str(source), "--yes"], capsys)
    assert code == 0, out
    assert "Plugin guard 1.2.0: Guards the shell." in out
    assert "PreToolUse: " in out and "hook.py ok" in out and "tracker: ${CLAUDE_PLUGIN_ROOT}/bin/tracker --stdio" in out
    assert "/guard:check" in out and "triage" in out and "auditor" in out
    code, out, _ = run_app(["plugin", "list", "--json"], capsys)
    [row] = json.loads(out)["plugins"]
    assert row["name"] == "guard" and row["enabled"] is True and row["source"] == str(source.resolve())

    from kimicode.extensions.slash import load_commands

    commands = load_commands(workspace, tmp_path / "home", trusted=False)
    assert commands["guard:check"].render("api") == "Run the checks on api." and "guard:triage" in commands
    server.add(Reply(tool_calls=[ToolCall("bash", {"command": "true"})]), Reply(content="ok"))
    agent = make_agent(permission_mode="yolo")
    assert "guard:auditor" in agent.tools.get("task").parameters["properties"]["agent"]["enum"]
    assert agent.extras.mcp is not None
    [mcp] = [s.config for s in agent.extras.mcp.servers if s.config.name == "tracker"]
    assert mcp.command == str(tmp_path / "home" / "plugins" / "guard" / "bin" / "tracker")
    agent.extras.mcp = None  # the tracker binary does not exist: do not start it
    agent.run_sync("go")
    [run] = [json.loads(x) for x in (workspace / "hooks.jsonl").read_text().splitlines()]
    assert run["plugin_root"] == str(tmp_path / "home" / "plugins" / "guard")

    assert run_app(["plugin", "disable", "guard"], capsys)[0] == 0
    assert "guard:check" not in load_commands(workspace, tmp_path / "home", trusted=False)
    assert "skill" not in make_agent().tools.names  # its skill went with it
    assert run_app(["plugin", "enable", "guard"], capsys)[0] == 0
    assert "guard:check" in load_commands(workspace, tmp_path / "home", trusted=False)
    code, _, err = run_app(["plugin", "add", str(source), "--yes"], capsys)
    assert code == 1 and "is installed" in err
    assert run_app(["plugin", "remove", "guard"], capsys)[0] == 0
    assert not (tmp_path / "home" / "plugins" / "guard").exists()
    code, _, err = run_app(["plugin", "remove", "guard"], capsys)
    assert code == 1 and "no plugin named guard" in err


def test_add_from_a_git_repository(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = make_plugin(tmp_path / "repo", "gitplug")
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q", str(source)], check=True)
    subprocess.run([*git, "-C", str(source), "add", "-A"], check=True)
    subprocess.run([*git, "-C", str(source), "commit", "-qm", "x"], check=True)
    code, _, err = run_app(["plugin", "add", f"file://{source}", "--yes"], capsys)
    assert code == 0, err
    installed = tmp_path / "home" / "plugins" / "gitplug"
    assert (installed / "commands" / "check.md").exists() and not (installed / ".git").exists()


@pytest.mark.parametrize(
    ("manifest", "problem"),
    [('{"name": "../evil"}', "must be letters"), ("{not json", "invalid JSON"), ('["a"]', "expected a JSON object")],
)
def test_bad_plugins_are_refused_with_a_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], manifest: str, problem: str
) -> None:
    plugin = tmp_path / "p"
    (plugin / ".claude-plugin").mkdir(parents=True)
    (plugin / ".claude-plugin" / "plugin.json").write_text(manifest)
    code, _, err = run_app(["plugin", "add", str(plugin), "--yes"], capsys)
    assert code == 1 and problem in err and "Traceback" not in err
    assert not (tmp_path / "home" / "plugins").exists() or not any((tmp_path / "home" / "plugins").iterdir())


def test_not_a_folder_nor_a_url(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_app(["plugin", "add", str(tmp_path / "missing"), "--yes"], capsys)
    assert code == 1 and "not a folder, and not a git URL" in err
    assert run_app(["plugin", "list"], capsys)[1].startswith("No plugins installed")


@pytest.mark.parametrize(("answer", "installed"), [("n\n", False), ("\n", False), ("y\n", True)])
def test_add_asks_in_a_terminal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answer: str, installed: bool) -> None:
    from typer.testing import CliRunner

    from kimicode.cli import plugin_cmd
    from kimicode.cli.app import app

    monkeypatch.setattr(plugin_cmd, "can_ask", lambda: True)
    source = make_plugin(tmp_path / "src")
    result = CliRunner().invoke(app, ["plugin", "add", str(source)], input=answer)
    assert "Install guard? [y/N]" in result.output and "hook.py ok" in result.output
    assert (tmp_path / "home" / "plugins" / "guard").is_dir() is installed
    assert result.exit_code == (0 if installed else 1)


@pytest.mark.prepush
def test_a_plugins_mcp_server_starts_and_its_tools_reach_the_model(
    make_agent: Callable[..., Any], server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    demo = MCP_DEMO
    plugin = tmp_path / "src" / "demo"
    (plugin / ".claude-plugin").mkdir(parents=True)
    (plugin / ".claude-plugin" / "plugin.json").write_text('{"name": "demo"}')
    shutil.copy(demo, plugin / "server.py")
    (plugin / ".mcp.json").write_text(
        json.dumps({"mcpServers": {"demo": {"command": sys.executable, "args": ["${CLAUDE_PLUGIN_ROOT}/server.py"]}}})
    )
    assert run_app(["plugin", "add", str(plugin), "--yes"], capsys)[0] == 0
    code, out, _ = run_app(["mcp", "list", "--json"], capsys)
    [row] = json.loads(out)["servers"]
    assert code == 0 and row["name"] == "demo" and row["status"] == "ready"
    server.add(Reply(content="ok"))
    make_agent().run_sync("x")
    assert any(t["function"]["name"].startswith("mcp__demo__") for t in server.requests[0].body["tools"])
