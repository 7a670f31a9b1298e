"""Run one task from start to result line: workspace, isolated home, Agent, timeout, budget, changes.

Shared by the local engine (many of these on one event loop) and the Ray engine (one per Ray task).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kimicode.batch.results import TaskResult
from kimicode.batch.tasks import Task
from kimicode.batch.workspace import WorkspaceError, changed_files, git_diff, prepare, snapshot, task_dir_name
from kimicode.config.choices import DEFAULT_MAX_TURNS


@dataclass(frozen=True)
class BatchOptions:
    """Defaults every task gets unless its line says otherwise, and where the batch keeps its files."""

    root: Path
    """The batch directory: tasks/<name>/{workspace,home} live under it."""
    model: str | None = None
    base_url: str | None = None
    api_key: str | None = None
    home: Path | None = None
    """The user's KIMICODE_HOME, read for configuration (keys, models, prices); sessions go to each task's home."""
    permission_mode: str = "accept-edits"
    thinking: str | None = None
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    max_turns: int = DEFAULT_MAX_TURNS
    timeout: float | None = None
    budget_usd: float | None = None
    append_system_prompt: str | None = None
    diff: bool = False
    persist: bool = True
    project_config: bool = False
    """Read each task workspace's own `.kimicode/config.toml` (as untrusted) and its AGENTS.md files, as the
    command line started there would. Off by default: a task repository does not choose its model, effort
    or instructions unless asked (the user's config in `home` is read either way)."""
    checkpoints: bool = False
    """Take workspace checkpoints (for `kimicode undo`) in each task; off by default: every task works on
    its own fresh copy already, and a checkpoint costs a git snapshot per turn (see docs/batch.md)."""
    max_retries: int = 5
    retry_base_delay: float = 1.0
    request_timeout: float = 300.0
    agent_options: dict[str, Any] = field(default_factory=dict)
    """More Agent keyword arguments for every task (library use: tools, context_window, ...)."""


def watch_budget(agent: Any, budget: float | None) -> list[float]:
    """Interrupt `agent` once its cost passes `budget`; the returned list gets the cost when that happens."""
    hit: list[float] = []
    if budget is None:
        return hit
    from kimicode.agent.costs import session_cost
    from kimicode.events import UsageUpdated

    previous = agent.on_event

    def on_event(event: Any) -> None:
        if previous is not None:
            previous(event)
        if isinstance(event, UsageUpdated) and not hit:
            cost = session_cost(agent)
            if cost is not None and cost > budget:
                hit.append(cost)
                agent.interrupt()

    agent.on_event = on_event
    return hit


async def run_task(task: Task, opts: BatchOptions, gate: Any = None, attempt: int = 1) -> TaskResult:
    """Run `task` once and describe the outcome; bugs and crashes surface as exceptions (the engine retries)."""
    start = time.monotonic()
    area = opts.root / "tasks" / task_dir_name(task.id)

    def failed(status: str, error: str, kind: str | None = None, **extra: Any) -> TaskResult:
        return TaskResult(
            task.id,
            status,
            error=error,
            error_kind=kind,
            attempts=attempt,
            duration_ms=int((time.monotonic() - start) * 1000),
            metadata=dict(task.metadata),
            **extra,
        )

    try:
        ws, home = await asyncio.to_thread(prepare, task, area)
    except WorkspaceError as exc:
        return failed("error", str(exc), "workspace")
    before = await asyncio.to_thread(snapshot, ws)
    from kimicode.agent.core import Agent
    from kimicode.config.endpoint import ConfigError, kimicode_home
    from kimicode.config.settings import load_settings

    try:
        settings = load_settings(ws, opts.home or kimicode_home(), project=opts.project_config)
        if not opts.checkpoints:
            settings.update({"checkpoints": {"enabled": False}})
        agent = Agent(
            model=task.model or opts.model,
            base_url=opts.base_url,
            api_key=opts.api_key,
            workspace=ws,
            home=home,
            config=settings,
            project_instructions=opts.project_config,  # the task's AGENTS.md only when asked
            permission_mode=task.permission_mode or opts.permission_mode,
            thinking=task.thinking or opts.thinking,
            max_turns=task.max_turns or opts.max_turns,
            allow=(*opts.allow, *task.allow),
            deny=(*opts.deny, *task.deny),
            system_prompt=task.system_prompt,
            append_system_prompt="\n\n".join(p for p in (opts.append_system_prompt, task.append_system_prompt) if p)
            or None,
            persist=opts.persist,
            headless=True,
            max_retries=opts.max_retries,
            retry_base_delay=opts.retry_base_delay,
            request_timeout=opts.request_timeout,
            **opts.agent_options,
        )
    except (ConfigError, ValueError, TypeError) as exc:
        return failed("error", str(exc), "config", workspace=str(ws))
    if gate is not None:
        from kimicode.llm.client import ChatClient

        client = agent.client  # kimicode's own (a batch passes no client of its own)
        assert isinstance(client, ChatClient)
        client.config.gate = gate
    budget = task.budget_usd if task.budget_usd is not None else opts.budget_usd
    if budget is not None:
        from kimicode.agent.costs import agent_prices

        if not agent_prices(agent)[0]:
            await agent.aclose()
            return failed(
                "error",
                f"a budget needs the price of {agent.endpoint.model}: set [models.NAME] prices in config.toml",
                "config",
                workspace=str(ws),
            )
    over = watch_budget(agent, budget)
    timeout = task.timeout if task.timeout is not None else opts.timeout
    status: str
    error: str | None
    kind: str | None
    try:
        try:
            run = await asyncio.wait_for(agent.run(task.prompt), timeout)
            status, result, error, kind, turns = run.status, run.result, run.error, run.error_kind, run.num_turns
        except TimeoutError:
            status, result, error, kind, turns = "timeout", agent.turn_text, f"stopped after {timeout:g}s", None, 0
        if over:
            status, error, kind = "budget", f"stopped: cost ${over[0]:.4f} passed the budget ${budget:g}", None
        from kimicode.agent.costs import session_cost

        cost = session_cost(agent)
    finally:
        await agent.aclose()
    after = await asyncio.to_thread(snapshot, ws)
    want_diff = task.diff if task.diff is not None else opts.diff
    diff = await asyncio.to_thread(git_diff, ws) if want_diff else None
    log = agent.log.path if agent.log is not None else None
    return TaskResult(
        id=task.id,
        status=status,
        result=result,
        error=error,
        error_kind=kind,
        usage=dict(agent.usage),
        cost_usd=cost,
        duration_ms=int((time.monotonic() - start) * 1000),
        num_turns=turns,
        changed_files=changed_files(before, after),
        diff=diff,
        session_id=agent.session_id,
        session_log=str(log) if log is not None else None,
        workspace=str(ws),
        attempts=attempt,
        metadata=dict(task.metadata),
    )
