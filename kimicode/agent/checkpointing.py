"""Where the agent's turn loop meets the checkpoints: open, before a change, end of turn, rewind."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kimicode.checkpoints.session import Entry, SessionCheckpoints
from kimicode.checkpoints.store import CheckpointError
from kimicode.events import Event, Notice
from kimicode.prompts import user_words

if TYPE_CHECKING:
    from kimicode.agent.core import Agent
    from kimicode.agent.options import AgentOptions
    from kimicode.agent.parts import Resolved
    from kimicode.session.log import SessionLog
    from kimicode.tools.registry import ToolRegistry


@dataclass
class RewindResult:
    """What `agent.rewind` did."""

    turn: int
    files: list[str] = field(default_factory=list)
    """Files put back (or deleted) in the workspace."""
    messages_removed: int = 0
    checkpoint: str | None = None
    """The snapshot taken just before the restore (undo the undo with `/undo` again)."""
    what: str = ""
    """What was undone, in words: `turn 2`, or `restore 1 (undo of turn 2), so the files of turn 2 are back`."""


def open_checkpoints(
    r: Resolved, o: AgentOptions, log: SessionLog | None, warn: Callable[[str], None]
) -> SessionCheckpoints | None:
    """The session's checkpoints, unless `[checkpoints] enabled = false`; finishes an interrupted restore,
    starts storing the workspace in the background (`[checkpoints] warm_at_open`: the terminal, `-p`, ACP
    and the library alike, so a large tree's first snapshot overlaps the model's first request) and the
    automatic prune (`[checkpoints] auto_prune`, on unless the library is hermetic)."""
    cfg = r.settings.config.checkpoints
    if not cfg.enabled:
        return None
    cps = SessionCheckpoints.open(r.home, r.workspace, r.session_id, log, cfg)
    try:
        note = cps.store.recover()
    except (CheckpointError, OSError) as exc:
        note = f"an interrupted checkpoint restore could not be finished: {exc}"
    if note:
        warn(note)
    if cfg.warm_at_open and o.permission_mode != "plan":
        cps.warm()  # every face: the first snapshot overlaps the model's first request (plan mode changes nothing)
    auto = cfg.auto_prune
    if auto is True or (auto is None and o.config is not None):
        cps.auto_prune(cfg, r.home / "sessions", warn)
    return cps


def may_change(tool: Any, args: Mapping[str, Any], tools: ToolRegistry, subagent_tools: Sequence[str] | None) -> bool:
    """Whether a call can change the workspace: edit and execute tools, and a subagent given one (the tools
    it names, else `subagent_tools`, the configured default)."""
    if tool.kind in ("edit", "execute"):
        return True
    if tool.name == "task":
        names = args.get("tools") or subagent_tools or ()
        return any((t := tools.get(str(n))) is not None and t.kind in ("edit", "execute") for n in names)
    return False


def known_writes(tool: Any, args: Mapping[str, Any], ctx: Any, hooked: bool) -> list[str] | None:
    """What a call may change in the workspace, for `SessionCheckpoints.note`: nothing for a read tool,
    the workspace-relative files of kimicode's own edit tools (write_file, edit_file, apply_patch), and
    None (unknown) for anything else or when hooks run around calls (a hook may run any command)."""
    from kimicode.permissions.pathresolve import approved_paths
    from kimicode.tools.files import EDIT_FILE, WRITE_FILE
    from kimicode.tools.patch import APPLY_PATCH

    if tool.kind == "read" and not hooked:
        return []
    if hooked or tool not in (WRITE_FILE, EDIT_FILE, APPLY_PATCH):
        return None
    workspace = ctx.workspace.resolve()
    found: list[str] = []
    for path in approved_paths(tool, args, ctx):
        if path.is_relative_to(workspace) and path != workspace:
            found.append(path.relative_to(workspace).as_posix())
    return found


async def before_change(cps: SessionCheckpoints, emit: Callable[[Event], None]) -> None:
    """A snapshot before the turn's first change (in a thread: it reads the workspace)."""
    if cps.log is not None:  # what the thread logs goes to a caller's store on this loop (session/log.py)
        cps.log.loop = asyncio.get_running_loop()
    warning = await asyncio.to_thread(cps.before_change)
    if warning:
        emit(Notice(warning, "warning"))


def end_turn(cps: SessionCheckpoints | None, emit: Callable[[Event], None]) -> None:
    """The turn's checkpoint (none when they are off); a new warning of the store is emitted."""
    if cps is None:
        return
    had = cps.warning
    cps.end_turn()
    if cps.warning and cps.warning != had:
        emit(Notice(cps.warning, "warning"))


def _check_conversation(messages: list[dict[str, Any]], entry: Entry) -> None:
    """Fail before touching any file when the turn's user message is no longer where it was."""
    if not conversation_has(messages, entry):
        raise CheckpointError(
            f"the conversation changed since turn {entry.turn} (compacted?): rewind only the files (files only)"
        )


def conversation_has(messages: list[dict[str, Any]], entry: Entry) -> bool:
    """Whether `entry`'s user message is still where it was in the history (not cut or compacted away)."""
    at = entry.at
    if not (0 < at < len(messages) and messages[at].get("role") == "user"):
        return False
    content = messages[at].get("content")
    return not (isinstance(content, str) and entry.prompt and not user_words(content).startswith(entry.prompt[:500]))


def rewind_core(
    cps: SessionCheckpoints,
    messages: list[dict[str, Any]],
    turn: int | None,
    *,
    files: bool,
    conversation: bool,
    force: bool,
) -> tuple[RewindResult, Entry]:
    """Restore files (when asked) and check the conversation can be cut; the caller cuts it.

    Going back to before a turn puts back the files of that turn and of every later one, even when the
    turn itself changed none (the first later turn that did is restored from). A turn whose files were
    undone already can still be rewound in the conversation."""
    entry = cps.find(turn, undone_too=conversation and turn is not None)
    if entry.undone and not conversation_has(messages, entry):
        raise CheckpointError(f"turn {entry.turn} was already undone")
    result = RewindResult(entry.turn, what=cps.describe(entry))
    if conversation and entry.kind == "turn":
        _check_conversation(messages, entry)
    anchor = cps.files_anchor(entry) if files else None
    if anchor is not None:
        rec = cps.restore(anchor, force=force)
        if anchor is not entry:  # the turns between changed no files: nothing to put back for them
            cps.mark_undone_from(entry, until=anchor)
        result.files, result.checkpoint = rec.changes.paths(), rec.before
    elif files and not conversation:
        raise CheckpointError(f"turn {entry.turn} has no checkpoint: it changed no files, or the store failed")
    else:
        cps.mark_undone_from(entry)
    if conversation and entry.kind == "turn":
        result.messages_removed = len(messages) - entry.at
        if cps.log is not None:
            cps.log.append(
                {"type": "compaction", "reason": "rewind", "start": entry.at, "end": len(messages), "messages": []}
            )
            cps.log.sync()
    return result, entry


async def rewind(agent: Agent, turn: int | None, *, files: bool, conversation: bool, force: bool) -> RewindResult:
    """See `Agent.rewind`."""
    cps = agent.checkpoints
    if cps is None:
        raise CheckpointError("checkpoints are disabled ([checkpoints] enabled = false)")
    if cps.log is not None:  # what the thread logs goes to a caller's store on this loop (session/log.py)
        cps.log.loop = asyncio.get_running_loop()
    result, entry = await asyncio.to_thread(
        rewind_core, cps, agent.messages, turn, files=files, conversation=conversation, force=force
    )
    if result.messages_removed:
        del agent.messages[entry.at :]
        agent.context.used = agent.context.estimate(agent.messages, agent.tools.schemas())
    return result


def open_for_log(home: Path, path: Path) -> SessionCheckpoints:
    """The checkpoints of a saved session (for the shell commands), appending to its log."""
    from kimicode.config.settings import load_settings
    from kimicode.session.log import SessionLog, load

    session = load(path)
    logged = session.settings  # what the session log recorded
    workspace = Path(str(logged.get("workspace") or "."))
    if not workspace.is_dir():
        raise CheckpointError(f"the session's workspace {workspace} no longer exists")
    cfg = load_settings(workspace, home).config.checkpoints
    cps = SessionCheckpoints.open(home, workspace, path.stem, SessionLog(path.parent, path.stem), cfg)
    note = cps.store.recover()
    if note:
        sys.stderr.write(f"kimicode: {note}\n")
    return cps


def undo_in_log(
    path: Path, cps: Any, turn: int | None, *, files: bool, conversation: bool, force: bool
) -> RewindResult:
    """`kimicode undo`: rewind a saved session's files and log (the conversation as the log replays it)."""
    from kimicode.session.log import load

    assert isinstance(cps, SessionCheckpoints)
    try:
        result, _ = rewind_core(cps, load(path).replayed, turn, files=files, conversation=conversation, force=force)
    finally:
        if cps.log is not None:
            cps.log.close()
    return result


def forget_session(home: Path, log_path: Path) -> str | None:
    """Before `sessions rm`: drop the session's checkpoints from its workspace's store and prune the store
    (objects no other session needs, and refs older than `[checkpoints] max_age_days`, 30 by default).
    Returns a warning sentence when that failed (the session is deleted all the same)."""
    from kimicode.checkpoints.store import CheckpointStore
    from kimicode.checkpoints.upkeep import Limits
    from kimicode.config.sections import Checkpoints
    from kimicode.config.settings import load_settings
    from kimicode.session.log import iter_records

    try:
        meta = next((r for r in iter_records(log_path) if r.get("type") == "meta"), {})
        workspace = Path(str(meta.get("workspace") or ""))
        if not meta.get("workspace"):
            return None
        store = CheckpointStore(home, workspace)
        if not store.git_dir.exists():
            return None
        cfg = load_settings(workspace, home).config.checkpoints if workspace.is_dir() else Checkpoints()
        limits = Limits.from_settings(cfg)
        store.drop_session(log_path.stem)
        store.prune(limits.max_age_days, limits.max_store_mb)
    except (CheckpointError, OSError, ValueError) as exc:
        return f"could not prune the session's checkpoints: {exc}"
    return None
