"""The branches' process, once its overlays are mounted: every branch on one event loop (see child.py)."""

from __future__ import annotations

import asyncio
import importlib
import pickle
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


async def _messages(reader: asyncio.StreamReader) -> Any:
    """The parent's next message (a length-prefixed pickle), None when its pipe closed."""
    try:
        head = await reader.readexactly(8)
        return pickle.loads(await reader.readexactly(int.from_bytes(head, "big")))  # the parent's own bytes
    except (asyncio.IncompleteReadError, OSError):
        return None


class Runner:
    """The branches of this process: started as they arrive, stopped together."""

    def __init__(self, cls: Any, orders: dict[str, Any], failed: dict[str, str], emit: Emit) -> None:
        from kimicode.llm.client import new_http_client, share_connections
        from kimicode.llm.discovery import share_windows
        from kimicode.llm.ratelimit import SharedRateLimiter

        self.cls, self.orders, self.failed, self.emit = cls, orders, failed, emit
        self.gate = SharedRateLimiter()
        self.http = new_http_client()
        self.ctx = share_connections(self.http)
        self.ctx.run(share_windows)
        self.tasks: list[asyncio.Task[Branch]] = []
        self.agents: list[Any] = []
        self.stopped: list[str] = []
        self.ended = asyncio.Event()

    def stop(self, why: str) -> None:
        self.stopped.append(why)
        self.ended.set()
        for t in self.tasks:
            t.cancel()

    def changed(self, b: Branch) -> None:
        self.emit({"branch": b.to_dict()})

    def start(self, b: Branch) -> None:
        if b.id in self.failed:
            b.status, b.error = "error", self.failed[b.id]
            self.changed(b)
            return
        variant = {k: v for k, v in (("model", b.model), ("thinking", b.thinking)) if v}
        try:
            agent = self.cls.resume(
                str(b.session_id),
                options=self.orders["options"],
                workspace=b.workspace,
                approve=None,
                on_event=_step_hook(b, self.emit),
                **variant,
            )
        except Exception as exc:  # one branch that cannot open must not stop the others
            b.status, b.error = "error", f"could not open the branch: {type(exc).__name__}: {exc}"
            self.changed(b)
            return
        self.agents.append(agent)
        job = self.orders["job"]
        self.tasks.append(asyncio.create_task(run_branch(agent, b, job, self.gate, self.changed), context=self.ctx))

    async def feed(self, reader: asyncio.StreamReader) -> None:
        """Start each branch the parent sends; the pipe closing (the parent gone) stops them all."""
        while (message := await _messages(reader)) is not None:
            if message.get("end"):
                self.ended.set()
            elif not self.stopped:
                self.start(Branch.from_dict(message["branch"]))
                await asyncio.sleep(0)  # its first request goes out while the next one is opened
        self.stop("the parent went away")

    async def close(self) -> None:
        for agent in self.agents:
            try:
                await agent.aclose()
            except Exception:  # best effort: each branch's state is saved already
                pass
        await self.http.aclose()


async def run_all(class_path: str, orders: dict[str, Any], failed: dict[str, str], emit: Emit) -> int:
    """Run the branches the parent sends (those whose mount failed are reported `error`); the exit code."""
    loop = asyncio.get_running_loop()
    runner = Runner(agent_class(class_path), orders, failed, emit)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, runner.stop, sig.name)
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    feeder = asyncio.create_task(runner.feed(reader))
    try:
        await runner.ended.wait()
        while runner.tasks and not all(t.done() for t in runner.tasks):
            await asyncio.wait(list(runner.tasks))
    finally:
        feeder.cancel()
        await runner.close()
    return 130 if runner.stopped else 0
