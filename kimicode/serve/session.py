"""One served session: an `Agent`, its inbox of messages, its event hub and its approvals.

Messages are run one turn at a time, in order, by the session's own task (`POST .../messages` only queues
and answers 202). A message sent with `steer` while a turn runs goes into that turn instead (after the
running step's tool results, as the terminal's Ctrl-S; what arrives too late for the turn is sent next).
Explorations (`explore`) and undo go through the same inbox, so nothing runs beside a turn.
The session records what each turn cost and how full the context was after it, for `GET /sessions/{id}`
and the page.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from kimicode.events import ContextUpdated, Notice, TurnFinished
from kimicode.serve.approvals import HttpApprover
from kimicode.serve.hub import Hub
from kimicode.serve.wire import event_dict, plain

if TYPE_CHECKING:
    from kimicode import Agent

MAX_QUEUED = 100
"""Messages one session keeps waiting; past that a new one is refused (429)."""


@dataclass
class Job:
    """One unit of the session's work: a prompt, an exploration or an undo."""

    kind: Literal["prompt", "explore", "undo"]
    text: str = ""
    args: dict[str, Any] = field(default_factory=dict)
    done: asyncio.Future[Any] | None = None


@dataclass
class TurnRecord:
    """What one turn did, for the cost-per-turn and context-over-turns views."""

    n: int
    prompt: str
    status: str = "running"
    usage: dict[str, int] = field(default_factory=dict)
    cost: float | None = None
    context: dict[str, int] = field(default_factory=dict)
    started: float = 0.0
    duration_ms: int = 0
    compacted: bool = False


class QueueFull(Exception):
    """The session's inbox is full."""


class ServeSession:
    """An Agent served over HTTP."""

    def __init__(self, agent: Agent, approver: HttpApprover, hub: Hub) -> None:
        self.agent = agent
        self.approver = approver
        self.hub = hub
        self.inbox: deque[Job] = deque()
        self.wake = asyncio.Event()
        self.turns: list[TurnRecord] = []
        self.explorations: list[dict[str, Any]] = []
        self.current: Job | None = None
        self.closed = False
        self.task = asyncio.get_running_loop().create_task(self._work(), name=f"serve-{agent.session_id}")

    @property
    def id(self) -> str:
        return self.agent.session_id

    @property
    def status(self) -> str:
        """`idle`, `running` (a turn, an exploration or an undo), `waiting` (a permission question is open),
        or `closed`."""
        if self.closed:
            return "closed"
        if self.approver.pending:
            return "waiting"
        return "running" if self.current is not None else "idle"

    # -- work ---------------------------------------------------------------------------------------

    def submit(self, job: Job) -> int:
        """Queue `job`; returns its place in the queue (0: it starts now)."""
        if len(self.inbox) >= MAX_QUEUED:
            raise QueueFull(f"{MAX_QUEUED} messages are already waiting in this session")
        self.inbox.append(job)
        self.wake.set()
        place = len(self.inbox) if self.current is not None else len(self.inbox) - 1
        if place:
            self.hub.publish({"type": "Queued", "kind": job.kind, "text": job.text, "position": place})
        return place

    def steer(self, text: str) -> bool:
        """Send `text` into the running turn; False when no turn runs (the caller queues it instead)."""
        if self.current is None or self.current.kind != "prompt":
            return False
        from kimicode.agent.ecosystem import steer

        steer(self.agent, text)
        self.hub.publish({"type": "Steered", "text": text})
        return True

    def interrupt(self) -> bool:
        """Stop the running turn (its open questions are refused); queued messages stay queued."""
        self.approver.refuse_all("the turn was interrupted")
        if self.current is None:
            return False
        self.agent.interrupt()
        return True

    async def _work(self) -> None:
        while not self.closed:
            if not self.inbox:
                self.wake.clear()
                await self.wake.wait()
                continue
            job = self.inbox.popleft()
            self.current = job
            self.hub.publish({"type": "StatusChanged", "status": self.status})
            try:
                result = await self._run(job)
                if job.done is not None and not job.done.done():
                    job.done.set_result(result)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # reported to the client; the session goes on
                self.hub.publish({"type": "Notice", "level": "error", "text": f"{job.kind} failed: {exc}"})
                if job.done is not None and not job.done.done():
                    job.done.set_exception(exc)
            finally:
                self.current = None
                if not self.closed:
                    self.hub.publish({"type": "StatusChanged", "status": self.status})

    async def _run(self, job: Job) -> Any:
        if job.kind == "prompt":
            return await self._turn(job.text)
        if job.kind == "explore":
            return await self._explore(job.text, job.args)
        return await self._undo(job.args)

    async def _turn(self, text: str) -> None:
        before = dict(self.agent.usage)
        record = TurnRecord(n=len(self.turns) + 1, prompt=text, started=time.time())
        self.turns.append(record)
        async with self.agent.stream(text) as events:
            async for event in events:
                self.hub.publish(event_dict(event))
                if isinstance(event, ContextUpdated):
                    record.context = {"used": event.used, "window": event.window}
                elif isinstance(event, Notice) and event.text.startswith("context: compacting"):
                    record.compacted = True
                elif isinstance(event, TurnFinished):
                    record.status = event.status
        self._finish_turn(record, before)
        late = list(self.agent.extras.steering)  # steered after the turn's last step: sent next
        if late:
            self.agent.extras.steering.clear()
            for message in reversed(late):
                self.inbox.appendleft(Job("prompt", message))

    def _finish_turn(self, record: TurnRecord, before: dict[str, int]) -> None:
        usage = {k: v - before.get(k, 0) for k, v in self.agent.usage.items()}
        record.usage = usage
        record.cost = self.agent.parts.resolved.cost(self.agent.options, usage)
        record.duration_ms = int((time.time() - record.started) * 1000)
        breakdown = self.agent.context_breakdown().as_dict()
        record.context = {**breakdown, "used": self.agent.context.used, "window": self.agent.context_window}
        self.hub.publish({"type": "TurnCost", **turn_dict(record), "total_cost": self.total_cost()})

    async def _explore(self, prompt: str, args: dict[str, Any]) -> dict[str, Any]:
        self.hub.publish(
            {"type": "ExplorationStarted", "prompt": prompt, "n": args.get("n", 2), "verify": args.get("verify")}
        )
        exploration = await self.agent.explore(prompt, **args)
        summary = exploration.to_dict()
        for branch, data in zip(exploration.branches, summary["branches"], strict=False):
            data["diff"] = exploration.diff(branch)
            data["answer"] = exploration.answer(branch)
        self.explorations.append(summary)
        self.hub.publish({"type": "ExplorationFinished", **summary})
        return summary

    async def _undo(self, args: dict[str, Any]) -> dict[str, Any]:
        result = await self.agent.rewind(
            args.get("turn"),
            files=args.get("files", True),
            conversation=args.get("conversation", True),
            force=args.get("force", False),
        )
        data: dict[str, Any] = plain(result)
        data.pop("type", None)
        self.hub.publish({"type": "Rewound", **data})
        return data

    # -- views --------------------------------------------------------------------------------------

    def total_cost(self) -> float | None:
        return self.agent.parts.resolved.cost(self.agent.options, self.agent.usage)

    def summary(self) -> dict[str, Any]:
        """The line of `GET /sessions`."""
        agent = self.agent
        return {
            "id": self.id,
            "workspace": str(agent.workspace),
            "model": agent.endpoint.model,
            "permission_mode": agent.permission_mode,
            "status": self.status,
            "turns": len(self.turns),
            "queued": len(self.inbox),
            "title": self.turns[0].prompt[:80] if self.turns else "",
        }

    def state(self) -> dict[str, Any]:
        """`GET /sessions/{id}`: status, history, usage, cost, context, turns, queue, open questions."""
        agent = self.agent
        breakdown = agent.context_breakdown().as_dict()
        return {
            **self.summary(),
            "seq": self.hub.seq,
            "history": [plain(m) for m in agent.messages if m.get("role") != "system"],
            "usage": dict(agent.usage),
            "cost": {"total": self.total_cost(), "turns": [t.cost for t in self.turns]},
            "context": {"used": agent.context.used, "window": agent.context_window, "breakdown": breakdown},
            "turn_records": [turn_dict(t) for t in self.turns],
            "queue": [{"kind": j.kind, "text": j.text} for j in self.inbox],
            "pending_permissions": [p.as_event() for p in self.approver.pending.values()],
            "explorations": self.explorations,
        }

    def diff(self, turn: int | None = None) -> str:
        """The session's file changes as a unified diff (one turn's with `turn`), "" when none."""
        cps = self.agent.checkpoints
        if cps is None:
            return ""
        entry = None
        if turn is not None:
            entry = next((e for e in cps.entries if e.kind == "turn" and e.turn == turn), None)
            if entry is None:
                raise LookupError(f"no turn {turn} with file changes in this session")
        return cps.diff(entry)

    async def close(self) -> None:
        """Stop the work, refuse open questions, close the agent (its log and connections) and the hub."""
        self.closed = True
        self.approver.refuse_all("the session was closed")
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        try:
            await self.agent.aclose()
        finally:
            self.hub.publish({"type": "SessionClosed"})
            self.hub.close()


def turn_dict(t: TurnRecord) -> dict[str, Any]:
    return {
        "turn": t.n,
        "prompt": t.prompt,
        "status": t.status,
        "usage": t.usage,
        "cost": t.cost,
        "context": t.context,
        "duration_ms": t.duration_ms,
        "compacted": t.compacted,
    }
