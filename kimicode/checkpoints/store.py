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

import copy
import errno
import fcntl
import hashlib
import json
import os
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from kimicode import errors
from kimicode.checkpoints import rawpack
from kimicode.config.choices import DEFAULT_CHECKPOINT_MAX_FILE_MB
from kimicode.gitrun import git_env
from kimicode.safeio import private_dirs, private_open, private_write

DEFAULT_MAX_FILE_BYTES = int(DEFAULT_CHECKPOINT_MAX_FILE_MB * 1024 * 1024)
BULK = 200
STAGING = ".kimicode-restore-"
"""Prefix of the hidden directory a restore stages files in, inside the workspace (never stored)."""
"""More new or changed files than this go into one pack written by kimicode (see `_bulk_add`)."""


CheckpointError = errors.CheckpointError
"""A snapshot or restore that could not be done (disk full, store unwritable, git missing...): a
`kimicode.KimicodeError` (and, as before, a RuntimeError)."""


class NothingRestored(CheckpointError):
    """A restore that failed before changing any file (the files could not all be staged)."""


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
        self.stored_plain = 0
        """Bytes this object stored uncompressed in packs (the first snapshot, a bulk add): a compaction
        is worth starting when it is large (`SessionCheckpoints` starts `upkeep.compact_detached`)."""
        self._lock_fd: int | None = None
        """The held lock, passed to every git child: a git still running after kimicode was killed keeps
        the store locked until it exits, so recovery never races it."""

    # -- plumbing ---------------------------------------------------------------------------------

    def detached(self) -> CheckpointStore:
        """A copy of this store that holds no lock handle (for another thread: git children must not inherit
        a lock this one holds)."""
        twin = copy.copy(self)
        twin._lock_fd = None
        return twin

    def git_env(self) -> dict[str, str]:
        return git_env(
            GIT_DIR=str(self.git_dir),
            GIT_WORK_TREE=str(self.workspace),
            GIT_INDEX_FILE=str(self.index),
            GIT_CONFIG_NOSYSTEM="1",
            GIT_CONFIG_GLOBAL=os.devnull,  # the user's global hooks/filters/autocrlf must not apply
            GIT_AUTHOR_NAME="kimicode",
            GIT_AUTHOR_EMAIL="kimicode@localhost",
            GIT_COMMITTER_NAME="kimicode",
            GIT_COMMITTER_EMAIL="kimicode@localhost",
        )

    def git(self, *args: str, input: bytes | None = None, check: bool = True) -> bytes:
        """Run one git command against the private store; raises CheckpointError with git's message."""
        try:
            proc = subprocess.run(
                ["git", *args],
                cwd=self.workspace,
                env=self.git_env(),
                input=input,
                capture_output=True,
                check=False,
                pass_fds=self._held(),
            )
        except OSError as exc:
            raise CheckpointError(f"cannot run git: {exc}") from exc
        if check and proc.returncode != 0:
            if _is_full(OSError(proc.stderr.decode("utf-8", "replace"))):
                raise CheckpointError(self._full())
            msg = proc.stderr.decode("utf-8", "replace").strip().splitlines()
            raise CheckpointError(f"git {args[0]} failed: {msg[-1] if msg else proc.returncode}")
        return proc.stdout

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the store's lock (sessions of one workspace share the store); clears a stale index.lock."""
        try:
            private_dirs(self.dir, top=self.dir.parent.parent)  # KIMICODE_HOME/checkpoints/<store>: 0700
            fh = private_open(self.dir / "lock", "a")
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
            env = {k: v for k, v in self.git_env().items() if k not in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")}
            try:
                subprocess.run(
                    ["git", "init", "--bare", "--quiet", "--shared=0600", str(self.git_dir)],
                    env=env,
                    check=True,
                    capture_output=True,
                )  # --shared=0600: git keeps its files private
            except (OSError, subprocess.CalledProcessError) as exc:
                raise CheckpointError(f"cannot create the checkpoint store in {self.git_dir}: {exc}") from exc
            self.git("config", "core.autocrlf", "false")
            self.git("config", "gc.auto", "0")
            self.git("config", "core.looseCompression", "1")  # hashing speed matters more than size here
            self.git("config", "core.bare", "false")
        info = self.git_dir / "info"
        info.mkdir(exist_ok=True)
        rules = f"/{STAGING}*/\n"
        home = self.dir.parent.parent
        if home.is_relative_to(self.workspace):  # KIMICODE_HOME inside the workspace: never store the store
            rules += "/" + _glob_escape(str(home.relative_to(self.workspace))) + "/\n"
        user_exclude = self.workspace / ".git" / "info" / "exclude"
        if user_exclude.is_file():
            rules += user_exclude.read_text("utf-8", "replace")
        target = info / "exclude"
        if not target.exists() or target.read_text("utf-8", "replace") != rules:
            private_write(target, rules)

    # -- snapshots --------------------------------------------------------------------------------

    def snapshot(self, label: str, ref: str | None = None, *, only: Sequence[str] | None = None) -> Snapshot:
        """Record the workspace now as a commit; `ref` (e.g. `session/3-before`) keeps it alive. `only`:
        the paths that can have changed since the last snapshot (the files a turn's own edit tools wrote):
        the tree is not walked, the rest is recorded as the index has it (see `SessionCheckpoints.note`)."""
        with self.locked():
            return self._snapshot_locked(label, ref, only)

    def _snapshot_locked(self, label: str, ref: str | None, only: Sequence[str] | None = None) -> Snapshot:
        """`snapshot` with the lock held, tried twice unless the disk is full: the automatic gc
        (upkeep.py) may remove an empty objects/xx directory git has just made for a new object."""
        for attempt in (1, 2):
            try:
                self._init()
                return self._snapshot(label, ref, only)
            except (OSError, CheckpointError) as exc:
                self._clean_failed()
                full = _is_full(exc) or str(exc) == self._full()
                if attempt == 1 and not full:
                    continue
                if isinstance(exc, CheckpointError):
                    raise
                raise CheckpointError(self._full() if full else f"{exc.strerror or exc}") from exc
        raise AssertionError("unreachable")

    def prepare(self) -> bool:
        """Store the workspace into an empty store ahead of the first snapshot (started in the background
        when a terminal session opens): that snapshot then only records what changed since. Returns
        whether there was anything to do; a failure (a full disk) is left for the snapshot to report."""
        with self.locked():
            try:
                self._init()
                if self.index.exists():
                    return False
                self._first(self._listing()[0])
                return True
            except (OSError, CheckpointError) as exc:
                self._clean_failed()
                raise CheckpointError(self._full() if _is_full(exc) else str(exc)) from exc

    def seed(self, source: CheckpointStore, commit: str, *, index: Path | None = None) -> None:
        """Fill this store's (empty) workspace with snapshot `commit` of `source`, borrowing `source`'s
        objects (git alternates) instead of copying them: each file is written once, with its stat data
        in this store's index, so this store's first snapshot only hashes what changed since. For a
        branch's new worktree (kimicode/branches/trees.py); `source` must keep `commit` referenced.
        With `index` (an index of `commit` whose stat data the workspace's files already match: an
        overlay over them, kimicode/branches/overlay.py), that index is copied and no file is written."""
        with self.locked():
            self._init()
            private_write(self.git_dir / "objects" / "info" / "alternates", f"{source.git_dir / 'objects'}\n")
            if index is not None:
                private_write(self.index, index.read_bytes())
                return
            self.git("read-tree", commit)
            self.git("checkout-index", "-a", "-f", "-u")

    def _full(self) -> str:
        return f"no space left on the disk holding the checkpoint store ({self.dir})"

    def _clean_failed(self) -> None:
        """After a failed snapshot (a full disk): the temporary files git or kimicode left in the store."""
        objects = self.git_dir / "objects"
        for tmp in [*objects.glob("pack/tmp_*"), *objects.glob("??/tmp_obj_*"), self.dir / "index.lock"]:
            try:
                tmp.unlink()
            except OSError:
                pass

    def _listing(self, only: Sequence[str] | None = None) -> tuple[list[str], list[str], list[str]]:
        """Paths to (re)store, paths to drop from the index and the files skipped for their size: of the
        whole tree, or of `only` (a missing one is dropped: `rm --cached` ignores what was never stored)."""
        if only is None:
            listed = self.git("ls-files", "-z", "--modified", "--others", "--deleted", "--exclude-standard")
            candidates = sorted({p for p in listed.decode("utf-8", "surrogateescape").split("\0") if p})
        else:
            candidates = sorted(set(only))
        add: list[str] = []
        drop: list[str] = []
        skipped: list[str] = []
        for rel in candidates:
            if _beyond_link(self.workspace, rel):  # `d/f` once, and `d` is now a link: drop the old entry
                drop.append(rel)
                continue
            try:
                st = os.lstat(self.workspace / rel)
            except FileNotFoundError:
                (add if only is None else drop).append(rel)  # deleted: `add -A` records the removal
                continue
            except OSError:
                continue
            if rel.endswith("/") and stat.S_ISDIR(st.st_mode):  # a nested repository: its own git's business
                continue
            if st.st_size > self.max_file_bytes and not _is_link(st.st_mode):
                skipped.append(rel)
                drop.append(rel)
            else:
                add.append(rel)
        return add, drop, skipped

    def _snapshot(self, label: str, ref: str | None, only: Sequence[str] | None = None) -> Snapshot:
        if not self.index.exists():
            add, _, skipped = self._listing()
            return self._commit(self._first(add), label, ref, skipped)
        add, drop, skipped = self._listing(only)
        if drop:
            self.git(
                "rm",
                "--cached",
                "-q",
                "-f",
                "--ignore-unmatch",
                "--pathspec-from-file=-",
                "--pathspec-file-nul",
                input=_nul(drop),
            )
        if len(add) > BULK:
            self._bulk_add(add)
        elif add:
            self.git("add", "-A", "-f", "--pathspec-from-file=-", "--pathspec-file-nul", input=_nul(add))
        tree = self.git("write-tree").decode().strip()
        return self._commit(tree, label, ref, skipped)

    def _first(self, paths: Sequence[str]) -> str:
        """The first snapshot into an empty index: every file goes into one pack written here, the trees
        are built from the same list and the index is written from the stat data already taken (see
        rawpack), so no git command reads the workspace again. Only the commit and its ref go
        through git. Returns the tree id."""
        pack = rawpack.PackWriter(self.git_dir / "objects" / "pack")
        try:
            entries, _ = rawpack.add_files(pack, self.workspace, paths)
            entries.sort(key=lambda e: e.path)
            tree, tree_ext = rawpack.add_trees(pack, entries)
            pack.finish()
            self.stored_plain += pack.plain_bytes
            rawpack.write_index(self.index, entries, tree_ext)
        except BaseException:
            pack.abort()
            raise
        return tree.hex()

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
        pack = rawpack.PackWriter(self.git_dir / "objects" / "pack")
        try:
            entries, gone = rawpack.add_files(pack, self.workspace, paths)
            pack.finish()
            self.stored_plain += pack.plain_bytes
            info = b"".join(b"%o %s\t%s\0" % (e.mode, e.sha.hex().encode(), e.path) for e in entries)
            info += b"".join(b"0 " + b"0" * 40 + b"\t" + p.encode("utf-8", "surrogateescape") + b"\0" for p in gone)
            self.git("update-index", "-z", "--index-info", input=info)
        except BaseException:
            pack.abort()
            raise
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
            before = self._snapshot_locked(label, ref)
            self._write_journal(target, paths)
            try:
                self._apply(target, paths)
            except NothingRestored:
                self.journal.unlink(missing_ok=True)  # nothing to finish on the next start
                raise
            self.journal.unlink(missing_ok=True)
            return before

    def _write_journal(self, target: str, paths: Sequence[str]) -> None:
        tmp = self.journal.with_suffix(".tmp")
        private_write(tmp, json.dumps({"target": target, "paths": list(paths), "ts": time.time()}))
        os.replace(tmp, self.journal)

    def _apply(self, target: str, paths: Sequence[str]) -> None:
        """Stage the files of `target` first, then change the workspace: written into a hidden directory
        inside the workspace (same file system, so a rename moves them), then renamed into place. A
        failure while staging (a full disk) leaves the workspace exactly as it was."""
        wanted = set(paths)
        listed = self.git("ls-tree", "-r", "-z", target) if paths else b""
        present: dict[str, tuple[str, str]] = {}  # path -> (mode, blob id)
        for item in listed.split(b"\0"):
            meta, _, name = item.partition(b"\t")
            rel = name.decode("utf-8", "surrogateescape")
            if rel in wanted:
                mode, _, sha = meta.decode().split(" ")
                present[rel] = (mode, sha)
        staging = Path(tempfile.mkdtemp(prefix=STAGING, dir=self.workspace)) if present else None
        try:
            staged = self._stage(present, staging) if staging is not None else {}
        except (OSError, CheckpointError) as exc:
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)
            reason = "the disk is full" if _is_full(exc) else str(exc)
            raise NothingRestored(
                f"could not restore the files ({reason}); nothing in the workspace was changed"
            ) from exc
        for rel in sorted(wanted - set(present), key=lambda p: -p.count("/")):
            _remove(self.workspace, rel)
        for rel in sorted(present):  # a directory now where a file must go back
            _clear_way(self.workspace, rel)
            dest = self.workspace / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staged[rel], dest)
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)

    def _stage(self, files: dict[str, tuple[str, str]], staging: Path) -> dict[str, Path]:
        """Write each file's content from the store into `staging` (one `cat-file --batch`)."""
        out: dict[str, Path] = {}
        try:
            proc = subprocess.Popen(
                ["git", "cat-file", "--batch"],
                cwd=self.workspace,
                env=self.git_env(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                pass_fds=self._held(),
            )
        except OSError as exc:
            raise CheckpointError(f"cannot run git: {exc}") from exc
        assert proc.stdin is not None and proc.stdout is not None
        try:
            for n, (rel, (mode, sha)) in enumerate(sorted(files.items())):
                proc.stdin.write(sha.encode() + b"\n")
                proc.stdin.flush()
                head = proc.stdout.readline().split()
                if len(head) != 3 or head[1] != b"blob":
                    raise CheckpointError(f"the store lacks the content of {rel}")
                data = proc.stdout.read(int(head[2]) + 1)[:-1]
                path = staging / str(n)
                if mode == "120000":
                    os.symlink(os.fsdecode(data), path)
                else:
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o777 if mode == "100755" else 0o666)
                    with os.fdopen(fd, "wb") as fh:
                        fh.write(data)
                out[rel] = path
        finally:
            proc.stdin.close()
            proc.stdout.close()
            proc.wait()
        return out

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
            for left in self.workspace.glob(STAGING + "*"):  # files staged by the interrupted restore
                shutil.rmtree(left, ignore_errors=True)
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
            refs = self.snapshot_refs()
            if max_age_days is not None:
                cutoff = time.time() - max_age_days * 86400
                old = [name for name, when in refs if when < cutoff]
                self.drop_refs(old)
                dropped += old
                refs = [r for r in refs if r[0] not in old]
            self._gc()
            for _ in range(4):
                if max_mb is None or self.size() <= max_mb * 1e6 or not refs:
                    break
                oldest = [name for name, _ in refs[: max(1, len(refs) // 4)]]
                self.drop_refs(oldest)
                dropped += oldest
                refs = refs[len(oldest) :]
                self._gc()
        return dropped

    def snapshot_refs(self) -> list[tuple[str, int]]:
        """The snapshots' refs, oldest first."""
        out = self.git("for-each-ref", "--format=%(refname) %(committerdate:unix)", "refs/kimicode/")
        refs = []
        for line in out.decode().splitlines():
            name, _, when = line.rpartition(" ")
            refs.append((name, int(when) if when.isdigit() else 0))
        return sorted(refs, key=lambda r: r[1])

    def drop_refs(self, refs: Sequence[str]) -> None:
        if refs:
            self.git("update-ref", "--stdin", input="".join(f"delete {r}\n" for r in refs).encode())

    def _gc(self) -> None:
        self.git("reflog", "expire", "--expire=now", "--all", check=False)
        self.git("gc", "--prune=now", "--quiet", check=False)

    def size(self) -> int:
        """Bytes used by the store on disk."""
        return sum(p.stat().st_size for p in self.dir.rglob("*") if p.is_file())


def _is_full(exc: BaseException) -> bool:
    """Whether an error says the disk (or a quota) is full."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return "No space left on device" in str(exc) or "Disk quota exceeded" in str(exc)


def _glob_escape(path: str) -> str:
    return "".join("\\" + c if c in "*?[]\\!# " else c for c in path)


def _nul(paths: Sequence[str]) -> bytes:
    return b"".join(p.encode("utf-8", "surrogateescape") + b"\0" for p in paths)


def _is_link(mode: int) -> bool:
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


def _beyond_link(root: Path, rel: str) -> bool:
    """True when a parent directory of `rel` is (now) a symbolic link: git refuses such a path
    ("beyond a symbolic link"), and the file it names is not in the workspace but wherever the link goes."""
    parts = Path(rel).parts
    return any(root.joinpath(*parts[:i]).is_symlink() for i in range(1, len(parts)))


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
