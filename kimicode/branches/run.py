"""One branch's turn, from fork to verdict: run the prompt, measure what changed, run the verify command.

Used in-process by the local engine (kimicode/branches/explore.py) and inside a Ray worker by
`kimicode.batch.branch_ray`. It works on any Agent through its public face (run, checkpoints, usage,
client, interrupt), so it sits below the agent layer.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kimicode.branches.pidns import end_leftovers
from kimicode.branches.record import Branch
from kimicode.branches.verify import run_verify, verify_sandbox
from kimicode.checkpoints.store import CheckpointError, CheckpointStore
from kimicode.config.pricing import model_prices
from kimicode.config.settings import estimate_cost

CONTINUE_PROMPT = (
    "This attempt was interrupted before it finished (see above). Continue the task from where it stopped; "
    "do not redo the work already done."
)
"""The prompt a resumed branch gets when its log already holds the turn's start."""

BRANCH_HEADER = "x-kimicode-branch"
"""Sent with each branch's requests (its number): lets a proxy or a test tell the branches apart. Headers
are not part of the prompt, so the prefix cache still serves every branch from the parent's prefix."""


@dataclass(frozen=True)
class Job:
    """What a branch is asked to do (picklable: it travels to Ray workers)."""

    prompt: str
    verify: str | None
    verify_timeout: float
    base_messages: int
    cache_key: str
    """The parent's session id, sent as the prompt cache key so the server's prefix cache serves all branches."""
    timeout: float | None = None
    """Seconds the branch's turn may take (None: no limit beyond the agent's own)."""


def prepare_client(agent: Any, branch: Branch, job: Job, gate: Any) -> None:
    """Share the rate gate and the parent's cache key; call inside the context whose HTTP pool is shared.
    A caller's own client (`Agent(client=...)`) is left as it is: its requests, limits and caching are its own."""
    if agent.parts.client.given is not None:
        return
    config = agent.client.config
    config.gate = gate
    config.session_id = job.cache_key
    config.extra_headers = {**config.extra_headers, BRANCH_HEADER: str(branch.k)}


def branch_cost(agent: Any) -> float | None:
    prices, _ = model_prices(agent.model_config.prices, agent.endpoint.model, agent.endpoint.base_url)
    return estimate_cost(agent.usage, prices) if prices else None


def measure_changes(agent: Any, branch: Branch) -> None:
    """What the branch changed since it forked (all its turns: a resumed branch has two), and how many lines."""
    cps = agent.checkpoints
    if cps is None:
        return
    taken = [e for e in cps.entries if e.kind == "turn" and e.before]
    if not taken:
        branch.before = branch.after = None
        branch.changes, branch.changed_lines = None, 0
        return
    before, after = taken[0].before, next((e.after for e in reversed(taken) if e.after), None)
    branch.before, branch.after = before, after
    if after is None:
        return
    store: CheckpointStore = cps.store
    changes = store.changes(before, after)
    branch.changes = changes.as_dict() if changes else None
    branch.changed_lines = changed_lines(store, before, after)


def changed_since_turn(agent: Any, branch: Branch) -> str | None:
    """Why the branch cannot be verified when its workspace no longer is what its turn left (`branch.after`):
    a process the turn left changed it afterwards (the verify command would judge other files than those
    the branch offers). None when it is the same, or when there is no snapshot to compare."""
    cps = agent.checkpoints
    if cps is None or branch.after is None:
        return None
    store: CheckpointStore = cps.store
    now = store.snapshot("before verify")
    if not store.changes(branch.after, now.id):
        return None
    return "not verified: the workspace changed after the branch's turn ended (a process it left running?)"


def changed_lines(store: CheckpointStore, before: str, after: str) -> int:
    """Lines added plus removed between two snapshots (a binary file counts as one line)."""
    out = store.git("diff", "--numstat", "--no-renames", before, after).decode("utf-8", "replace")
    total = 0
    for line in out.splitlines():
        added, removed, _ = [*line.split("\t", 2), "", ""][:3]
        total += (int(added) if added.isdigit() else 1) + (int(removed) if removed.isdigit() else 0)
    return total


async def run_branch(
    agent: Any, branch: Branch, job: Job, gate: Any, changed: Callable[[Branch], None] = lambda b: None
) -> Branch:
    """Run the branch's turn (or continue it), then verify it; `changed` is called at each state change.

    Never raises for the branch's own failure (a model error, a crash in its turn): that is its status.
    Cancellation interrupts the turn (the branch's history stays valid), marks it `interrupted` and
    propagates."""
    branch.status, branch.started_at, branch.error = "running", branch.started_at or time.time(), None
    changed(branch)
    prompt = CONTINUE_PROMPT if len(agent.messages) > job.base_messages else job.prompt
    try:
        prepare_client(agent, branch, job, gate)
        try:
            result = await asyncio.wait_for(agent.run(prompt), job.timeout)
            branch.turn_status, branch.steps = result.status, branch.steps + result.num_turns
            branch.error = result.error if result.status != "success" else None
        except TimeoutError:
            branch.turn_status, branch.error = "timeout", f"the branch's turn took longer than {job.timeout:g} s"
        branch.usage, branch.cost_usd = dict(agent.usage), branch_cost(agent)
        if job.verify:  # nothing a command left may change the workspace from here on (sandbox off too)
            await asyncio.to_thread(end_leftovers)
        await asyncio.to_thread(measure_changes, agent, branch)
        if branch.turn_status != "success":
            branch.status = "interrupted" if branch.turn_status == "interrupted" else "error"
        elif job.verify and (why := await asyncio.to_thread(changed_since_turn, agent, branch)):
            branch.status, branch.error = "failed", why
        elif job.verify:
            branch.status = "verifying"
            changed(branch)
            await verify(agent, branch, job)
        else:
            branch.status = "done"
    except asyncio.CancelledError:
        agent.interrupt()
        branch.status, branch.error = "interrupted", "interrupted"
        branch.usage, branch.cost_usd = dict(agent.usage), branch_cost(agent)
        raise
    except (CheckpointError, OSError) as exc:
        branch.status, branch.error = "error", f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # a bug in one branch must not stop the others
        branch.status, branch.error = "crashed", f"internal error: {type(exc).__name__}: {exc}"
    finally:
        branch.finished_at = time.time()
        changed(branch)
    return branch


async def verify(agent: Any, branch: Branch, job: Job) -> None:
    assert job.verify
    sandbox = await asyncio.to_thread(verify_sandbox, agent)
    outcome = await run_verify(
        job.verify,
        Path(agent.workspace),
        timeout=job.verify_timeout,
        sandbox=sandbox,
        mask=agent.masker,
        env=agent.ctx.env,
    )
    branch.verified = outcome.passed
    branch.verify_exit = outcome.exit_code
    branch.verify_timed_out = outcome.timed_out
    branch.verify_output = outcome.output
    branch.status = "verified" if outcome.passed else "failed"
    if not outcome.passed:
        branch.error = (
            f"verify timed out after {job.verify_timeout:g} s"
            if outcome.timed_out
            else f"verify exited with {outcome.exit_code}"
        )
