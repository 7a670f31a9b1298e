"""Saved sessions on disk: list them, find one by id or prefix, load it, delete it.

Sessions live in `<KIMICODE_HOME>/sessions/<id>.jsonl` (see `kimicode.session.log` for the records),
with full copies of capped tool outputs in `<id>/` next to the log. Session ids start with their UTC
start time, so sorting ids sorts by age.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
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


def session_info(path: Path) -> SessionInfo:
    """Summarise one log, reading it line by line (only short records are fully parsed)."""
    st = path.stat()
    meta: dict[str, Any] = {}
    model = ""
    first_prompt = ""
    turns = messages = 0
    forked_from: str | None = None
    fork_tree: dict[str, Any] | None = None
    origin = ""
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            is_message = line.startswith('{"v": ') and '"type": "message"' in line[:60]
            if is_message:
                messages += 1
                if '"role": "user"' not in line[:120] and first_prompt:
                    continue  # skip parsing long assistant/tool records
            elif not any(f'"type": "{t}"' in line[:60] for t in ("meta", "settings")):
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn last line
            if not isinstance(rec, dict):
                continue
            kind = rec.get("type")
            said = rec.get("origin") if kind in ("meta", "settings") else None
            if isinstance(said, str) and (not origin or said == "interactive"):
                origin = said
            if kind == "meta" and not meta:
                meta = rec
                model = str(rec.get("model") or "")
            elif kind == "settings":
                model = str(rec.get("model") or model)
                if rec.get("forked_from"):
                    forked_from = str(rec["forked_from"])
                if isinstance(rec.get("fork_tree"), dict):
                    fork_tree = rec["fork_tree"]
            elif kind == "message":
                msg = rec.get("message")
                if isinstance(msg, dict) and msg.get("role") == "user":
                    turns += 1
                    if not first_prompt:
                        first_prompt = user_words(_text(msg.get("content")))
    return SessionInfo(
        id=path.stem,
        path=path,
        workspace=str(meta.get("workspace") or ""),
        model=model,
        started=_started(path.stem, st.st_mtime),
        updated=datetime.fromtimestamp(st.st_mtime, UTC),
        turns=turns,
        messages=messages,
        size=st.st_size,
        first_prompt=first_prompt,
        forked_from=forked_from,
        origin=origin,
        fork_tree=fork_tree,
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
