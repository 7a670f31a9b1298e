"""What the permission engine needs to know about a tool call, as protocols.

The engine sits below the tools (it decides before any tool runs), so it names only the few attributes
it reads: a tool's name and kind (and, for tools such as apply_patch, the paths a call touches), and the
workspace with its path resolver. `kimicode.tools.base.Tool` and `ToolContext` satisfy them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol


class ToolLike(Protocol):
    """A tool as the engine sees it."""

    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def paths(self) -> Callable[[Mapping[str, Any]], list[str]] | None:
        """Every path a call would touch, for tools whose targets are not in `path`/`paths`."""
        ...


class Place(Protocol):
    """The workspace a call runs in, with the one path resolver."""

    @property
    def workspace(self) -> Path: ...

    def resolve(self, path: str) -> Path: ...

    def is_inside(self, path: Path) -> bool: ...
