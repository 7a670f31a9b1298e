"""Automatic pruning of the checkpoint store when a session opens (kimicode/checkpoints/upkeep.py):
real git, real stores in temporary directories, the fake server driving the turns."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import bash_turn

from kimicode import Agent
from kimicode.checkpoints import CheckpointStore
from kimicode.checkpoints.upkeep import STAMP, Limits, auto_prune, due
from kimicode.testing import FakeServer

MakeAgent = Callable[..., Agent]
DAY = 86400.0


def old_ref(store: CheckpointStore, ref: str, days: float, content: str = "old only\n") -> str:
    """A snapshot whose commit is `days` old (committer date), kept by `refs/kimicode/<ref>`."""
    path = store.workspace / "old.txt"
    path.write_text(content)
    snap = store.snapshot("to age")
    path.unlink()
    store.snapshot("after")  # the private index no longer refers to old.txt's blob
    tree = store.git("rev-parse", f"{snap.id}^{{tree}}").decode().strip()
    env = {**store.git_env(), "GIT_COMMITTER_DATE": f"@{int(time.time() - days * DAY)} +0000"}
    commit = (
        subprocess.run(
            ["git", "commit-tree", tree, "-m", "old"], env=env, cwd=store.workspace, capture_output=True, check=True
        )
        .stdout.decode()
        .strip()
    )
    store.git("update-ref", f"refs/kimicode/{ref}", commit)
    return commit


def age_everything(store: CheckpointStore, days: float) -> None:
    """Make the store's objects, its creation and its stamp look `days` old (so the gc's grace is over)."""
    then = time.time() - days * DAY
    for path in [*store.git_dir.joinpath("objects").rglob("*"), store.git_dir / "HEAD", store.dir / STAMP]:
        if path.exists():
            os.utime(path, (then, then))


def refs(store: CheckpointStore) -> list[str]:
    return store.git("for-each-ref", "--format=%(refname)", "refs/kimicode/").decode().split()


def fsck(store: CheckpointStore) -> None:
    proc = subprocess.run(
        ["git", "fsck", "--strict", "--no-dangling"],
        env=store.git_env(),
        cwd=store.workspace,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_defaults_and_config_limits() -> None:
    from kimicode.config.sections import Checkpoints

    assert Limits.from_settings(Checkpoints()) == Limits(30.0, None)
    assert Limits.from_settings(Checkpoints(max_age_days=7, max_store_mb=2048)) == Limits(7.0, 2048.0)
    assert Limits.from_settings(Checkpoints(max_age_days=0, max_store_mb=-1)) == Limits(None, None)  # 0: no limit


@pytest.mark.prepush
def test_an_old_stamp_and_old_refs_are_pruned_when_a_session_opens(
    server: FakeServer, make_agent: MakeAgent, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("a\n")
    first = make_agent(permission_mode="yolo")
    bash_turn(server, "echo one > a.txt")
    assert first.run_sync("one").ok and first.checkpoints is not None
    store = first.checkpoints.store
    young = first.checkpoints.entries[-1].after
    old = old_ref(store, "long-gone/1-before", days=40)
    (store.dir / STAMP).write_text("")
    age_everything(store, days=2)
    assert due(store)

    second = make_agent(permission_mode="yolo")
    assert second.checkpoints is not None and second.checkpoints.pruning is not None  # in the background
    second.checkpoints.pruning.join(60)
    assert not store.has(old)  # its ref was older than max_age_days (30 by default), and git removed it
    assert young and store.has(young)  # the first session's checkpoints are younger than the limit
    assert "refs/kimicode/long-gone/1-before" not in refs(store)
    assert abs((store.dir / STAMP).stat().st_mtime - time.time()) < 60 and not due(store)
    fsck(store)
    bash_turn(server, "echo two > a.txt")
    assert second.run_sync("two").ok  # the store still takes checkpoints
    assert (workspace / "a.txt").read_text() == "two\n"


def test_a_fresh_stamp_is_not_run_again(server: FakeServer, make_agent: MakeAgent, workspace: Path) -> None:
    first = make_agent(permission_mode="yolo")
    bash_turn(server, "echo one > a.txt")
    assert first.run_sync("one").ok and first.checkpoints is not None
    store = first.checkpoints.store
    old = old_ref(store, "long-gone/1-before", days=40)
    age_everything(store, days=2)
    (store.dir / STAMP).write_text("")  # pruned just now
    second = make_agent(permission_mode="yolo")
    assert second.checkpoints is not None and second.checkpoints.pruning is None  # not even a thread
    assert auto_prune(store, Limits(), store.dir.parent) is None
    assert store.has(old) and "refs/kimicode/long-gone/1-before" in refs(store)


def test_the_hermetic_library_does_not_prune_unless_asked(server: FakeServer, workspace: Path, tmp_path: Path) -> None:
    from kimicode import AgentOptions
    from kimicode.config.settings import Settings

    store = CheckpointStore(tmp_path / "home", workspace)
    old_ref(store, "long-gone/1-before", days=40)
    age_everything(store, days=2)
    base: dict[str, Any] = {
        "base_url": server.base_url,
        "api_key": "k",
        "workspace": workspace,
        "home": tmp_path / "home",
    }
    hermetic = Agent(AgentOptions(**base), persist=False)
    assert hermetic.checkpoints is not None and hermetic.checkpoints.pruning is None
    asked = Agent(AgentOptions(**base, config=Settings({"checkpoints": {"auto_prune": True}})), persist=False)
    assert asked.checkpoints is not None and asked.checkpoints.pruning is not None
    asked.checkpoints.pruning.join(60)
    assert "refs/kimicode/long-gone/1-before" not in refs(store)


@pytest.mark.prepush
def test_the_size_limit_drops_only_checkpoints_of_sessions_that_are_gone(workspace: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    sessions = home / "sessions"
    sessions.mkdir(parents=True)
    (sessions / "alive.jsonl").write_text("")
    store = CheckpointStore(home, workspace)
    alive = [old_ref(store, f"alive/{i}-before", days=5, content=os.urandom(300_000).hex()) for i in range(3)]
    gone = [old_ref(store, f"gone/{i}-before", days=5, content=os.urandom(300_000).hex()) for i in range(3)]
    recent = old_ref(store, "recent/1-before", days=0.1, content=os.urandom(300_000).hex())  # no log, yet young
    age_everything(store, days=2)
    dropped = auto_prune(store, Limits(max_age_days=30, max_store_mb=0.001), sessions)
    assert dropped is not None and set(dropped) == {f"refs/kimicode/gone/{i}-before" for i in range(3)}
    assert all(store.has(c) for c in [*alive, recent]) and not any(store.has(c) for c in gone)
    fsck(store)


@pytest.mark.prepush
def test_prune_and_checkpoints_at_the_same_time_never_corrupt_the_store(workspace: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    for i in range(600):
        d = workspace / f"d{i // 100}"
        d.mkdir(exist_ok=True)
        (d / f"f{i}.txt").write_text(f"first {i}\n" * 20)
    store = CheckpointStore(home, workspace)
    store.snapshot("first", "s/0")
    for i in range(5):
        old_ref(store, f"gone/{i}-before", days=40, content=f"garbage {i}\n" * 1000)
    age_everything(store, days=2)
    errors: list[BaseException] = []

    def pruner() -> None:
        try:
            for _ in range(4):  # (only the stamp is aged: objects keep their real times, as in real use)
                (store.dir / STAMP).unlink(missing_ok=True)
                then = time.time() - 2 * DAY
                os.utime(store.git_dir / "HEAD", (then, then))
                auto_prune(store, Limits(max_age_days=30), home / "sessions")
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    thread = threading.Thread(target=pruner)
    thread.start()
    snaps: list[tuple[str, dict[str, str]]] = []
    n = 0
    while thread.is_alive() or n < 6:
        n += 1
        many = n % 2 == 0  # more than BULK files: a pack written by kimicode; otherwise `git add`
        for i in range(600 if many else 3):
            (workspace / f"d{i // 100}" / f"f{i}.txt").write_text(f"round {n} {i}\n" * 20)
        state = {f"d{i // 100}/f{i}.txt": (workspace / f"d{i // 100}" / f"f{i}.txt").read_text() for i in range(600)}
        snaps.append((store.snapshot(f"round {n}", f"s/{n}").id, state))
    thread.join(120)
    assert not errors, errors
    assert "refs/kimicode/gone/0-before" not in refs(store)  # the prune did run
    fsck(store)
    for commit, state in [snaps[0], snaps[len(snaps) // 2], snaps[-1]]:
        store.restore(commit, sorted(state), "check")
        assert all((workspace / p).read_text() == text for p, text in state.items())
    fsck(store)


@pytest.mark.prepush
def test_an_unwritable_store_warns_and_never_crashes(
    server: FakeServer, make_agent: MakeAgent, workspace: Path
) -> None:
    first = make_agent(permission_mode="yolo")
    bash_turn(server, "echo one > a.txt")
    assert first.run_sync("one").ok and first.checkpoints is not None
    store = first.checkpoints.store
    (store.dir / STAMP).mkdir()  # the stamp cannot be written (works as root too)
    age_everything(store, days=2)
    agent = make_agent(permission_mode="yolo")
    assert agent.checkpoints is not None and agent.checkpoints.pruning is not None
    agent.checkpoints.pruning.join(60)
    notices: list[str] = []
    agent.on_event = lambda ev: notices.append(getattr(ev, "text", "")) if type(ev).__name__ == "Notice" else None
    bash_turn(server, "echo two > a.txt")
    result = agent.run_sync("two")
    assert result.ok and result.checkpoint  # the turn and its checkpoint go on
    assert any("could not prune the checkpoint store" in n for n in notices), notices
