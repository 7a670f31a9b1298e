"""A session's checkpoints: one entry per turn (and per restore), recorded in the session log.

Before a turn's first tool call that can change the workspace (an `edit` or `execute` tool) the
workspace is snapshotted; at the end of the turn it is snapshotted again, and the difference is what
the turn changed. Each entry is logged as a `checkpoint` record (older readers skip unknown record
types), so `kimicode undo`, `kimicode sessions diff` and a resumed session find them again.

Restores (undo, rewind) compare the workspace with the state the agent last left it in: a file changed
outside the agent since then is a conflict, refused unless forced, never overwritten silently.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kimicode.checkpoints.store import Changes, CheckpointError, CheckpointStore
from kimicode.session.log import SessionLog

if TYPE_CHECKING:
    from kimicode.config.sections import Checkpoints


class RestoreConflict(CheckpointError):
    """Files changed outside the agent since its last checkpoint that a restore would overwrite."""

    def __init__(self, files: Sequence[str]) -> None:
        self.files = list(files)
        super().__init__(
            "changed outside kimicode since its last checkpoint, not overwritten: " + ", ".join(self.files)
        )


@dataclass
class Entry:
    """One turn (or one restore) of the session and its snapshots."""

    kind: str  # "turn" or "restore"
    turn: int
    prompt: str = ""
    at: int = -1
    """Index of the turn's user message in the history (for rewinding the conversation)."""
    before: str | None = None
    after: str | None = None
    changes: Changes = field(default_factory=Changes)
    skipped: list[str] = field(default_factory=list)
    undone: bool = False
    undid: list[int] = field(default_factory=list)
    """For a restore: the turns it undid (undoing the restore brings their files back, so they count again)."""

    def record(self) -> dict[str, Any]:
        return {
            "type": "checkpoint",
            "kind": self.kind,
            "turn": self.turn,
            "prompt": self.prompt[:500],
            "at": self.at,
            "before": self.before,
            "after": self.after,
            "changes": self.changes.as_dict(),
            "skipped": self.skipped,
            "undone": self.undone,
            "undid": self.undid,
        }

    @classmethod
    def from_record(cls, rec: dict[str, Any]) -> Entry:
        ch = rec.get("changes") if isinstance(rec.get("changes"), dict) else {}
        assert isinstance(ch, dict)
        return cls(
            kind=str(rec.get("kind") or "turn"),
            turn=int(rec.get("turn") or 0),
            prompt=str(rec.get("prompt") or ""),
            at=rec["at"] if isinstance(rec.get("at"), int) else -1,
            before=rec.get("before") if isinstance(rec.get("before"), str) else None,
            after=rec.get("after") if isinstance(rec.get("after"), str) else None,
            changes=Changes(*(list(ch.get(k) or []) for k in ("added", "modified", "deleted"))),
            skipped=list(rec.get("skipped") or []),
            undone=bool(rec.get("undone")),
            undid=[t for t in rec.get("undid") or [] if isinstance(t, int)],
        )


def entries_from_records(records: Iterable[dict[str, Any]]) -> list[Entry]:
    """The entries a log describes: the last record for each (kind, turn) wins."""
    found: dict[tuple[str, int], Entry] = {}
    for rec in records:
        if rec.get("type") == "checkpoint":
            try:
                entry = Entry.from_record(rec)
            except (TypeError, ValueError):
                continue
            found.pop((entry.kind, entry.turn), None)
            found[(entry.kind, entry.turn)] = entry
    return list(found.values())


class SessionCheckpoints:
    """The checkpoints of one session over a workspace store (`agent.checkpoints`)."""

    def __init__(
        self,
        store: CheckpointStore,
        session_id: str,
        log: SessionLog | None,
        entries: list[Entry] | None = None,
    ) -> None:
        self.store = store
        self.session_id = session_id
        self.log = log
        self.entries: list[Entry] = entries or []
        self.current: Entry | None = None
        self.turns = max((e.turn for e in self.entries if e.kind == "turn"), default=0)
        """Turns of the session so far (counted from `turn_end` records when reopened)."""
        self.warning: str | None = None
        """Why the current turn has no checkpoint (the store failed), once per turn."""
        self.warming: threading.Thread | None = None
        """The warm-up started by `warm`, if any."""
        self.pruning: threading.Thread | None = None
        """The automatic prune started by `auto_prune`, if any."""
        self.touched: set[str] | None = None
        """What the current turn's calls can have changed (workspace-relative), when all of them were
        kimicode's own file tools; None: unknown (a command, a hook, another tool), so the turn's end
        walks the whole tree. See `note`."""

    @classmethod
    def open(
        cls, home: Path, workspace: Path, session_id: str, log: SessionLog | None, settings: Checkpoints
    ) -> SessionCheckpoints:
        """The checkpoints of a session (entries read back from its log when it exists)."""
        store = CheckpointStore(home, workspace, max_file_bytes=int(settings.max_file_mb * 1024 * 1024))
        entries: list[Entry] = []
        turns = 0
        records = log.records() if log is not None else []
        if records:
            entries = entries_from_records(records)
            turns = sum(1 for r in records if r.get("type") == "turn_end")
        cps = cls(store, session_id, log, entries)
        cps.turns = max(cps.turns, turns)
        return cps

    def warm(self) -> threading.Thread | None:
        """Start storing the workspace in the background when the store is still empty (`store.prepare`),
        so the turn's first checkpoint only records what changed since. The store's lock orders it
        before any snapshot; a failure is left for that snapshot to report. Returns the thread started."""
        if self.store.index.exists() or (self.warming is not None and self.warming.is_alive()):
            return None

        def run() -> None:
            try:
                self.store.prepare()
            except (CheckpointError, OSError):
                pass
            self.compact_if_plain()

        thread = threading.Thread(target=run, name="kimicode-checkpoint-warm", daemon=True)
        thread.start()
        self.warming = thread
        return thread

    def compact_if_plain(self) -> bool:
        """Start compacting the store in the background once this session stored much uncompressed
        (`upkeep.COMPACT_AFTER`): the first snapshot of a large tree is written plain to be quick."""
        from kimicode.checkpoints import upkeep

        if self.store.stored_plain < upkeep.COMPACT_AFTER:
            return False
        self.store.stored_plain = 0
        return upkeep.compact_detached(self.store)

    def auto_prune(
        self, settings: Checkpoints, sessions_dir: Path | None, warn: Callable[[str], None]
    ) -> threading.Thread | None:
        """Apply the `[checkpoints]` age and size limits in the background, at most once a day per store
        (see checkpoints/upkeep.py); this session's checkpoints are never dropped for the size. Returns
        the thread started (None when not due, or the store does not exist yet)."""
        from kimicode.checkpoints import upkeep

        if not upkeep.due(self.store):
            return None

        def after_warm_up() -> None:
            if self.warming is not None:
                self.warming.join()

        self.pruning = upkeep.start(
            self.store,
            upkeep.Limits.from_settings(settings),
            sessions_dir,
            {self.session_id},
            warn,
            wait_for=after_warm_up,
        )
        return self.pruning

    @property
    def last(self) -> Entry | None:
        """The most recent turn's entry."""
        turns = [e for e in self.entries if e.kind == "turn"]
        return turns[-1] if turns else None

    def last_turn_fields(self) -> dict[str, Any]:
        """`changes` and `checkpoint` of the most recent turn for its RunResult ({} when it changed nothing)."""
        entry = self.last
        if entry is None or entry.before is None:
            return {}
        return {"changes": entry.changes.as_dict() if entry.after else None, "checkpoint": entry.before}

    def _log(self, entry: Entry) -> None:
        if self.log is not None and (entry.before is not None or entry.kind == "restore"):
            self.log.append(entry.record())

    # -- during a turn ----------------------------------------------------------------------------

    def begin_turn(self, prompt: str, at: int, *, noted: bool = False) -> None:
        """Start a turn's entry. `noted`: the caller reports every call of the turn through `note` (the
        agent's turn loop), so its last snapshot may record only what was noted; otherwise (an
        exploration applying a branch) the turn's end walks the whole tree."""
        self.turns += 1
        self.current = Entry("turn", self.turns, prompt, at)
        self.entries.append(self.current)
        self.warning = None
        self.touched = set() if noted else None

    def note(self, paths: Sequence[str] | None) -> None:
        """A call of this turn ran that may change the workspace: the files it writes (relative to the
        workspace), or None when that cannot be known (a command, a hook, a subagent, a tool of a server):
        the turn's end then walks the whole tree instead of recording only these files."""
        if self.touched is not None:
            if paths is None:
                self.touched = None
            else:
                self.touched.update(paths)

    def before_change(self) -> str | None:
        """Snapshot before the turn's first change (once per turn); returns a warning if it failed."""
        cur = self.current
        if cur is None or cur.before is not None or self.warning is not None:
            return None
        try:
            snap = self.store.snapshot(
                f"before turn {cur.turn}: {cur.prompt[:200]}", f"{self.session_id}/{cur.turn}-before"
            )
        except (CheckpointError, OSError) as exc:
            self.warning = f"no checkpoint for this turn ({exc}); /undo will not restore its files"
            return self.warning
        cur.before, cur.skipped = snap.id, list(snap.skipped)
        self._log(cur)
        self.compact_if_plain()
        if snap.skipped:
            return (
                f"checkpoint skipped {len(snap.skipped)} file(s) over the size limit: "
                + ", ".join(snap.skipped[:5])
                + ("…" if len(snap.skipped) > 5 else "")
            )
        return None

    def end_turn(self) -> Entry | None:
        """Snapshot after the turn and log what it changed; returns the turn's entry."""
        cur, self.current = self.current, None
        if cur is None:
            return None
        if cur.before is not None:
            try:
                only = sorted(self.touched) if self.touched is not None else None
                snap = self.store.snapshot(f"after turn {cur.turn}", f"{self.session_id}/{cur.turn}-after", only=only)
                cur.after = snap.id
                cur.changes = self.store.changes(cur.before, snap.id)
                self.compact_if_plain()
            except (CheckpointError, OSError) as exc:
                self.warning = f"could not record the turn's changes ({exc})"
            self._log(cur)  # turns that changed nothing are kept in memory only (the log stays as it was)
        return cur

    # -- restoring --------------------------------------------------------------------------------

    def undoable(self) -> list[Entry]:
        """Entries that can still be undone, oldest first."""
        return [e for e in self.entries if not e.undone]

    def find(self, turn: int | None, *, undone_too: bool = False) -> Entry:
        """The entry of turn `turn`, or the last entry not yet undone. `undone_too`: a turn whose files
        were already undone is found as well (rewinding its conversation still means something)."""
        live = self.undoable()
        if turn is None:
            if not live:
                raise CheckpointError("nothing to undo in this session")
            return live[-1]
        for e in live if not undone_too else self.entries:
            if e.kind == "turn" and e.turn == turn:
                return e
        raise CheckpointError(f"turn {turn} has no checkpoint to restore (or was already undone)")

    def files_anchor(self, entry: Entry) -> Entry | None:
        """The entry whose restore puts the files back as they were before `entry`: `entry` itself when it
        has a snapshot and is not undone, else the first later turn (not yet undone) that changed files.
        None when no file changed since (or every later change was undone already)."""
        start = self.entries.index(entry)
        for e in self.entries[start:]:
            if e.undone or e.before is None:
                continue
            if e is entry or e.kind == "turn":
                return e
        return None

    def mark_undone_from(self, entry: Entry, until: Entry | None = None) -> None:
        """Mark `entry` and every later entry not yet undone (up to `until`, exclusive) as undone, logged:
        their files need no restore (they changed none, or were put back already)."""
        start = self.entries.index(entry)
        stop = self.entries.index(until) if until is not None else len(self.entries)
        for e in self.entries[start:stop]:
            if not e.undone:
                e.undone = True
                if self.log is not None:
                    self.log.append(e.record())

    def describe(self, entry: Entry) -> str:
        """`turn 2`, or `restore 1 (undo of turn 2), so the files of turn 2 are back`: what undoing `entry`
        undoes, in words."""
        if entry.kind == "turn":
            return f"turn {entry.turn}"
        turns = ("turn " if len(entry.undid) == 1 else "turns ") + ", ".join(str(t) for t in entry.undid)
        return f"restore {entry.turn} ({entry.prompt})" + (f", so the files of {turns} are back" if entry.undid else "")

    def plan(self, entry: Entry) -> tuple[list[str], list[str]]:
        """Paths a restore to before `entry` puts back, and those changed outside the agent since."""
        later = [e for e in self.undoable() if self.entries.index(e) >= self.entries.index(entry)]
        paths = sorted({p for e in later for p in e.changes.paths()})
        last_after = next((e.after for e in reversed(self.entries) if e.after), None)
        if not paths or last_after is None or not self.store.has(last_after):
            return paths, []
        now = self.store.snapshot("before restore (check)")
        outside = set(self.store.changes(last_after, now.id).paths())
        conflicts = set(paths) & outside
        wanted = set(paths)
        for rel in paths:  # a directory where a file goes back, holding files the turns did not make
            here = self.store.workspace / rel
            if here.is_dir() and not here.is_symlink():
                conflicts.update(f"{rel}/{p}" for p in _files_under(here) if f"{rel}/{p}" not in wanted)
        return paths, sorted(conflicts)

    def restore(self, entry: Entry, *, force: bool = False) -> Entry:
        """Put back the files as they were before `entry`; itself recorded as an undoable entry."""
        if entry.before is None:
            raise CheckpointError(f"turn {entry.turn} changed no files (nothing to restore)")
        if not self.store.has(entry.before):
            raise CheckpointError(f"the checkpoint of turn {entry.turn} is no longer in the store (pruned?)")
        paths, conflicts = self.plan(entry)
        if conflicts and not force:
            raise RestoreConflict(conflicts)
        n = sum(1 for e in self.entries if e.kind == "restore") + 1
        pre = self.store.restore(entry.before, paths, f"before restore {n}", f"{self.session_id}/r{n}-before")
        post = self.store.snapshot(f"after restore {n}", f"{self.session_id}/r{n}-after")
        later = [e for e in self.undoable() if self.entries.index(e) >= self.entries.index(entry)]
        for e in later:
            e.undone = True
            self._log(e)
        if entry.kind == "restore":  # undoing a restore: the turns it undid are back in the files
            for e in self.entries:
                if e.kind == "turn" and e.turn in entry.undid and e.undone:
                    e.undone = False
                    self._log(e)
        what = f"turn {entry.turn}" if entry.kind == "turn" else f"restore {entry.turn}"
        rec = Entry(
            "restore",
            n,
            f"undo of {what}",
            -1,
            pre.id,
            post.id,
            self.store.changes(pre.id, post.id),
            undid=[e.turn for e in later if e.kind == "turn"],
        )
        self.entries.append(rec)
        self._log(rec)
        if self.log is not None:
            self.log.sync()
        return rec

    def diff(self, entry: Entry | None = None, color: bool = False) -> str:
        """The changes of one entry, or of the whole session (first checkpoint to the last)."""
        if entry is not None:
            if entry.before is None or entry.after is None:
                return ""
            return self.store.diff(entry.before, entry.after, color=color)
        snaps = [e for e in self.entries if e.before and e.after]
        if not snaps:
            return ""
        first, last = snaps[0].before, snaps[-1].after
        assert first is not None and last is not None
        return self.store.diff(first, last, color=color)


def _files_under(directory: Path) -> list[str]:
    import os

    out: list[str] = []
    for dirpath, _, files in os.walk(directory):
        out.extend(str(Path(dirpath, f).relative_to(directory)) for f in files)
    return out
