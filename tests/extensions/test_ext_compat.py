"""Real Claude Code setups nobody on the project wrote (tests/fixtures/compat, see its SOURCES.md), run end
to end with the fake server as the model: Anthropic's skills, Anthropic's plugins (hookify's Python hooks,
a SessionStart shell hook, commands, subagents), its example hook, and a community collection's Node guards."""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import FIXTURES, last_tool_result

from kimicode.events import Event, HookRan, Notice, PermissionDenied
from kimicode.testing import FakeServer, RecordedRequest, Reply, ToolCall

COMPAT = FIXTURES / "compat"
SKILLS = COMPAT / "anthropics-skills" / "skills"
CLAUDE_PLUGINS = COMPAT / "anthropics-claude-code" / "plugins"
GUARDS = COMPAT / "karanb192-claude-code-hooks" / "plugins"


def add_plugin(path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    from kimicode.cli.app import app

    try:
        app(args=["plugin", "add", str(path), "--yes"], prog_name="kimicode", standalone_mode=False)
    except SystemExit as exc:
        assert not exc.code, capsys.readouterr().err
    return capsys.readouterr().out


def test_anthropics_skills_are_listed_then_read_on_demand(
    make_agent: Callable[..., Any], server: FakeServer, tmp_path: Path
) -> None:
    shutil.copytree(SKILLS, tmp_path / "claude-home" / "skills")
    server.add(
        Reply(tool_calls=[ToolCall("skill", {"name": "internal-comms"})]),
        Reply(tool_calls=[ToolCall("skill", {"name": "internal-comms", "file": "examples/3p-updates.md"})]),
        Reply(content="Here is your 3P update."),
    )
    result = make_agent(headless=True).run_sync("write a 3P update for the team")  # nothing asks
    assert result.ok
    first = server.requests[0].body
    listing = next(t["function"]["description"] for t in first["tools"] if t["function"]["name"] == "skill")
    for name in ("internal-comms", "webapp-testing", "brand-guidelines"):
        assert f"- {name}: " in listing
    assert "## How to use this skill" not in json.dumps(first)  # the body stays out until activated
    activated = last_tool_result(server.requests[1])
    assert "## How to use this skill" in activated and "- examples/3p-updates.md" in activated
    assert "3P" in last_tool_result(server.requests[2])  # the example file, read when the body said so


@pytest.mark.prepush
def test_hookify_plugin_blocks_by_its_own_rule_file(
    make_agent: Callable[..., Any], server: FakeServer, workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = add_plugin(CLAUDE_PLUGINS / "hookify", capsys)
    assert "PreToolUse: python3 ${CLAUDE_PLUGIN_ROOT}/hooks/pretooluse.py" in out
    (workspace / ".claude").mkdir()
    shutil.copy(
        CLAUDE_PLUGINS / "hookify" / "examples" / "dangerous-rm.local.md",
        workspace / ".claude" / "hookify.dangerous-rm.local.md",
    )
    (workspace / "build").mkdir()
    server.add(
        Reply(tool_calls=[ToolCall("bash", {"command": "rm -rf build"})]),
        Reply(tool_calls=[ToolCall("bash", {"command": "echo still-here"})]),
        Reply(content="ok"),
    )
    events: list[Event] = []
    make_agent(permission_mode="yolo", on_event=events.append).run_sync("clean up")
    assert (workspace / "build").is_dir()
    assert any(isinstance(e, PermissionDenied) and e.name == "bash" for e in events)
    assert any(isinstance(e, Notice) and "Dangerous rm command detected" in e.text for e in events)
    assert "still-here" in last_tool_result(server.requests[2])
    ran = {(e.hook_event, e.outcome) for e in events if isinstance(e, HookRan)}
    assert ("PreToolUse", "deny") in ran and ("UserPromptSubmit", "ok") in ran and ("Stop", "ok") in ran


@pytest.mark.prepush
@pytest.mark.skipif(shutil.which("node") is None, reason="the community guards are Node scripts")
def test_community_node_guards_refuse_rm_home_and_reading_env(
    make_agent: Callable[..., Any],
    server: FakeServer,
    workspace: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "user-home"))  # they log to ~/.claude/hooks-logs
    add_plugin(GUARDS / "block-dangerous-commands", capsys)
    add_plugin(GUARDS / "protect-secrets", capsys)
    (workspace / ".env").write_text("API_TOKEN=do-not-leak\n")
    server.add(
        Reply(tool_calls=[ToolCall("bash", {"command": "rm -rf ~"})]),
        Reply(tool_calls=[ToolCall("read_file", {"path": ".env"})]),
        Reply(tool_calls=[ToolCall("bash", {"command": "echo fine"})]),
        Reply(content="ok"),
    )
    make_agent(permission_mode="yolo").run_sync("go")
    assert "[rm-home]" in last_tool_result(server.requests[1])
    assert "[env-file]" in last_tool_result(server.requests[2])
    assert "do-not-leak" not in json.dumps(server.requests[-1].body)
    assert "fine" in last_tool_result(server.requests[3])
    logs = list((tmp_path / "user-home" / ".claude" / "hooks-logs").glob("*.jsonl"))
    assert logs and "rm-home" in logs[0].read_text()


def test_a_plugins_session_start_shell_hook_adds_its_context(
    make_agent: Callable[..., Any], server: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    add_plugin(CLAUDE_PLUGINS / "explanatory-output-style", capsys)
    server.add(Reply(content="ok"))
    make_agent().run_sync("explain the parser")
    assert "explanatory' output style mode" in json.dumps(server.requests[0].body["messages"])


def test_anthropics_commands_and_subagents(
    make_agent: Callable[..., Any],
    server: FakeServer,
    workspace: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from kimicode.extensions.slash import load_commands

    add_plugin(CLAUDE_PLUGINS / "commit-commands", capsys)
    add_plugin(CLAUDE_PLUGINS / "feature-dev", capsys)
    commands = load_commands(workspace, tmp_path / "home", trusted=False)
    commit = commands["commit-commands:commit"]
    assert commit.description == "Create a git commit"
    assert commit.allowed_tools == ("Bash(git add:*)", "Bash(git status:*)", "Bash(git commit:*)")
    assert "feature-dev:feature-dev" in commands

    def answer(req: RecordedRequest) -> Reply:
        msgs = req.body["messages"]
        if "expert code analyst" in msgs[0]["content"]:
            return Reply(content="the parser lives in src/")
        if msgs[-1]["role"] == "user":
            return Reply(
                tool_calls=[
                    ToolCall(
                        "task",
                        {"description": "explore", "prompt": "map the parser", "agent": "feature-dev:code-explorer"},
                    )
                ]
            )
        return Reply(content="done")

    server.add(*[answer] * 3)
    make_agent().run_sync("how does parsing work?")
    child = next(r for r in server.requests if "expert code analyst" in r.body["messages"][0]["content"])
    # Glob, Grep, LS, Read, NotebookRead, WebFetch, TodoWrite, WebSearch, KillShell, BashOutput: what exists here
    assert sorted(t["function"]["name"] for t in child.body["tools"]) == ["glob", "grep", "read_file", "web_fetch"]


def test_anthropics_example_bash_validator_hook(
    make_agent: Callable[..., Any], server: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    script = COMPAT / "anthropics-claude-code" / "examples" / "hooks" / "bash_command_validator_example.py"
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}"
    settings = {"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": command}]}]}}
    (tmp_path / "claude-home").mkdir()
    (tmp_path / "claude-home" / "settings.json").write_text(json.dumps(settings))
    (workspace / "a.txt").write_text("needle\n")
    server.add(
        Reply(tool_calls=[ToolCall("bash", {"command": "grep needle a.txt"})]),
        Reply(tool_calls=[ToolCall("bash", {"command": "rg needle a.txt"})]),
        Reply(content="ok"),
    )
    make_agent(permission_mode="yolo").run_sync("find needle")
    assert "Use 'rg' (ripgrep) instead of 'grep'" in last_tool_result(server.requests[1])
    assert "needle" in last_tool_result(server.requests[2])
