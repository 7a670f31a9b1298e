"""`kimicode sessions list|show|export|rm`, and what `-c`, `-r` and `--fork` resolve to (with the `-r` picker).

Errors (an unknown or ambiguous id) are one line on stderr with exit code 1; nothing here prints a
traceback.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Collection
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from kimicode.session.store import SessionInfo

sessions_app = typer.Typer(
    name="sessions",
    help="List, show, export and delete saved sessions (stored in KIMICODE_HOME/sessions).",
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

PICK = ""
"""The value of `-r/--resume` given without an id: pick one."""


def optional_resume_value(argv: list[str], takes_value: Collection[str]) -> list[str]:
    """Let `-r/--resume` stand without an id: `-r` followed by nothing or by another option means "pick".
    `takes_value`: the main command's options whose next word is their value (`firstprompt.value_options`,
    read from the command itself, so `--model -r` keeps `-r` as the model's value whatever options are added)."""
    if not argv or not argv[0].startswith("-"):
        return list(argv)  # a subcommand (`kimicode sessions ...`): its arguments are its own
    out: list[str] = []
    for i, arg in enumerate(argv):
        if arg == "--":
            return out + argv[i:]
        if arg in ("-r", "--resume") and not (out and out[-1] in takes_value):
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            if nxt is None or nxt.startswith("-"):
                out.append(f"--resume={PICK}")
                continue
        out.append(arg)
    return out


def _fail(message: str, code: int = 1) -> typer.Exit:
    typer.echo(f"kimicode: {message}", err=True)
    return typer.Exit(code)


def _home() -> Path:
    from kimicode.config.endpoint import kimicode_home

    return kimicode_home()


def _short_path(path: str) -> str:
    home = str(Path.home())
    return "~" + path[len(home) :] if path == home or path.startswith(home + os.sep) else path


def _table(sessions: list[SessionInfo], *, workspace: bool = True, numbered: bool = False) -> list[str]:
    from kimicode.session.store import human_size, one_line

    rows = []
    for n, info in enumerate(sessions, 1):
        cells = [f"{n:>3}"] if numbered else [f"{info.id:<22}"]
        cells += [
            info.started.astimezone().strftime("%Y-%m-%d %H:%M"),
            f"{info.turns:>5}",
            f"{human_size(info.size):>6}",
            f"{info.origin or '?':<11}",
        ]
        if workspace:
            path = _short_path(info.workspace or "?")
            cells.append(f"{path if len(path) <= 30 else '…' + path[-29:]:<30}")  # the end says most
        cells.append(one_line(info.first_prompt, 60) or "(no prompt)")
        rows.append("  ".join(cells))
        tree = info.fork_tree
        if tree:  # a fork with its own working tree: say where it is
            how = f"git worktree, branch {tree.get('branch')}" if tree.get("kind") == "worktree" else "copy"
            rows.append(f"{'':>3}  └ fork tree ({how}): {tree.get('workspace')}")
    head = ["  #" if numbered else f"{'ID':<22}", f"{'STARTED':<16}", "TURNS", f"{'SIZE':>6}", f"{'ORIGIN':<11}"]
    if workspace:
        head.append(f"{'WORKSPACE':<30}")
    head.append("FIRST PROMPT")
    return ["  ".join(head), *rows]


@sessions_app.command("list")
def list_command(
    here: Annotated[bool, typer.Option("--here", help="Only sessions of the current directory.")] = False,
    workspace: Annotated[
        Path | None, typer.Option("--workspace", "-w", help="Only sessions of this workspace.")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, help="Show at most this many.")] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
    origin: Annotated[
        list[Origin] | None,
        typer.Option(
            "--origin",
            help="Only sessions started this way: interactive, headless, library, acp or serve (repeatable).",
        ),
    ] = None,
    show_all: Annotated[
        bool, typer.Option("--all", "-a", help="Also sessions without a prompt (saved by older versions).")
    ] = False,
) -> None:
    """List saved sessions, most recently used first."""
    from kimicode.session.store import list_sessions

    where = workspace if workspace is not None else (Path.cwd() if here else None)
    sessions = list_sessions(_home(), where, include_empty=show_all)
    if origin:
        wanted = {o.value for o in origin}
        sessions = [s for s in sessions if s.origin in wanted]
    sessions = sessions[:limit]
    if as_json:
        for info in sessions:
            typer.echo(
                json.dumps(
                    {
                        "id": info.id,
                        "workspace": info.workspace,
                        "model": info.model,
                        "started": info.started.isoformat(),
                        "updated": info.updated.isoformat(),
                        "turns": info.turns,
                        "messages": info.messages,
                        "size": info.size,
                        "first_prompt": info.first_prompt,
                        "forked_from": info.forked_from,
                        "origin": info.origin or None,
                        "fork_tree": info.fork_tree,
                    },
                    ensure_ascii=False,
                )
            )
        return
    if not sessions:
        kinds = f" {'/'.join(o.value for o in origin)}" if origin else ""
        typer.echo(f"No saved{kinds} sessions" + (f" in {where}." if where is not None else "."))
        return
    for line in _table(sessions):
        typer.echo(line)


def _load(session_id: str) -> tuple[Any, Any]:
    from kimicode.session.store import SessionError, load_session, session_info

    try:
        session = load_session(_home(), session_id)
    except SessionError as exc:
        raise _fail(str(exc)) from None
    except OSError as exc:
        raise _fail(f"cannot read session {session_id}: {exc.strerror or exc}") from None
    return session, session_info(_home() / "sessions" / f"{session.session_id}.jsonl")


@sessions_app.command("show")
def show_command(
    session_id: Annotated[str, typer.Argument(metavar="ID", help="Session id (or a unique prefix).")],
) -> None:
    """Show a session's details and a short transcript."""
    from kimicode.session.export import describe, to_text

    session, info = _load(session_id)
    typer.echo(describe(info, session))
    transcript = to_text(session)
    if transcript:
        typer.echo("")
        typer.echo(transcript)


class Origin(StrEnum):
    interactive = "interactive"
    headless = "headless"
    library = "library"
    acp = "acp"
    serve = "serve"


class ExportFormat(StrEnum):
    markdown = "markdown"
    json = "json"


@sessions_app.command("export")
def export_command(
    session_id: Annotated[str, typer.Argument(metavar="ID", help="Session id (or a unique prefix).")],
    fmt: Annotated[ExportFormat, typer.Option("--format", "-f", help="markdown or json.")] = ExportFormat.markdown,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write to this file instead of stdout.")] = None,
    system: Annotated[bool, typer.Option("--system", help="Markdown: include the system prompt.")] = False,
) -> None:
    """Export a session's conversation as Markdown or JSON."""
    from kimicode.session.export import to_json, to_markdown

    session, info = _load(session_id)
    if fmt is ExportFormat.json:
        text = json.dumps(to_json(session, info), ensure_ascii=False, indent=2) + "\n"
    else:
        text = to_markdown(session, info, system=system)
    if output is None:
        sys.stdout.write(text)
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise _fail(f"cannot write {output}: {exc.strerror or exc}") from None
    typer.echo(f"wrote {output}", err=True)


@sessions_app.command("rm")
def rm_command(
    session_ids: Annotated[list[str], typer.Argument(metavar="ID...", help="Session ids (or unique prefixes).")],
    remove_worktree: Annotated[
        bool | None,
        typer.Option(
            "--remove-worktree/--keep-worktree",
            help="A fork's own working tree: remove it too, or keep it (default: ask in a terminal, else keep).",
        ),
    ] = None,
) -> None:
    """Delete saved sessions (their logs, spilled tool outputs and workspace checkpoints) and the branches of
    their explorations (worktrees, git branches, branch sessions)."""
    from kimicode.agent.checkpointing import forget_session
    from kimicode.session.store import SessionError, delete_session, find_session

    failed = False
    for session_id in session_ids:
        try:
            path = find_session(_home(), session_id)
            _fork_tree(path, remove_worktree)
            from kimicode.branches.manage import remove_for_session

            for line in remove_for_session(_home(), path.stem):  # its explorations' branches go with it
                typer.echo(line)
            warning = forget_session(_home(), path)  # its checkpoints go too
            if warning:
                typer.echo(f"kimicode: {warning}", err=True)
            typer.echo(f"deleted {delete_session(_home(), session_id)}")
        except SessionError as exc:
            typer.echo(f"kimicode: {exc}", err=True)
            failed = True
        except OSError as exc:
            typer.echo(f"kimicode: cannot delete {session_id}: {exc.strerror or exc}", err=True)
            failed = True
    if failed:
        raise typer.Exit(1)


def _fork_tree(log: Path, remove: bool | None) -> None:
    """Offer to remove a fork's own working tree along with its session (never without a yes or the flag)."""
    from kimicode.checkpoints.forks import remove_tree
    from kimicode.checkpoints.store import CheckpointError
    from kimicode.session.store import session_info

    tree = session_info(log).fork_tree
    if not tree or not Path(str(tree.get("root") or "")).exists():
        return
    if remove is None and sys.stdin.isatty():
        remove = typer.confirm(f"Also remove the fork's working tree {tree.get('root')}?", default=False)
    if not remove:
        typer.echo(f"kept the fork's working tree {tree.get('root')} (--remove-worktree removes it)", err=True)
        return
    try:
        typer.echo(remove_tree(tree))
    except (CheckpointError, OSError) as exc:
        typer.echo(f"kimicode: {exc}", err=True)


# -- -c / -r / --fork ---------------------------------------------------------------------------------


def pick_session(workspace: Path, *, limit: int = 20) -> str:
    """Ask on the terminal which session to resume (a numbered list with date, first prompt and size);
    terminal sessions come first, so headless one-shot runs do not push them off the list."""
    from kimicode.session.store import interactive_first, list_sessions

    sessions = list_sessions(_home(), workspace)
    everywhere = not sessions
    if everywhere:
        sessions = list_sessions(_home())
    if not sessions:
        raise _fail("no saved sessions to resume", 2)
    sessions = interactive_first(sessions)[:limit]
    where = "all workspaces" if everywhere else str(workspace)
    header, *rows = _table(sessions, workspace=everywhere, numbered=True)
    if sys.stdin.isatty() and sys.stderr.isatty():
        from kimicode.cli.picker import pick

        chosen = pick(f"Resume which session? ({where}; terminal sessions first)", header, rows)
        if chosen is None:
            raise _fail("no session picked", 1)
        return sessions[chosen].id
    typer.echo(f"Sessions ({where}), most recent first:", err=True)
    for line in (header, *rows):
        typer.echo(line, err=True)
    while True:
        try:
            answer = typer.prompt(
                f"Resume which session? [1-{len(sessions)}, Enter to cancel]", default="", show_default=False, err=True
            ).strip()
        except (EOFError, typer.Abort):
            answer = ""
        if not answer:
            raise _fail("no session picked", 1)
        if answer.isdigit() and 1 <= int(answer) <= len(sessions):
            return sessions[int(answer) - 1].id
        typer.echo(f"Type a number from 1 to {len(sessions)}.", err=True)


def resume_target(*, continue_: bool, resume: str | None, fork: bool, workspace: Path) -> str | None:
    """The session `-c`, `-r [ID]` and `--fork` select (None: a new session). Raises ValueError to report."""
    from kimicode.session.store import SessionError, find_session, latest_session

    if continue_ and resume is not None:
        raise SessionError("use either -c/--continue or -r/--resume, not both")
    if fork and not continue_ and resume is None:
        raise SessionError("--fork needs -c/--continue or -r/--resume ID")
    if continue_:
        info = latest_session(_home(), workspace)
        if info is None:
            raise SessionError(f"no session to continue in {workspace.resolve()} (see `kimicode sessions list`)")
        return info.id
    if resume is None:
        return None
    if resume == PICK:
        if not sys.stdin.isatty():
            raise SessionError(
                "-r/--resume needs a session id when not run in a terminal (see `kimicode sessions list`)"
            )
        return pick_session(workspace.resolve())
    return find_session(_home(), resume).stem
