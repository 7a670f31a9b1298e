"""What a slash command's module uses of the interactive session: named here as a protocol (not `ui.app.Session`),
so that the modules of the commands stay below ui/app.py even for the type checker."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from kimicode.agent.core import Agent
    from kimicode.events import Event

T = TypeVar("T")


class SessionHost(Protocol):
    """The interactive session as the commands of ui/bangcmds.py, claude_cmds.py, compact_cmd.py and window.py
    see it: its agent, its directories, its output and its cancellable waits."""

    @property
    def agent(self) -> Agent: ...
    @property
    def workspace(self) -> Path: ...
    @property
    def home(self) -> Path: ...

    def say(self, text: str, style: str = "") -> None: ...
    def announce(self, text: str, style: str = "") -> None: ...
    def transient(self, text: str) -> contextlib.AbstractContextManager[None]: ...
    def on_side_event(self, ev: Event) -> None: ...
    async def run_cancellable(self, work: Awaitable[T]) -> T: ...
