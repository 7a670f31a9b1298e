"""A scripted editor for tests: the ACP SDK's client side driving a real `kimicode acp` process.

It keeps open buffers (fs/* go there, as in Zed: unsaved text is what the agent reads, edits land in the
buffer), answers permission questions from a script, runs terminal/* commands for real, and records
every update and every raw JSON-RPC message of the exchange.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
from collections import deque
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from acp import RequestError, spawn_agent_process
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    CreateTerminalResponse,
    DeniedOutcome,
    FileSystemCapabilities,
    KillTerminalResponse,
    ReadTextFileResponse,
    ReleaseTerminalResponse,
    RequestPermissionResponse,
    TerminalExitStatus,
    TerminalOutputResponse,
    WaitForTerminalExitResponse,
    WriteTextFileResponse,
)


class Editor:
    """The client: `answers` are option kinds (`allow_once`, `allow_always`, `reject_once`) or `cancelled`."""

    def __init__(self, answers: list[str] | None = None, buffers: dict[str, str] | None = None) -> None:
        self.answers: deque[str] = deque(answers or [])
        self.buffers: dict[str, str] = dict(buffers or {})
        self.updates: list[tuple[str, Any]] = []
        self.questions: list[Any] = []
        self.reads: list[str] = []
        self.writes: list[tuple[str, str]] = []
        self.terminals: dict[str, subprocess.Popen[bytes]] = {}
        self.commands: list[list[str]] = []
        self.got_update = asyncio.Event()

    def kinds(self, name: str) -> list[Any]:
        """The updates of one kind (`agent_message_chunk`, `tool_call`, ...)."""
        return [u for _, u in self.updates if u.session_update == name]

    def text(self, name: str = "agent_message_chunk") -> str:
        return "".join(u.content.text for u in self.kinds(name) if getattr(u.content, "type", "") == "text")

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append((session_id, update))
        self.got_update.set()

    async def request_permission(self, session_id: str, tool_call: Any, options: Any, **kwargs: Any) -> Any:
        self.questions.append((tool_call, options))
        answer = self.answers.popleft() if self.answers else "reject_once"
        if answer == "cancelled":
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        chosen = next(o for o in options if o.kind == answer)
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=chosen.option_id))

    async def read_text_file(
        self, session_id: str, path: str, line: int | None = None, limit: int | None = None, **kwargs: Any
    ) -> ReadTextFileResponse:
        self.reads.append(path)
        if path in self.buffers:
            return ReadTextFileResponse(content=self.buffers[path])
        try:
            return ReadTextFileResponse(content=Path(path).read_text(encoding="utf-8"))  # noqa: ASYNC240 - tiny test files
        except OSError as exc:
            raise RequestError.resource_not_found(path) from exc

    async def write_text_file(self, session_id: str, path: str, content: str, **kwargs: Any) -> WriteTextFileResponse:
        self.writes.append((path, content))
        self.buffers[path] = content  # into the buffer, not saved: the disk keeps the old text
        return WriteTextFileResponse()

    async def create_terminal(
        self,
        session_id: str,
        command: str,
        args: list[str] | None = None,
        env: Any = None,
        cwd: str | None = None,
        output_byte_limit: int | None = None,
        **kwargs: Any,
    ) -> CreateTerminalResponse:
        argv = [command, *(args or [])]
        self.commands.append(argv)
        environ = dict(os.environ, **{e.name: e.value for e in env or ()})
        # starting is quick; waiting happens in a thread (wait_for_terminal_exit)
        proc = subprocess.Popen(  # noqa: ASYNC220
            argv, cwd=cwd, env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
        )
        tid = f"term-{len(self.terminals) + 1}"
        self.terminals[tid] = proc
        return CreateTerminalResponse(terminal_id=tid)

    async def wait_for_terminal_exit(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> WaitForTerminalExitResponse:
        code = await asyncio.to_thread(self.terminals[terminal_id].wait)
        return WaitForTerminalExitResponse(
            exit_code=code if code >= 0 else None, signal=None if code >= 0 else f"SIG{-code}"
        )

    async def terminal_output(self, session_id: str, terminal_id: str, **kwargs: Any) -> TerminalOutputResponse:
        proc = self.terminals[terminal_id]
        done = proc.poll() is not None
        data = proc.stdout.read() if done and proc.stdout is not None else b""
        status = TerminalExitStatus(exit_code=proc.returncode) if done and proc.returncode >= 0 else None
        return TerminalOutputResponse(output=data.decode("utf-8", "replace"), truncated=False, exit_status=status)

    async def kill_terminal(self, session_id: str, terminal_id: str, **kwargs: Any) -> KillTerminalResponse:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.terminals[terminal_id].pid, 9)
        return KillTerminalResponse()

    async def release_terminal(self, session_id: str, terminal_id: str, **kwargs: Any) -> ReleaseTerminalResponse:
        proc = self.terminals[terminal_id]
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        return ReleaseTerminalResponse()


def capabilities(fs: bool = True, terminal: bool = False) -> ClientCapabilities:
    return ClientCapabilities(fs=FileSystemCapabilities(read_text_file=fs, write_text_file=fs), terminal=terminal)


@contextlib.asynccontextmanager
async def kimicode_acp(
    editor: Editor,
    command: list[str],
    env: dict[str, str],
    cwd: Path,
    log: Path,
    messages: list[dict[str, Any]] | None = None,
) -> AsyncIterator[Any]:
    """`kimicode acp` as a subprocess, connected to `editor`; `messages` collects the raw exchange."""
    observers = []
    if messages is not None:

        def observe(event: Any) -> None:
            messages.append({"direction": event.direction.value, "message": event.message})

        observers.append(observe)
    with log.open("ab") as err:
        async with spawn_agent_process(
            editor, command[0], *command[1:], env=env, cwd=cwd, transport_kwargs={"stderr": err}, observers=observers
        ) as (conn, proc):
            yield conn, proc
