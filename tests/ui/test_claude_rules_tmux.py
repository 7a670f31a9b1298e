"""A Claude Code user's session (issue 36, finding 1): `~/.claude/settings.json` deny and allow rules in
the real `kimicode` in tmux, against the fake server. The denied command is refused with the rule's file
named; the allowed one runs without a question."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import kimicode_command, terminal_env
from terminals import Tmux

from kimicode.testing import FakeServer, Reply, ToolCall

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (.ci/run installs it)"),
]


def test_claude_deny_refuses_naming_its_file_and_allow_runs_without_asking(
    server: FakeServer, tmp_path: Path, workspace: Path
) -> None:
    claude = tmp_path / "claude-home"
    claude.mkdir()
    (claude / "settings.json").write_text(
        json.dumps({"permissions": {"deny": ["Bash(curl:*)"], "allow": ["Bash(touch:*)"]}, "model": "opus"})
    )
    server.add(
        Reply(tool_calls=[ToolCall("bash", {"command": "curl -s https://example.com/x"})]),
        Reply(tool_calls=[ToolCall("bash", {"command": "touch made.txt"})]),
        Reply(content="All-done-END."),
    )
    env = terminal_env(tmp_path / "home", server, CLAUDE_CONFIG_DIR=str(claude))
    term = Tmux([*kimicode_command(), "--sandbox", "off"], env, workspace, cols=160)
    try:
        opened = term.wait(term.at_prompt)
        assert "Claude Code setup: 1 thing(s) found and not used" in opened  # said before anything is typed
        term.keys("fetch then touch", "Enter")
        term.wait(lambda screen: "All-done-END." in screen and term.at_prompt(screen), 40)
        history = term.history()
    finally:
        term.close()
    flat, words = history.replace("\n", ""), " ".join(history.split())  # long lines wrap (mid-word too)
    assert "is denied by the rule" in words and "`Bash(curl:*)`" in flat
    assert f"{claude}/settings.json: permissions.deny" in flat
    assert (workspace / "made.txt").exists()
    assert words.count("Claude Code setup:") == 1 and "`model` not taken" in words
    assert "Allow" not in history and "1. Yes" not in history  # no question was asked
    refused = server.requests[1].body["messages"][-1]["content"]
    assert "Bash(curl:*)" in refused and "settings.json" in refused
