"""`/undo`, `/rewind` and `/diff` in the terminal (see docs/checkpoints.md).

A restore that would overwrite files changed outside kimicode shows them and asks first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text

from kimicode.checkpoints.session import Entry, RestoreConflict
from kimicode.checkpoints.store import CheckpointError
from kimicode.session.store import one_line

if TYPE_CHECKING:
    from kimicode.ui.app import Session

_WHAT = {"both": (True, True), "files": (True, False), "conversation": (False, True)}
_KEYS = "123456789abcdefghijklmopqrstuvwxz"


async def _ask_what(session: Session, title: str, arg: str, entry: Entry) -> tuple[bool, bool] | None:
    if arg in _WHAT:
        return _WHAT[arg]
    if arg:
        session.say(f"takes files, conversation or both (got {arg!r}).", "yellow")
        return None
    if entry.kind == "restore":
        return (True, False)
    cps = session.agent.checkpoints
    if cps is None or cps.files_anchor(entry) is None:
        return (False, True)  # no file changed since (or the changes were undone already)
    from kimicode.ui.approvals import Option, choose

    answer = await choose(title, [
        Option("both", "b", "Restore the files and take the turn(s) out of the conversation"),
        Option("files", "f", "Restore the files only"),
        Option("conversation", "c", "Take the turn(s) out of the conversation only"),
    ])  # fmt: skip
    return _WHAT.get(answer or "")


async def _restore(session: Session, entry: Entry, files: bool, conversation: bool) -> None:
    agent = session.agent
    try:
        try:
            result = await agent.rewind(
                entry.turn if entry.kind == "turn" else None, files=files, conversation=conversation
            )
        except RestoreConflict as exc:
            session.say("Changed outside kimicode since the agent last touched them:", "yellow")
            for name in exc.files:
                session.say(f"  {name!r}" if "\n" in name else f"  {name}", "yellow")
            from kimicode.ui.approvals import Option, choose

            answer = await choose("Overwrite them with the checkpoint's version?", [
                Option("yes", "y", "Yes, overwrite them"), Option("no", "n", "No, leave everything as it is (esc)"),
            ])  # fmt: skip
            if answer != "yes":
                session.say("Nothing was restored.", "dim")
                return
            result = await agent.rewind(
                entry.turn if entry.kind == "turn" else None, files=files, conversation=conversation, force=True
            )
    except CheckpointError as exc:
        session.say(f"Could not restore: {exc}", "red")
        return
    done = []
    if result.files:
        done.append(
            f"{len(result.files)} file(s) restored ({', '.join(result.files[:5])}"
            + ("…" if len(result.files) > 5 else "")
            + ")"
        )
    if result.messages_removed:
        done.append(f"{result.messages_removed} message(s) taken out of the conversation")
    session.say(
        (f"Undid {result.what}: " + "; ".join(done) + "." if done else "Nothing to restore.")
        + (" /undo again to undo this restore." if result.files else ""),
        "green",
    )


def _label(entry: Entry) -> str:
    if entry.kind == "restore":
        return f"{entry.prompt} ({len(entry.changes.paths())} file(s))"
    files = entry.changes.paths()
    shown = ", ".join(files[:3]) + ("…" if len(files) > 3 else "")
    if entry.undone:
        return f"turn {entry.turn}: {one_line(entry.prompt, 50)}  [files already undone]"
    return f"turn {entry.turn}: {one_line(entry.prompt, 50)}" + (f"  [{shown}]" if files else "  [no file changes]")


async def cmd_undo(session: Session, arg: str) -> None:
    cps = session.agent.checkpoints
    if cps is None:
        session.say("Checkpoints are disabled ([checkpoints] enabled = false).", "yellow")
        return
    live = cps.undoable()
    if not live:
        session.say("Nothing to undo in this session.")
        return
    entry = live[-1]
    what = await _ask_what(session, f"Undo {_label(entry)}", arg.strip(), entry)
    if what is not None:
        await _restore(session, entry, *what)


async def cmd_rewind(session: Session, arg: str) -> None:
    cps = session.agent.checkpoints
    if cps is None:
        session.say("Checkpoints are disabled ([checkpoints] enabled = false).", "yellow")
        return
    from kimicode.agent.checkpointing import conversation_has

    messages = session.agent.messages
    turns = [e for e in cps.entries if e.kind == "turn" and (not e.undone or conversation_has(messages, e))]
    turns = turns[-len(_KEYS) :]
    if not turns:
        session.say("No turn to rewind to in this session.")
        return
    from kimicode.ui.approvals import Option, choose

    options = [Option(str(e.turn), _KEYS[i], _label(e)) for i, e in enumerate(reversed(turns))]
    picked = await choose("Rewind to before which turn? (it and every later turn are undone)", options)
    entry = next((e for e in turns if str(e.turn) == picked), None)
    if entry is None:
        return
    what = await _ask_what(session, f"Rewind to before {_label(entry)}", arg.strip(), entry)
    if what is not None:
        await _restore(session, entry, *what)


async def cmd_diff(session: Session, arg: str) -> None:
    cps = session.agent.checkpoints
    if cps is None:
        session.say("Checkpoints are disabled ([checkpoints] enabled = false).", "yellow")
        return
    entry = None
    if arg.strip():
        if not arg.strip().isdigit():
            session.say(f"/diff takes a turn number (got {arg.strip()!r}).", "yellow")
            return
        entry = next((e for e in cps.entries if e.kind == "turn" and e.turn == int(arg)), None)
        if entry is None:
            session.say(f"No turn {arg.strip()} in this session.", "yellow")
            return
    try:
        text = cps.diff(entry, color=True)
    except CheckpointError as exc:
        session.say(f"Could not show the diff: {exc}", "red")
        return
    if not text:
        session.say("No file changes recorded" + (f" for turn {entry.turn}." if entry else " in this session."))
        return
    session.console.print(Text.from_ansi(text), highlight=False)


async def cmd_fork(session: Session, arg: str) -> None:
    """Continue in a fork of this conversation, by default in its own working tree."""
    from kimicode.checkpoints.forks import MODES

    mode = arg.strip() or "worktree"
    if mode not in MODES:
        session.say(f"/fork takes {', '.join(MODES)} (got {mode!r}).", "yellow")
        return
    old = session.agent
    try:
        child = old.fork(workspace=mode)
    except (CheckpointError, ValueError, RuntimeError, OSError) as exc:
        session.say(f"Could not fork: {exc}", "red")
        return
    await session.continue_in(child)
    where = "the same working tree" if mode == "shared" else f"its own working tree {child.workspace}"
    session.say(
        f"Forked {old.session_id} into {child.session_id}, working in {where}. "
        f"`kimicode -r {old.session_id}` goes back to the original.",
        "green",
    )
