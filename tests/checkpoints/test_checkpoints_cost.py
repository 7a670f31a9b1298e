"""What a checkpoint costs, kept honest: the warm-up at open in every face, a turn's last snapshot that
records only the files kimicode's own edit tools wrote (never missing what anything else changed), and
the first snapshot's parallel hashing giving the same objects git would.

Real git in temporary directories, turns driven by the fake server.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kimicode import Agent
from kimicode.agent.checkpointing import known_writes
from kimicode.checkpoints import rawpack
from kimicode.checkpoints.session import SessionCheckpoints
from kimicode.checkpoints.store import CheckpointStore
from kimicode.testing import FakeServer, Reply, ToolCall
from kimicode.tools.files import WRITE_FILE
from kimicode.tools.patch import APPLY_PATCH

MakeAgent = Callable[..., Agent]


def _turn(cps: SessionCheckpoints, n: int, noted: list[str] | None, change: Callable[[], None]) -> list[str]:
    cps.begin_turn(f"turn {n}", n, noted=True)
    cps.before_change()
    cps.note(noted)
    change()
    entry = cps.end_turn()
    assert entry is not None
    return entry.changes.paths()


def test_a_turn_of_known_writes_records_only_those_and_the_next_turn_sees_the_rest(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    (ws / "b.txt").write_text("b\n")
    cps = SessionCheckpoints(CheckpointStore(tmp_path / "home", ws), "s", None)

    def both() -> None:
        (ws / "a.txt").write_text("a2\n")  # what the turn's edit tool wrote
        (ws / "b.txt").write_text("b2\n")  # the user's editor, meanwhile

    assert _turn(cps, 1, ["a.txt"], both) == ["a.txt"]  # the user's edit is not the turn's to undo
    assert _turn(cps, 2, [], lambda: None) == []
    first_of_3 = cps.entries[-1]
    assert first_of_3.before is not None
    # the next snapshot walks the tree: b.txt's change is in its "before", so nothing is lost
    assert cps.store.git("show", f"{first_of_3.before}:b.txt") == b"b2\n"


def test_an_unknown_call_makes_the_turn_walk_the_whole_tree(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    cps = SessionCheckpoints(CheckpointStore(tmp_path / "home", ws), "s", None)

    def run() -> None:
        (ws / "a.txt").write_text("a2\n")
        (ws / "new.txt").write_text("n\n")
        (ws / "gone.txt").unlink(missing_ok=True)

    cps.begin_turn("t", 1, noted=True)
    cps.note(["a.txt"])
    cps.note(None)  # a bash call, a hook, a subagent: anything may have changed
    cps.before_change()
    run()
    entry = cps.end_turn()
    assert entry is not None and entry.changes.paths() == ["a.txt", "new.txt"]


def test_a_known_write_that_deleted_or_never_made_its_file_is_recorded_safely(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "old.txt").write_text("o\n")
    cps = SessionCheckpoints(CheckpointStore(tmp_path / "home", ws), "s", None)
    changed = _turn(cps, 1, ["old.txt", "never-written.txt", "sub/also-not.txt"], lambda: (ws / "old.txt").unlink())
    assert changed == ["old.txt"]
    entry = cps.entries[-1]
    assert entry.changes.deleted == ["old.txt"]


def test_known_writes_of_each_tool(tmp_path: Path, make_agent: MakeAgent, workspace: Path) -> None:
    agent = make_agent()
    ctx = agent.ctx
    outside = tmp_path / "elsewhere.txt"
    assert known_writes(WRITE_FILE, {"path": "d/x.txt", "content": ""}, ctx, False) == ["d/x.txt"]
    assert known_writes(WRITE_FILE, {"path": str(outside), "content": ""}, ctx, False) == []
    patch = "*** Begin Patch\n*** Add File: p.txt\n+x\n*** Update File: q.txt\n@@\n-a\n+b\n*** End Patch\n"
    assert sorted(known_writes(APPLY_PATCH, {"input": patch}, ctx, False) or []) == ["p.txt", "q.txt"]
    bash = agent.tools.get("bash")
    read = agent.tools.get("read_file")
    assert bash is not None and read is not None
    assert known_writes(bash, {"command": "true"}, ctx, False) is None
    assert known_writes(read, {"path": "x"}, ctx, False) == []
    assert known_writes(read, {"path": "x"}, ctx, True) is None  # a hook may run any command
    assert known_writes(WRITE_FILE, {"path": "x", "content": ""}, ctx, True) is None


def _store_index_written(agent: Agent) -> bool:
    cps = agent.checkpoints
    assert cps is not None
    if cps.warming is not None:
        cps.warming.join(30)
    return cps.store.index.exists()


def test_the_library_and_headless_start_storing_the_workspace_at_open(make_agent: MakeAgent, workspace: Path) -> None:
    (workspace / "big.txt").write_text("x" * 10_000)
    agent = make_agent()
    assert _store_index_written(agent)  # no turn yet: stored ahead, the first change waits for nothing more


@pytest.mark.parametrize(
    ("mode", "config", "warmed"),
    [
        ("plan", None, False),  # plan mode changes nothing: nothing to store ahead
        ("accept-edits", "[checkpoints]\nwarm_at_open = false\n", False),
        ("default", None, True),
    ],
)
def test_the_warm_up_follows_the_mode_and_the_setting(
    make_agent: MakeAgent, workspace: Path, tmp_path: Path, mode: str, config: str | None, warmed: bool
) -> None:
    (workspace / "f.txt").write_text("f\n")
    if config:
        (tmp_path / "home").mkdir(exist_ok=True)
        (tmp_path / "home" / "config.toml").write_text(config)
    agent = make_agent(permission_mode=mode)
    assert _store_index_written(agent) is warmed


def test_a_write_file_turn_through_the_agent_is_undone_exactly(
    server: FakeServer, make_agent: MakeAgent, workspace: Path
) -> None:
    (workspace / "keep.txt").write_text("k\n")
    server.add(
        Reply(tool_calls=[ToolCall("write_file", {"path": "out.txt", "content": "new\n"})]),
        Reply(tool_calls=[ToolCall("bash", {"command": "echo more >> keep.txt"})]),
        Reply("done"),
    )
    agent = make_agent(permission_mode="yolo")
    result = agent.run_sync("write and append")
    assert result.ok and result.changes is not None
    assert sorted(result.changes["added"]) == ["out.txt"] and result.changes["modified"] == ["keep.txt"]
    server.add(Reply(tool_calls=[ToolCall("write_file", {"path": "out.txt", "content": "newer\n"})]), Reply("done"))
    second = agent.run_sync("rewrite")
    assert second.changes == {"added": [], "modified": ["out.txt"], "deleted": []}
    asyncio.run(agent.rewind(files=True, conversation=False))
    assert (workspace / "out.txt").read_text() == "new\n"


def test_the_first_snapshot_builds_the_tree_git_builds(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    for i in range(600):
        d = ws / f"d{i % 7}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}.txt").write_bytes(bytes([i % 251]) * (i * 37 % 5000))
    (ws / "link").symlink_to("d0/f0.txt")
    store = CheckpointStore(tmp_path / "home", ws)
    snap = store.snapshot("first", "s/1")
    expected_index = tmp_path / "git-index"
    env = {
        "GIT_DIR": str(tmp_path / "ref.git"),
        "GIT_WORK_TREE": str(ws),
        "GIT_INDEX_FILE": str(expected_index),
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
    }
    subprocess.run(
        ["git", "init", "-q", "--bare", str(tmp_path / "ref.git")], check=True, env={"PATH": "/usr/bin:/bin"}
    )
    subprocess.run(["git", "add", "-A"], cwd=ws, check=True, env=env)
    tree = subprocess.run(["git", "write-tree"], cwd=ws, check=True, env=env, capture_output=True, text=True)
    assert store.git("rev-parse", f"{snap.id}^{{tree}}").decode().strip() == tree.stdout.strip()
    assert store.git("fsck", "--strict", "--no-dangling", check=False) == b""


def test_a_large_plain_first_snapshot_is_compacted_in_the_background(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kimicode.checkpoints import upkeep

    ws = tmp_path / "ws"
    ws.mkdir()
    text = b"".join(b"line %d of a source-like file, repeated enough to compress\n" % i for i in range(2000))
    for i in range(40):
        (ws / f"f{i}.txt").write_bytes(text + bytes([i]))
    monkeypatch.setattr(rawpack, "COMPRESS_BYTES", 0)  # everything stored plain, as past the budget
    monkeypatch.setattr(upkeep, "COMPACT_AFTER", 1)
    cps = SessionCheckpoints(CheckpointStore(tmp_path / "home", ws), "s", None)
    cps.begin_turn("t", 1)
    cps.before_change()
    assert cps.store.stored_plain == 0  # handed to the compaction, which runs detached
    plain = cps.store.size()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and cps.store.size() > plain // 2:
        time.sleep(0.2)
    assert cps.store.size() < plain // 2, (plain, cps.store.size())  # compressed (and delta'd) by the repack
    while len(list((cps.store.git_dir / "objects" / "pack").glob("*.pack"))) > 1 and time.monotonic() < deadline:
        time.sleep(0.1)  # the old pack goes once the new one is in place
    assert cps.store.git("fsck", "--strict", "--no-dangling", check=False) == b""
    (ws / "f1.txt").write_text("changed\n")
    entry = cps.end_turn()
    assert entry is not None and entry.changes.modified == ["f1.txt"]
    cps.restore(entry)
    assert (ws / "f1.txt").read_bytes() == text + b"\x01"


def test_checkpoints_du_shows_each_store(tmp_path: Path) -> None:
    from kimicode.checkpoints.upkeep import usage

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    cps = SessionCheckpoints(CheckpointStore(tmp_path / "home", ws), "sess1", None)
    cps.begin_turn("t", 1)
    cps.before_change()
    (ws / "a.txt").write_text("b\n")
    cps.end_turn()
    u = usage(cps.store.dir)
    assert u.workspace == str(ws.resolve()) and u.snapshots == 2 and u.sessions == 1
    assert u.bytes == cps.store.size() and u.packs >= 1


def test_a_turn_whose_caller_notes_nothing_walks_the_tree(tmp_path: Path) -> None:
    """An exploration applying a branch (or any caller not reporting its calls) keeps the full walk."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    cps = SessionCheckpoints(CheckpointStore(tmp_path / "home", ws), "s", None)
    cps.begin_turn("apply", 1)
    cps.before_change()
    (ws / "a.txt").write_text("applied\n")
    entry = cps.end_turn()
    assert entry is not None and entry.changes.modified == ["a.txt"]


def test_the_du_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from kimicode.cli.app import app

    home = tmp_path / "home"
    for name in ("one", "two"):
        ws = tmp_path / name
        ws.mkdir()
        (ws / "f.txt").write_text(name * 1000)
        CheckpointStore(home, ws).snapshot("s", f"{name}/1-before")
    monkeypatch.setenv("KIMICODE_HOME", str(home))
    here = CliRunner().invoke(app, ["checkpoints", "du", "--cwd", str(tmp_path / "one")])
    assert here.exit_code == 0 and str((tmp_path / "one").resolve()) in here.output
    assert str((tmp_path / "two").resolve()) not in here.output and "1 checkpoint(s) of 1 session(s)" in here.output
    every = CliRunner().invoke(app, ["checkpoints", "du", "--all"])
    assert every.exit_code == 0 and "in all" in every.output and str((tmp_path / "two").resolve()) in every.output
    none = CliRunner().invoke(app, ["checkpoints", "du", "--cwd", str(tmp_path)])
    assert none.exit_code == 0 and "no checkpoint store for" in none.output


def test_the_compaction_outlives_kimicodes_exit_and_other_leftovers_do_not(tmp_path: Path) -> None:
    """`reap_children` (run at exit) ends a command's leftovers but spares the store's compaction."""
    import os
    import signal

    from kimicode.procs import reap_children, spare

    leftover = subprocess.Popen(["sleep", "30"])
    compaction = subprocess.Popen(["sh", "-c", "sleep 30 & wait"], start_new_session=True)
    spare(compaction.pid)
    try:
        assert reap_children(grace=0.2) >= 1
        assert leftover.poll() is not None  # ended
        assert compaction.poll() is None  # still running, its own child too
    finally:
        os.killpg(compaction.pid, signal.SIGKILL)
        compaction.wait()
