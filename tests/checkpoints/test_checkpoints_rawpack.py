"""The first checkpoint writes git's pack, tree and index formats itself (kimicode/checkpoints/rawpack.py).

Each test builds the same workspace state with plain `git add -A` into a separate repository and
requires the very same tree ids, then lets git check the store (`fsck --strict`, `verify-pack`) and
the written index (`ls-files`, `diff-files`, later snapshots that rely on its stat data and cache tree).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kimicode.checkpoints import CheckpointStore, rawpack
from kimicode.checkpoints.store import BULK


def plain_git_tree(ws: Path, scratch: Path) -> str:
    """The tree git itself records for `ws` (a fresh repository, index and `add -A`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_DIR=str(scratch / "ref.git"),
        GIT_WORK_TREE=str(ws),
        GIT_INDEX_FILE=str(scratch / "ref-index"),
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
    )
    (scratch / "ref-index").unlink(missing_ok=True)
    if not (scratch / "ref.git").exists():
        subprocess.run(
            ["git", "init", "-q", "--bare", str(scratch / "ref.git")],
            check=True,
            env={k: v for k, v in env.items() if k != "GIT_WORK_TREE"},
        )
        subprocess.run(["git", "config", "core.bare", "false"], check=True, env=env)
    subprocess.run(["git", "add", "-A", "-f", "."], cwd=ws, check=True, env=env)
    ignored = subprocess.run(
        ["git", "ls-files", "-z", "-i", "-c", "--exclude-standard"], cwd=ws, env=env, check=True, capture_output=True
    ).stdout
    if ignored:  # `add -f .` took ignored files too: keep only what `ls-files --exclude-standard` would list
        subprocess.run(
            ["git", "rm", "-q", "--cached", "--pathspec-from-file=-", "--pathspec-file-nul"],
            cwd=ws,
            env=env,
            input=ignored,
            check=True,
        )
    return subprocess.run(
        ["git", "write-tree"], cwd=ws, env=env, check=True, capture_output=True, text=True
    ).stdout.strip()


def tree_of(store: CheckpointStore, commit: str) -> str:
    return store.git("rev-parse", f"{commit}^{{tree}}").decode().strip()


def hostile_tree(ws: Path) -> None:
    (ws / "plain.txt").write_text("hello\n")
    (ws / "empty").write_bytes(b"")
    (ws / "line\nbreak.txt").write_text("newline in the name\n")
    (ws / "ünïcødé ✓.md").write_text("unicode\n")
    (ws / os.fsdecode(b"latin1-\xe9.txt")).write_text("not utf-8\n")
    (ws / "tab\tand space .txt").write_text("x\n")
    (ws / "a.c").write_text("sorts before a/\n")
    (ws / "a").mkdir()
    (ws / "a" / "b").write_text("in a dir\n")
    (ws / "a-b").write_text("sorts after a/ in trees, before it in the index\n")
    deep = ws / "x" / "y" / "z"
    deep.mkdir(parents=True)
    (deep / "leaf.py").write_text("print(1)\n")
    (ws / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (ws / "run.sh").chmod(0o755)
    (ws / "user-x-only").write_text("u+x\n")
    (ws / "user-x-only").chmod(0o744)
    (ws / "group-x-only").write_text("g+x is not executable for git\n")
    (ws / "group-x-only").chmod(0o654)
    (ws / "same1.txt").write_text("duplicate\n")
    (ws / "same2.txt").write_text("duplicate\n")
    os.symlink("plain.txt", ws / "link-to-file")
    os.symlink("does/not/exist", ws / "dangling")
    os.symlink("/etc/passwd", ws / "outside")
    os.symlink("a", ws / "link-to-dir")
    (ws / ".gitignore").write_text("*.log\nbuild/\n")
    (ws / "noise.log").write_text("ignored\n")
    (ws / "build").mkdir()
    (ws / "build" / "out.o").write_bytes(b"\0ignored")
    (ws / "empty-dir").mkdir()
    for rel in ("pkg/sub1/f1", "pkg/sub1/f2", "pkg/sub2/f3", "pkg/top", "zz/f4"):  # left alone by later changes:
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)  # their cached trees are reused, counts and all
        (ws / rel).write_text(rel + "\n")


@pytest.mark.prepush
@pytest.mark.parametrize("compress", [True, False], ids=["compressed", "stored"])
def test_the_first_snapshot_is_the_tree_git_would_record(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compress: bool
) -> None:
    if not compress:  # past the compression budget objects go in as stored deflate blocks
        monkeypatch.setattr(rawpack, "COMPRESS_BYTES", 0)
    hostile_tree(workspace)
    (workspace / "big.bin").write_bytes(os.urandom(200_000))  # several 64 KB stored blocks
    store = CheckpointStore(tmp_path / "home", workspace)
    snap = store.snapshot("first", "s/1")
    assert tree_of(store, snap.id) == plain_git_tree(workspace, tmp_path)
    assert store.git("fsck", "--strict", "--no-dangling", check=False) == b""
    packs = list((store.git_dir / "objects" / "pack").glob("*.idx"))
    assert len(packs) == 1
    store.git("verify-pack", str(packs[0]))  # checksums, CRCs and offsets as git computes them
    assert not list((store.git_dir / "objects" / "pack").glob("tmp_*"))
    # The index: every stored file with the stat data git expects, nothing reported changed.
    listed = store.git("ls-files", "-z", "-s").split(b"\0")
    assert any(b"100755" in e and e.endswith(b"run.sh") for e in listed)
    assert any(b"100644" in e and e.endswith(b"group-x-only") for e in listed)
    assert any(b"120000" in e and e.endswith(b"dangling") for e in listed)
    assert store.git("diff-files", "--name-only") == b""
    assert store.git("ls-files", "-o", "--exclude-standard") == b""
    # The cache tree it carries is the right one: write-tree without touching a file gives the same tree.
    assert store.git("write-tree").decode().strip() == tree_of(store, snap.id)
    assert store.git("cat-file", "blob", f"{snap.id}:big.bin") == (workspace / "big.bin").read_bytes()
    assert store.snapshot("again").id != snap.id
    assert store.changes(snap.id, store.snapshot("again").id).paths() == []


def test_later_snapshots_over_the_written_index_see_every_kind_of_change(workspace: Path, tmp_path: Path) -> None:
    hostile_tree(workspace)
    store = CheckpointStore(tmp_path / "home", workspace)
    first = store.snapshot("first", "s/1")
    (workspace / "x" / "y" / "z" / "leaf.py").write_text("print(2)\n")  # deep change: cache tree invalidated
    (workspace / "a" / "b").unlink()
    (workspace / "a").rmdir()
    (workspace / "line\nbreak.txt").unlink()
    (workspace / "plain.txt").chmod(0o755)
    (workspace / "run.sh").chmod(0o644)
    (workspace / "empty").write_text("not empty any more\n")
    (workspace / "link-to-file").unlink()
    os.symlink("empty", workspace / "link-to-file")
    (workspace / "new dir").mkdir()
    (workspace / "new dir" / "ñew").write_text("new\n")
    second = store.snapshot("second", "s/2")
    assert tree_of(store, second.id) == plain_git_tree(workspace, tmp_path)
    ch = store.changes(first.id, second.id)
    assert ch.added == ["new dir/ñew"]
    assert sorted(ch.deleted) == ["a/b", "line\nbreak.txt"]
    assert sorted(ch.modified) == ["empty", "link-to-file", "plain.txt", "run.sh", "x/y/z/leaf.py"]
    assert store.git("fsck", "--strict", "--no-dangling", check=False) == b""


def test_a_file_rewritten_in_the_same_second_as_the_index_is_still_seen_as_changed(
    workspace: Path, tmp_path: Path
) -> None:
    """Racy git: same size, same mtime as recorded, written right after the index. git must compare the
    content (the entry's mtime is not older than the index file), and the next snapshot store it."""
    for i in range(BULK + 5):
        (workspace / f"f{i}.txt").write_text(f"version A {i:04d}\n")
    target = workspace / "f7.txt"
    store = CheckpointStore(tmp_path / "home", workspace)
    st = os.stat(target)
    first = store.snapshot("first")
    target.write_text("version B 0007\n")  # same length
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))  # same mtime as the index recorded
    second = store.snapshot("second")
    assert store.changes(first.id, second.id).modified == ["f7.txt"]
    assert store.git("show", f"{second.id}:f7.txt") == b"version B 0007\n"


def test_many_files_added_later_go_through_one_pack_and_the_kept_index(workspace: Path, tmp_path: Path) -> None:
    (workspace / "keep.txt").write_text("kept\n")
    store = CheckpointStore(tmp_path / "home", workspace)
    first = store.snapshot("first")
    for i in range(BULK * 2):
        d = workspace / "node_modules" / f"p{i % 7}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"m{i}.js").write_text(f"module.exports = {i % 50}\n")  # many identical blobs: stored once
    (workspace / "node_modules" / "p0" / "bin").write_text("#!/bin/sh\n")
    (workspace / "node_modules" / "p0" / "bin").chmod(0o755)
    packs_before = set((store.git_dir / "objects" / "pack").glob("*.pack"))
    second = store.snapshot("npm install")
    assert tree_of(store, second.id) == plain_git_tree(workspace, tmp_path)
    new_packs = set((store.git_dir / "objects" / "pack").glob("*.pack")) - packs_before
    assert len(new_packs) == 1
    assert len(store.changes(first.id, second.id).added) == BULK * 2 + 1
    assert store.git("diff-files", "--name-only") == b""  # stat data recorded: the next snapshot re-hashes nothing
    assert store.git("fsck", "--strict", "--no-dangling", check=False) == b""


@pytest.mark.parametrize("files", [0, 1])
def test_an_empty_or_tiny_workspace(workspace: Path, tmp_path: Path, files: int) -> None:
    for i in range(files):
        (workspace / f"f{i}").write_text("x")
    store = CheckpointStore(tmp_path / "home", workspace)
    snap = store.snapshot("first")
    assert tree_of(store, snap.id) == plain_git_tree(workspace, tmp_path)


_FIRST = """
import sys
from pathlib import Path
from kimicode.checkpoints import CheckpointStore, rawpack
print("go", flush=True)
CheckpointStore(Path(sys.argv[1]), Path(sys.argv[2])).snapshot("killed", "s/1")
print("done", flush=True)
"""


@pytest.mark.prepush
def test_kill_9_at_any_point_of_a_first_snapshot_leaves_a_store_that_works(workspace: Path, tmp_path: Path) -> None:
    """Killed while the pack, its index, the private index or the commit is being written: the next
    snapshot clears what was left half-done and records the workspace in full."""
    for i in range(4000):
        d = workspace / f"d{i // 100}"
        d.mkdir(exist_ok=True)
        (d / f"f{i}.txt").write_text(f"content {i}\n" * 200)
    killed = 0
    for n, delay in enumerate((0.05, 0.15, 0.3, 0.5, 0.8)):
        home = tmp_path / f"home{n}"
        proc = subprocess.Popen(
            [sys.executable, "-c", _FIRST, str(home), str(workspace)], stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None and proc.stdout.readline().strip() == "go"
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert proc.stdout.read().strip() in ("", "done")
        store = CheckpointStore(home, workspace)
        killed += not (store.dir / "index").exists()
        snap = store.snapshot("after the kill")
        assert len(store.git("ls-tree", "-r", "--name-only", snap.id).split()) == 4000
        assert store.git("fsck", "--strict", "--no-dangling", check=False) == b""
        assert not list(store.git_dir.rglob("tmp_*")) and not (store.dir / "index.lock").exists()
        assert store.git("diff-files", "--name-only") == b""
    assert killed, "no run was killed before the snapshot finished: the tree is too small for this machine"


@pytest.mark.prepush
def test_a_snapshot_asked_for_while_warming_waits_and_records_the_workspace_then(
    workspace: Path, tmp_path: Path
) -> None:
    from kimicode.checkpoints.session import SessionCheckpoints

    for i in range(2000):
        (workspace / f"f{i}.txt").write_text(f"{i}\n" * 100)
    cps = SessionCheckpoints(CheckpointStore(tmp_path / "home", workspace), "s", None)
    thread = cps.warm()
    assert thread is not None
    (workspace / "late.txt").write_text("written while the warm-up runs\n")
    cps.begin_turn("go", 1)
    assert cps.before_change() is None  # waits for the store's lock, then takes the turn's checkpoint
    thread.join()
    assert cps.current is not None and cps.current.before
    assert tree_of(cps.store, cps.current.before) == plain_git_tree(workspace, tmp_path)
    assert cps.warm() is None  # the store is ready: nothing more to warm


def test_nested_repositories_are_left_to_their_own_git(workspace: Path, tmp_path: Path) -> None:
    """One with a commit, one without (`git add` of that one fails): neither is stored nor breaks a snapshot."""
    (workspace / "top.txt").write_text("top\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_AUTHOR_NAME="u", GIT_AUTHOR_EMAIL="u@x", GIT_COMMITTER_NAME="u", GIT_COMMITTER_EMAIL="u@x")
    for name, commit in (("sub", True), ("fresh", False)):
        subprocess.run(["git", "init", "-q", name], cwd=workspace, check=True, env=env)
        (workspace / name / "f.txt").write_text("inside\n")
        if commit:
            subprocess.run(["git", "add", "-A"], cwd=workspace / name, check=True, env=env)
            subprocess.run(["git", "commit", "-qm", "i"], cwd=workspace / name, check=True, env=env)
    store = CheckpointStore(tmp_path / "home", workspace)
    first = store.snapshot("first")
    (workspace / "top.txt").write_text("changed\n")
    second = store.snapshot("second")
    assert store.git("ls-tree", "-r", "--name-only", second.id).decode().split() == ["top.txt"]
    assert store.changes(first.id, second.id).as_dict() == {"added": [], "modified": ["top.txt"], "deleted": []}
