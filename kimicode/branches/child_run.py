"""The branches' process, once its overlays are mounted: every branch on one event loop (see child.py)."""

from __future__ import annotations

import asyncio
import importlib
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

from kimicode.branches.record import Branch
from kimicode.branches.run import run_branch
from kimicode.events import StepStarted

Emit = Callable[[dict[str, Any]], None]


def agent_class(path: str) -> Any:
    """The parent's Agent class, from `module:qualname` (the branches are resumed with the same class)."""
    module, _, qualname = path.partition(":")
    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


def _step_hook(b: Branch, emit: Emit) -> Callable[[Any], None]:
    def hook(event: Any) -> None:
        if isinstance(event, StepStarted):
            emit({"step": event.step, "id": b.id})

    return hook


async def run_all(class_path: str, orders: dict[str, Any], failed: dict[str, str], emit: Emit) -> int:
    """Run the ordered branches (those whose mount failed are reported `error`); returns the exit code."""
    from kimicode.llm.client import new_http_client, share_connections
    from kimicode.llm.discovery import share_windows
    from kimicode.llm.ratelimit import SharedRateLimiter

    cls = agent_class(class_path)
    branches = [Branch.from_dict(d) for d in orders["branches"]]
    loop = asyncio.get_running_loop()
    tasks: list[asyncio.Task[Branch]] = []
    stopped: list[str] = []

    def stop(why: str) -> None:
        stopped.append(why)
        for t in tasks:
            t.cancel()

    def on_stdin() -> None:
        try:
            data = os.read(sys.stdin.fileno(), 4096)
        except OSError:
            data = b""
        if not data:
            loop.remove_reader(sys.stdin.fileno())
            stop("the parent went away")

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop, sig.name)
    loop.add_reader(sys.stdin.fileno(), on_stdin)

    def changed(b: Branch) -> None:
        emit({"branch": b.to_dict()})

    gate = SharedRateLimiter()
    http = new_http_client()
    ctx = share_connections(http)
    ctx.run(share_windows)
    agents: list[Any] = []
    try:
        for b in branches:
            if stopped:
                break
            if b.id in failed:
                b.status, b.error = "error", failed[b.id]
                changed(b)
                continue
            variant = {k: v for k, v in (("model", b.model), ("thinking", b.thinking)) if v}
            try:
                agent = cls.resume(str(b.session_id), options=orders["options"], workspace=b.workspace,
                                   approve=None, on_event=_step_hook(b, emit), **variant)
            except Exception as exc:  # one branch that cannot open must not stop the others
                b.status, b.error = "error", f"could not open the branch: {type(exc).__name__}: {exc}"
                changed(b)
                continue
            agents.append(agent)
            tasks.append(asyncio.create_task(run_branch(agent, b, orders["job"], gate, changed), context=ctx))
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        for agent in agents:
            try:
                await agent.aclose()
            except Exception:  # best effort: the branch's state is saved already
                pass
        await http.aclose()
    return 130 if stopped else 0
