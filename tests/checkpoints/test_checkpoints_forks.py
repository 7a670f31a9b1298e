"""Forks with their own working tree: git worktree on a new branch, or a copy; listing and removal."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import bash_turn, git
from typer.testing import CliRunner

from kimicode import Agent
from kimicode.cli.app import app
from kimicode.session.store import session_info
from kimicode.testing import FakeServer, Reply

MakeAgent = Callable[..., Agent]


@pytest.mark.prepush
def test_worktree_fork_runs_beside_the_original_without_touching_its_files(
    server: FakeServer, make_agent: MakeAgent, workspace: Path
) -> None:
    git(workspace, "init", "-q")
    (workspace / "a.txt").write_text("committed\n")
    (workspace / ".gitignore").write_text("secret.env\n")
    git(workspace, "add", "-A")
    git(workspace, "commit", "-qm", "init")
    (workspace / "a.txt").write_text("uncommitted edit\n")
    (workspace / "untracked.txt").write_text("new\n")
    (workspace / "secret.env").write_text("TOKEN=x\n")
    branch_before = git(workspace, "rev-parse", "--abbrev-ref", "HEAD")
    parent = make_agent(permission_mode="yolo")
    server.add(Reply(content="hi"))
    assert parent.run_sync("hello").ok

    # sandbox off: a commit in a git worktree writes into the main repository's .git, which the default
    # workspace-write sandbox keeps read-only (on purpose: its hooks would run outside the sandbox)
    child = parent.fork(workspace="worktree", sandbox="off")
    assert child.workspace != parent.workspace and child.workspace.is_dir()
    assert (child.workspace / "a.txt").read_text() == "uncommitted edit\n"  # the state now, not HEAD
    assert (child.workspace / "untracked.txt").read_text() == "new\n"
    assert not (child.workspace / "secret.env").exists()  # ignored files are not carried over
    assert f"kimicode/fork-{child.session_id}" in git(workspace, "branch", "--list", "kimicode/*")
    assert git(workspace, "rev-parse", "--abbrev-ref", "HEAD") == branch_before

    bash_turn(
        server,
        "echo fork > a.txt; echo f > only-in-fork.txt; git add -A; "
        "git -c user.name=a -c user.email=a@x commit -qm 'fork work'",
    )
    assert child.run_sync("change in the fork").ok
    assert (workspace / "a.txt").read_text() == "uncommitted edit\n"
    assert not (workspace / "only-in-fork.txt").exists()
    assert child.log is not None
    info = session_info(child.log.path)
    assert info.forked_from == parent.session_id

    out = CliRunner().invoke(app, ["sessions", "list", "--all"]).stdout
    assert f"fork tree (git worktree, branch kimicode/fork-{child.session_id}): {child.workspace}" in out
    res = CliRunner().invoke(app, ["sessions", "rm", child.session_id, "--remove-worktree"])
    assert res.exit_code == 0, res.stderr
    assert not child.workspace.exists()
    assert "worktree" in res.stdout
    assert "kimicode/fork" in git(workspace, "branch", "--list", "kimicode/*")  # its commit is kept
    assert "kept the branch" in res.stdout
    assert "worktrees" not in git(workspace, "worktree", "list")
    assert (workspace / "a.txt").read_text() == "uncommitted edit\n"


def test_copy_fork_outside_git_and_bad_modes(server: FakeServer, make_agent: MakeAgent, workspace: Path) -> None:
    server.add(Reply(content="hi"))
    (workspace / "f.txt").write_text("x\n")
    os.symlink("f.txt", workspace / "link")
    parent = make_agent()
    assert parent.run_sync("hello").ok
    # sandbox off: a commit in a git worktree writes into the main repository's .git, which the default
    # workspace-write sandbox keeps read-only (on purpose: its hooks would run outside the sandbox)
    child = parent.fork(workspace="worktree", sandbox="off")  # no repository: a copy
    assert (child.workspace / "f.txt").read_text() == "x\n" and os.readlink(child.workspace / "link") == "f.txt"
    (child.workspace / "f.txt").write_text("changed in the fork\n")
    assert (workspace / "f.txt").read_text() == "x\n"
    shared = parent.fork(workspace="shared")
    assert shared.workspace == parent.workspace
    with pytest.raises(ValueError):
        parent.fork(workspace=str(workspace / "missing-dir"))
    server.add(Reply(content="ok"))
    assert child.run_sync("saved now").ok
    res = CliRunner().invoke(app, ["sessions", "rm", child.session_id])  # not a terminal: the tree is kept
    assert res.exit_code == 0 and child.workspace.exists() and "--remove-worktree" in res.stderr


def test_slash_fork_switches_the_terminal_to_its_own_tree(
    server: FakeServer, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio
    import io

    from rich.console import Console

    from kimicode.ui import commands
    from kimicode.ui.app import Session, SessionOptions

    monkeypatch.setenv("KIMI_API_KEY", "sk-test")
    monkeypatch.setenv("KIMI_BASE_URL", server.base_url)
    (workspace / "f.txt").write_text("orig\n")
    console = Console(file=io.StringIO(), width=200, color_system=None, force_terminal=False)
    session = Session(
        SessionOptions(workspace=workspace, retry_base_delay=0.01, permission_mode="yolo"), console, plain=True
    )
    server.add(Reply(content="hi"))

    async def go() -> None:
        await session.run_turn("hello")
        first = session.agent.session_id
        await commands.dispatch(session, "/fork nonsense")
        assert session.agent.session_id == first
        await commands.dispatch(session, "/fork")
        assert session.agent.session_id != first and session.workspace != workspace
        bash_turn(server, "echo fork > f.txt")
        await session.run_turn("edit in the fork")
        await session.agent.aclose()

    asyncio.run(go())
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "/fork takes worktree, copy, shared" in text and "its own working tree" in text
    assert (workspace / "f.txt").read_text() == "orig\n"
    assert (session.workspace / "f.txt").read_text() == "fork\n"


@pytest.mark.slow
def test_cli_fork_worktree(server: FakeServer, workspace: Path, tmp_path: Path) -> None:
    import json

    from helpers import kimicode_command

    git(workspace, "init", "-q")
    (workspace / "a.txt").write_text("base\n")
    git(workspace, "add", "-A")
    git(workspace, "commit", "-qm", "init")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI_", "OPENAI_", "KIMICODE_"))}
    env.update(KIMICODE_HOME=str(tmp_path / "home"), KIMI_API_KEY="sk-x", KIMI_BASE_URL=server.base_url)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*kimicode_command(), *args],
            env=env,
            cwd=workspace,
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )

    server.add(Reply(content="first"))
    assert run("-p", "hello").returncode == 0
    bad = run("-p", "x", "--worktree")
    assert bad.returncode == 2 and "--fork" in bad.stderr
    bash_turn(server, "echo forked > a.txt")
    out = run("-c", "--fork", "--worktree", "-p", "edit", "--permission-mode", "yolo", "--output-format", "json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.splitlines()[-1])
    assert result["changes"]["modified"] == ["a.txt"]
    assert "working in its own tree" in out.stderr and f"on branch kimicode/fork-{result['session_id']}" in out.stderr
    assert (workspace / "a.txt").read_text() == "base\n"
    listing = run("sessions", "list", "--json").stdout.splitlines()
    trees = [json.loads(line)["fork_tree"] for line in listing if json.loads(line)["fork_tree"]]
    assert len(trees) == 1 and Path(trees[0]["workspace"], "a.txt").read_text() == "forked\n"
