"""Where the agent's turn loop meets the checkpoints: open, before a change, end of turn, rewind."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kimicode.agent.events import Event, Notice
from kimicode.checkpoints.session import Entry, SessionCheckpoints
from kimicode.checkpoints.store import CheckpointError

if TYPE_CHECKING:
    from kimicode.agent.core import Agent


@dataclass
class RewindResult:
    """What `agent.rewind` did."""

    turn: int
    files: list[str] = field(default_factory=list)
    """Files put back (or deleted) in the workspace."""
    messages_removed: int = 0
    checkpoint: str | None = None
    """The snapshot taken just before the restore (undo the undo with `/undo` again)."""


def open_checkpoints(agent: Agent) -> SessionCheckpoints | None:
    """The session's checkpoints, unless `[checkpoints] enabled = false`; finishes an interrupted restore."""
    cfg = agent.settings.table("checkpoints")
    if cfg.get("enabled", True) is False:
        return None
    cps = SessionCheckpoints.open(agent.home, agent.workspace, agent.session_id, agent.log, cfg)
    try:
        note = cps.store.recover()
    except (CheckpointError, OSError) as exc:
        note = f"an interrupted checkpoint restore could not be finished: {exc}"
    if note:
        agent._notices.append(Notice(note, "warning"))
    return cps


async def before_change(agent: Agent, emit: Callable[[Event], None]) -> None:
    assert agent.checkpoints is not None
    warning = await asyncio.to_thread(agent.checkpoints.before_change)
    if warning:
        emit(Notice(warning, "warning"))


def end_turn(agent: Agent, emit: Callable[[Event], None]) -> None:
    assert agent.checkpoints is not None
    cps = agent.checkpoints
    had = cps.warning
    cps.end_turn()
    if cps.warning and cps.warning != had:
        emit(Notice(cps.warning, "warning"))


def _drop_conversation(agent: Agent, entry: Entry) -> int:
    at = entry.at
    msgs = agent.messages
    if not 0 < at < len(msgs) or msgs[at].get("role") != "user":
        raise CheckpointError(
            f"the conversation changed since turn {entry.turn} (compacted?): it cannot be rewound, only files"
        )
    content = msgs[at].get("content")
    if isinstance(content, str) and entry.prompt and not content.startswith(entry.prompt[:500]):
        raise CheckpointError(f"the conversation changed since turn {entry.turn} (compacted?): rewind only the files")
    removed = len(msgs) - at
    if agent.log:
        agent.log.append({"type": "compaction", "reason": "rewind", "start": at, "end": len(msgs), "messages": []})
        agent.log.sync()
    del msgs[at:]
    agent.context.used = agent.context.estimate(agent.messages, agent.tools.schemas())
    return removed


async def rewind(agent: Agent, turn: int | None, *, files: bool, conversation: bool, force: bool) -> RewindResult:
    """See `Agent.rewind`."""
    cps = agent.checkpoints
    if cps is None:
        raise CheckpointError("checkpoints are disabled ([checkpoints] enabled = false)")
    entry = cps.find(turn)
    result = RewindResult(entry.turn)
    if conversation and entry.kind == "turn":
        _drop_conversation_check(agent, entry)
    if files and entry.before is not None:
        rec = await asyncio.to_thread(cps.restore, entry, force=force)
        result.files, result.checkpoint = rec.changes.paths(), rec.before
    elif files and not conversation:
        raise CheckpointError(f"turn {entry.turn} has no checkpoint: it changed no files, or the store failed")
    else:
        for e in cps.undoable()[cps.undoable().index(entry):]:
            e.undone = True
            if cps.log is not None:
                cps.log.append(e.record())
    if conversation and entry.kind == "turn":
        result.messages_removed = _drop_conversation(agent, entry)
    return result


def _drop_conversation_check(agent: Agent, entry: Entry) -> None:
    """Fail before touching any file when the conversation part cannot be done."""
    at = entry.at
    if not 0 < at < len(agent.messages) or agent.messages[at].get("role") != "user":
        raise CheckpointError(
            f"the conversation changed since turn {entry.turn} (compacted?): rewind only the files (files only)"
        )


def checkpoint_summary(changes: Any) -> str:
    """`3 files changed (1 added, 2 modified)` for notices and listings."""
    added, modified, deleted = (len(changes.get(k) or []) for k in ("added", "modified", "deleted"))
    total = added + modified + deleted
    parts = [f"{n} {what}" for n, what in ((added, "added"), (modified, "modified"), (deleted, "deleted")) if n]
    return f"{total} file{'s' if total != 1 else ''} changed" + (f" ({', '.join(parts)})" if parts else "")
