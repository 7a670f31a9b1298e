"""Checkpoints through the agent: a snapshot before a turn's first change, undo/rewind, safe restore.

Real git, real file trees in temp dirs, turns driven by the fake server.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import git

from kimicode import Agent
from kimicode.checkpoints import CheckpointError
from kimicode.checkpoints.session import RestoreConflict
from kimicode.session.log import iter_records, load
from kimicode.testing import FakeServer, Reply, ToolCall

MakeAgent = Callable[..., Agent]


def bash(cmd: str) -> ToolCall:
    return ToolCall("bash", {"command": cmd})


def script(server: FakeServer, *calls: ToolCall, answer: str = "done") -> None:
    server.add(*(Reply(tool_calls=[c]) for c in calls), Reply(content=answer))


def tree_digest(root: Path) -> dict[str, str]:
    """Every file, directory and symlink under root (outside .git) with its content hash."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        if ".git" in dirnames:
            dirnames.remove(".git")
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = "link:" + os.readlink(p)
            elif p.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def git_state(ws: Path) -> dict[str, bytes]:
    """The bytes of everything in the user's .git that a checkpoint must never touch."""
    g = ws / ".git"
    state: dict[str, bytes] = {}
    for p in sorted(g.rglob("*")):
        if p.is_file() and "objects" not in p.parts:
            state[str(p.relative_to(g))] = p.read_bytes()
    state["stash"] = git(ws, "stash", "list").encode()
    return state


def records(agent: Agent, kind: str = "checkpoint") -> list[dict[str, Any]]:
    assert agent.log is not None
    return [r for r in iter_records(agent.log.path) if r.get("type") == kind]


@pytest.fixture
def repo(workspace: Path) -> Path:
    git(workspace, "init", "-q")
    (workspace / "a.txt").write_text("one\n")
    (workspace / ".gitignore").write_text(".env\n")
    (workspace / ".env").write_text("API_KEY=hunter2-very-secret\n")
    git(workspace, "add", "-A")
    git(workspace, "commit", "-qm", "init")
    git(workspace, "stash", "list")
    (workspace / ".git" / "hooks" / "pre-commit").write_text("#!/bin/sh\nexit 1\n")
    (workspace / ".git" / "info" / "exclude").write_text("private-notes.txt\n")
    (workspace / "private-notes.txt").write_text("my notes\n")
    (workspace / "staged.txt").write_text("staged\n")
    git(workspace, "add", "staged.txt")  # something in the user's index that must stay staged
    return workspace


@pytest.mark.prepush
def test_a_turn_that_changes_files_is_checkpointed_and_undone_without_touching_user_git(
    server: FakeServer, make_agent: MakeAgent, repo: Path
) -> None:
    before_git = git_state(repo)
    before_tree = tree_digest(repo)
    script(server, bash("echo two > a.txt; rm staged.txt; mkdir -p d; printf 'x' > d/new.bin; echo s > .env"))
    agent = make_agent(permission_mode="yolo")
    result = agent.run_sync("change things")
    assert result.ok, result.error
    assert result.checkpoint
    assert result.changes == {"added": ["d/new.bin"], "modified": ["a.txt"], "deleted": ["staged.txt"]}
    assert git_state(repo) == before_git  # index, HEAD, branches, stash, hooks, config, info/exclude
    recs = records(agent)
    assert recs[-1]["before"] == result.checkpoint and recs[-1]["turn"] == 1
    store = agent.checkpoints.store if agent.checkpoints else None
    assert store is not None
    stored = store.git("ls-tree", "-r", "--name-only", result.checkpoint).decode().split()
    assert ".env" not in stored and "private-notes.txt" not in stored  # ignored, excluded: never stored
    assert "hunter2" not in store.git("log", "--all", "-p").decode()

    agent2 = Agent.resume(agent.session_id, base_url=server.base_url, api_key="k", home=agent.home)
    rewound = asyncio.run(agent2.rewind())
    assert sorted(rewound.files) == ["a.txt", "d/new.bin", "staged.txt"]
    after = tree_digest(repo)
    assert {k: v for k, v in after.items() if k != ".env"} == {k: v for k, v in before_tree.items() if k != ".env"}
    assert (repo / ".env").read_text() == "s\n"  # ignored files are not the checkpoint's to restore
    assert git_state(repo) == before_git
    assert agent2.messages[-1]["role"] == "system" and len(agent2.messages) == 1
    assert load(agent2.log.path if agent2.log else Path()).messages == agent2.messages  # the log agrees


def test_read_only_turns_take_no_checkpoint(server: FakeServer, make_agent: MakeAgent, workspace: Path) -> None:
    (workspace / "f.txt").write_text("hi\n")
    script(server, ToolCall("read_file", {"path": "f.txt"}))
    agent = make_agent()
    result = agent.run_sync("read it")
    assert result.ok and result.checkpoint is None and result.changes is None
    assert records(agent) == []  # a read-only turn leaves the log as it was
    store = agent.checkpoints.store if agent.checkpoints else None
    if store is not None and (store.git_dir / "HEAD").exists():  # stored ahead at open (warm_at_open), no ref
        assert store.git("for-each-ref", "refs/kimicode/") == b""


def test_non_git_directory_hostile_tree_round_trips(
    server: FakeServer, make_agent: MakeAgent, workspace: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("outside\n")
    (workspace / "keep.txt").write_text("keep\n")
    (workspace / "bin.dat").write_bytes(bytes(range(256)) * 10)
    (workspace / "new\nline.txt").write_text("odd name\n")
    (workspace / "file_then_dir").write_text("I was a file\n")
    os.symlink(outside, workspace / "link-out")
    (workspace / "sub").mkdir()
    (workspace / "sub" / "deep.txt").write_text("deep\n")
    before = tree_digest(workspace)
    # A turn that wrecks everything: deletes the whole tree, turns a file into a directory.
    script(server, bash("rm -rf ./* ./.[!.]* 2>/dev/null; mkdir file_then_dir; echo x > file_then_dir/y"))
    agent = make_agent(permission_mode="yolo")
    result = agent.run_sync("wreck it")
    assert result.ok
    assert result.changes is not None and "keep.txt" in result.changes["deleted"]
    assert outside.read_text() == "outside\n"
    asyncio.run(agent.rewind(files=True, conversation=False))
    assert tree_digest(workspace) == before
    assert os.readlink(workspace / "link-out") == str(outside)  # the link itself, not its target's bytes
    assert outside.read_text() == "outside\n"
    assert len(agent.messages) > 1  # conversation kept: files only


def test_a_file_changed_outside_is_not_overwritten_silently_and_force_overrides(
    server: FakeServer, make_agent: MakeAgent, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("v1\n")
    script(server, bash("echo agent > a.txt; echo agent > b.txt"))
    agent = make_agent(permission_mode="yolo")
    assert agent.run_sync("edit").ok
    (workspace / "a.txt").write_text("user edit\n")  # the user fixes it by hand afterwards
    with pytest.raises(RestoreConflict) as err:
        asyncio.run(agent.rewind())
    assert err.value.files == ["a.txt"]
    assert (workspace / "a.txt").read_text() == "user edit\n" and (workspace / "b.txt").exists()
    assert len(agent.messages) > 1  # nothing lost: neither files nor conversation
    res = asyncio.run(agent.rewind(force=True, conversation=False))
    assert (workspace / "a.txt").read_text() == "v1\n" and not (workspace / "b.txt").exists()
    # The restore is itself checkpointed: undoing it brings back the state before the restore.
    asyncio.run(agent.rewind(conversation=False))
    assert (workspace / "a.txt").read_text() == "user edit\n" and (workspace / "b.txt").read_text() == "agent\n"
    assert res.checkpoint


@pytest.mark.prepush
def test_rewind_to_an_earlier_turn_and_the_user_committing_in_between(
    server: FakeServer, make_agent: MakeAgent, repo: Path
) -> None:
    agent = make_agent(permission_mode="yolo")
    script(server, bash("echo t1 > a.txt"))
    assert agent.run_sync("first").ok
    git(repo, "commit", "-qam", "user commits the agent's work")
    script(server, bash("echo t2 > a.txt; echo t2 > c.txt"))
    assert agent.run_sync("second").ok
    script(server, ToolCall("read_file", {"path": "a.txt"}))
    assert agent.run_sync("third, read only").ok
    head = git(repo, "rev-parse", "HEAD")
    res = asyncio.run(agent.rewind(1))
    assert res.turn == 1 and (repo / "a.txt").read_text() == "one\n" and not (repo / "c.txt").exists()
    assert [m["content"] for m in agent.messages if m["role"] == "user"] == []
    assert git(repo, "rev-parse", "HEAD") == head
    with pytest.raises(CheckpointError):
        asyncio.run(agent.rewind(2))  # already undone


def test_too_big_files_are_skipped_and_reported(
    server: FakeServer, make_agent: MakeAgent, workspace: Path, tmp_path: Path
) -> None:
    (tmp_path / "home").mkdir(exist_ok=True)
    (tmp_path / "home" / "config.toml").write_text("[checkpoints]\nmax_file_mb = 0.001\n")
    (workspace / "big.bin").write_bytes(b"0" * 5000)
    script(server, bash("echo x > small.txt"))
    agent = make_agent(permission_mode="yolo")
    notices: list[str] = []
    agent.on_event = lambda ev: notices.append(getattr(ev, "text", "")) if type(ev).__name__ == "Notice" else None
    assert agent.run_sync("go").ok
    assert any("big.bin" in n and "size limit" in n for n in notices)
    assert records(agent)[-1]["skipped"] == ["big.bin"]


def test_an_unwritable_store_warns_and_the_turn_goes_on(
    server: FakeServer, make_agent: MakeAgent, workspace: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "checkpoints").write_text("not a directory: the store cannot be created (works as root too)\n")
    script(server, bash("echo x > f.txt"))
    agent = make_agent(permission_mode="yolo")
    notices: list[str] = []
    agent.on_event = lambda ev: notices.append(getattr(ev, "text", "")) if type(ev).__name__ == "Notice" else None
    result = agent.run_sync("go")
    assert result.ok and (workspace / "f.txt").exists()
    assert result.checkpoint is None and result.changes is None
    assert sum("no checkpoint" in n for n in notices) == 1  # once per turn, not per tool call
    with pytest.raises(CheckpointError, match=r"changed no files"):
        asyncio.run(agent.rewind(conversation=False))


@pytest.mark.prepush
def test_a_subagent_given_bash_counts_as_a_change(server: FakeServer, make_agent: MakeAgent, workspace: Path) -> None:
    (workspace / "f.txt").write_text("before\n")
    server.add(
        Reply(tool_calls=[ToolCall("task", {"description": "edit", "prompt": "edit f.txt", "tools": ["bash"]})]),
        Reply(tool_calls=[bash("echo after > f.txt")]),  # the subagent's steps
        Reply(content="sub done"),
        Reply(content="done"),
    )
    agent = make_agent(permission_mode="yolo")
    result = agent.run_sync("delegate")
    assert result.ok, result.error
    assert result.changes == {"added": [], "modified": ["f.txt"], "deleted": []}
    asyncio.run(agent.rewind(conversation=False))
    assert (workspace / "f.txt").read_text() == "before\n"


def test_a_kimicode_home_inside_the_workspace_is_never_stored(
    server: FakeServer, make_agent: MakeAgent, workspace: Path
) -> None:
    home = workspace / ".kimi home"
    script(server, bash("echo x > f.txt"))
    agent = make_agent(permission_mode="yolo", home=home)
    result = agent.run_sync("go")
    assert result.ok and result.changes == {"added": ["f.txt"], "modified": [], "deleted": []}
    assert agent.checkpoints is not None and result.checkpoint
    stored = agent.checkpoints.store.git("ls-tree", "-r", "--name-only", result.checkpoint).decode()
    assert ".kimi home" not in stored


def test_a_directory_in_the_way_holding_the_users_new_files_is_a_conflict(
    server: FakeServer, make_agent: MakeAgent, workspace: Path
) -> None:
    (workspace / "a").write_text("a file\n")
    script(server, bash("rm a; mkdir a; echo x > a/x"))
    agent = make_agent(permission_mode="yolo")
    assert agent.run_sync("file to dir").ok
    (workspace / "a" / "mine.txt").write_text("the user's\n")
    with pytest.raises(RestoreConflict) as err:
        asyncio.run(agent.rewind(conversation=False))
    assert err.value.files == ["a/mine.txt"]
    assert (workspace / "a" / "mine.txt").exists() and (workspace / "a" / "x").exists()
    asyncio.run(agent.rewind(conversation=False, force=True))
    assert (workspace / "a").read_text() == "a file\n"
    assert agent.checkpoints is not None and not agent.checkpoints.store.journal.exists()
