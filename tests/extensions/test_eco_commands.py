"""Custom slash commands from Markdown files."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import write

from kimicode.commands import load_custom_commands
from kimicode.testing import FakeServer, Reply


def test_project_and_user_commands(tmp_path: Path, workspace: Path) -> None:
    home = tmp_path / "home"
    write(home / "commands" / "review.md", "User review of $ARGUMENTS\n")
    write(home / "commands" / "explain.md", "# Explain code\n\nExplain $ARGUMENTS simply.\n")
    write(workspace / ".kimicode" / "commands" / "review.md",
          "---\ndescription: Review the staged diff\nargument-hint: [focus]\n---\nReview the staged diff. "
          "Focus: $ARGUMENTS.\n")  # fmt: skip
    write(workspace / ".kimicode" / "commands" / "git" / "commit.md", "Write a commit message for the staged changes.")
    write(workspace / ".kimicode" / "commands" / "empty.md", "  \n")
    write(workspace / ".kimicode" / "commands" / "notes.txt", "not markdown")
    found = load_custom_commands(workspace, home)
    assert list(found) == ["explain", "git:commit", "review"]
    review = found["review"]
    assert review.scope == "project" and review.description == "Review the staged diff"
    assert review.argument_hint == "[focus]"
    assert review.render("error handling") == "Review the staged diff. Focus: error handling."
    assert found["explain"].scope == "user" and found["explain"].description == "Explain code"
    assert found["explain"].render("") == "# Explain code\n\nExplain  simply."


def test_arguments_without_placeholder_are_appended_and_positionals(tmp_path: Path) -> None:
    write(tmp_path / ".kimicode" / "commands" / "plain.md", "Run the tests.")
    write(tmp_path / ".kimicode" / "commands" / "pos.md", "Rename $1 to $2 everywhere.")
    found = load_custom_commands(tmp_path, tmp_path / "nohome")
    assert found["plain"].render("") == "Run the tests."
    assert found["plain"].render("only unit ones") == "Run the tests.\n\nonly unit ones"
    assert found["pos"].render('old_name "new name"') == "Rename old_name to new name everywhere."
    assert found["pos"].render("one") == "Rename one to  everywhere."


def test_no_directories_means_no_commands(tmp_path: Path) -> None:
    assert load_custom_commands(tmp_path / "ws", tmp_path / "home") == {}


@pytest.mark.prepush
def test_a_rendered_command_is_an_ordinary_prompt(
    make_agent: Callable[..., Any], server: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    write(workspace / ".kimicode" / "commands" / "fix.md", "Fix issue #$ARGUMENTS and add a test.")
    command = load_custom_commands(workspace, tmp_path / "home")["fix"]
    server.add(Reply(content="fixed"))
    assert make_agent().run_sync(command.render("42")).ok
    assert server.requests[0].body["messages"][-1]["content"] == "Fix issue #42 and add a test."
