"""Read-only git run by the bash tool does not run the programs a repository's configuration names
(external diff, textconv, fsmonitor, hooks), against real git; and another repository inside the
workspace (nested, bare, or written as ordinary files) is found as a boundary."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest

from kimicode.permissions.gitsafe import foreign_repository, read_only_git_env
from kimicode.tools.base import ToolContext
from kimicode.tools.shell import BASH

READS = [
    "git diff",
    "git log -p -1",
    "git show HEAD",
    "git diff HEAD",
    "git status",
    "git blame f.txt",
    "git grep -n b",
    "git diff --stat | head -5",
    "git whatchanged -1 -p",
]


def _repo(ws: Path) -> Path:
    """A repository whose own configuration runs programs on diff, textconv, fsmonitor and hooks."""
    run = {"cwd": ws, "check": True, "capture_output": True}
    subprocess.run(["git", "init", "-q"], **run)  # type: ignore[call-overload]
    (ws / "f.txt").write_text("a\n")
    (ws / ".gitattributes").write_text("*.txt diff=evil\n")
    subprocess.run(["git", "add", "."], **run)  # type: ignore[call-overload]
    subprocess.run(["git", "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "x"], **run)  # type: ignore[call-overload]
    (ws / "f.txt").write_text("b\n")
    hook = ws / "hook.sh"
    hook.write_text(f"#!/bin/sh\ntouch {ws}/pwned-fsmonitor\n")
    hook.chmod(0o755)
    with (ws / ".git" / "config").open("a") as config:
        config.write(
            f'[diff]\n\texternal = "touch {ws}/pwned-external"\n'
            f'[diff "evil"]\n\ttextconv = "touch {ws}/pwned-textconv; cat"\n'
            f"[core]\n\tfsmonitor = {hook}\n"
        )
    return ws


def _bash(command: str, ws: Path) -> str:
    ctx = ToolContext(workspace=ws, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(ws)})
    result = asyncio.run(BASH.fn({"command": command}, ctx))
    return result.content


def _pwned(ws: Path) -> list[str]:
    return sorted(p.name for p in ws.glob("pwned-*"))


def test_the_repository_really_would_run_them(tmp_path: Path) -> None:
    ws = _repo(tmp_path)
    subprocess.run(["git", "diff"], cwd=ws, capture_output=True, check=False)
    subprocess.run(["git", "log", "-p", "-1", "--no-ext-diff"], cwd=ws, capture_output=True, check=False)
    assert {"pwned-external", "pwned-textconv", "pwned-fsmonitor"} <= set(_pwned(ws))


@pytest.mark.parametrize("line", READS)
def test_read_only_git_runs_none_of_them(tmp_path: Path, line: str) -> None:
    ws = _repo(tmp_path)
    output = _bash(line, ws)
    assert _pwned(ws) == [], (line, output)
    assert "[exit code: 0]" in output, output
    if line in ("git diff", "git show HEAD"):
        assert "+b" in output or "+a" in output, output


def test_a_line_that_is_not_read_only_runs_as_written(tmp_path: Path) -> None:
    ws = _repo(tmp_path)
    assert read_only_git_env("git diff; touch y") == {}
    assert read_only_git_env("git commit -m x") == {}
    assert read_only_git_env("ls") == {}
    assert read_only_git_env("git diff | head") != {}
    _bash("git diff; touch y", ws)
    assert "pwned-external" in _pwned(ws)  # the user's rule or approval admitted it: the configuration applies


def test_other_repositories_are_found(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "src" / "a").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    subprocess.run(["git", "init", "-q", str(ws / "nested")], check=True)
    (ws / "nested" / "x").mkdir()
    subprocess.run(["git", "init", "-q", "--bare", str(ws / "bare")], check=True)
    written = ws / "written"
    (written / "objects").mkdir(parents=True)
    (written / "refs").mkdir()
    (written / "HEAD").write_text("ref: refs/heads/main\n")
    assert foreign_repository(ws, ws) is None
    assert foreign_repository(ws / "src" / "a", ws) is None
    assert foreign_repository(ws / "nested" / "x", ws) == ws / "nested"
    assert foreign_repository(ws / "bare" / "refs", ws) == ws / "bare"
    assert foreign_repository(written, ws) == written
    assert foreign_repository(tmp_path, ws) == tmp_path  # outside the workspace
