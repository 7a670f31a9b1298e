"""A Claude Code setup brought over whole, or what was left out said (issue 36), end to end: each test
fails on the code before the issue's fix.

1. `~/.claude/settings.json` permission rules decide (deny refuses naming the file, allow runs unasked);
3. plugins Claude Code installed and enabled are used and listed;
4. `~/.claude/CLAUDE.md` is in the system prompt; Claude's slash command names answer;
5. what is found and not used is said once at start-up and in `doctor`;
6. a hook's refusal names the hook, not a flag that cannot help.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import FIXTURES, run_app, sent_tool_results
from ui_helpers import output, plain_session

from kimicode.events import Notice, PermissionDenied
from kimicode.testing import FakeServer, Reply, ToolCall

HOOK = FIXTURES / "hooks" / "hook.py"


def claude_dir(tmp_path: Path) -> Path:
    """The test's Claude Code user folder (conftest points CLAUDE_CONFIG_DIR at it)."""
    folder = tmp_path / "claude-home"
    folder.mkdir(exist_ok=True)
    return folder


def write_settings(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = claude_dir(tmp_path) / "settings.json"
    path.write_text(json.dumps(data))
    return path


def test_user_settings_deny_refuses_naming_the_file_and_allow_runs_unasked(
    make_agent: Callable[..., Any], server: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    write_settings(tmp_path, {"permissions": {"deny": ["Bash(curl:*)"], "allow": ["Bash(touch:*)"]}})
    server.add(
        Reply(
            tool_calls=[
                ToolCall("bash", {"command": "curl -s https://example.com"}),
                ToolCall("bash", {"command": "touch made.txt"}),
            ]
        ),
        Reply(content="done"),
    )
    events: list[Any] = []
    agent = make_agent(headless=True, sandbox="off", on_event=events.append)
    agent.run_sync("go")
    refused, ran = sent_tool_results(server)
    assert (
        "denied by the rule `Bash(curl:*)` (~/.claude/settings.json: permissions.deny)"
        in refused.replace(str(claude_dir(tmp_path)), "~/.claude")
        or "claude-home/settings.json: permissions.deny" in refused
    )
    assert (workspace / "made.txt").exists(), ran
    assert [e.name for e in events if isinstance(e, PermissionDenied)] == ["bash"]


def test_an_untrusted_projects_allow_rules_stay_ignored_its_deny_rules_apply(
    make_agent: Callable[..., Any], server: FakeServer, workspace: Path
) -> None:
    (workspace / ".claude").mkdir()
    (workspace / ".claude" / "settings.json").write_text(
        json.dumps({"permissions": {"allow": ["Bash(touch:*)"], "deny": ["Read(./notes.txt)"]}})
    )
    (workspace / "notes.txt").write_text("hello")
    server.add(
        Reply(
            tool_calls=[ToolCall("read_file", {"path": "notes.txt"}), ToolCall("bash", {"command": "touch made.txt"})]
        ),
        Reply(content="done"),
    )
    make_agent(headless=True, sandbox="off").run_sync("go")
    read, touched = sent_tool_results(server)
    assert "denied by the rule `Read(./notes.txt)`" in read and "settings.json" in read
    assert "Permission denied" in touched and not (workspace / "made.txt").exists()


def test_trusted_project_and_local_settings_allow(
    make_agent: Callable[..., Any], server: FakeServer, workspace: Path
) -> None:
    (workspace / ".claude").mkdir()
    local = workspace / ".claude" / "settings.local.json"
    local.write_text(json.dumps({"permissions": {"allow": ["Bash(touch *)"]}}))
    server.add(Reply(tool_calls=[ToolCall("bash", {"command": "touch made.txt"})]), Reply(content="done"))
    from kimicode import Agent, AgentOptions

    options = AgentOptions.from_workspace(workspace, home=workspace.parent / "home", trust=True)
    Agent(options, base_url=server.base_url, api_key="sk-test", model="kimi-k3", headless=True, sandbox="off").run_sync(
        "go"
    )
    assert (workspace / "made.txt").exists()


def install_claude_plugin(tmp_path: Path, name: str = "builder-kit", enabled: bool = True) -> Path:
    """A plugin installed the way Claude Code installs one: its copy under plugins/cache, the index
    `installed_plugins.json` (version 2) and `enabledPlugins` in the user settings."""
    import shutil

    root = claude_dir(tmp_path)
    where = root / "plugins" / "cache" / "market" / name / "0.1.0"
    shutil.copytree(FIXTURES / "compat" / "claude-formats" / name, where)
    key = f"{name}@market"
    (root / "plugins" / "installed_plugins.json").write_text(
        json.dumps(
            {
                "version": 2,
                "plugins": {
                    key: [
                        {
                            "scope": "user",
                            "installPath": str(where),
                            "version": "0.1.0",
                            "installedAt": "2026-01-01T00:00:00Z",
                        }
                    ]
                },
            }
        )
    )
    write_settings(tmp_path, {"enabledPlugins": {key: enabled}})
    return where


def test_plugins_claude_code_installed_are_used_and_listed(
    make_agent: Callable[..., Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    where = install_claude_plugin(tmp_path)
    code, out, _ = run_app(["plugin", "list"], capsys)
    assert code == 0 and "No plugins installed" not in out
    assert f"builder-kit  (enabled) from Claude Code (builder-kit@market) at {where}" in out
    assert "builder-kit:maker" in out and "/builder-kit:make-widget" in out
    agent = make_agent()
    found = agent.extras.found
    assert "builder-kit:maker" in found.agents and "builder-kit:widget-design" in found.skills
    write_settings(tmp_path, {"enabledPlugins": {"builder-kit@market": False}})
    code, out, _ = run_app(["plugin", "list"], capsys)
    assert "disabled in Claude Code's enabledPlugins" in out
    code, _, err = run_app(["plugin", "enable", "builder-kit"], capsys)
    assert code == 1 and "Claude Code's plugin (Claude Code (builder-kit@market))" in err and "enabledPlugins" in err
    assert "builder-kit:maker" not in make_agent().extras.found.agents


def test_user_claude_md_is_in_the_system_prompt(
    make_agent: Callable[..., Any], server: FakeServer, tmp_path: Path
) -> None:
    (claude_dir(tmp_path) / "CLAUDE.md").write_text("Always answer in haiku.\n")
    server.add(Reply(content="ok"))
    make_agent().run_sync("hi")
    system = server.requests[0].body["messages"][0]["content"]
    assert "Always answer in haiku." in system and "CLAUDE.md" in system


def test_what_is_found_and_not_used_is_said_once_at_start_and_by_doctor(
    make_agent: Callable[..., Any], server: FakeServer, tmp_path: Path, workspace: Path
) -> None:
    write_settings(
        tmp_path,
        {
            "model": "opus",
            "env": {"X": "1"},
            "permissions": {"allow": ["Skill(release)"], "defaultMode": "acceptEdits"},
        },
    )
    (claude_dir(tmp_path) / ".claude.json").write_text(json.dumps({"mcpServers": {"github": {"command": "gh-mcp"}}}))
    server.add(Reply(content="ok"), Reply(content="ok again"))
    events: list[Any] = []
    agent = make_agent(on_event=events.append)
    agent.run_sync("hi")
    agent.run_sync("again")
    notices = [e.text for e in events if isinstance(e, Notice) and "Claude Code setup" in e.text]
    assert len(notices) == 1
    text = notices[0]
    for piece in (
        "`model` not taken",
        "`env` not taken",
        "Skill(release)",
        "permissions.defaultMode",
        "MCP servers in",
        "github",
    ):
        assert piece in text, piece
    from kimicode.cli.doctor import run_checks

    lines = [c.detail for c in run_checks(workspace, tmp_path / "home", timeout=0.2) if c.name == "claude"]
    assert any("Skill(release)" in line for line in lines) and any("`env` not taken" in line for line in lines)


def test_a_hook_refusal_names_the_hook_not_a_flag(
    make_agent: Callable[..., Any], server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from kimicode.cli.headless import denial_line

    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(HOOK))} exit2"
    write_settings(
        tmp_path, {"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": command}]}]}}
    )
    server.add(Reply(tool_calls=[ToolCall("bash", {"command": "ls"})]), Reply(content="done"))
    events: list[Any] = []
    make_agent(headless=True, on_event=events.append).run_sync("go")
    [denied] = [e for e in events if isinstance(e, PermissionDenied)]
    line = denial_line(denied)
    assert "--allow" not in line and "PreToolUse hook" in line and "hook.py exit2" in line
    assert "settings.json" in line


def test_claudes_slash_command_names_answer(
    server: FakeServer, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kimicode.ui import commands

    write_settings(
        tmp_path,
        {
            "permissions": {"deny": ["Bash(curl:*)"]},
            "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "true"}]}]},
        },
    )
    s = plain_session(server, workspace, monkeypatch)

    async def go() -> None:
        for name in ("hooks", "agents", "plugin", "mcp", "doctor", "export", "permissions", "memory", "status"):
            await commands.dispatch(s, f"/{name}")
        await s.agent.aclose()

    asyncio.run(go())
    text = output(s)
    assert "Unknown command" not in text and "/login" not in text
    assert "Stop: true" in text  # /hooks
    assert "kimicode doctor" in text and "kimicode sessions export" in text
    assert "deny  Bash(curl:*)" in text and "settings.json: permissions.deny" in text  # /permissions
    assert "Model: kimi-k3" in text  # /status


def test_config_show_lists_every_rule_with_its_file(
    tmp_path: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write_settings(tmp_path, {"permissions": {"deny": ["Bash(curl:*)"], "allow": ["Read(~/notes/**)", "Agent(x)"]}})
    (tmp_path / "home").mkdir(exist_ok=True)
    (tmp_path / "home" / "config.toml").write_text('[permissions]\nask = ["bash(git push*)"]\n')
    code, out, _ = run_app(["config", "show", "-C", str(workspace)], capsys)
    assert code == 0
    section = out[out.index("# permission rules in effect") :]
    lines = section.splitlines()
    assert any(
        line.startswith("#   deny  Bash(curl:*)") and "settings.json: permissions.deny" in line for line in lines
    )
    assert any(line.startswith("#   ask   bash(git push*)") and "config.toml" in line for line in lines)
    assert any("Read(~/notes/**)" in line and "permissions.allow" in line for line in lines)
    assert any("Agent(x)" in line and "not used" in line for line in lines)
    code, out, _ = run_app(["config", "show", "-C", str(workspace), "--json"], capsys)
    rules = json.loads(out)["permission_rules"]
    assert {"action": "deny", "rule": "Bash(curl:*)"}.items() <= rules[0].items()


def test_bang_lines_of_a_command_run_through_the_permission_check(
    server: FakeServer, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ui_helpers import answers

    from kimicode.ui import commands

    write_settings(tmp_path, {"permissions": {"deny": ["Bash(rm:*)"]}})
    (workspace / "keep.txt").write_text("x")
    folder = claude_dir(tmp_path) / "commands"
    folder.mkdir()
    (folder / "state.md").write_text(
        "---\nallowed-tools: Bash(touch granted.txt)\n---\nSaid: !`echo hello-from-bang`\n"
        "Granted: !`touch granted.txt`\nAsked: !`touch asked.txt`\nDenied: !`rm -f keep.txt`\nNow answer.\n"
    )
    asked = answers(monkeypatch, "yes")
    server.add(Reply(content="ok"))
    s = plain_session(server, workspace, monkeypatch, sandbox="off")

    async def go() -> None:
        await commands.dispatch(s, "/state")
        await s.agent.aclose()

    asyncio.run(go())
    sent = server.requests[0].body["messages"][-1]["content"]
    assert "Said: hello-from-bang" in sent and "!`" not in sent
    assert (workspace / "granted.txt").exists() and (workspace / "asked.txt").exists()
    assert len(asked) == 1 and "touch asked.txt" in asked[0]  # only the one no rule allows asked
    assert (workspace / "keep.txt").exists() and "`rm -f keep.txt` not run" in sent and "Bash(rm:*)" in sent


def test_status_line_runs_its_command_with_claudes_json_and_shows_its_line(
    server: FakeServer, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kimicode.ui.prompt import toolbar
    from kimicode.ui.statusline import refresh_for

    got = tmp_path / "status-in.json"
    write_settings(
        tmp_path,
        {"statusLine": {"type": "command", "command": f"cat > {shlex.quote(str(got))}; printf 'my-line\\n2nd\\n'"}},
    )
    s = plain_session(server, workspace, monkeypatch)

    async def go() -> None:
        await refresh_for(s)
        await s.agent.aclose()

    asyncio.run(go())
    payload = json.loads(got.read_text())
    assert payload["session_id"] == s.agent.session_id and payload["model"]["id"] == "kimi-k3"
    assert payload["workspace"]["current_dir"] == str(workspace) and payload["cwd"] == str(workspace)
    shown = "".join(text for _style, text, *_ in toolbar(s))
    assert shown.endswith("\n my-line ") and "2nd" not in shown


def test_skills_list_fits_120_columns_and_shows_display_names(
    server: FakeServer, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kimicode.ui import commands

    for folder, name in (("agent-development", "Agent Development"), ("x" * 30, "x" * 30)):
        skill = claude_dir(tmp_path) / "skills" / folder
        skill.mkdir(parents=True)
        (skill / "SKILL.md").write_text(f"---\nname: {name}\ndescription: {'word ' * 60}\n---\nBody.\n")
    s = plain_session(server, workspace, monkeypatch, width=120)

    async def go() -> None:
        await commands.dispatch(s, "/skills")
        await s.agent.aclose()

    asyncio.run(go())
    lines = output(s).splitlines()
    rows = [line for line in lines if line.startswith("  /")]
    assert len(rows) == 2 and all(len(line) <= 120 and line.endswith("(user)") for line in rows)
    assert any(line.startswith("  /agent-development (Agent Development)  word") for line in rows)


def test_help_lists_claudes_folders_and_keys(
    server: FakeServer, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kimicode.ui import commands

    (claude_dir(tmp_path) / "commands").mkdir()
    (claude_dir(tmp_path) / "commands" / "hello.md").write_text("Say hello.\n")
    s = plain_session(server, workspace, monkeypatch)

    async def go() -> None:
        await commands.dispatch(s, "/help")
        await s.agent.aclose()

    asyncio.run(go())
    text = output(s)
    for piece in ("Ctrl-O", "Ctrl-S", "Esc Esc", "!command", ".claude/commands/", "~/.claude/commands/"):
        assert piece in text, piece


def test_a_hooks_if_rule_limits_it_to_the_calls_it_names(
    make_agent: Callable[..., Any], server: FakeServer, tmp_path: Path, workspace: Path
) -> None:
    """Claude Code's hook `if` (security-guidance's `"if": "Bash(git commit:*)"`): the hook runs only for the
    calls the rule names; before, kimicode ran it for every call its matcher took."""
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(HOOK))} exit2"
    write_settings(
        tmp_path,
        {
            "hooks": {
                "PreToolUse": [
                    {"matcher": "Bash", "hooks": [{"type": "command", "command": command, "if": "Bash(rm:*)"}]}
                ]
            }
        },
    )
    (workspace / "keep.txt").write_text("x")
    server.add(
        Reply(
            tool_calls=[
                ToolCall("bash", {"command": "echo fine"}),
                ToolCall("bash", {"command": "cd . && rm keep.txt"}),
            ]
        ),
        Reply(content="done"),
    )
    make_agent(permission_mode="yolo", sandbox="off").run_sync("go")
    ran, refused = sent_tool_results(server)
    assert "fine" in ran and "Blocked by a PreToolUse hook" in refused and (workspace / "keep.txt").exists()
    logged = [json.loads(line) for line in (workspace / "hooks.jsonl").read_text().splitlines()]
    assert [e["payload"]["tool_input"]["command"] for e in logged] == ["cd . && rm keep.txt"]


def test_the_toolbar_shows_the_servers_window_before_the_first_turn(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After `-c` the toolbar said `/1.0M` (the model's default) until a request was sent: the window is
    now asked for when the session opens."""
    from kimicode.ui.prompt import toolbar
    from kimicode.ui.window import learn_window

    with FakeServer(dialect="vllm", model="kimi-k3", context_window=200_000) as fake:  # vLLM: max_model_len
        s = plain_session(fake, workspace, monkeypatch)

        async def go() -> str:
            task = learn_window(s)
            assert task is not None
            await task
            await s.agent.aclose()
            return "".join(text for _style, text, *_ in toolbar(s))

        shown = asyncio.run(go())
    assert "/200k" in shown and "1.0M" not in shown


def test_nothing_of_the_turn_is_drawn_while_a_question_is_on_screen() -> None:
    """Finding 7: reasoning was drawn over the approval menu. While the live region is paused (a question
    owns the screen) what the turn prints is held, and written once the question is answered."""
    import io

    from kimicode.ui.live import LiveRegion

    screen = io.StringIO()
    region = LiveRegion(screen, lambda: 40, lambda: ["status\n"])
    region.print_above("before\n")
    region.clear()  # as TurnView.suspend does before the question is shown
    region.paused = True
    drawn = screen.getvalue()
    region.print_above("late reasoning line\n")
    region.redraw()
    assert screen.getvalue() == drawn  # nothing over the menu
    region.paused = False
    assert screen.getvalue().endswith("late reasoning line\n")
