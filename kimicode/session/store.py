"""Saved sessions on disk: list them, find one by id or prefix, load it, delete it.

Sessions live in `<KIMICODE_HOME>/sessions/<id>.jsonl` (see `kimicode.session.log` for the records),
with full copies of capped tool outputs in `<id>/` next to the log. Session ids start with their UTC
start time, so sorting ids sorts by age.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kimicode.config.endpoint import kimicode_home
from kimicode.errors import SessionError as SessionError  # a session that cannot be found or used (a ValueError)
from kimicode.prompts import user_words
from kimicode.session.log import LoadedSession, load


@dataclass(frozen=True)
class SessionInfo:
    """A one-line summary of a saved session (for `kimicode sessions list`, `/sessions`, the picker)."""

    id: str
    path: Path
    workspace: str
    model: str
    started: datetime
    """When the session began (UTC)."""
    updated: datetime
    """When its log was last written (UTC)."""
    turns: int
    """User prompts sent in the session."""
    messages: int
    """Message records in the log (what was committed, before any compaction)."""
    size: int
    """Bytes of the log."""
    first_prompt: str
    forked_from: str | None = None
    origin: str = ""
    """`interactive` (the terminal), `headless` (`kimicode -p`), `library`, or "" for logs written before
    kimicode recorded it. A session ever continued in the terminal counts as interactive."""
    fork_tree: dict[str, Any] | None = None
    """A fork's own working tree (`kind` worktree/copy, `root`, `workspace`, `repo`, `branch`), if it has one."""

    def __str__(self) -> str:
        when = self.started.astimezone().strftime("%Y-%m-%d %H:%M")
        turns = f"{self.turns} turn{'s' if self.turns != 1 else ''}"
        return f"{self.id}  {when}  {turns:>9}  {human_size(self.size):>6}  {one_line(self.first_prompt, 60)}"


def human_size(n: int) -> str:
    """1234567 -> `1.2M`."""
    size = float(n)
    for unit in ("B", "K", "M", "G"):
        if size < 1024 or unit == "G":
            return f"{size:.0f}{unit}" if unit == "B" else f"{size:.1f}{unit}"
        size /= 1024
    return f"{size:.1f}G"


def one_line(text: str, width: int) -> str:
    """The text on one line, cut to `width` characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def sessions_dir(home: str | Path | None = None) -> Path:
    """Where session logs live. `home` is KIMICODE_HOME (default: the environment's), or its
    `sessions/` directory itself."""
    base = Path(home).expanduser() if home is not None else kimicode_home()
    if base.name == "sessions" and not (base / "sessions").is_dir():
        return base
    return base / "sessions"


def _started(session_id: str, fallback: float) -> datetime:
    try:
        return datetime.strptime(session_id[:15], "%Y%m%d-%H%M%S").replace(tzinfo=UTC)
    except ValueError:
        return datetime.fromtimestamp(fallback, UTC)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


@dataclass
class _Summary:
    """What `session_info` gathers from a log's records, one record at a time."""

    meta: dict[str, Any] = field(default_factory=dict)
    model: str = ""
    first_prompt: str = ""
    turns: int = 0
    messages: int = 0
    forked_from: str | None = None
    fork_tree: dict[str, Any] | None = None
    origin: str = ""

    def wants(self, line: str) -> bool:
        """Whether `line` must be parsed (long assistant and tool records never are); counts messages."""
        if line.startswith('{"v": ') and '"type": "message"' in line[:60]:
            self.messages += 1
            return '"role": "user"' in line[:120] or not self.first_prompt
        return any(f'"type": "{t}"' in line[:60] for t in ("meta", "settings"))

    def add(self, rec: dict[str, Any]) -> None:
        kind = rec.get("type")
        said = rec.get("origin") if kind in ("meta", "settings") else None
        if isinstance(said, str) and (not self.origin or said == "interactive"):
            self.origin = said
        if kind == "meta" and not self.meta:
            self.meta = rec
            self.model = str(rec.get("model") or "")
        elif kind == "settings":
            self.settings(rec)
        elif kind == "message":
            msg = rec.get("message")
            if isinstance(msg, dict) and msg.get("role") == "user":
                self.turns += 1
                self.first_prompt = self.first_prompt or user_words(_text(msg.get("content")))

    def settings(self, rec: dict[str, Any]) -> None:
        self.model = str(rec.get("model") or self.model)
        if rec.get("forked_from"):
            self.forked_from = str(rec["forked_from"])
        if isinstance(rec.get("fork_tree"), dict):
            self.fork_tree = rec["fork_tree"]


def session_info(path: Path) -> SessionInfo:
    """Summarise one log, reading it line by line (only short records are fully parsed)."""
    st = path.stat()
    seen = _Summary()
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if not seen.wants(line):
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn last line
            if isinstance(rec, dict):
                seen.add(rec)
    return SessionInfo(
        id=path.stem,
        path=path,
        workspace=str(seen.meta.get("workspace") or ""),
        model=seen.model,
        started=_started(path.stem, st.st_mtime),
        updated=datetime.fromtimestamp(st.st_mtime, UTC),
        turns=seen.turns,
        messages=seen.messages,
        size=st.st_size,
        first_prompt=seen.first_prompt,
        forked_from=seen.forked_from,
        origin=seen.origin,
        fork_tree=seen.fork_tree,
    )


def list_sessions(
    home: str | Path | None = None, workspace: str | Path | None = None, *, include_empty: bool = False
) -> list[SessionInfo]:
    """Saved sessions, most recently used first; only those of `workspace` when given.

    Sessions without a prompt (left by versions that saved them) are skipped unless `include_empty`.
    """
    directory = sessions_dir(home)
    if not directory.is_dir():
        return []
    wanted = str(Path(workspace).expanduser().resolve()) if workspace is not None else None
    found: list[tuple[int, SessionInfo]] = []
    for path in directory.glob("*.jsonl"):
        try:
            info = session_info(path)
            mtime = path.stat().st_mtime_ns
        except OSError:
            continue  # deleted while listing
        if (wanted is None or info.workspace == wanted) and (include_empty or info.turns):
            found.append((mtime, info))
    found.sort(key=lambda pair: (pair[0], pair[1].id), reverse=True)
    return [info for _, info in found]


def latest_session(home: str | Path | None = None, workspace: str | Path | None = None) -> SessionInfo | None:
    """The most recently used session with a prompt (of `workspace`, when given), or None."""
    sessions = list_sessions(home, workspace)
    return sessions[0] if sessions else None


def interactive_first(sessions: list[SessionInfo]) -> list[SessionInfo]:
    """The same sessions with the terminal ones first (each group keeps its order): a picker is not
    flooded by headless one-shot runs."""
    return [s for s in sessions if s.origin == "interactive"] + [s for s in sessions if s.origin != "interactive"]


def find_session(home: str | Path | None, session_id: str) -> Path:
    """The log of a session given its id or a unique prefix of it; SessionError otherwise."""
    directory = sessions_dir(home)
    wanted = session_id.strip()
    if not wanted or "/" in wanted or "\\" in wanted or wanted.startswith("."):
        raise SessionError(f"not a session id: {session_id!r}")
    exact = directory / f"{wanted}.jsonl"
    if exact.is_file():
        return exact
    # a literal prefix: `*` or `[` in an id are not a pattern (`*` matched any one session, `**` raised)
    matches = sorted(p for p in directory.glob("*.jsonl") if p.stem.startswith(wanted)) if directory.is_dir() else []
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise SessionError(f"no session {wanted!r} (see `kimicode sessions list`)")
    names = ", ".join(p.stem for p in matches[:5])
    raise SessionError(f"{wanted!r} matches {len(matches)} sessions ({names}{', …' if len(matches) > 5 else ''})")


def load_session(home: str | Path | None, session_id: str) -> LoadedSession:
    """Load a session's valid history by id or unique prefix."""
    return load(find_session(home, session_id))


def delete_session(home: str | Path | None, session_id: str) -> str:
    """Delete a session's log and its spilled tool outputs; return the full id deleted.

    A session another process is writing is not deleted (SessionError saying which process)."""
    from kimicode.session.lock import SessionBusyError, SessionLock

    path = find_session(home, session_id)
    spill = path.with_suffix("")
    try:
        lock = SessionLock.acquire(path.parent, path.stem)
    except SessionBusyError as exc:
        raise SessionError(str(exc).split(":")[0] + ": wait for it to finish before deleting it") from None
    try:
        path.unlink()
        if spill.is_dir():
            shutil.rmtree(spill, ignore_errors=True)
    finally:
        lock.release()
        lock.path.unlink(missing_ok=True)
    return path.stem
