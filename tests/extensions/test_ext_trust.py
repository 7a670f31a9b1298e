"""The trust question: listing what a project brings, asking once, remembering yes in `[trust] workspaces`
(the user's config keeps everything else byte for byte) and no in trust.json, `/trust`, and never asking in
headless runs."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kimicode.config.endpoint import ConfigError
from kimicode.config.settings import is_trusted, load_settings
from kimicode.config.trustlist import toml_string
from kimicode.extensions.trust import project_brings, set_trusted, was_declined
from kimicode.ui.trust_cmds import ask_trust


def bring_everything(ws: Path) -> None:
    (ws / ".kimicode").mkdir()
    (ws / ".kimicode" / "config.toml").write_text(
        '[[hooks.PreToolUse]]\nhooks = [{ type = "command", command = "guard.sh" }]\n'
        '[mcp_servers.db]\ncommand = "db-mcp"\nargs = ["--rw"]\n'
    )
    (ws / ".mcp.json").write_text(json.dumps({"mcpServers": {"gh": {"command": "npx", "args": ["gh-mcp"]}}}))
    (ws / ".claude" / "skills" / "lint").mkdir(parents=True)
    (ws / ".claude" / "skills" / "lint" / "SKILL.md").write_text("---\nname: lint\ndescription: d\n---\nx\n")
    (ws / ".claude" / "agents").mkdir()
    (ws / ".claude" / "agents" / "rev.md").write_text("---\nname: rev\ndescription: d\n---\nx\n")
    (ws / ".claude" / "commands").mkdir()
    (ws / ".claude" / "commands" / "ship.md").write_text("Ship it.\n")
    (ws / ".claude" / "settings.json").write_text(
        json.dumps(
            {
                "permissions": {"allow": ["Bash(npm:*)"]},
                "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "say done"}]}]},
            }
        )
    )


def test_project_brings_lists_everything_that_would_run_or_be_added(workspace: Path) -> None:
    assert project_brings(workspace) == []
    bring_everything(workspace)
    text = "\n".join(project_brings(workspace))
    for expected in (
        "hook PreToolUse: guard.sh",
        "MCP server db: db-mcp --rw",
        "MCP server gh: npx gh-mcp",
        "skill .claude/skills/lint/SKILL.md",
        "agent .claude/agents/rev.md",
        "command .claude/commands/ship.md",
        "hook Stop: say done",
        "allows without asking: Bash(npm:*)",
    ):
        assert expected in text


def test_asked_once_yes_is_stored_in_trust_workspaces(workspace: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text('# my settings\n[defaults]\nmodel = "k3"  # keep this comment\n')
    bring_everything(workspace)
    shown: list[str] = []
    asked: list[str] = []
    answer = ask_trust(workspace, home, out=shown.append, ask=lambda q: asked.append(q) or "y", interactive=True)
    assert answer is True and asked == ["Trust this folder? [y/N] "]
    assert "guard.sh" in shown[0] and "db-mcp --rw" in shown[0]
    text = (home / "config.toml").read_text()
    assert text.startswith('# my settings\n[defaults]\nmodel = "k3"  # keep this comment\n')
    assert is_trusted(workspace, tomllib.loads(text)) and load_settings(workspace, home).trusted
    assert (home / "config.toml").stat().st_mode & 0o777 == 0o600
    assert ask_trust(workspace, home, ask=lambda q: pytest.fail("asked twice"), interactive=True) is None


def test_no_is_remembered_and_headless_never_asks(workspace: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    bring_everything(workspace)
    assert ask_trust(workspace, home, ask=lambda q: pytest.fail("asked"), interactive=False) is None
    assert ask_trust(workspace, home, out=lambda s: None, ask=lambda q: "", interactive=True) is False
    assert was_declined(home, workspace) and not (home / "config.toml").exists()
    assert ask_trust(workspace, home, ask=lambda q: pytest.fail("asked twice"), interactive=True) is None
    set_trusted(home, workspace, True)  # /trust on
    assert not was_declined(home, workspace) and load_settings(workspace, home).trusted
    set_trusted(home, workspace, False)  # /trust off
    assert was_declined(home, workspace) and not load_settings(workspace, home).trusted


def test_nothing_to_ask_about_means_no_question(workspace: Path, tmp_path: Path) -> None:
    assert ask_trust(workspace, tmp_path / "home", ask=lambda q: pytest.fail("asked"), interactive=True) is None


def test_an_existing_trust_table_is_extended_in_place(workspace: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(
        '[trust]\n# mine\nworkspaces = [\n  "/srv/a", # a comment with ] in it\n  "/srv/b]",\n]\n\n'
        '[ui]\nreasoning = "hide"\n'
    )
    set_trusted(home, workspace, True)
    data = tomllib.loads((home / "config.toml").read_text())
    assert data["trust"]["workspaces"] == ["/srv/a", "/srv/b]", str(workspace.resolve())]
    assert data["ui"] == {"reasoning": "hide"} and "# mine" in (home / "config.toml").read_text()


@pytest.mark.parametrize("text", ['trust = { workspaces = ["/a"] }\n', 'trust.workspaces = ["/a"]\n'])
def test_a_trust_list_it_cannot_edit_safely_is_left_alone_with_a_clear_error(
    workspace: Path, tmp_path: Path, text: str
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(text)
    with pytest.raises(ConfigError, match="edit it yourself"):
        set_trusted(home, workspace, True)
    assert (home / "config.toml").read_text() == text


paths = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=20)


@pytest.mark.prepush
@settings(max_examples=60, deadline=None)
@given(existing=st.lists(paths, max_size=4), comment=st.sampled_from(["", " # ]\"'[", "\n# [trust]\n"]))
def test_rewriting_the_trust_list_keeps_every_other_setting(
    existing: list[str], comment: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    root = tmp_path_factory.mktemp("t")
    home, ws = root / "home", root / "ws"
    home.mkdir()
    ws.mkdir()
    array = ", ".join(toml_string(p) for p in existing)
    text = f'[defaults]\nmodel = "m"{comment}\n[trust]\nworkspaces = [{array}]{comment}\n[ui]\nreasoning = "show"\n'
    (home / "config.toml").write_text(text)
    set_trusted(home, ws, True)
    data = tomllib.loads((home / "config.toml").read_text())
    assert data["trust"]["workspaces"][: len(existing)] == existing
    assert data["defaults"] == {"model": "m"} and data["ui"] == {"reasoning": "show"}
    assert is_trusted(ws, data)
