"""`kimicode undo`, `kimicode sessions diff` and `kimicode checkpoints du`: checkpoints from the shell,
without a model.

Both work on the session log directly (no endpoint or key needed). A restore that would overwrite a
file changed outside kimicode is refused with exit 1, naming the files, unless `--force`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from kimicode.cli.sessions import sessions_app

checkpoints_app = typer.Typer(
    help="The workspaces' checkpoint stores (KIMICODE_HOME/checkpoints).", no_args_is_help=True
)


def _fail(message: str, code: int = 1) -> typer.Exit:
    typer.echo(f"kimicode: {message}", err=True)
    return typer.Exit(code)


def open_session(session_id: str | None, cwd: Path) -> tuple[Path, object]:
    """The log path and the SessionCheckpoints of a session (default: the latest one of `cwd`)."""
    from kimicode.agent.checkpointing import open_for_log
    from kimicode.config.endpoint import kimicode_home
    from kimicode.session.store import SessionError, find_session, latest_session

    home = kimicode_home()
    try:
        if session_id is None:
            latest = latest_session(home, cwd.resolve())
            if latest is None:
                raise _fail(f"no saved session in {cwd.resolve()}; name one with --session ID")
            path = latest.path
        else:
            path = find_session(home, session_id)
        return path, open_for_log(home, path)
    except SessionError as exc:
        raise _fail(str(exc)) from None
    except (OSError, ValueError) as exc:
        raise _fail(f"cannot open the session: {exc}") from None


def undo_command(
    session: Annotated[
        str | None,
        typer.Option("--session", "-s", metavar="ID", help="Session id or prefix (default: the latest here)."),
    ] = None,
    turn: Annotated[int | None, typer.Option("--turn", "-t", help="Undo this turn and every later one.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite files changed outside kimicode too.")] = False,
    files_only: Annotated[bool, typer.Option("--files-only", help="Keep the conversation as it is.")] = False,
    conversation_only: Annotated[bool, typer.Option("--conversation-only", help="Keep the files as they are.")] = False,
    cwd: Annotated[Path, typer.Option("--cwd", "-C", help="Workspace whose latest session to use.")] = Path("."),
) -> None:
    """Undo the last turn of a session (or --turn N and later): restore its files and drop it from the
    conversation. Refuses (exit 1) when a file changed outside kimicode since, unless --force."""
    from kimicode.agent.checkpointing import undo_in_log
    from kimicode.checkpoints.session import RestoreConflict
    from kimicode.checkpoints.store import CheckpointError

    if files_only and conversation_only:
        raise _fail("--files-only and --conversation-only exclude each other", 2)
    path, cps = open_session(session, cwd)
    try:
        result = undo_in_log(path, cps, turn, files=not conversation_only, conversation=not files_only, force=force)
    except RestoreConflict as exc:
        typer.echo(
            f"kimicode: not restored: {len(exc.files)} file(s) changed outside kimicode since the agent "
            "last touched them (use --force to overwrite them):",
            err=True,
        )
        for name in exc.files:
            typer.echo(f"  {name!r}" if "\n" in name else f"  {name}", err=True)
        raise typer.Exit(1) from None
    except CheckpointError as exc:
        raise _fail(str(exc)) from None
    for name in result.files:
        typer.echo(f"restored {name}")
    what = result.what or f"turn {result.turn}"
    parts = [f"{len(result.files)} file(s) restored"] if not conversation_only else []
    if result.messages_removed:
        parts.append(f"{result.messages_removed} message(s) taken out of the conversation")
    typer.echo(f"undid {what} of {path.stem}: " + (", ".join(parts) or "nothing to restore"), err=True)


@sessions_app.command("diff")
def diff_command(
    session_id: Annotated[str, typer.Argument(metavar="ID", help="Session id (or a unique prefix).")],
    turn: Annotated[int | None, typer.Option("--turn", "-t", help="Only this turn's changes.")] = None,
    color: Annotated[
        bool | None, typer.Option("--color/--no-color", help="Default: when stdout is a terminal.")
    ] = None,
) -> None:
    """What a session (or one turn of it) changed in the workspace, as a unified diff."""
    from kimicode.checkpoints.session import SessionCheckpoints
    from kimicode.checkpoints.store import CheckpointError

    _, cps = open_session(session_id, Path("."))
    assert isinstance(cps, SessionCheckpoints)
    use_color = sys.stdout.isatty() if color is None else color
    try:
        if turn is not None:
            entry = next((e for e in cps.entries if e.kind == "turn" and e.turn == turn), None)
            if entry is None:
                raise _fail(f"session {session_id} has no turn {turn}")
            text = cps.diff(entry, color=use_color)
        else:
            text = cps.diff(color=use_color)
    except CheckpointError as exc:
        raise _fail(str(exc)) from None
    if not text:
        typer.echo("no file changes recorded" + (f" for turn {turn}" if turn is not None else ""), err=True)
        return
    sys.stdout.write(text)


@checkpoints_app.command("du")
def du_command(
    every: Annotated[bool, typer.Option("--all", "-a", help="Every workspace's store, largest first.")] = False,
    cwd: Annotated[Path, typer.Option("--cwd", "-C", help="The workspace whose store to show.")] = Path("."),
) -> None:
    """What the checkpoint store of this workspace (or of every one) holds on disk: its size, snapshots and
    sessions, packs and loose objects. A store is compacted in the background after a large first
    snapshot and pruned once a day by `[checkpoints] max_age_days` / `max_store_mb`."""
    from kimicode.checkpoints.store import store_dir
    from kimicode.checkpoints.upkeep import usage
    from kimicode.config.endpoint import kimicode_home

    root = kimicode_home() / "checkpoints"
    dirs = sorted(root.iterdir()) if every and root.is_dir() else [store_dir(kimicode_home(), cwd.resolve())]
    rows = [usage(d) for d in dirs if (d / "git").is_dir()]
    if not rows:
        typer.echo("no checkpoint store" + ("s" if every else f" for {cwd.resolve()}"), err=True)
        return
    for u in sorted(rows, key=lambda u: -u.bytes):
        where = u.workspace or "(no snapshot kept)"
        typer.echo(
            f"{u.bytes / 1e6:10.1f} MB  {where}  {u.snapshots} checkpoint(s) of {u.sessions} session(s), "
            f"{u.packs} pack(s), {u.loose} loose object(s)  [{u.dir}]"
        )
    if len(rows) > 1:
        typer.echo(f"{sum(u.bytes for u in rows) / 1e6:10.1f} MB  in all")
