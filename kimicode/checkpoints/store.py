"""A private git object store of workspace snapshots, outside the user's repository.

One store per workspace lives in `<KIMICODE_HOME>/checkpoints/<hash of the path>/`: a bare git
directory (`git/`) and a private index (`index`). Every git command runs with `GIT_DIR`,
`GIT_WORK_TREE` and `GIT_INDEX_FILE` pointing there, so the user's `.git` (index, HEAD, branches,
stash, hooks, config) is never read for writing nor changed, and non-git directories work the same.
The index is kept between snapshots, so git re-hashes only the files whose stat data changed.

A snapshot honours `.gitignore` files and the user's `.git/info/exclude` (copied into the store's own
exclude file), and skips files above a size limit (reported in `Snapshot.skipped`). Objects are
shared by all sessions of the workspace; each snapshot is kept reachable by a ref
`refs/kimicode/<session>/<n>` so `git gc` (run by `prune`) drops only what no session needs.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from kimicode.checkpoints import rawpack

DEFAULT_MAX_FILE_BYTES = 10 * 1024 * 1024
BULK = 200
"""More new or changed files than this go into one pack written by kimicode (see `_bulk_add`)."""
FIRST_LEVEL = 0
"""zlib level of the packs written by kimicode."""


class CheckpointError(RuntimeError):
    """A snapshot or restore that could not be done (disk full, store unwritable, git missing...)."""


@dataclass(frozen=True)
class Snapshot:
    """One checkpoint: a commit in the private store, and the files left out of it."""

    id: str
    skipped: tuple[str, ...] = ()
    """Files above the size limit, not stored (a restore leaves them as they are)."""


@dataclass
class Changes:
    """Files added, modified and deleted between two snapshots (paths relative to the workspace)."""

    added: list[str] = field(default_factory=list)
    modified: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)

    def paths(self) -> list[str]:
        return sorted({*self.added, *self.modified, *self.deleted})

    def as_dict(self) -> dict[str, list[str]]:
        return {"added": list(self.added), "modified": list(self.modified), "deleted": list(self.deleted)}

    def __bool__(self) -> bool:
        return bool(self.added or self.modified or self.deleted)


def store_dir(home: Path, workspace: Path) -> Path:
    """Where the store of `workspace` lives (one per resolved workspace path)."""
    digest = hashlib.sha256(str(workspace.resolve()).encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return home / "checkpoints" / digest


class CheckpointStore:
    """Snapshots of one workspace; see the module docstring."""

    def __init__(self, home: Path, workspace: Path, *, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES) -> None:
        self.workspace = workspace.resolve()
        self.dir = store_dir(home.expanduser().resolve(), self.workspace)  # absolute: git runs in the workspace
        self.git_dir = self.dir / "git"
        self.index = self.dir / "index"
        self.journal = self.dir / "restore.json"
        self.max_file_bytes = max_file_bytes
        self._lock_fd: int | None = None
        """The held lock, passed to every git child: a git still running after kimicode was killed keeps
        the store locked until it exits, so recovery never races it."""

    # -- plumbing ---------------------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env.update(
            GIT_DIR=str(self.git_dir),
            GIT_WORK_TREE=str(self.workspace),
            GIT_INDEX_FILE=str(self.index),
            GIT_CONFIG_NOSYSTEM="1",
            GIT_CONFIG_GLOBAL=os.devnull,  # the user's global hooks/filters/autocrlf must not apply
            GIT_AUTHOR_NAME="kimicode",
            GIT_AUTHOR_EMAIL="kimicode@localhost",
            GIT_COMMITTER_NAME="kimicode",
            GIT_COMMITTER_EMAIL="kimicode@localhost",
            GIT_TERMINAL_PROMPT="0",
        )
        return env

    def git(self, *args: str, input: bytes | None = None, check: bool = True) -> bytes:
        """Run one git command against the private store; raises CheckpointError with git's message."""
        try:
            proc = subprocess.run(
                ["git", *args], cwd=self.workspace, env=self._env(), input=input, capture_output=True, check=False,
                pass_fds=self._held(),
            )
        except OSError as exc:
            raise CheckpointError(f"cannot run git: {exc}") from exc
        if check and proc.returncode != 0:
            msg = proc.stderr.decode("utf-8", "replace").strip().splitlines()
            raise CheckpointError(f"git {args[0]} failed: {msg[-1] if msg else proc.returncode}")
        return proc.stdout

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the store's lock (sessions of one workspace share the store); clears a stale index.lock."""
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            fh = open(self.dir / "lock", "a")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise CheckpointError(f"cannot create the checkpoint store {self.dir}: {exc.strerror}") from exc
        try:
            fcntl.flock(fh, fcntl.LOCK_EX)
            self._lock_fd = fh.fileno()
            stale = self.dir / "index.lock"
            if stale.exists():  # left by a process killed mid-snapshot: we hold the lock, so nobody uses it
                stale.unlink()
            for tmp in (self.git_dir / "objects" / "pack").glob("tmp_kc_pack_*"):  # a pack cut short
                tmp.unlink(missing_ok=True)
            yield
        finally:
            self._lock_fd = None
            fh.close()

    def _held(self) -> tuple[int, ...]:
        return (self._lock_fd,) if self._lock_fd is not None else ()

    def _init(self) -> None:
        if not (self.git_dir / "HEAD").exists():
            env = {k: v for k, v in self._env().items() if k not in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")}
            try:
                subprocess.run(["git", "init", "--bare", "--quiet", str(self.git_dir)], env=env, check=True,
                               capture_output=True)
            except (OSError, subprocess.CalledProcessError) as exc:
                raise CheckpointError(f"cannot create the checkpoint store in {self.git_dir}: {exc}") from exc
            self.git("config", "core.autocrlf", "false")
            self.git("config", "gc.auto", "0")
            self.git("config", "core.looseCompression", "1")  # hashing speed matters more than size here
            self.git("config", "core.bare", "false")
        info = self.git_dir / "info"
        info.mkdir(exist_ok=True)
        rules = ""
        home = self.dir.parent.parent
        if home.is_relative_to(self.workspace):  # KIMICODE_HOME inside the workspace: never store the store
            rules += "/" + _glob_escape(str(home.relative_to(self.workspace))) + "/\n"
        user_exclude = self.workspace / ".git" / "info" / "exclude"
        if user_exclude.is_file():
            rules += user_exclude.read_text("utf-8", "replace")
        target = info / "exclude"
        if not target.exists() or target.read_text("utf-8", "replace") != rules:
            target.write_text(rules, "utf-8")

    # -- snapshots --------------------------------------------------------------------------------

    def snapshot(self, label: str, ref: str | None = None) -> Snapshot:
        """Record the workspace now as a commit; `ref` (e.g. `session/3-before`) keeps it alive."""
        with self.locked():
            self._init()
            return self._snapshot(label, ref)

    def _snapshot(self, label: str, ref: str | None) -> Snapshot:
        listed = self.git("ls-files", "-z", "--modified", "--others", "--deleted", "--exclude-standard")
        candidates = sorted({p for p in listed.decode("utf-8", "surrogateescape").split("\0") if p})
        add: list[str] = []
        drop: list[str] = []
        skipped: list[str] = []
        for rel in candidates:
            try:
                st = os.lstat(self.workspace / rel)
            except FileNotFoundError:
                add.append(rel)  # deleted: `add -A` records the removal
                continue
            except OSError:
                continue
            if st.st_size > self.max_file_bytes and not _is_link(st.st_mode):
                skipped.append(rel)
                drop.append(rel)
            else:
                add.append(rel)
        if not self.index.exists():
            return self._first(label, ref, add, skipped)
        if drop:
            self.git("rm", "--cached", "-q", "--ignore-unmatch", "--pathspec-from-file=-", "--pathspec-file-nul",
                     input=_nul(drop))
        if len(add) > BULK:
            self._bulk_add(add)
        elif add:
            self.git("add", "-A", "-f", "--pathspec-from-file=-", "--pathspec-file-nul", input=_nul(add))
        tree = self.git("write-tree").decode().strip()
        return self._commit(tree, label, ref, skipped)

    def _first(self, label: str, ref: str | None, paths: Sequence[str], skipped: list[str]) -> Snapshot:
        """The first snapshot into an empty index: every file goes into one pack written here, the trees
        are built from the same list and the index is written from the stat data already taken (see
        rawpack), so no git command reads the workspace again. Only the commit and its ref go
        through git."""
        pack = rawpack.PackWriter(self.git_dir / "objects" / "pack", FIRST_LEVEL)
        try:
            entries, _ = rawpack.add_files(pack, self.workspace, paths)
            entries.sort(key=lambda e: e.path)
            tree, tree_ext = rawpack.add_trees(pack, entries)
            pack.finish()
            rawpack.write_index(self.index, entries, tree_ext)
        except BaseException:
            pack.abort()
            raise
        return self._commit(tree.hex(), label, ref, skipped)

    def _commit(self, tree: str, label: str, ref: str | None, skipped: Sequence[str]) -> Snapshot:
        message = f"{label}\n\nworkspace: {self.workspace}\n"
        commit = self.git("commit-tree", tree, "-m", message).decode().strip()
        if ref:
            self.git("update-ref", f"refs/kimicode/{ref}", commit)
        return Snapshot(commit, tuple(skipped))

    def _bulk_add(self, paths: Sequence[str]) -> None:
        """Many new or changed files (an `npm install`, a checkout): their blobs go into one pack (see
        `_first`) instead of one loose object file each, then into the kept index, whose stat data
        `update-index --refresh` records (only these entries are new, the others are up to date)."""
        pack = rawpack.PackWriter(self.git_dir / "objects" / "pack", FIRST_LEVEL)
        try:
            entries, gone = rawpack.add_files(pack, self.workspace, paths)
            pack.finish()
        except BaseException:
            pack.abort()
            raise
        info = b"".join(b"%o %s\t%s\0" % (e.mode, e.sha.hex().encode(), e.path) for e in entries)
        info += b"".join(b"0 " + b"0" * 40 + b"\t" + rel.encode("utf-8", "surrogateescape") + b"\0" for rel in gone)
        self.git("update-index", "-z", "--index-info", input=info)
        self.git("update-index", "-q", "--refresh", check=False)  # stat data, so the next snapshot is quick

    def has(self, commit: str) -> bool:
        """Whether `commit` is a snapshot in this store."""
        if not commit or not (self.git_dir / "HEAD").exists():
            return False
        try:
            self.git("cat-file", "-e", f"{commit}^{{commit}}")
        except CheckpointError:
            return False
        return True

    def changes(self, old: str, new: str) -> Changes:
        """What changed from snapshot `old` to snapshot `new`."""
        out = self.git("diff-tree", "-r", "-z", "--no-renames", "--name-status", old, new)
        parts = [p for p in out.decode("utf-8", "surrogateescape").split("\0") if p]
        result = Changes()
        for status, path in zip(parts[0::2], parts[1::2], strict=False):
            {"A": result.added, "D": result.deleted}.get(status[:1], result.modified).append(path)
        return result

    def diff(self, old: str, new: str, paths: Sequence[str] = (), color: bool = False) -> str:
        """A unified diff between two snapshots (text; binary files are named, not dumped)."""
        args = ["diff", "--no-renames", f"--color={'always' if color else 'never'}", old, new, "--", *paths]
        return self.git(*args).decode("utf-8", "replace")

    # -- restore ----------------------------------------------------------------------------------

    def restore(self, target: str, paths: Sequence[str], label: str, ref: str | None = None) -> Snapshot:
        """Put each of `paths` back as it is in snapshot `target` (deleting those it lacks).

        The workspace is snapshotted first (the returned Snapshot), so the restore can be undone. A
        journal names the target and paths until the restore is complete: a restore cut short by a
        crash is finished by `recover()` on the next start.
        """
        with self.locked():
            self._init()
            before = self._snapshot(label, ref)
            self._write_journal(target, paths)
            self._apply(target, paths)
            self.journal.unlink(missing_ok=True)
            return before

    def _write_journal(self, target: str, paths: Sequence[str]) -> None:
        tmp = self.journal.with_suffix(".tmp")
        tmp.write_text(json.dumps({"target": target, "paths": list(paths), "ts": time.time()}), "utf-8")
        os.replace(tmp, self.journal)

    def _apply(self, target: str, paths: Sequence[str]) -> None:
        listed = self.git("ls-tree", "-r", "-z", "--name-only", target, "--", *paths) if paths else b""
        present = {p for p in listed.decode("utf-8", "surrogateescape").split("\0") if p}
        for rel in sorted(set(paths) - present, key=lambda p: -p.count("/")):
            _remove(self.workspace, rel)
        for rel in sorted(present):  # a directory now where a file must go back
            _clear_way(self.workspace, rel)
        if present:
            self.git("checkout", "-f", target, "--pathspec-from-file=-", "--pathspec-file-nul",
                     input=_nul(sorted(present)))

    def recover(self) -> str | None:
        """Finish a restore cut short by a crash; returns a sentence saying so, or None."""
        if not self.journal.exists():
            return None
        with self.locked():
            try:
                data = json.loads(self.journal.read_text("utf-8"))
                target, paths = str(data["target"]), [str(p) for p in data["paths"]]
            except (OSError, ValueError, KeyError, TypeError):
                self.journal.unlink(missing_ok=True)
                return "a checkpoint restore was interrupted and its journal is unreadable; check the workspace"
            self._apply(target, paths)
            self.journal.unlink(missing_ok=True)
        return f"finished a checkpoint restore that was interrupted ({len(paths)} file(s))"

    # -- housekeeping -----------------------------------------------------------------------------

    def drop_session(self, session_id: str) -> None:
        """Forget a session's checkpoints (its refs); objects go at the next `prune`."""
        if not (self.git_dir / "HEAD").exists():
            return
        with self.locked():
            out = self.git("for-each-ref", "--format=%(refname)", f"refs/kimicode/{session_id}/")
            for ref in out.decode().split():
                self.git("update-ref", "-d", ref)

    def prune(self, max_age_days: float | None = None, max_mb: float | None = None) -> list[str]:
        """Drop refs older than `max_age_days`, then (while the store is over `max_mb`) the oldest
        quarter of the rest, and let git remove unreachable objects. Returns the refs dropped."""
        if not (self.git_dir / "HEAD").exists():
            return []
        dropped: list[str] = []
        with self.locked():
            refs = self._refs()
            if max_age_days is not None:
                cutoff = time.time() - max_age_days * 86400
                old = [name for name, when in refs if when < cutoff]
                self._drop(old)
                dropped += old
                refs = [r for r in refs if r[0] not in old]
            self._gc()
            for _ in range(4):
                if max_mb is None or self.size() <= max_mb * 1e6 or not refs:
                    break
                oldest = [name for name, _ in refs[: max(1, len(refs) // 4)]]
                self._drop(oldest)
                dropped += oldest
                refs = refs[len(oldest):]
                self._gc()
        return dropped

    def _refs(self) -> list[tuple[str, int]]:
        """The snapshots' refs, oldest first."""
        out = self.git("for-each-ref", "--format=%(refname) %(committerdate:unix)", "refs/kimicode/")
        refs = []
        for line in out.decode().splitlines():
            name, _, when = line.rpartition(" ")
            refs.append((name, int(when) if when.isdigit() else 0))
        return sorted(refs, key=lambda r: r[1])

    def _drop(self, refs: Sequence[str]) -> None:
        if refs:
            self.git("update-ref", "--stdin", input="".join(f"delete {r}\n" for r in refs).encode())

    def _gc(self) -> None:
        self.git("reflog", "expire", "--expire=now", "--all", check=False)
        self.git("gc", "--prune=now", "--quiet", check=False)

    def size(self) -> int:
        """Bytes used by the store on disk."""
        return sum(p.stat().st_size for p in self.dir.rglob("*") if p.is_file())


def _glob_escape(path: str) -> str:
    return "".join("\\" + c if c in "*?[]\\!# " else c for c in path)


def _nul(paths: Sequence[str]) -> bytes:
    return b"".join(p.encode("utf-8", "surrogateescape") + b"\0" for p in paths)


def _is_link(mode: int) -> bool:
    import stat

    return stat.S_ISLNK(mode)


def _remove(root: Path, rel: str) -> None:
    """Delete a file the target snapshot lacks, and its parent directories left empty."""
    path = root / rel
    try:
        if path.is_dir() and not path.is_symlink():
            return  # a directory now holds other files: leave it
        path.unlink()
    except FileNotFoundError:
        pass
    parent = path.parent
    while parent != root and parent.is_relative_to(root):
        try:
            parent.rmdir()
        except OSError:
            break
        parent = parent.parent


def _clear_way(root: Path, rel: str) -> None:
    """Before writing `rel` back: a file or link where one of its parent directories must be goes."""
    parts = Path(rel).parts
    for i in range(1, len(parts)):
        p = root.joinpath(*parts[:i])
        if p.is_symlink() or p.is_file():
            p.unlink()
    target = root / rel
    if target.is_dir() and not target.is_symlink():  # only reached when allowed (see SessionCheckpoints.plan)
        shutil.rmtree(target)
