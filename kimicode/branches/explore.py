"""Explore: run one prompt in N branches at once, verify each, choose one (`agent.explore`, `--branches`).

Each branch is a fork of the session so far (same history, same preserved reasoning) in its own
workspace (kimicode/branches/trees.py), with the parent's permissions and sandbox, its own checkpoints
and its own session log. All branches share one rate limiter (a 429 slows them all), one HTTP connection
pool, and the parent's prompt cache key, so the server's prefix cache serves the shared history once.
They run on this event loop (the `local` engine) or on a Ray cluster (`kimicode.batch.branch_ray`).
The exploration's state is saved after every change (kimicode/branches/record.py): an interrupted one
is resumed with `resume_exploration`, keeping the branches that finished.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from kimicode.branches.choose import PICKS, choose, judge_prompt, parse_verdict
from kimicode.branches.exploration import Exploration
from kimicode.branches.record import Branch, ExplorationRecord, new_exploration_id, next_k
from kimicode.branches.run import Job, run_branch
from kimicode.branches.trees import TreeError, create_overlay, create_tree
from kimicode.errors import UsageError

MAX_BRANCHES = 16
WORKSPACE_KINDS = ("auto", "overlay", "worktree", "copy")
"""`auto`: an overlay holding only the branch's changes where the system allows it (Linux user namespaces,
kimicode/branches/overlay.py), else a git worktree (a copy outside git), with a notice saying why."""

OnUpdate = Callable[[Branch], None]
OnEvent = Callable[[Branch, Any], None]
INHERIT: Any = object()
"""`approve=INHERIT` (the default): the branches ask through the parent's approval function."""


@dataclass(frozen=True)
class Hooks:
    """Who hears of the branches' progress, and who approves their calls."""

    on_update: OnUpdate | None
    on_event: OnEvent | None
    approve: Any

    def for_branch(self, b: Branch) -> Callable[[Any], None] | None:
        hook = self.on_event
        if hook is None:
            return None
        return lambda event: hook(b, event)


class Engine(Protocol):
    """Runs branches somewhere else (a Ray cluster): see `kimicode.batch.branch_ray.RayEngine`."""

    def run(
        self, parent: Any, record: ExplorationRecord, job: Job, branches: Sequence[Branch]
    ) -> AsyncIterator[Branch]:
        """Run each branch (forked already: its session log and workspace exist) and yield it when finished."""


def _spread(values: Sequence[str], k: int) -> str | None:
    return values[k % len(values)] if values else None


def check_arguments(parent: Any, n: int, pick: str, workspace: str, verify: str | None, verify_timeout: float) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_BRANCHES:
        raise ValueError(f"n must be a whole number from 1 to {MAX_BRANCHES} (got {n!r})")
    if pick not in PICKS:
        raise ValueError(f"pick must be one of {', '.join(PICKS)} (got {pick!r})")
    if workspace not in WORKSPACE_KINDS:
        raise ValueError(f"workspace must be one of {', '.join(WORKSPACE_KINDS)} (got {workspace!r})")
    if verify is not None and (not isinstance(verify, str) or not verify.strip()):
        raise ValueError("verify must be a non-empty shell command (or None)")
    if not isinstance(verify_timeout, int | float) or isinstance(verify_timeout, bool) or verify_timeout <= 0:
        raise ValueError(f"verify_timeout must be a positive number of seconds (got {verify_timeout!r})")
    if parent.busy:
        raise UsageError("cannot explore while a turn is running: wait for it, or interrupt() it first")
    if parent.checkpoints is None:
        raise UsageError("branches need checkpoints to apply the chosen one ([checkpoints] enabled = true)")


async def explore(
    parent: Any,
    prompt: str,
    *,
    n: int = 2,
    verify: str | None = None,
    verify_timeout: float = 600.0,
    pick: str = "auto",
    models: Sequence[str] = (),
    thinking: Sequence[str] = (),
    judge_model: str | None = None,
    apply: bool = True,
    timeout: float | None = None,
    workspace: str = "auto",
    engine: Engine | None = None,
    on_update: OnUpdate | None = None,
    on_event: OnEvent | None = None,
    approve: Any = INHERIT,
) -> Exploration:
    """Run `prompt` in `n` branches of `parent`'s session; see `Agent.explore` and docs/branches.md.

    `on_event(branch, event)` sees every event of the branches run in this process (the terminal's live
    table counts their steps); `approve` replaces the parent's approval function in the branches (None:
    nothing is asked, what the rules do not allow is refused)."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError("the prompt must be a non-empty str")
    check_arguments(parent, n, pick, workspace, verify, verify_timeout)
    home = Path(parent.home)
    first = next_k(home, parent.session_id)
    rec = ExplorationRecord(
        id=new_exploration_id(),
        parent_session=parent.session_id,
        workspace=str(parent.workspace),
        prompt=prompt,
        n=n,
        verify=verify,
        verify_timeout=float(verify_timeout),
        pick=pick,
        base_messages=len(parent.messages),
        branches=[
            Branch(id="", k=first + i, model=_spread(models, i), thinking=_spread(thinking, i)) for i in range(n)
        ],
    )
    for b in rec.branches:
        b.id = f"{rec.id}-{b.k}"
    if parent.log is not None:
        parent.log.append({"type": "exploration", "id": rec.id, "n": n, "prompt": prompt[:500]})
        parent.log.keep()  # found by id later (`kimicode branches apply`), even before its first prompt
    rec.save(home)
    job = Job(prompt, verify, float(verify_timeout), rec.base_messages, parent.session_id, timeout)
    hooks = Hooks(on_update, on_event, parent.approve if approve is INHERIT else approve)
    return await _run(
        parent, rec, job, workspace=workspace, engine=engine, hooks=hooks, judge_model=judge_model, apply=apply
    )


async def _run(
    parent: Any,
    rec: ExplorationRecord,
    job: Job,
    *,
    workspace: str,
    engine: Engine | None,
    hooks: Hooks,
    judge_model: str | None,
    apply: bool,
) -> Exploration:
    home = Path(parent.home)

    def changed(b: Branch) -> None:
        rec.save(home)
        if hooks.on_update is not None:
            hooks.on_update(b)

    workspace, engine = _choose_engine(parent, rec, workspace, engine, hooks)
    todo = [b for b in rec.branches if not b.finished or b.status == "crashed"]  # a resume retries a crash
    agents: dict[str, Any] = {}

    async def open_branch(b: Branch) -> Any:
        agent = await asyncio.to_thread(_open_branch, parent, rec, b, workspace, hooks)
        if agent is not None:
            agents[b.id] = agent
        changed(b)
        return agent

    try:
        if engine is None:
            await _run_local(todo, open_branch, job, changed)
        elif workspace == "overlay":
            await _run_overlay(parent, rec, job, todo, open_branch, changed, engine)
        else:
            start = getattr(engine, "start", None)
            if start is not None:
                await start(parent)  # the overlay engine's process starts while the branches fork
            for b in todo:
                agent = await open_branch(b)
                if agent is not None:
                    await agent.aclose()  # the workers resume the branches from their logs
            runnable = [b for b in todo if b.id in agents]
            updates = engine.run(parent, rec, job, runnable)
            try:
                async for done in updates:
                    mine = rec.branch(done.id)
                    mine.__dict__.update(done.__dict__)
                    changed(mine)
            finally:
                close = getattr(updates, "aclose", None)
                if close is not None:
                    await close()  # the overlay engine stops its process (and lets it save its branches)
    except BaseException:
        rec.status = "interrupted"
        for b in rec.branches:
            if b.status in ("running", "verifying", "pending"):
                b.status = "interrupted"
        rec.save(home)
        raise
    finally:
        for agent in agents.values():
            with contextlib.suppress(Exception):
                await agent.aclose()
    # branches that ran elsewhere are read back from their logs (the local fork objects never ran the turn)
    return await _conclude(parent, rec, agents if engine is None else {}, judge_model=judge_model, apply=apply)


def _open_branch(parent: Any, rec: ExplorationRecord, b: Branch, workspace: str, hooks: Hooks) -> Any:
    """The branch's agent: a new fork in a new tree, or (resuming) its session continued from its log."""
    collaborators = {"approve": hooks.approve, "on_event": hooks.for_branch(b)}  # never the parent's hook
    if b.session_id and b.workspace and Path(b.workspace).is_dir():
        return type(parent).resume(
            b.session_id,
            options=parent.options,
            workspace=b.workspace,
            **collaborators,
            **own_parts(parent),
            **_variant(parent, b),
        )
    try:
        if workspace == "overlay" and b.tree is not None:
            tree = b.tree  # made ahead, before any fork (see _run_overlay)
        elif workspace == "overlay":
            tree = create_overlay(Path(parent.workspace), Path(parent.home), rec.parent_session, b.k, rec.id)
        else:
            tree = create_tree(Path(parent.workspace), Path(parent.home), rec.parent_session, b.k, workspace).record()
    except TreeError as exc:
        b.status, b.error = "error", str(exc)
        return None
    child = parent.fork(workspace=Path(tree["workspace"]), **collaborators, **_variant(parent, b))
    child.record_settings("branch", fork_tree=tree, exploration=rec.id, branch=b.id)
    if child.log is not None:
        child.log.keep()  # on disk now: a Ray worker, or a resume, opens the branch from its log
    b.session_id, b.workspace, b.tree = child.session_id, str(tree["workspace"]), tree
    return child


async def _run_overlay(
    parent: Any,
    rec: ExplorationRecord,
    job: Job,
    todo: Sequence[Branch],
    open_branch: Callable[[Branch], Awaitable[Any]],
    changed: OnUpdate,
    engine: Any,
) -> None:
    """The overlay engine's run: every branch's directories first (cheap: the first one writes the
    exploration's snapshot), mounted at once by the child; then each branch is forked and handed over as
    soon as it is, so it runs while the next one forks."""
    await engine.start(parent)  # its Python start overlaps the directories and the forks
    for b in todo:
        if b.tree is None:
            try:
                b.tree = await asyncio.to_thread(
                    create_overlay, Path(parent.workspace), Path(parent.home), rec.parent_session, b.k, rec.id
                )
                b.workspace = str(b.tree["workspace"])
            except TreeError as exc:
                b.status, b.error = "error", str(exc)
                changed(b)
    await engine.begin(parent, job, [b for b in todo if b.tree is not None and b.status != "error"])

    async def feed() -> None:
        try:
            for b in todo:
                agent = await open_branch(b) if b.status != "error" else None
                if agent is not None:
                    await agent.aclose()  # the child resumes the branch from its log
                    engine.add(b)
        finally:
            engine.end()

    feeder = asyncio.create_task(feed())
    updates = engine.updates(rec)
    try:
        async for done in updates:
            mine = rec.branch(done.id)
            mine.__dict__.update(done.__dict__)
            changed(mine)
        await feeder
    finally:
        feeder.cancel()
        await updates.aclose()  # stops the child (it saves its branches as interrupted)


def _choose_engine(
    parent: Any, rec: ExplorationRecord, workspace: str, engine: Engine | None, hooks: Hooks
) -> tuple[str, Engine | None]:
    """Overlay workspaces (run by the overlay engine) where possible; else worktrees, saying why once."""
    if engine is not None and workspace == "overlay":
        raise UsageError("branches with overlay workspaces run on this machine only (not on Ray)")
    if engine is not None and own_parts(parent):
        raise UsageError(
            "branches of an agent given its own model client or session store run in this process "
            "(not on another engine): those objects cannot travel"
        )
    if engine is not None or workspace in ("worktree", "copy"):
        return ("worktree" if workspace in ("auto", "overlay") else workspace), engine
    why = overlay_unavailable(parent, hooks)
    if why is None:
        from kimicode.branches.overlay_engine import OverlayEngine

        return "overlay", OverlayEngine(on_event=hooks.on_event, on_notice=lambda text: _notice(parent, rec, text))
    if workspace == "overlay":
        raise UsageError(f"the branches' workspaces cannot be overlays here: {why}")
    _notice(parent, rec, f"each branch is a full checkout of the workspace: {why}")
    return "worktree", None


def _notice(parent: Any, rec: ExplorationRecord, text: str) -> None:
    """Tell the user (a warning) and keep it in the exploration's record."""
    if text not in (rec.notice or ""):  # a resume says it again
        rec.notice = f"{rec.notice}; {text}" if rec.notice else text
    with contextlib.suppress(Exception):
        parent.notify(text, "warning")


def overlay_unavailable(parent: Any, hooks: Hooks) -> str | None:
    """Why this exploration's branches cannot run as overlays in their own process (None: they can)."""
    from kimicode.branches.overlay import unavailable
    from kimicode.branches.overlay_engine import picklable_options

    if hooks.approve is not None:
        return "the branches may ask for approvals (an approval function was given), which they do in this process"
    if own_parts(parent):
        return "the session uses the caller's own model client or session store, which live in this process"
    why = unavailable(Path(parent.home), Path(parent.workspace))
    if why is not None:
        return why
    try:
        picklable_options(parent)
    except Exception as exc:  # pickle raises several kinds
        return f"the session's options cannot be sent to the branches' process ({type(exc).__name__}: {exc})"
    return None


def own_parts(parent: Any) -> dict[str, Any]:
    """The caller's own client and session store of `parent` (`Agent(client=, session_store=)`), which serve
    its branches too: {} when kimicode made both."""
    store = parent.log.store if parent.log is not None else None
    given = {"client": parent.parts.client.given, "session_store": store}
    return {k: v for k, v in given.items() if v is not None}


def _variant(parent: Any, b: Branch) -> dict[str, Any]:
    """The branch's model and effort (`--branch-models`, `--branch-thinking`), else the parent's."""
    out: dict[str, Any] = {}
    if b.model:
        out["model"] = b.model
    if b.thinking:
        out["thinking"] = b.thinking
    return out


async def _run_local(
    todo: Sequence[Branch], open_branch: Callable[[Branch], Awaitable[Any]], job: Job, changed: OnUpdate
) -> None:
    """Every branch at once on this event loop, in a context with one shared HTTP pool and window lookup.

    Each branch starts as soon as its workspace exists, while the next one is being made: with a model
    that takes seconds per step, making the workspaces (one after the other: git serialises them anyway)
    costs the exploration little more than making the first one."""
    from kimicode.llm.client import new_http_client, share_connections
    from kimicode.llm.discovery import share_windows
    from kimicode.llm.ratelimit import SharedRateLimiter

    gate = SharedRateLimiter()
    http = new_http_client()
    ctx = share_connections(http)
    ctx.run(share_windows)
    tasks: list[asyncio.Task[Branch]] = []
    try:
        for b in todo:
            agent = await open_branch(b)
            if agent is not None:
                tasks.append(asyncio.create_task(run_branch(agent, b, job, gate, changed), context=ctx))
        if tasks:
            await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks)
        await http.aclose()


def _final_status(rec: ExplorationRecord, chosen: bool) -> str:
    """An exploration's status once its branches ended: done (a branch verified, or one chosen without
    verification), no_verified, or error."""
    if any(b.status == "verified" for b in rec.branches) or (not rec.verify and chosen):
        return "done"
    return "no_verified" if rec.verify else "error"


async def _conclude(
    parent: Any, rec: ExplorationRecord, agents: dict[str, Any], *, judge_model: str | None, apply: bool
) -> Exploration:
    home = Path(parent.home)
    chosen, reason = choose(rec.branches, rec.verify, rec.pick)
    exploration = Exploration(rec, parent, agents)
    if judge_model and chosen is not None:
        pool = [b for b in rec.branches if (b.verified if rec.verify else b.status == "done")]
        if len(pool) > 1:
            chosen, reason = await _judge(parent, exploration, pool, judge_model, (chosen, reason))
    rec.chosen, rec.reason = (chosen.id if chosen else None), reason
    rec.status = _final_status(rec, chosen is not None)
    for b in rec.branches:
        for key, value in b.usage.items():
            parent.usage[key] = parent.usage.get(key, 0) + int(value)
    rec.save(home)
    if apply and chosen is not None and rec.pick != "ask":
        from kimicode.branches.exploration import RunsLaterFiles

        try:
            await exploration.apply(chosen)
        except RunsLaterFiles as exc:  # never carried over unasked: said, and left for an explicit apply
            _notice(parent, rec, str(exc))
    return exploration


async def _judge(
    parent: Any, exploration: Exploration, pool: list[Branch], model: str, fallback: tuple[Branch | None, str]
) -> tuple[Branch | None, str]:
    """Ask `model` (a fork of the parent: it knows the task) to compare the candidates' diffs."""
    diffs = {b.id: await asyncio.to_thread(exploration.diff, b) for b in pool}
    judge = parent.fork(model=model, persist=False, tools=[], approve=None, on_event=None)
    try:
        result = await judge.run(judge_prompt(pool, diffs, exploration.record.verify))
        from kimicode.branches.run import branch_cost

        exploration.record.judge_cost_usd = branch_cost(judge)
    finally:
        await judge.aclose()
    if not result.ok:
        return fallback[0], f"{fallback[1]} (the judge failed: {result.error})"
    chosen, reason = parse_verdict(result.result, pool)
    if chosen is None:
        return fallback[0], f"{fallback[1]} ({reason})"
    return chosen, f"judged by {model}: {reason}"


async def resume_exploration(
    parent: Any,
    rec: ExplorationRecord,
    *,
    engine: Engine | None = None,
    on_update: OnUpdate | None = None,
    on_event: OnEvent | None = None,
    approve: Any = INHERIT,
    judge_model: str | None = None,
    apply: bool = True,
    timeout: float | None = None,
) -> Exploration:
    """Finish an interrupted exploration: finished branches are kept, the others continue from their logs
    (or start, if they never did). `parent` is the exploration's session, resumed."""
    if parent.session_id != rec.parent_session:
        raise UsageError(f"exploration {rec.id} belongs to session {rec.parent_session}, not {parent.session_id}")
    if rec.applied:
        raise UsageError(f"exploration {rec.id} is finished: branch {rec.applied} was applied")
    rec.status = "running"
    job = Job(rec.prompt, rec.verify, rec.verify_timeout, rec.base_messages, rec.parent_session, timeout)
    kind = next((str(b.tree.get("kind")) for b in rec.branches if b.tree), "auto")
    hooks = Hooks(on_update, on_event, parent.approve if approve is INHERIT else approve)
    return await _run(
        parent,
        rec,
        job,
        workspace=kind if kind in WORKSPACE_KINDS else "auto",
        engine=engine,
        hooks=hooks,
        judge_model=judge_model,
        apply=apply,
    )
