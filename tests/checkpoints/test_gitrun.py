"""kimicode's one git runner (kimicode/gitrun.py): a `GIT_*` variable left in the environment never points its
bookkeeping at another repository, and a failure is one line naming the subcommand."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kimicode.checkpoints.forks import repo_top
from kimicode.gitrun import failure, git_env, run_git


def test_git_variables_of_the_callers_shell_do_not_leak_into_kimicodes_git(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, other = tmp_path / "ws", tmp_path / "other"
    for repo in (ws, other):
        repo.mkdir()
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        subprocess.run(
            [
                "git",
                "-C",
                str(repo),
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "commit",
                "-q",
                "--allow-empty",
                "-m",
                "init",
            ],
            check=True,
        )
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))  # as a git hook that ran kimicode would leave them
    monkeypatch.setenv("GIT_WORK_TREE", str(other))
    monkeypatch.setenv("GIT_TERMINAL_PROMPT", "1")
    env = git_env(GIT_AUTHOR_NAME="kimicode")
    assert "GIT_DIR" not in env and "GIT_WORK_TREE" not in env
    assert env["GIT_TERMINAL_PROMPT"] == "0" and env["GIT_AUTHOR_NAME"] == "kimicode"
    assert Path(run_git(ws, "rev-parse", "--show-toplevel").stdout.strip()) == ws.resolve()
    assert repo_top(ws) == ws.resolve()  # the checkpoint forks' runner is this one


def test_a_failure_is_one_line_naming_the_subcommand(tmp_path: Path) -> None:
    proc = run_git(tmp_path, "rev-parse", "--verify", "no-such-ref")
    assert proc.returncode != 0
    message = failure(["rev-parse", "--verify", "no-such-ref"], proc)
    assert message.startswith("git rev-parse failed: ") and "\n" not in message
    silent = subprocess.CompletedProcess(["git"], 3, "", "")
    assert failure(["status"], silent) == "git status failed: 3"
