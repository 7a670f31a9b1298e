"""`kimicode -p PROMPT --branches N --verify CMD` and `kimicode branches list|show|apply|rm|resume`.

The headless run prints what `-p` prints (text: the chosen branch's answer; json: one result object),
with `branches`, `chosen` and the costs added; a one-line-per-branch table goes to stderr in text mode.
Exit codes: 0 a branch was chosen (and applied unless `--apply never`), 5 no branch passed the verify
command, 1 no branch finished (or the apply failed), 130/143 interrupted (resume with
`kimicode branches resume ID`).
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from kimicode.cli.headless import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TERMINATED,
    EXIT_USAGE,
    Printer,
    on_stop_signals,
    one_line,
)

EXIT_UNVERIFIED = 5
"""A verify command was given and no branch passed it (status `no_verified`)."""
ENGINES = ("local", "ray")


@dataclass(frozen=True)
class BranchFlags:
    """The exploration flags of a headless run."""

    n: int
    verify: str | None = None
    verify_timeout: float = 600.0
    pick: str = "auto"
    apply: str = "auto"
    models: tuple[str, ...] = ()
    thinking: tuple[str, ...] = ()
    judge_model: str | None = None
    engine: str = "local"
    address: str | None = None
    timeout: float | None = None

    def check(self) -> None:
        from kimicode.branches.choose import PICKS
        from kimicode.branches.explore import MAX_BRANCHES
        from kimicode.config.choices import EFFORTS

        if not 1 <= self.n <= MAX_BRANCHES:
            raise ValueError(f"--branches must be from 1 to {MAX_BRANCHES} (got {self.n})")
        if self.pick not in PICKS:
            raise ValueError(f"--pick must be one of {', '.join(PICKS)} (got {self.pick!r})")
        if self.apply not in ("auto", "never"):
            raise ValueError(f"--apply must be auto or never (got {self.apply!r})")
        if self.engine not in ENGINES:
            raise ValueError(f"--engine must be local or ray (got {self.engine!r})")
        bad = [t for t in self.thinking if t not in EFFORTS]
        if bad:
            raise ValueError(f"--branch-thinking takes {', '.join(EFFORTS)} (got {', '.join(bad)})")
        if self.verify is not None and not self.verify.strip():
            raise ValueError("--verify needs a command")


def branch_flags(n: int | None, *, ctx: Any, **given: Any) -> BranchFlags | None:
    """The exploration flags, checked; None without --branches (then the others are refused)."""
    if n is None:
        names = (
            "verify",
            "pick",
            "apply",
            "branch_models",
            "branch_thinking",
            "judge_model",
            "engine",
            "ray_address",
            "verify_timeout",
        )
        used = [f"--{name.replace('_', '-')}" for name in names if _given(ctx, name)]
        if used:
            raise ValueError(f"{', '.join(used)} go{'es' if len(used) == 1 else ''} with --branches N")
        return None
    flags = BranchFlags(
        n=n,
        verify=given["verify"],
        verify_timeout=given["verify_timeout"],
        pick=given["pick"],
        apply=given["apply"],
        models=split_list(given["models"]),
        thinking=split_list(given["thinking"]),
        judge_model=given["judge_model"],
        engine=given["engine"],
        address=given["address"],
    )
    flags.check()
    return flags


def _given(ctx: Any, name: str) -> bool:
    from kimicode.cli.options import given

    return given(ctx, "apply_" if name == "apply" else name)


def split_list(value: str | None) -> tuple[str, ...]:
    return tuple(p.strip() for p in (value or "").split(",") if p.strip())


def make_engine(flags: BranchFlags) -> Any:
    if flags.engine != "ray":
        return None
    from kimicode.batch.branch_ray import RayEngine

    return RayEngine(address=flags.address)


def branch_line(b: Any) -> str:
    """One line of the branch table (stderr, `kimicode branches list`)."""
    cost = f"${b.cost_usd:.4f}" if b.cost_usd is not None else "-"
    verified = {True: "yes", False: "no", None: "-"}[b.verified]
    extra = f"  {one_line(b.error, 80)}" if b.error and b.status not in ("verified", "done") else ""
    model = f"  {b.model}" if b.model else ""
    effort = f"/{b.thinking}" if b.thinking else ""
    return (
        f"{b.id:<12} {b.status:<11} verified {verified:<3}  {b.changed_lines:>5} lines  {cost:>9}  "
        f"cached {b.cached_share:>4.0%}{model}{effort}{extra}"
    )


def result_object(agent: Any, exploration: Any, duration_ms: int, error: str | None) -> dict[str, Any]:
    """The `result` object of a headless exploration: `-p`'s fields plus `branches`, `chosen` and costs."""
    rec = exploration.record
    chosen = exploration.chosen
    status = {"done": "success", "no_verified": "no_verified", "interrupted": "interrupted"}.get(rec.status, "error")
    if error and status == "success":
        status = "error"
    applied = exploration.applied
    entry = agent.checkpoints.last if applied is not None and agent.checkpoints is not None else None
    total = exploration.cost_usd
    return {
        "type": "result",
        "status": status,
        "result": exploration.answer(chosen) if chosen is not None else "",
        "session_id": agent.session_id,
        "num_turns": chosen.steps if chosen is not None else 0,
        "usage": dict(agent.usage),
        "cost_usd": round(total, 6) if total is not None else None,
        "duration_ms": duration_ms,
        "permission_denials": [],
        "error": error or (None if status == "success" else rec.reason),
        "changes": entry.changes.as_dict() if entry is not None and entry.before and entry.after else None,
        "checkpoint": entry.before if entry is not None else None,
        **exploration.to_dict(),
    }


async def run_branches(agent: Any, prompt: str | None, printer: Printer, flags: BranchFlags, resume: Any = None) -> int:
    """Run (or, with `resume`, finish) an exploration headless; Ctrl-C and SIGTERM stop it cleanly."""
    from kimicode.branches.explore import explore, resume_exploration
    from kimicode.errors import UsageError

    start = time.monotonic()
    stopped: list[signal.Signals] = []
    printer.init(agent)

    def on_update(b: Any) -> None:
        if printer.fmt == "stream-json":
            printer.line({"type": "branch", **b.result()})
        elif printer.verbose:
            printer.err.write(f"branch {branch_line(b)}\n")
            printer.err.flush()

    options: dict[str, Any] = {
        "judge_model": flags.judge_model,
        "apply": False,
        "engine": make_engine(flags),
        "on_update": on_update,
        "timeout": flags.timeout,
    }
    if resume is not None:
        work = resume_exploration(agent, resume, **options)
    else:
        work = explore(
            agent,
            prompt or "",
            n=flags.n,
            verify=flags.verify,
            verify_timeout=flags.verify_timeout,
            pick=flags.pick,
            models=flags.models,
            thinking=flags.thinking,
            **options,
        )
    task = asyncio.ensure_future(work)

    def on_signal(sig: signal.Signals) -> None:
        stopped.append(sig)
        if len(stopped) > 1:
            raise SystemExit(EXIT_TERMINATED if sig == signal.SIGTERM else EXIT_INTERRUPTED)
        task.cancel()

    release = on_stop_signals(on_signal)
    try:
        exploration = await task
    except asyncio.CancelledError:
        await agent.aclose()
        return _interrupted(agent, printer, stopped, start)
    except (UsageError, ValueError) as exc:
        await agent.aclose()
        typer.echo(f"kimicode: {exc}", err=True)
        return EXIT_USAGE
    finally:
        release()
    error = await _maybe_apply(exploration, printer, flags)
    await agent.aclose()
    result = result_object(agent, exploration, int((time.monotonic() - start) * 1000), error)
    _print(printer, result, exploration)
    if error:
        return EXIT_FAILURE
    return {"done": EXIT_OK, "no_verified": EXIT_UNVERIFIED}.get(exploration.status, EXIT_FAILURE)


async def _maybe_apply(exploration: Any, printer: Printer, flags: BranchFlags) -> str | None:
    """Apply the chosen branch (or the one picked at the terminal with `--pick ask`); the error, if any."""
    from kimicode.checkpoints.session import RestoreConflict
    from kimicode.checkpoints.store import CheckpointError
    from kimicode.errors import UsageError

    if flags.apply == "never":
        return None
    chosen = exploration.chosen
    if flags.pick == "ask" and sys.stdin.isatty() and sys.stderr.isatty():
        chosen = _ask(exploration)
    if chosen is None:
        return None
    try:
        await exploration.apply(chosen)
    except RestoreConflict as exc:
        return f"branch {chosen.id} not applied: changed in the workspace since the branches forked: " + ", ".join(
            exc.files[:10]
        )
    except (CheckpointError, UsageError, OSError) as exc:
        return f"branch {chosen.id} not applied: {exc}"
    return None


def _ask(exploration: Any) -> Any:
    pool = [b for b in exploration.branches if b.status in ("verified", "done", "failed")]
    if not pool:
        return None
    for i, b in enumerate(pool, 1):
        typer.echo(f"{i:>2}. {branch_line(b)}", err=True)
    raw = typer.prompt("apply which branch (number, or 0 for none)", default="0", err=True)
    try:
        pick = int(raw)
    except ValueError:
        return None
    return pool[pick - 1] if 1 <= pick <= len(pool) else None


def _print(printer: Printer, result: dict[str, Any], exploration: Any) -> None:
    if printer.fmt == "text":
        for b in exploration.branches:
            mark = "*" if b.id == exploration.record.chosen else " "
            printer.err.write(f"{mark} {branch_line(b)}\n")
        what = (
            f"applied branch {exploration.record.applied}"
            if exploration.record.applied
            else f"chose branch {exploration.record.chosen} (not applied)"
            if exploration.record.chosen
            else "no branch chosen"
        )
        per = result.get("cost_usd_per_verified")
        cost = f"; total ${result['cost_usd']:.4f}" if result.get("cost_usd") is not None else ""
        cost += f", ${per:.4f} per verified branch" if per is not None else ""
        if exploration.record.notice:
            printer.err.write(f"kimicode: note: {exploration.record.notice}\n")
        printer.err.write(f"kimicode: exploration {exploration.id}: {what}: {exploration.reason}{cost}\n")
        printer.err.flush()
    printer.result(result)


def _interrupted(agent: Any, printer: Printer, stopped: list[signal.Signals], start: float) -> int:
    from kimicode.branches.record import all_records

    recs = [r for r in all_records(agent.home) if r.parent_session == agent.session_id]
    ident = recs[-1].id if recs else "?"
    terminated = bool(stopped) and stopped[0] == signal.SIGTERM
    why = "terminated by SIGTERM" if terminated else "interrupted by user"
    hint = f"{why}; resume with: kimicode branches resume {ident}"
    result = {
        "type": "result",
        "status": "interrupted",
        "result": "",
        "session_id": agent.session_id,
        "error": hint,
        "exploration": ident,
        "duration_ms": int((time.monotonic() - start) * 1000),
        "branches": [b.result() for b in recs[-1].branches] if recs else [],
        "chosen": None,
    }
    printer.result(result)
    return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED


# -- kimicode branches ... ----------------------------------------------------------------------------

branches_app = typer.Typer(
    help="Explorations and their branches (kimicode -p ... --branches N).", no_args_is_help=True, rich_markup_mode=None
)


def _home() -> Path:
    from kimicode.config.endpoint import kimicode_home

    return kimicode_home()


def _fail(message: str, code: int = 1) -> typer.Exit:
    typer.echo(f"kimicode: {message}", err=True)
    return typer.Exit(code)


def _find(ident: str) -> tuple[Any, Any]:
    from kimicode.branches.record import find
    from kimicode.errors import UsageError

    try:
        return find(_home(), ident)
    except UsageError as exc:
        raise _fail(str(exc), 2) from None


@branches_app.command("list")
def list_command(
    all_: Annotated[bool, typer.Option("--all", "-a", help="Every workspace's explorations.")] = False,
    cwd: Annotated[Path, typer.Option("--cwd", "-C", help="Workspace whose explorations to list.")] = Path("."),
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per exploration.")] = False,
) -> None:
    """List explorations (of this workspace) and their branches; `*` marks the chosen branch."""
    from kimicode.branches.record import all_records

    here = str(cwd.expanduser().resolve())
    recs = [r for r in all_records(_home()) if all_ or r.workspace == here]
    if as_json:
        for r in recs:
            typer.echo(json.dumps(r.to_dict(), ensure_ascii=False))
        return
    if not recs:
        typer.echo("no explorations" + ("" if all_ else " in this workspace (--all lists every workspace's)"), err=True)
        return
    for r in recs:
        applied = f", applied {r.applied}" if r.applied else ""
        typer.echo(f"{r.id}  {r.status}{applied}  session {r.parent_session}  {one_line(r.prompt, 60)}")
        for b in r.branches:
            typer.echo(f"  {'*' if b.id == r.chosen else ' '} {branch_line(b)}")


@branches_app.command("show")
def show_command(
    ident: Annotated[str, typer.Argument(metavar="ID", help="A branch (or exploration) id, or a unique prefix.")],
    diff: Annotated[bool, typer.Option("--diff/--no-diff", help="Show the branch's changes.")] = True,
    color: Annotated[
        bool | None, typer.Option("--color/--no-color", help="Colour the diff (default: on a terminal).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="The branch as JSON.")] = False,
) -> None:
    """A branch's status, verify output and diff (an exploration: each of its branches)."""
    from kimicode.branches.exploration import branch_diff
    from kimicode.errors import UsageError

    rec, branch = _find(ident)
    shown = [branch] if branch is not None else rec.branches
    for b in shown:
        if as_json:
            typer.echo(json.dumps({**b.to_dict(), "exploration": rec.id}, ensure_ascii=False))
            continue
        typer.echo(f"branch {b.id} of exploration {rec.id} ({one_line(rec.prompt, 60)})")
        typer.echo(f"  {branch_line(b)}")
        where = (
            f"an overlay: `kimicode branches open {b.id}` puts its files in a worktree"
            if (b.tree or {}).get("kind") == "overlay"
            else f"workspace {b.workspace}"
        )
        typer.echo(f"  session {b.session_id}  {where}")
        if b.verify_output:
            typer.echo(f"  verify ({rec.verify}), last lines:")
            for line in b.verify_output.rstrip().splitlines()[-15:]:
                typer.echo(f"    {one_line(line, 200)}")
        if diff:
            try:
                text = branch_diff(_home(), b, color=sys.stdout.isatty() if color is None else color)
            except UsageError as exc:
                text = f"({exc})\n"
            typer.echo(text or "  (no changes)")


@branches_app.command("open")
def open_command(
    ident: Annotated[str, typer.Argument(metavar="ID", help="The branch whose files to open.")],
) -> None:
    """Print the directory holding a branch's files. A branch whose workspace is an overlay (its changed
    files only, seen by its own process) gets a git worktree on branch kimicode/branch-<session>-<k> (a
    plain directory outside git), made now from its last checkpoint; `kimicode branches rm` removes it."""
    from kimicode.branches.exploration import open_branch
    from kimicode.checkpoints.store import CheckpointError
    from kimicode.errors import UsageError

    rec, branch = _find(ident)
    if branch is None:
        raise _fail(f"{ident} is an exploration; name one of its branches: " + ", ".join(b.id for b in rec.branches), 2)
    try:
        typer.echo(str(open_branch(_home(), rec, branch)))
    except (CheckpointError, UsageError, OSError) as exc:
        raise _fail(f"cannot open branch {branch.id}: {exc}") from None


@branches_app.command("apply")
def apply_command(
    ident: Annotated[
        str, typer.Argument(metavar="ID", help="The branch to apply (or an exploration: its chosen branch).")
    ],
    force: Annotated[
        bool, typer.Option("--force", help="Overwrite files changed in the workspace since the branches forked.")
    ] = False,
    allow_runs_later: Annotated[
        bool,
        typer.Option(
            "--allow-runs-later",
            help="Also apply files that run "
            "later outside any sandbox (git internals, .claude/, .mcp.json, "
            "...), which are otherwise refused.",
        ),
    ] = False,
) -> None:
    """Apply a branch's changes to its session's workspace as one checkpointed change (`kimicode undo` takes
    it back); the session continues from the branch's history."""
    rec, branch = _find(ident)
    if branch is None:
        if not rec.chosen:
            raise _fail(
                f"exploration {rec.id} chose no branch ({rec.reason}); name one: kimicode branches show {rec.id}", 2
            )
        branch = rec.branch(rec.chosen)
    agent = _parent(rec)
    from kimicode.branches.exploration import apply_branch
    from kimicode.checkpoints.session import RestoreConflict
    from kimicode.checkpoints.store import CheckpointError
    from kimicode.errors import UsageError

    try:
        apply_branch(agent, rec, branch, None, force=force, runs_later=allow_runs_later)
    except RestoreConflict as exc:
        typer.echo(
            "kimicode: not applied: changed in the workspace since the branches forked (--force overwrites them):",
            err=True,
        )
        for name in exc.files:
            typer.echo(f"  {name}", err=True)
        raise typer.Exit(1) from None
    except (CheckpointError, UsageError) as exc:
        raise _fail(f"not applied: {exc}") from None
    finally:
        if agent.log is not None:
            agent.log.close()
    for kind, paths in (branch.changes or {}).items():
        for p in paths:
            typer.echo(f"{kind} {p}")
    typer.echo(
        f"applied branch {branch.id} to {rec.workspace} (session {rec.parent_session}; kimicode undo "
        f"--session {rec.parent_session} takes it back)",
        err=True,
    )


def _parent(rec: Any, **settings: Any) -> Any:
    from kimicode.agent.core import Agent
    from kimicode.agent.options import AgentOptions
    from kimicode.config.endpoint import ConfigError
    from kimicode.session.store import SessionError

    try:
        return Agent.resume(
            rec.parent_session,
            home=_home(),
            options=lambda ws: AgentOptions.from_workspace(ws, headless=True, **settings),
        )
    except (SessionError, ConfigError, ValueError) as exc:
        raise _fail(f"cannot open session {rec.parent_session}: {exc}") from None


@branches_app.command("rm")
def rm_command(
    idents: Annotated[list[str], typer.Argument(metavar="ID...", help="Branch or exploration ids.")],
) -> None:
    """Remove branches (an exploration: all of them): their worktrees, git branches, sessions and checkpoints.
    An applied branch's changes stay in the workspace."""
    from kimicode.branches.manage import remove_branch, remove_exploration

    for ident in idents:
        rec, branch = _find(ident)
        done = remove_exploration(_home(), rec) if branch is None else remove_branch(_home(), rec, branch)
        for line in done:
            typer.echo(line)


@branches_app.command("resume")
def resume_command(
    ident: Annotated[str, typer.Argument(metavar="ID", help="The interrupted exploration.")],
    output_format: Annotated[str, typer.Option("--output-format", help="text, json or stream-json.")] = "text",
    apply: Annotated[str, typer.Option("--apply", help="auto: apply the chosen branch; never.")] = "auto",
    engine: Annotated[str, typer.Option("--engine", help="local or ray.")] = "local",
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show progress on stderr.")] = False,
    permission_mode: Annotated[
        str,
        typer.Option(
            "--permission-mode",
            help="What may run without asking (as for -p; a resumed session does not keep its mode).",
        ),
    ] = "default",
    allow: Annotated[list[str] | None, typer.Option("--allow", metavar="RULE", help="As for -p.")] = None,
    deny: Annotated[list[str] | None, typer.Option("--deny", metavar="RULE", help="As for -p.")] = None,
    base_url: Annotated[str | None, typer.Option("--base-url", help="Endpoint (env KIMI_BASE_URL).")] = None,
) -> None:
    """Finish an interrupted exploration: finished branches are kept, the others continue from their logs.
    Give the permission flags the run had: a resumed session starts in the mode it is given."""
    rec, _ = _find(ident)
    if output_format not in ("text", "json", "stream-json"):
        raise _fail("--output-format must be text, json or stream-json", 2)
    flags = BranchFlags(n=max(1, len(rec.branches)), verify=rec.verify, pick=rec.pick, apply=apply, engine=engine)
    try:
        flags.check()
    except ValueError as exc:
        raise _fail(str(exc), 2) from None
    settings: dict[str, Any] = {
        "permission_mode": permission_mode,
        "allow": tuple(allow or ()),
        "deny": tuple(deny or ()),
    }
    if base_url:
        settings["base_url"] = base_url
    agent = _parent(rec, **settings)
    printer = Printer(output_format, verbose=verbose)
    raise typer.Exit(asyncio.run(run_branches(agent, None, printer, flags, resume=rec)))
