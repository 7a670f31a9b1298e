"""The tool contract: a tool is an async function of (validated arguments, context) returning a result.

Tools never print, never ask the user and never import the UI. What the user sees of a tool call comes
from the events the agent emits around it (with `ToolResult.display` as an optional hint).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from kimicode.errors import ToolError as ToolError  # raised by a tool to report a failure to the model

if TYPE_CHECKING:
    from kimicode.config.redact import Masker

CURRENT_CALL_ID: ContextVar[str] = ContextVar("kimicode_current_call_id", default="")
"""The id of the tool call being executed (set by the agent around each tool; the task tool reads it
to tie what its subagent does to the call that started it)."""

ToolKind = Literal["read", "edit", "execute", "other"]
"""What a tool does, for permissions and concurrency: `read` tools may run concurrently,
`edit` tools change files (their target is the `path` argument), `execute` runs commands."""


@dataclass(frozen=True)
class ToolResult:
    """What a tool returns. `content` goes to the model; `summary` and `display` are hints for faces."""

    content: str
    is_error: bool = False
    summary: str = ""
    display: Mapping[str, Any] | None = None


@dataclass
class FileStamp:
    """What the agent last saw of a file: used to refuse edits to files changed behind its back."""

    mtime_ns: int
    size: int


class FileAccess(Protocol):
    """Where the file tools read and write text files instead of the disk: an editor's buffers (the ACP
    face's `fs/read_text_file` and `fs/write_text_file`), so unsaved changes are seen and edits land in them.

    Called from the worker threads the file tools run in (never on the event loop). Permission checks,
    path resolution and the freshness stamps still work on the disk; only the bytes go through here.
    Raise OSError (with a strerror) when the editor refuses."""

    def read_text(self, path: Path) -> str:
        """The file's text as the editor has it (its unsaved buffer when one is open)."""
        ...

    def write_text(self, path: Path, text: str) -> None:
        """Replace (or create) the file with `text` through the editor."""
        ...


@dataclass(frozen=True)
class ShellOutcome:
    """What happened to a command (the bash tool's own shell, or a `CommandRunner`'s)."""

    output: str
    returncode: int | None  # negative: killed by that signal
    timed_out: bool
    lines: int
    total_bytes: int


class CommandRunner(Protocol):
    """Where the bash tool runs commands instead of its own shell: an editor's terminals (ACP `terminal/*`),
    so the user watches them run. The permission engine decides first, as for local commands; a command
    that would run in the OS sandbox locally comes wrapped (`bwrap ... -- /bin/bash -c COMMAND`), so the
    editor's terminal runs it confined too. The policy still counts on no sandbox there (it asks more)."""

    async def run(self, command: str, *, cwd: str, env: Mapping[str, str], timeout: float) -> ShellOutcome:
        """Run `command` with bash; on timeout kill it and say so (`timed_out`); cancelled: kill it and raise."""
        ...


@dataclass
class ToolContext:
    """Everything a tool may use besides its arguments."""

    workspace: Path
    session_dir: Path | None = None
    file_stamps: dict[Path, FileStamp] = field(default_factory=dict)
    env: Mapping[str, str] | None = None
    """Environment for child processes; None means the agent's own, minus secrets."""
    mask: Masker | None = None
    """Known secrets to mask in output as it is read (set by the agent; kimicode.config.redact)."""
    approved: bool = False
    """The user approved this very call at a prompt (set on a per-call copy by the agent): under
    `--sandbox auto` such a command runs outside the sandbox, as the user saw and approved it."""
    sandbox_profile: Literal["read-only", "workspace-write"] = "workspace-write"
    """Which sandbox an allowed bash call runs in (set per call by the agent from the permission
    decision: `read-only` when only the read-only allowance admitted it)."""
    files: FileAccess | None = None
    """Text files are read and written through this (an editor over ACP) instead of the disk; None: the disk."""
    commands: CommandRunner | None = None
    """bash runs its commands through this (an editor's terminals over ACP); None: a local shell."""
    extra_dirs: tuple[Path, ...] = ()
    """More directories treated as the workspace is for writes (`--add-dir`)."""
    cancelled: threading.Event = field(default_factory=threading.Event)
    """Set when this call is cancelled or times out. Each call gets its own context (sharing the
    workspace, file stamps and environment) and so its own flag: a sync tool runs in a thread that
    cannot be killed, so a long one should check `ctx.cancelled.is_set()` and stop; whatever it returns
    after the flag is set is discarded."""

    def resolve(self, path: str) -> Path:
        """Resolve a user/model-supplied path against the workspace, following `..` and symlinks, with
        the one resolver of the permission engine (`kimicode.permissions.pathresolve`): an alias that cannot
        be resolved (`/dev/fd/3/..`, `/proc/self/root/...`) comes back as written, and the policy
        treats it as sensitive. A path no file can have (a NUL byte, unencodable text) raises ToolError."""
        from kimicode.permissions.pathresolve import resolve

        resolved = resolve(path, self.workspace)
        if resolved.invalid:  # a NUL byte or an unencodable name: a clean error for the model
            raise ToolError(resolved.problem or "invalid path")
        return resolved.path

    def is_inside(self, path: Path) -> bool:
        """True when the resolved `path` lies inside the (resolved) workspace, or one of `extra_dirs`."""
        for where in (self.workspace, *self.extra_dirs):
            root = Path(os.path.realpath(where))
            if path == root or root in path.parents:
                return True
        return False

    def remember(self, path: Path) -> None:
        """Record the current on-disk state of `path` after reading or writing it."""
        try:
            st = path.stat()
        except OSError:
            self.file_stamps.pop(path, None)
            return
        self.file_stamps[path] = FileStamp(st.st_mtime_ns, st.st_size)


ToolFn = Callable[[dict[str, Any], ToolContext], Awaitable["ToolResult | str"]]
PreviewFn = Callable[[dict[str, Any], ToolContext], str]
"""The exact change a call would make, as a unified diff, without making it (raises ToolError when the
call would fail)."""


@dataclass(frozen=True)
class Tool:
    """A tool the model can call: name, description for the model, JSON schema, function, kind."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    fn: ToolFn
    kind: ToolKind = "other"
    timeout: float | None = None
    """Seconds a call may run before it is stopped and reported to the model as timed out (None: the
    agent's `tool_timeout`)."""
    repeatable: bool = False
    """True for tools whose identical consecutive calls are expected (polling): no `repeat_limit`."""
    preview: PreviewFn | None = None
    """For tools that change files: the diff a call would apply (shown when asking for approval)."""
    paths: Callable[[Mapping[str, Any]], list[str]] | None = None
    """For tools whose targets are not in a `path`/`paths` argument (apply_patch): every path a call
    would touch, each checked by the permission engine."""

    def schema(self) -> dict[str, Any]:
        """The OpenAI `tools` entry for this tool."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": dict(self.parameters)},
        }
