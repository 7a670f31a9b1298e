"""The append-only session log: one JSON object per line, written as each message is committed.

A record is flushed to the operating system as soon as it is written, so a crash of kimicode (a kill, an
exception, a lost worker) loses at most a torn last line, which `load` ignores. The file is also fsynced (forced
to the disk, which matters only when the machine itself fails: power loss, kernel crash) at the end of each turn
and on close, in a background thread (`sync` returns at once; `wait_durable` waits): an fsync can block for
milliseconds, and an event loop running 64 agents must not stop for each. A failed fsync is reported by the next
write, sync or close. The API key is never part of a record.

Every record carries `"v"` (the schema version) and `"ts"` (Unix seconds). The record types:

- `meta`: the first record: `session_id`, `model`, `base_url`, `workspace`, `permission_mode`,
  `thinking`.
- `message`: `{"message": {...}}`, one committed message exactly as sent to the model (the
  assistant message before its tools run, each tool result as soon as it completes).
- `settings`: the model and settings in effect from here on: `reason` (`resume`, `fork`, `model`,
  `thinking`), `model`, `thinking`, `permission_mode`, `workspace`, and `forked_from` for forks.
- `usage`: the usage object of one model request.
- `prune`: `{"replace": [[index, message], ...]}` puts each message at its index (the context
  manager shrank old tool results).
- `compaction`: `{"start": s, "end": e, "messages": [...]}` replaces `history[s:e]` (see
  `kimicode.session.replay`); also written when resuming has to repair the middle of a history.
- `turn_end`: `status`, `steps`, and the process's running `usage` totals; fsynced.
- `checkpoint`: a turn's (or a restore's) workspace checkpoints and changes (`kimicode.checkpoints`).

Readers ignore record types they do not know, so new types can be added without a version bump.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import json
import os
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from kimicode.errors import SessionError, out_of_descriptors
from kimicode.safeio import private_dirs, private_open

if TYPE_CHECKING:
    import asyncio

    from kimicode.config.redact import Masker
    from kimicode.session.lock import SessionLock
    from kimicode.session.protocol import SessionStore

SCHEMA_VERSION = 1
INTERRUPTED = "interrupted by user"


class SessionWriteError(ValueError):
    """The session log cannot be written (a full disk, an unwritable or missing KIMICODE_HOME).

    A ValueError like the other "this session cannot be used" errors, so faces report it in one line."""


class NewerLogError(ValueError):
    """The log was written by a newer kimicode (a record version above SCHEMA_VERSION)."""


def new_session_id() -> str:
    """Sortable, unique: UTC timestamp plus random suffix (also used as the prompt cache key).

    48 random bits: a thousand agents started in the same second (a batch, an evaluation harness) clash
    with a chance of about 2e-9; the 24 bits used before clashed in about 3% of such starts."""
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(6)


class SessionLog:
    """Appends records to `<home>/sessions/<id>.jsonl`.

    A new session's records are held in memory until its first user message: a session that never got a
    prompt (opened and quit, `/clear` then `/exit`) leaves no file, so it cannot become "the latest" for
    `-c` or clutter the listings. A log that already exists (a resumed session) is appended to at once.
    """

    def __init__(self, directory: Path, session_id: str, store: SessionStore | None = None) -> None:
        self.session_id = session_id
        self.directory = directory
        self.path = directory / f"{session_id}.jsonl"
        self.store = store
        """The caller's own store (`Agent(session_store=...)`): the records go there instead of `path`."""
        self._fh: IO[str] | None = None
        self._left: int | None = None
        """The file's size when `sync` closed it: a different size at the next write means another writer."""
        self.masker: Masker | None = None
        """Set by the Agent: every record is written with known secrets masked."""
        self.lock: SessionLock | None = None
        """Held while this process writes the log (kimicode.session.lock); taken on first write."""
        self.loop: asyncio.AbstractEventLoop | None = None
        """The event loop a caller's store was last called on (records made off it are handed to it)."""
        self.failed: str | None = None
        """Why writing failed (then nothing more is written; the turn ends with this error)."""
        saved = self.path.exists() if store is None else bool(self._stored())
        self._held: list[str] | None = None if saved else []
        """Lines waiting for the first user message (None once the file is written)."""
        self._pending: list[concurrent.futures.Future[None]] = []
        """Background fsyncs (and the closing one) not known to be finished."""
        self._sync_error: str | None = None
        """Set by the fsync thread when an fsync failed; raised by the next append, sync or close."""

    @property
    def saved(self) -> bool:
        """Whether the session is on disk (it had a prompt, or was resumed)."""
        return self._held is None

    @property
    def spill_dir(self) -> Path:
        """Where full copies of capped tool outputs go (readable by the model with read_file)."""
        return self.directory / self.session_id

    @property
    def transcript(self) -> Path | None:
        """The log's file (for hooks' `transcript_path`), None when the records go to a caller's store."""
        return self.path if self.store is None else None

    def records(self) -> list[dict[str, Any]]:
        """The records written so far (none while a new session's records are held before its prompt)."""
        if self._held is not None:
            return []
        if self.store is not None:
            return list(self._stored())
        return list(iter_records(self.path)) if self.path.exists() else []

    def _stored(self) -> Any:
        """What the caller's store's `load` returns for this session; a SessionError when it fails."""
        assert self.store is not None
        return stored_records(self.store, self.session_id)

    def acquire(self) -> None:
        """Take the session's lock now (resume does, so a busy session is refused before any work). For a
        caller's own store the lock is this process's only (two agents here writing one session of the same
        store would mix their conversations); across processes the store keeps its sessions apart itself."""
        if self.lock is None:
            from kimicode.session.lock import SessionLock

            if self.store is None:
                self.lock = SessionLock.acquire(self.directory, self.session_id)
            else:
                self.lock = SessionLock.in_process(f"store:{id(self.store)}:{self.session_id}", self.session_id)
        elif self.lock.suspended:  # the first write of a turn: take back what `sync` let go of
            self.lock.resume(self.session_id)

    def _open(self) -> IO[str]:
        if self._fh is None:
            # KIMICODE_HOME and sessions/ made 0700 (only that layout: a log resumed from elsewhere
            # leaves its directories as they are)
            private_dirs(self.directory, top=self.directory.parent if self.directory.name == "sessions" else None)
            self.acquire()
            self._check_unchanged()
            torn = _ends_without_newline(self.path)
            self._fh = private_open(self.path, "a")  # 0600, kept open for the session
            if torn:  # a crash cut the last line short: end it, so the next record starts on its own line
                self._fh.write("\n")
        return self._fh

    def _check_unchanged(self) -> None:
        """SessionWriteError when the log changed since this agent's last turn (another process continued it
        meanwhile): two writers would mix their conversations."""
        left, self._left = self._left, None
        with contextlib.suppress(OSError):
            if left is not None and self.path.stat().st_size != left:
                self.failed = (
                    f"session {self.session_id} was continued by another process since this agent's last "
                    "turn: two writers would mix their conversations. Resume it again to continue from "
                    "what it wrote, or fork it"
                )
                raise SessionWriteError(self.failed)

    def append(self, record: dict[str, Any]) -> None:
        """Write one record and flush it to the OS (held in memory until the session has a prompt)."""
        if self.masker is not None:  # the values, not the JSON text: a secret with a `"` or `\` is escaped there
            record = self.masker.mask_data(record)
        line = json.dumps({"v": SCHEMA_VERSION, "ts": round(time.time(), 3), **record}, ensure_ascii=False)
        if not line.isascii() and not _encodable(line):  # a file name that is not UTF-8 (a lone surrogate):
            line = json.dumps({"v": SCHEMA_VERSION, "ts": round(time.time(), 3), **record})  # escaped, round-trips
        if self.failed is not None:
            return  # already reported; nothing more can be written
        self._raise_if_sync_failed()
        try:
            self._write(line, record)
        except Exception as exc:  # a caller's store may fail with anything (sqlite3.OperationalError...)
            if isinstance(exc, SessionError) or (self.store is None and not isinstance(exc, OSError)):
                raise  # a busy session (session/lock.py) is said as it is
            self.failed = (
                f"the session store could not keep a record of session {self.session_id}: {exc}"
                if self.store is not None
                else f"cannot write the session log {self.path}: {out_of_descriptors(exc)}"
                if out_of_descriptors(exc) is not None
                else f"cannot write the session log {self.path}: {getattr(exc, 'strerror', None) or exc}. "
                "Check that KIMICODE_HOME is writable and its disk is not full (KIMICODE_HOME=... picks another)"
            )
            raise SessionWriteError(self.failed) from None

    def save(self) -> None:
        """Write the records held for the first prompt now: a session that must be resumable before it has
        one (an editor's new ACP session, loaded again by another process)."""
        if self._held is not None and self.failed is None:
            lines, self._held = self._held, None
            self._put(lines)

    def _write(self, line: str, record: dict[str, Any]) -> None:
        if self._held is not None:
            self._held.append(line)
            message = record.get("message")
            if record.get("type") != "message" or not isinstance(message, dict) or message.get("role") != "user":
                return
            lines, self._held = self._held, None
        else:
            lines = [line]
        self._put(lines)

    def _put(self, lines: list[str]) -> None:
        """Write whole records: to the caller's store (as the masked dicts), else to the file."""
        if self.store is not None:
            if self._off_the_loop(lines):
                return
            self.acquire()  # one writer per session of a store in this process, as for the files
            for line in lines:
                self.store.append(self.session_id, json.loads(line))
            return
        fh = self._open()
        fh.write("".join(h + "\n" for h in lines))
        fh.flush()

    def _off_the_loop(self, lines: list[str]) -> bool:
        """A caller's store is called on the event loop only (a sqlite3 connection refuses other threads, and a
        store need not be thread-safe): records made in a worker thread (a checkpoint's snapshot, a rewind, an
        exploration opening a branch) are handed to the loop the store is used on, ahead of the work waiting
        for that thread (session/storethread.py). True when handed."""
        from kimicode.session.storethread import home_loop

        loop = home_loop(self.store, self.loop)
        if loop is None:
            return False  # on its loop, or no loop of it running (sync code between runs): called here

        def put() -> None:
            try:
                self._put(lines)
            except Exception as exc:  # reported by the next write, as a failed fsync is
                self._sync_error = f"the session store could not keep a record of session {self.session_id}: {exc}"

        loop.call_soon_threadsafe(put)
        return True

    def keep(self) -> None:
        """Write the held records now, before any prompt: the session is used (an exploration's branches
        refer to it) and must be found by id later."""
        if self._held is None or self.failed is not None:
            return
        held, self._held = self._held, None
        try:
            self._put(held)
        except Exception as exc:  # a caller's store may fail with anything
            if isinstance(exc, SessionError) or (self.store is None and not isinstance(exc, OSError)):
                raise
            self.failed = (
                f"the session store could not keep a record of session {self.session_id}: {exc}"
                if self.store is not None
                else f"cannot write the session log {self.path}: {getattr(exc, 'strerror', None) or exc}"
            )
            raise SessionWriteError(self.failed) from None

    def message(self, message: dict[str, Any], model: str | None = None) -> None:
        """Record a committed message exactly as it is sent to the model, with the model that wrote it
        beside it (assistant messages: the message itself stays the wire object)."""
        record: dict[str, Any] = {"type": "message", "message": message}
        if model is not None and message.get("role") == "assistant":
            record["model"] = model
        self.append(record)

    def sync(self) -> None:
        """Flush now, fsync and close in the background, and suspend the lock: called at the end of each turn
        (see the module's notes), so an idle session holds no descriptor; the next record opens it again."""
        self._raise_if_sync_failed()
        if self._fh is not None and self.failed is None:
            fh, self._fh = self._fh, None
            try:
                fh.flush()
                self._left = os.fstat(fh.fileno()).st_size
            except OSError as exc:
                self.failed = f"cannot write the session log {self.path}: {exc.strerror or exc}"
                with contextlib.suppress(OSError):
                    fh.close()
                raise SessionWriteError(self.failed) from None
            self._pending.append(_background(self._fsync_and_close, fh))
        if self.lock is not None:
            self.lock.suspend()

    def _fsync(self, fh: IO[str]) -> None:
        try:
            os.fsync(fh.fileno())
        except (OSError, ValueError) as exc:  # ValueError: closed meanwhile (close fsyncs it itself)
            if isinstance(exc, OSError):
                self._sync_error = f"cannot write the session log {self.path}: {exc.strerror or exc}"

    def _raise_if_sync_failed(self) -> None:
        self._pending = [f for f in self._pending if not f.done()]
        if self._sync_error is not None and self.failed is None:
            self.failed = self._sync_error
            raise SessionWriteError(self.failed)

    def wait_durable(self, timeout: float | None = None) -> bool:
        """Wait until every record synced or closed so far is on disk; False on timeout. Raises
        SessionWriteError when an fsync failed."""
        _, not_done = concurrent.futures.wait(list(self._pending), timeout)
        self._pending = list(not_done)
        self._raise_if_sync_failed()
        return not not_done

    def close(self) -> None:
        """Flush, release the lock, and fsync and close the file in the background (`wait_durable` waits)."""
        try:
            if self._fh is not None:
                fh, self._fh = self._fh, None
                if self.failed is None:
                    try:
                        fh.flush()
                    except OSError as exc:
                        self.failed = f"cannot write the session log {self.path}: {exc.strerror or exc}"
                if self.failed is None:
                    self._pending.append(_background(self._fsync_and_close, fh))
                else:
                    with contextlib.suppress(OSError):
                        fh.close()
        finally:
            if self.lock is not None:
                self.lock.release()
                self.lock = None

    def _fsync_and_close(self, fh: IO[str]) -> None:
        try:
            self._fsync(fh)
        finally:
            with contextlib.suppress(OSError):
                fh.close()


_SYNCER: concurrent.futures.ThreadPoolExecutor | None = None
_SYNCER_LOCK = threading.Lock()


def _forget_syncer() -> None:
    """In a forked child: the parent's fsync thread does not exist here; start a new one when needed."""
    global _SYNCER, _SYNCER_LOCK
    _SYNCER, _SYNCER_LOCK = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_syncer)


def _background(fn: Any, fh: IO[str]) -> concurrent.futures.Future[None]:
    """Run `fn(fh)` on the process's one fsync thread (in order; drained before the interpreter exits)."""
    global _SYNCER
    with _SYNCER_LOCK:
        if _SYNCER is None:
            _SYNCER = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kimicode-fsync")
            atexit.register(_SYNCER.shutdown, wait=True)
        return _SYNCER.submit(fn, fh)


def _ends_without_newline(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            if fh.tell() == 0:
                return False
            fh.seek(-1, os.SEEK_END)
            return fh.read(1) != b"\n"
    except FileNotFoundError:
        return False


@dataclass
class LoadedSession:
    """What `load` recovers: records and a valid message history."""

    session_id: str
    records: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    """The history after replaying messages, prunes and compactions, then repairing it."""
    repaired: int
    """How many synthetic tool results were added for calls that never got one."""
    replayed: list[dict[str, Any]] = field(default_factory=list)
    """The history exactly as the log describes it, before the repair."""

    @property
    def meta(self) -> dict[str, Any]:
        """The first `meta` record (empty if the log has none)."""
        return next((r for r in self.records if r.get("type") == "meta"), {})

    @property
    def settings(self) -> dict[str, Any]:
        """The model and settings last in effect: `meta` updated by each `settings` record."""
        current: dict[str, Any] = {}
        for rec in self.records:
            if rec.get("type") in ("meta", "settings"):
                current.update({k: v for k, v in rec.items() if k not in ("v", "ts", "type", "reason")})
        return current

    @property
    def model(self) -> str | None:
        """The model the session last ran with."""
        model = self.settings.get("model")
        return model if isinstance(model, str) else None

    def repair_records(self) -> list[dict[str, Any]]:
        """Records that turn the logged history into `messages` when appended to the log.

        Synthetic results at the end become `message` records; a repair anywhere else becomes one
        `compaction` record replacing the changed tail, so replaying the log stays exact.
        """
        old, new = self.replayed, self.messages
        if new[: len(old)] == old:
            return [{"type": "message", "message": m} for m in new[len(old) :]]
        same = 0
        while same < min(len(old), len(new)) and old[same] == new[same]:
            same += 1
        return [{"type": "compaction", "reason": "repair", "start": same, "end": len(old), "messages": new[same:]}]


def stored_records(store: SessionStore, session_id: str) -> Any:
    """`store.load(session_id)`, whatever it returns; a SessionError naming the store when it raises (a
    database that is down is the caller's environment, not a bug of kimicode's to show as a traceback)."""
    from kimicode.session.storethread import call

    try:
        return call(store, lambda: store.load(session_id))  # on the store's loop thread (storethread.py)
    except Exception as exc:
        raise SessionError(
            f"the session store {type(store).__name__} could not read session {session_id}: {type(exc).__name__}: {exc}"
        ) from exc


def iter_records(path: Path) -> Iterator[dict[str, Any]]:
    """Records of a log, skipping a torn or corrupt line instead of failing."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict):
                yield rec


def repair_history(messages: list[dict[str, Any]]) -> int:
    """Give every tool call without a result a synthetic `interrupted` result, in place; return count."""
    fixed: list[dict[str, Any]] = []
    added = 0
    pending: list[str] = []

    def flush() -> None:
        nonlocal added
        for call_id in pending:
            fixed.append({"role": "tool", "tool_call_id": call_id, "content": INTERRUPTED})
            added += 1
        pending.clear()

    for msg in messages:
        role = msg.get("role")
        if role == "tool":
            if msg.get("tool_call_id") in pending:
                pending.remove(msg["tool_call_id"])
                fixed.append(msg)
            continue  # orphan tool results (no matching call) would be rejected by the server
        flush()
        fixed.append(msg)
        if role == "assistant":
            pending = [tc.get("id", "") for tc in msg.get("tool_calls") or ()]
    flush()
    messages[:] = fixed
    return added


def load(path: Path) -> LoadedSession:
    """Read a session log back into a valid history (for resume), replaying prunes and compactions."""
    return load_records(path.stem, list(iter_records(path)))


def load_records(session_id: str, records: list[dict[str, Any]]) -> LoadedSession:
    """A session's records (from its file, or from a caller's store) as a valid history."""
    from kimicode.session.replay import replay

    newest = max((r["v"] for r in records if isinstance(r.get("v"), int) and not isinstance(r["v"], bool)), default=0)
    if newest > SCHEMA_VERSION:
        raise NewerLogError(
            f"session {session_id} was written by a newer kimicode (log version {newest}; this kimicode reads "
            f"version {SCHEMA_VERSION}): upgrade kimicode to resume it (pip install -U kimicode)"
        )
    replayed = replay(records)
    messages = list(replayed)
    repaired = repair_history(messages)
    return LoadedSession(session_id, records, messages, repaired, replayed)


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
