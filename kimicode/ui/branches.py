"""`/branches N [verify command]` and `/branches` in the terminal (see docs/branches.md).

`/branches N [CMD]` asks for the prompt, runs it in N branches with a live table (status, step, tests,
changed lines, cost), then opens a picker: each branch with its verify result; choosing one shows its
diff and offers to apply it (one checkpointed change: /undo takes it back). Esc or Ctrl-C stops the
exploration (`kimicode branches resume ID` finishes it). `/branches` lists the session's explorations.
Branches ask nothing while they run (the live table cannot host a question): what the rules and the
permission mode do not allow is refused, as in a headless run.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from rich.live import Live
from rich.table import Table
from rich.text import Text

from kimicode.events import StepStarted
from kimicode.session.store import one_line

if TYPE_CHECKING:
    from kimicode.branches.exploration import Exploration
    from kimicode.branches.record import Branch
    from kimicode.ui.app import Session

USAGE = "/branches N [verify command], e.g. /branches 3 pytest -q; /branches alone lists them"
_STYLE = {
    "verified": "green",
    "done": "green",
    "failed": "red",
    "error": "red",
    "crashed": "red",
    "interrupted": "yellow",
    "running": "cyan",
    "verifying": "cyan",
    "pending": "dim",
}


def parse(arg: str) -> tuple[int, str | None]:
    """(N, verify command or None) from `/branches`' argument; ValueError with the usage otherwise."""
    head, _, rest = arg.strip().partition(" ")
    if not head.isdigit() or not 1 <= int(head) <= 16:
        raise ValueError(f"usage: {USAGE} (N from 1 to 16)")
    return int(head), rest.strip() or None


def table(branches: list[Branch], steps: dict[str, int], chosen: str | None = None) -> Table:
    t = Table(box=None, pad_edge=False, show_edge=False)
    for col in ("branch", "status", "step", "tests", "changed lines", "cost", "cached", "model"):
        t.add_column(col, justify="right" if col in ("step", "changed lines", "cost", "cached") else "left")
    for b in branches:
        tests = {
            True: Text("pass", "green"),
            False: Text("timeout" if b.verify_timed_out else "fail", "red"),
            None: Text("-", "dim"),
        }[b.verified]
        cost = f"${b.cost_usd:.4f}" if b.cost_usd is not None else "-"
        mark = "* " if b.id == chosen else "  "
        t.add_row(
            mark + b.id,
            Text(b.status, _STYLE.get(b.status, "")),
            str(steps.get(b.id, b.steps) or "-"),
            tests,
            str(b.changed_lines) if b.finished else "-",
            cost,
            f"{b.cached_share:.0%}" if b.usage else "-",
            "/".join(x for x in (b.model, b.thinking) if x) or "",
        )
    return t


async def cmd_branches(session: Session, arg: str) -> None:
    if not arg.strip():
        list_explorations(session)
        return
    try:
        n, verify = parse(arg)
    except ValueError as exc:
        session.say(str(exc), "yellow")
        return
    what = f" (verify: {verify})" if verify else " (no verify command: the smallest finished branch is proposed)"
    session.say(f"Type the prompt to run in {n} branches{what}; an empty line cancels.", "cyan")
    try:
        prompt = await session.read_input()
    except (KeyboardInterrupt, EOFError):
        prompt = ""
    if not prompt.strip():
        session.say("No exploration started.", "dim")
        return
    exploration = await explore_live(session, prompt, n, verify)
    if exploration is not None:
        await pick(session, exploration)


async def explore_live(session: Session, prompt: str, n: int, verify: str | None) -> Exploration | None:
    """Run the exploration with the live table; None when it was stopped or could not start."""
    from kimicode.errors import UsageError

    steps: dict[str, int] = {}
    seen: dict[str, Branch] = {}
    live = Live(
        Text("forking…", "dim"),
        console=session.console,
        refresh_per_second=4,
        transient=False,
        auto_refresh=not session.plain,
    )

    def redraw(b: Branch | None = None) -> None:
        if b is not None:
            seen[b.id] = b
        live.update(table(sorted(seen.values(), key=lambda x: x.k), steps))

    def on_event(b: Branch, event: Any) -> None:
        if isinstance(event, StepStarted):
            steps[b.id] = steps.get(b.id, 0) + 1
            redraw(b)

    work = session.agent.explore(
        prompt, n=n, verify=verify, apply=False, on_update=redraw, on_event=on_event, approve=None
    )
    try:
        with live:
            return await session.run_cancellable(work)
    except asyncio.CancelledError:
        ident = next(iter(seen.values())).id.rsplit("-", 1)[0] if seen else "?"
        session.say(
            f"Stopped. The finished branches are kept; `kimicode branches resume {ident}` finishes the others.",
            "yellow",
        )
    except (UsageError, ValueError) as exc:
        session.say(str(exc), "red")
    return None


async def pick(session: Session, exploration: Exploration) -> None:
    """The picker: a branch, its diff, then apply it or go back."""
    from kimicode.ui.approvals import Option, choose

    rec = exploration.record
    session.say(
        f"{rec.reason}." if rec.chosen is None else f"Proposed: {rec.chosen} ({rec.reason}).",
        "green" if rec.chosen else "yellow",
    )
    pool = sorted(exploration.branches, key=lambda b: (b.id != rec.chosen, not b.verified, b.changed_lines))
    pool = [b for b in pool if b.status in ("verified", "failed", "done")]
    keys = "123456789abcdefg"
    while pool:
        options = [
            Option(
                b.id,
                keys[i],
                f"{b.id}  {b.status}, {b.changed_lines} changed lines"
                + (f", ${b.cost_usd:.4f}" if b.cost_usd is not None else "")
                + ("  (proposed)" if b.id == rec.chosen else ""),
            )
            for i, b in enumerate(pool)
        ]
        options.append(Option("none", "n", "None: keep the workspace as it is (kimicode branches apply ID later)"))
        answer = await choose("Which branch? (its diff is shown next)", options)
        if answer in (None, "none", "interrupt"):
            session.say("Nothing applied; the branches are kept (kimicode branches list, /branches).", "dim")
            return
        b = rec.branch(answer)
        diff = exploration.diff(b, color=True)
        session.console.print(Text.from_ansi(diff) if diff else Text("(no changes)", "dim"), highlight=False)
        if b.verify_output and not b.verified:
            session.say(f"verify output (last lines): {one_line(b.verify_output[-300:], 300)}", "dim")
        sure = await choose(
            f"Apply {b.id}?",
            [Option("yes", "y", "Yes, apply it (/undo takes it back)"), Option("back", "b", "Back to the list")],
        )
        if sure == "yes":
            await _apply(session, exploration, b)
            return


async def _apply(session: Session, exploration: Exploration, b: Branch) -> None:
    from kimicode.branches.exploration import RunsLaterFiles
    from kimicode.checkpoints.session import RestoreConflict
    from kimicode.checkpoints.store import CheckpointError
    from kimicode.errors import UsageError

    try:
        try:
            try:
                await exploration.apply(b)
            except RunsLaterFiles as exc:
                from kimicode.ui.approvals import Option, choose

                session.say(str(exc), "yellow")
                if (
                    await choose(
                        "Apply these files that run later too?", [Option("yes", "y", "Yes"), Option("no", "n", "No")]
                    )
                    != "yes"
                ):
                    session.say("Nothing applied.", "dim")
                    return
                await exploration.apply(b, runs_later=True)
        except RestoreConflict as exc:
            from kimicode.ui.approvals import Option, choose

            session.say("Changed in the workspace since the branches forked: " + ", ".join(exc.files[:10]), "yellow")
            if await choose("Overwrite them?", [Option("yes", "y", "Yes"), Option("no", "n", "No")]) != "yes":
                session.say("Nothing applied.", "dim")
                return
            await exploration.apply(b, force=True, runs_later=True)
    except (CheckpointError, UsageError) as exc:
        session.say(f"Not applied: {exc}", "red")
        return
    files = sorted({p for ps in (b.changes or {}).values() for p in ps})
    session.say(
        f"Applied {b.id}: {len(files)} file(s) ({', '.join(files[:5])}{'…' if len(files) > 5 else ''}); "
        "the conversation continues from its history. /undo takes it back.",
        "green",
    )


def list_explorations(session: Session) -> None:
    from kimicode.branches.record import all_records

    recs = [r for r in all_records(session.agent.home) if r.parent_session == session.agent.session_id]
    if not recs:
        session.say(f"No branches in this session. {USAGE}.", "dim")
        return
    for r in recs:
        applied = f", applied {r.applied}" if r.applied else ""
        session.say(f"{r.id}  {r.status}{applied}  {one_line(r.prompt, 60)}", "bold")
        session.console.print(table(r.branches, {}, r.chosen))
