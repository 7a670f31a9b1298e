"""AGENTS.md / CLAUDE.md project instructions in the system prompt."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kimicode.config.agentsmd import MAX_FILE_CHARS, instruction_files, project_instructions, repo_root
from kimicode.testing import FakeServer, Reply


def make_tree(tmp_path: Path) -> tuple[Path, Path, Path]:
    repo = tmp_path / "repo"
    sub = repo / "pkg" / "sub"
    sub.mkdir(parents=True)
    (repo / ".git").mkdir()
    (repo / "AGENTS.md").write_text("Root rule: run `make test`.\n")
    (repo / "CLAUDE.md").write_text("ignored: AGENTS.md exists here\n")
    (repo / "pkg" / "CLAUDE.md").write_text("Pkg rule from CLAUDE.md.\n")
    (sub / "AGENTS.md").write_text("Sub rule: tabs.\n")
    home = tmp_path / "home"
    home.mkdir()
    (home / "AGENTS.md").write_text("User rule: be brief.\n")
    return repo, sub, home


def test_files_from_home_and_repo_root_down_to_the_workspace(tmp_path: Path) -> None:
    repo, sub, home = make_tree(tmp_path)
    assert repo_root(sub) == repo
    files = instruction_files(sub, home)
    assert [f.path for f in files] == [
        home / "AGENTS.md",
        repo / "AGENTS.md",
        repo / "pkg" / "CLAUDE.md",  # no AGENTS.md in pkg/: CLAUDE.md is read
        sub / "AGENTS.md",
    ]
    text = project_instructions(sub, home)
    assert "ignored" not in text
    assert text.index("User rule") < text.index("Root rule") < text.index("Pkg rule") < text.index("Sub rule")
    assert f"## {repo / 'pkg' / 'CLAUDE.md'}" in text


def test_without_a_repository_only_the_workspace_counts(tmp_path: Path) -> None:
    outer = tmp_path / "outer"
    ws = outer / "ws"
    ws.mkdir(parents=True)
    (outer / "AGENTS.md").write_text("outside the project\n")
    (ws / "AGENTS.md").write_text("inside\n")
    assert [f.path for f in instruction_files(ws, None)] == [ws / "AGENTS.md"]
    assert project_instructions(tmp_path / "outer" / "ws" / ".." / "ws", None).count("inside") == 1


def test_long_and_empty_files(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("x" * (MAX_FILE_CHARS + 100))
    files = instruction_files(tmp_path, None)
    assert files[0].truncated and len(files[0].text) == MAX_FILE_CHARS
    assert "cut: the file is longer" in project_instructions(tmp_path, None)
    (tmp_path / "AGENTS.md").write_text("  \n")
    assert project_instructions(tmp_path, None) == ""


def test_agent_sends_them_in_the_system_prompt(
    make_agent: Callable[..., Any], server: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    (workspace / "AGENTS.md").write_text("Always answer in French.\n")
    (tmp_path / "home").mkdir(exist_ok=True)
    (tmp_path / "home" / "AGENTS.md").write_text("Home conventions.\n")
    server.add(Reply(content="ok"))
    agent = make_agent(append_system_prompt="APPENDED")
    assert agent.run_sync("hi").ok
    system = server.requests[0].body["messages"][0]["content"]
    assert "Always answer in French." in system and str(workspace / "AGENTS.md") in system
    assert "Home conventions." in system
    assert system.index("Always answer in French.") < system.index("APPENDED")
    plain = make_agent(project_instructions=False)
    assert "French" not in plain.messages[0]["content"]
