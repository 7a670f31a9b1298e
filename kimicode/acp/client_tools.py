"""The editor's files and terminals as the tools' `FileAccess` and `CommandRunner` (kimicode/tools/base.py).

When the client offers `fs/read_text_file` and `fs/write_text_file`, read_file, write_file, edit_file and
apply_patch read the editor's buffers (unsaved changes included) and write through it (the edit lands in
the open buffer). When it offers `terminal/*`, bash runs its commands in the editor's terminals. The
tools stay the same; only their context says where bytes and commands go.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any, TypeVar

from acp import RequestError, update_tool_call
from acp.schema import EnvVariable, TerminalToolCallContent

from kimicode.tools.base import CURRENT_CALL_ID, ShellOutcome
from kimicode.tools.shell import HEAD_BYTES, SHELL_ENV, TAIL_BYTES

T = TypeVar("T")

FS_TIMEOUT = 60.0
"""Seconds an editor may take to answer one fs/* request."""


class ClientFiles:
    """`FileAccess` through the client's fs/* methods; called from the file tools' worker threads."""

    def __init__(self, conn: Any, session_id: str, loop: asyncio.AbstractEventLoop) -> None:
        self.conn = conn
        self.session_id = session_id
        self.loop = loop

    def _call(self, make: Callable[[], Coroutine[Any, Any, T]], path: Path) -> T:
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:  # it would wait for itself for ever
            raise RuntimeError("ClientFiles is called from the file tools' worker threads, not the event loop")
        future = asyncio.run_coroutine_threadsafe(make(), self.loop)
        try:
            return future.result(FS_TIMEOUT)
        except TimeoutError:
            future.cancel()
            raise OSError(0, f"the editor did not answer within {FS_TIMEOUT:g} s", str(path)) from None
        except RequestError as exc:  # the editor's refusal, as the file error the tools report
            raise OSError(0, f"the editor refused: {exc}", str(path)) from None
        except ConnectionError as exc:
            raise OSError(0, f"the editor is gone ({exc})", str(path)) from None

    def read_text(self, path: Path) -> str:
        response = self._call(lambda: self.conn.read_text_file(session_id=self.session_id, path=str(path)), path)
        return str(response.content)

    def write_text(self, path: Path, text: str) -> None:
        self._call(lambda: self.conn.write_text_file(session_id=self.session_id, path=str(path), content=text), path)


class ClientTerminals:
    """`CommandRunner` through the client's terminal/* methods: create, show it in the tool call, wait
    (bounded by the timeout), read the output, release; a cancelled or timed-out command is killed."""

    def __init__(
        self,
        conn: Any,
        session_id: str,
        mask: Callable[[str], str] | None = None,
        show: Callable[[Any], Awaitable[None]] | None = None,
    ) -> None:
        self.conn = conn
        self.session_id = session_id
        self.mask = mask
        self.show = show
        """Sends a session update (the terminal shown inside its tool call)."""

    async def run(self, command: str, *, cwd: str, env: Mapping[str, str], timeout: float) -> ShellOutcome:
        sid = self.session_id
        # Only kimicode's own variables (no pager, no colour): the editor starts the shell with its own
        # environment, and secrets of this process must not travel in the request.
        variables = [EnvVariable(name=k, value=v) for k, v in SHELL_ENV.items()]
        created = await self.conn.create_terminal(
            session_id=sid,
            command="/bin/bash",
            args=["-c", command],
            cwd=cwd,
            env=variables,
            output_byte_limit=HEAD_BYTES + TAIL_BYTES,
        )
        tid = created.terminal_id
        call_id = CURRENT_CALL_ID.get()
        timed_out = False
        try:
            if self.show is not None and call_id:
                await self.show(
                    update_tool_call(call_id, content=[TerminalToolCallContent(type="terminal", terminal_id=tid)])
                )
            try:
                async with asyncio.timeout(timeout):
                    await self.conn.wait_for_terminal_exit(session_id=sid, terminal_id=tid)
            except TimeoutError:
                timed_out = True
                await self.conn.kill_terminal(session_id=sid, terminal_id=tid)
            out = await self.conn.terminal_output(session_id=sid, terminal_id=tid)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await asyncio.shield(self.conn.kill_terminal(session_id=sid, terminal_id=tid))
            raise
        finally:
            with contextlib.suppress(Exception):
                await asyncio.shield(self.conn.release_terminal(session_id=sid, terminal_id=tid))
        text = str(out.output)
        if self.mask is not None:
            text = self.mask(text)
        status = out.exit_status
        code: int | None = None
        if status is not None and status.exit_code is not None:
            code = status.exit_code
        elif status is not None and status.signal:
            code = -15 if "TERM" in status.signal else -9
        if out.truncated:
            text = "[the beginning of the output was cut by the editor]\n" + text
        return ShellOutcome(
            output=text,
            returncode=code,
            timed_out=timed_out,
            lines=text.count("\n") + (0 if text.endswith("\n") or not text else 1),
            total_bytes=len(text.encode("utf-8", errors="replace")),
        )
