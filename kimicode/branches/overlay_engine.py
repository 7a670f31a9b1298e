"""The overlay engine: the branches run in one child process whose namespace mounts their overlays.

Implements `kimicode.branches.explore.Engine`. `start()` starts the child (kimicode/branches/child.py)
as the exploration begins, so that its Python start and imports overlap the branches' forking; `run()`
sends it its orders and turns its JSON lines back into branch updates (every state change, so the
terminal's table and the stream-json lines work as with in-process branches), step events and notices
(what the child could not set up, e.g. its PID namespace: kimicode/branches/pidns.py). If the
child dies, the branches it had not finished are `crashed`, with its exit status and the last lines it
wrote to stderr; an exploration left so is resumed with `kimicode branches resume`. Cancelling `run()`
(Ctrl-C) asks the child to interrupt its branches (SIGTERM) and waits for it to save them.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import pickle
import signal
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from kimicode.branches.overlay import mount_spec
from kimicode.branches.record import Branch, ExplorationRecord
from kimicode.branches.run import Job
from kimicode.events import StepStarted

_BOOT = (
    "import json, sys\nsys.path[:] = json.loads(sys.argv.pop(1))\n"
    "from kimicode.branches.child import main\nsys.exit(main())\n"
)
STDERR_TAIL = 2000
OUTCOME = (
    "status",
    "turn_status",
    "error",
    "verified",
    "verify_exit",
    "verify_timed_out",
    "verify_output",
    "changes",
    "changed_lines",
    "before",
    "after",
    "cost_usd",
    "usage",
    "steps",
    "started_at",
    "finished_at",
)
"""What the branches' process reports of a branch; its identity (id, number, session, workspace, tree, model)
is the parent's own record, whatever a line says."""
STOPPED = 130
"""The child's exit code when it stopped its branches (SIGTERM, SIGINT, its stdin closed) and saved them."""
STOP_GRACE = 15.0
"""Seconds the child gets to interrupt and save its branches before it is killed."""


def picklable_options(parent: Any) -> Any:
    """The parent's options as the child gets them; raises (pickle's error) when they cannot travel
    (a library caller's own tools or hooks defined where another process cannot import them)."""
    options = parent.options.replace(workspace=parent.workspace, home=parent.home)
    pickle.loads(pickle.dumps(options))  # our own bytes: checked for the trip
    return options


def agent_class_path(parent: Any) -> str:
    cls = type(parent)
    return f"{cls.__module__}:{cls.__qualname__}"


class OverlayEngine:
    """Runs branches whose trees are overlays (kimicode/branches/overlay.py) in one namespaced child."""

    def __init__(
        self, on_event: Callable[[Branch, Any], None] | None = None, on_notice: Callable[[str], None] | None = None
    ) -> None:
        self.on_event = on_event
        self.on_notice = on_notice
        self._proc: asyncio.subprocess.Process | None = None
        self._stderr: bytearray = bytearray()
        self._stderr_task: asyncio.Task[None] | None = None

    async def start(self, parent: Any) -> None:
        """Start the child now (it enters its namespace and imports the agent while the branches fork)."""
        if self._proc is not None:
            return
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _BOOT,
            json.dumps(sys.path),
            agent_class_path(parent),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            limit=1 << 24,
        )
        self._stderr_task = asyncio.create_task(self._keep_stderr(self._proc))

    async def _keep_stderr(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stderr is not None
        while chunk := await proc.stderr.read(4096):
            self._stderr += chunk
            del self._stderr[:-STDERR_TAIL]

    def _send(self, message: dict[str, Any]) -> None:
        proc = self._proc
        assert proc is not None and proc.stdin is not None
        data = pickle.dumps(message)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError, RuntimeError):
            proc.stdin.write(len(data).to_bytes(8, "big") + data)

    async def begin(self, parent: Any, job: Job, branches: Sequence[Branch]) -> None:
        """Give the child the job, the options and every branch's mount (the trees exist; the forks may not)."""
        await self.start(parent)
        self._pending: dict[str, Branch] = {}
        self._last: dict[str, Branch] = {}
        self._send(
            {
                "options": picklable_options(parent),
                "job": job,
                "mounts": {b.id: mount_spec(b.tree or {}) for b in branches},
            }
        )

    def add(self, b: Branch) -> None:
        """Hand the child a forked branch: it resumes it from its log and runs it at once."""
        self._pending[b.id] = b
        self._send({"branch": b.to_dict()})

    def end(self) -> None:
        """No more branches."""
        self._send({"end": True})

    async def updates(self, record: ExplorationRecord) -> AsyncIterator[Branch]:
        """The branches' state changes until the child exits (then those unfinished are `crashed`);
        closing this iterator stops the child (it saves its branches as interrupted)."""
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        try:
            async for line in proc.stdout:
                update = self._read(line, record, self._pending)
                if update is not None:
                    yield update
            code = await proc.wait()
            if self._stderr_task is not None:
                await self._stderr_task
            for b in list(self._pending.values()):
                last = self._last.get(b.id)
                if code == STOPPED and last is not None and last.status == "interrupted":
                    yield last  # stopped (SIGTERM, whoever sent it) and saved as such: not a crash
                else:
                    yield self._crashed(b, code)
        finally:
            await self._stop(proc)

    async def run(
        self, parent: Any, record: ExplorationRecord, job: Job, branches: Sequence[Branch]
    ) -> AsyncIterator[Branch]:
        """`Engine.run`: every branch forked already (explore.py feeds forks one by one instead)."""
        await self.begin(parent, job, branches)
        for b in branches:
            self.add(b)
        self.end()
        async for update in self.updates(record):
            yield update

    def _read(self, line: bytes, record: ExplorationRecord, pending: dict[str, Branch]) -> Branch | None:
        try:
            message = json.loads(line)
        except ValueError:
            return None
        if not isinstance(message, dict):
            return None
        if "fatal" in message:
            self._stderr += f"\n{message['fatal']}".encode()
            return None
        if "notice" in message:
            if self.on_notice is not None:
                self.on_notice(str(message["notice"]))
            return None
        if "step" in message:
            if self.on_event is not None and message.get("id") in pending:
                self.on_event(record.branch(message["id"]), StepStarted(int(message["step"])))
            return None
        data = message.get("branch")
        if not isinstance(data, dict) or data.get("id") not in pending:
            return None
        update = copy.copy(pending[data["id"]])  # who the branch is (session, workspace, tree) stays ours
        for name in OUTCOME:
            if name in data:
                setattr(update, name, data[name])
        if update.finished:
            del pending[update.id]
        self._last[update.id] = update
        return update

    def _crashed(self, b: Branch, code: int) -> Branch:
        tail = self._stderr.decode("utf-8", "replace").strip().splitlines()
        why = f"killed by signal {-code}" if code < 0 else f"exit {code}"
        b.status = "crashed"
        b.error = f"the branches' process ended before this branch finished ({why})" + (
            f": {tail[-1][-300:]}" if tail else ""
        )
        return b

    async def _stop(self, proc: asyncio.subprocess.Process) -> None:
        drain = asyncio.create_task(_drain(proc))  # its last lines must not block it on a full pipe
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), STOP_GRACE)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        drain.cancel()
        if self._stderr_task is not None:
            self._stderr_task.cancel()
        self._proc = None


async def _drain(proc: asyncio.subprocess.Process) -> None:
    if proc.stdout is not None:
        with contextlib.suppress(Exception):
            while await proc.stdout.read(65536):
                pass
