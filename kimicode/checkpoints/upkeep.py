"""Automatic pruning of a workspace's checkpoint store, so a user who never runs `kimicode sessions rm`
does not grow it forever.

When a session that takes checkpoints opens, `auto_prune` runs in a background thread, at most once a
day per store (the `pruned-at` stamp file in the store; a store without one counts from its creation).
It drops the refs older than `[checkpoints] max_age_days` and, when the store is over `max_store_mb`,
the refs of sessions whose log no longer exists (never those of a live session, never those of the
last day: only an explicit `kimicode sessions rm` drops a live session's checkpoints by size). Then
`git gc` (niced) removes the objects no ref, and no private index, needs, and compresses the rest
(the first checkpoint of a big workspace is stored mostly uncompressed).

Only the ref changes hold the store's lock (milliseconds), so a checkpoint never waits for the gc.
The gc runs unlocked next to checkpoints, as git's own background gc does: it keeps every unreferenced
object younger than `GRACE`, so the objects a running checkpoint has written but not yet referenced
stay, and git keeps reading objects a repack moved to its new pack.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kimicode.checkpoints.store import CheckpointError, CheckpointStore
from kimicode.config.choices import DEFAULT_CHECKPOINT_MAX_AGE_DAYS
from kimicode.procs import spare
from kimicode.safeio import private_open, private_write

if TYPE_CHECKING:
    from kimicode.config.sections import Checkpoints

STAMP = "pruned-at"
"""File in the store whose modification time is the last automatic prune."""
INTERVAL = 86400.0
"""At most one automatic prune per store in this many seconds."""
GRACE = "1.hour.ago"
"""Unreferenced objects younger than this survive a gc (a running checkpoint may still refer to them)."""
ORPHAN_AFTER = 86400.0
"""The size limit drops refs of a session without a log only once they are this old (seconds): a
library session that keeps no log (`persist=False`) may still be running."""
DEFAULT_MAX_AGE_DAYS = DEFAULT_CHECKPOINT_MAX_AGE_DAYS
DEFAULT_MAX_STORE_MB: float | None = None


@dataclass(frozen=True)
class Limits:
    """The `[checkpoints]` limits; None: no limit."""

    max_age_days: float | None = DEFAULT_MAX_AGE_DAYS
    max_store_mb: float | None = DEFAULT_MAX_STORE_MB

    @classmethod
    def from_settings(cls, cfg: Checkpoints) -> Limits:
        """From the `[checkpoints]` section: 0 (or less) means no limit."""

        def value(raw: float | None) -> float | None:
            return float(raw) if raw is not None and raw > 0 else None

        return cls(value(cfg.max_age_days), value(cfg.max_store_mb))


def last_run(store: CheckpointStore) -> float:
    """When the store was last pruned automatically (its creation when never)."""
    for path in (store.dir / STAMP, store.git_dir / "HEAD"):
        try:
            return path.stat().st_mtime
        except OSError:
            continue
    return time.time()


def due(store: CheckpointStore, now: float | None = None) -> bool:
    """Whether the store exists and was last pruned automatically a day ago or more (reads only)."""
    now = time.time() if now is None else now
    return (store.git_dir / "HEAD").exists() and now - last_run(store) >= INTERVAL


def auto_prune(
    store: CheckpointStore,
    limits: Limits,
    sessions_dir: Path | None,
    keep: Collection[str] = (),
    *,
    now: float | None = None,
) -> list[str] | None:
    """Prune `store` when the last automatic prune is a day old; see the module docstring.

    `sessions_dir` holds the session logs (`<id>.jsonl`): a session without one no longer exists.
    `keep` names sessions whose refs stay whatever the size (the one opening). Returns the refs dropped,
    or None when it was not due or another process is pruning. Raises CheckpointError (an unwritable
    store), after which the stamp is left as it was when it could not be written."""
    now = time.time() if now is None else now
    if not due(store, now):
        return None  # no store yet, or pruned less than a day ago: nothing is written
    store = store.detached()  # its own lock handle: git children must not inherit another thread's lock
    try:
        claim = private_open(store.dir / "prune.lock", "a")
    except OSError as exc:
        raise CheckpointError(f"cannot prune the checkpoint store {store.dir}: {exc.strerror or exc}") from exc
    with claim:
        try:
            fcntl.flock(claim, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return None  # another process is pruning this store
        if now - last_run(store) < INTERVAL:
            return None  # another process has just done it
        _stamp(store, now)
        return _prune(store, limits, sessions_dir, set(keep), now)


def _stamp(store: CheckpointStore, now: float) -> None:
    stamp = store.dir / STAMP
    try:
        private_write(stamp, time.strftime("%Y-%m-%dT%H:%M:%SZ\n", time.gmtime(now)))
        os.utime(stamp, (now, now))
    except OSError as exc:
        raise CheckpointError(f"cannot prune the checkpoint store {store.dir}: {exc.strerror or exc}") from exc


def _prune(store: CheckpointStore, limits: Limits, sessions_dir: Path | None, keep: set[str], now: float) -> list[str]:
    """Every ref to drop is dropped before the one gc: a gc keeps what was unreferenced when it started
    if it is younger than `GRACE`, and its own new pack is, so a second gc would free nothing today."""
    with store.locked():
        refs = store.snapshot_refs()
        dropped: list[str] = []
        if limits.max_age_days is not None:
            cutoff = now - limits.max_age_days * 86400
            dropped = [name for name, when in refs if when < cutoff]
        if limits.max_store_mb is not None and store.size() > limits.max_store_mb * 1e6:
            dropped += [
                name
                for name, when in refs
                if name not in dropped and when < now - ORPHAN_AFTER and _orphan(name, sessions_dir, keep)
            ]
        store.drop_refs(dropped)
        store.git("pack-refs", "--all", "--prune", check=False)
    gc(store)
    return dropped


def _orphan(ref: str, sessions_dir: Path | None, keep: set[str]) -> bool:
    """Whether the session of `ref` (`refs/kimicode/<session>/<n>`) no longer exists."""
    session = ref.removeprefix("refs/kimicode/").rpartition("/")[0]
    if not session or session in keep or sessions_dir is None:
        return False
    return not (sessions_dir / f"{session}.jsonl").exists()


def gc(store: CheckpointStore) -> None:
    """`git gc` at low priority without the store's lock (see the module docstring); failures are
    ignored (another gc running, a checkpoint that removed a temporary pack): the next one catches up."""
    nice = shutil.which("nice")
    cmd = [
        *([nice, "-n", "10"] if nice else []),
        "git",
        "-c",
        "gc.packRefs=false",
        "-c",
        "gc.reflogExpire=never",
        "-c",
        "gc.reflogExpireUnreachable=never",
        "gc",
        "--quiet",
        f"--prune={GRACE}",
    ]
    try:
        subprocess.run(cmd, cwd=store.workspace, env=store.git_env(), capture_output=True, check=False)
    except OSError:
        pass


COMPACT_AFTER = 64 << 20
"""Bytes stored uncompressed by one session after which the store is compacted in the background."""


def compact_detached(store: CheckpointStore) -> bool:
    """Start a repack (niced, in a session of its own so it outlives a `kimicode -p` that ends now) that
    compresses what the first snapshot stored plain and deltas the rest: `-F`, since a plain repack
    would copy the stored data as it is. As `git gc` does, it keeps every unreferenced object (`-A`,
    loose while younger than `GRACE`), so it runs unlocked next to checkpoints (see the module
    docstring); the daily prune removes what no ref needs. One thread, bounded delta windows and small
    pack mappings keep its memory small (a plain repack of a 1 GB store mapped all of it); files over 8 MB
    are compressed, never deltaed. Returns whether it was started."""
    nice = shutil.which("nice")
    cmd = [
        *([nice, "-n", "10"] if nice else []),
        "git",
        "-c",
        "pack.threads=1",
        "-c",
        "pack.windowMemory=32m",
        "-c",
        "pack.deltaCacheSize=16m",
        "-c",
        "core.bigFileThreshold=8m",
        "-c",
        "core.packedGitWindowSize=16m",
        "-c",
        "core.packedGitLimit=128m",
        "repack",
        "-A",
        "-d",
        "-F",
        "-l",
        "-q",
        f"--unpack-unreachable={GRACE}",
    ]
    try:
        proc = subprocess.Popen(
            cmd,
            cwd=store.workspace,
            env=store.git_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError:
        return False
    spare(proc.pid)  # kimicode's exit ends its other children (procs.reap_children), not this one
    return True


def start(
    store: CheckpointStore,
    limits: Limits,
    sessions_dir: Path | None,
    keep: Collection[str],
    warn: Callable[[str], None],
    *,
    wait_for: Callable[[], Any] | None = None,
) -> Any:
    """Run `auto_prune` in a daemon thread (never delays the session, never keeps it from exiting);
    `wait_for` runs first in that thread (the warm-up of an empty store goes before the gc). A failure
    is passed to `warn` as one sentence. Returns the thread."""
    import threading

    def run() -> None:
        try:
            if wait_for is not None:
                wait_for()
            auto_prune(store, limits, sessions_dir, keep)
        except (CheckpointError, OSError) as exc:
            warn(f"could not prune the checkpoint store automatically ({exc})")

    thread = threading.Thread(target=run, name="kimicode-checkpoint-prune", daemon=True)
    thread.start()
    return thread


@dataclass(frozen=True)
class Usage:
    """What one workspace's store holds on disk (`kimicode checkpoints du`)."""

    dir: Path
    workspace: str
    """The workspace it snapshots (from its newest snapshot), or "" when it holds none."""
    bytes: int
    snapshots: int
    sessions: int
    packs: int
    loose: int


def usage(store_dir: Path) -> Usage:
    """Read a store's size and contents (no lock: it only reads)."""
    git_dir = store_dir / "git"
    total = sum(p.stat().st_size for p in store_dir.rglob("*") if p.is_file() and not p.is_symlink())
    packs = len(list((git_dir / "objects" / "pack").glob("*.pack")))
    loose = sum(1 for d in (git_dir / "objects").glob("[0-9a-f][0-9a-f]") for _ in d.iterdir())
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_DIR=str(git_dir), GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull)
    listed = subprocess.run(
        ["git", "for-each-ref", "--sort=-committerdate", "--format=%(refname)%00%(contents:body)", "refs/kimicode/"],
        env=env,
        capture_output=True,
        check=False,
    )
    out = listed.stdout.decode("utf-8", "replace")
    refs = [line.split("\0", 1) for line in out.split("\n") if line.startswith("refs/")]
    sessions = {name.removeprefix("refs/kimicode/").rpartition("/")[0] for name, *_ in refs}
    workspace = ""
    if refs and len(refs[0]) > 1:
        workspace = refs[0][1].removeprefix("workspace: ").strip()
    return Usage(store_dir, workspace, total, len(refs), len(sessions), packs, loose)
