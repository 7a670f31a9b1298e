"""The `bash` tool: run a shell command in the workspace with a timeout, bounded output and clean kills.

Every command runs as `/bin/bash -c` in its own session (so in its own process group), with stdin
closed and an environment without secrets. Whatever happens (normal exit, timeout, the user pressing
Ctrl-C, a background job holding the output pipe open) the tool returns promptly and nothing it started
is left running in that process group. Output is streamed through a fixed-size head + rolling tail, so
a command printing gigabytes costs a few tens of kilobytes of memory; once output overflows them, every
byte also goes to a file in the session directory (within the session's disk limit), so the elided
middle can be read back.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final

from kimicode.context.output import in_use, make_room, spill_limit
from kimicode.prompts import load_prompt
from kimicode.safeio import private_dirs, private_open
from kimicode.tools.base import ShellOutcome, Tool, ToolContext, ToolError, ToolResult
from kimicode.tools.progress import ByteReporter
from kimicode.tools.sandbox import Sandbox
from kimicode.tools.sandbox_explain import Blocked, explain_blocked

if TYPE_CHECKING:
    from kimicode.config.redact import Masker
    from kimicode.tools.limits import CgroupSlot

__all__ = [
    "BASH",
    "SECRET_ENV_NAMES",
    "SECRET_ENV_SUFFIXES",
    "OutputBuffer",
    "bash_tool",
    "run_shell",
    "scrub_env",
]

SECRET_ENV_NAMES: Final = frozenset(
    {
        "KIMI_API_KEY",
        "MOONSHOT_API_KEY",
        "OPENAI_API_KEY",
        "DEEPSEEK_API_KEY",
        "OPENROUTER_API_KEY",
        "ANTHROPIC_API_KEY",
    }
)
"""Variables never passed to commands (the suffix rule below covers them too; listed for clarity)."""
SECRET_ENV_SUFFIXES: Final = ("_API_KEY", "_TOKEN", "_SECRET", "_PASSWORD")
"""Any variable whose name ends with one of these (case-insensitively) is treated as a secret."""

SHELL_ENV: Final = {
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "MANPAGER": "cat",
    "GIT_TERMINAL_PROMPT": "0",
    "TERM": "dumb",
    "NO_COLOR": "1",
}
"""Set for every command: no pagers, no prompts, no colours."""

DEFAULT_TIMEOUT: Final = 120
MAX_TIMEOUT: Final = 600
HEAD_BYTES: Final = 20_000
TAIL_BYTES: Final = 20_000
READ_CHUNK: Final = 64 * 1024
KILL_GRACE: Final = 2.0
"""Seconds between SIGTERM and SIGKILL."""
EOF_GRACE: Final = 1.0
"""Seconds to wait for the output pipe to close after the shell itself exited."""


def _is_secret(name: str) -> bool:
    upper = name.upper()
    return upper in SECRET_ENV_NAMES or upper.endswith(SECRET_ENV_SUFFIXES)


def scrub_env(env: Mapping[str, str], *, names: Iterable[str] = (), values: Iterable[str] = ()) -> dict[str, str]:
    """A copy of `env` without API keys, tokens, secrets and passwords.

    `names` adds variables to drop (e.g. the `api_key_env` of each configured provider) and `values`
    drops any variable holding one of these values (the API key in use, whatever variable holds it).
    """
    extra = {n.upper() for n in names}
    secrets = {v for v in values if v and len(v) >= 8}
    return {k: v for k, v in env.items() if not (_is_secret(k) or k.upper() in extra or v in secrets)}


class OutputBuffer:
    """The first HEAD bytes and a rolling last TAIL bytes of a stream, with totals of what passed.

    With `spill_dir`, once the stream overflows head + tail every byte is also written to a file there
    (raw, so binary or invalid UTF-8 output is kept exactly), up to the directory's disk limit.
    """

    def __init__(self, head: int = HEAD_BYTES, tail: int = TAIL_BYTES, spill_dir: Path | None = None) -> None:
        self._spill_dir = spill_dir
        self.spill_path: Path | None = None
        """The file holding the whole output, once it overflowed (None before, or when it could not be saved)."""
        self.spill_error = "" if spill_dir is not None else "no session directory to save it in"
        self.spilled_bytes = 0
        self.spill_dropped: tuple[str, ...] = ()
        self._spill_file: IO[bytes] | None = None
        self._spill_room = 0
        self._head_max = head
        self._tail_max = tail
        self.head = bytearray()
        self.tail = bytearray()
        self.total_bytes = 0
        self.newlines = 0
        self.dropped_bytes = 0
        self.dropped_lines = 0
        self._last = b""

    def feed(self, data: bytes) -> None:
        if not data:
            return
        if self._spill_file is not None:
            self._spill_write(data)
        self.total_bytes += len(data)
        self.newlines += data.count(b"\n")
        self._last = data[-1:]
        room = self._head_max - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > 2 * self._tail_max:
                self._trim()

    def _start_spill(self) -> None:
        """Open the spill file and write everything seen so far (nothing was dropped yet)."""
        if self._spill_dir is None or self.spill_path is not None or self.spill_error:
            return
        try:
            private_dirs(self._spill_dir)
            self._spill_room = spill_limit(self._spill_dir)
            if self._spill_room <= 0:
                self.spill_error = "the session's limit for saved outputs ([context] spill_max_bytes) is 0"
                return
            reserve = min(self._spill_room, 4 * (self._head_max + self._tail_max))
            self.spill_dropped = make_room(self._spill_dir, reserve)
            path = self._spill_dir / f"bash-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}.txt"
            self._spill_file = private_open(path, "wb")  # 0600; written as the command runs, closed in close()
            self.spill_path = path
            in_use.add(path)
        except OSError as exc:
            self.spill_error = f"it could not be saved ({exc.strerror or exc})"
            return
        self._spill_write(bytes(self.head) + bytes(self.tail))

    def _spill_write(self, data: bytes) -> None:
        if self._spill_file is None:
            return
        part = data[: max(0, self._spill_room - self.spilled_bytes)]
        try:
            self._spill_file.write(part)
        except OSError as exc:
            self.spill_error = f"writing it failed ({exc.strerror or exc})"
            self.close()
            return
        self.spilled_bytes += len(part)

    def close(self) -> None:
        """Close the spill file and keep the session's directory within its disk limit."""
        if self._spill_file is None:
            return
        with contextlib.suppress(OSError):
            self._spill_file.close()
        self._spill_file = None
        if self.spill_path is not None:
            in_use.discard(self.spill_path)
        if self._spill_dir is not None:
            self.spill_dropped += make_room(self._spill_dir, 0, keep=self.spill_path)

    def _where(self) -> str:
        """Where the whole output is, for the elision marker."""
        if self.spill_path is None or (self.spill_error and not self.spilled_bytes):
            return f"; the full output was not saved: {self.spill_error or 'no session directory to save it in'}"
        first = self.head.count(b"\n") + 1
        whole = self.spilled_bytes == self.total_bytes
        held = "the full output" if whole else f"the first {self.spilled_bytes:,} bytes of the output"
        note = ""
        if not whole:
            why = self.spill_error or "the session's limit for saved outputs was reached"
            note = f" ({why})"
        if self.spill_dropped:
            note += f"; older saved outputs were deleted to make room: {', '.join(self.spill_dropped[:5])}"
        return (
            f"; {held} ({self.total_bytes:,} bytes, {self.lines:,} lines) is saved at {self.spill_path}{note}: "
            f"use read_file with offset/limit (the elided part starts at line {first:,}) or grep on it"
        )

    def _trim(self) -> None:
        drop = len(self.tail) - self._tail_max
        if drop > 0:
            self._start_spill()
            self.dropped_bytes += drop
            self.dropped_lines += self.tail.count(b"\n", 0, drop)
            del self.tail[:drop]

    @property
    def lines(self) -> int:
        """Lines of output (a final line without newline counts)."""
        return self.newlines + (1 if self.total_bytes and self._last != b"\n" else 0)

    def render(self) -> str:
        """Head, an elision marker when bytes were dropped, then tail; decoded leniently."""
        self._trim()
        head = self.head.decode("utf-8", "replace")
        if not self.dropped_bytes:
            return (self.head + self.tail).decode("utf-8", "replace")
        tail = bytes(self.tail)
        skip = 0
        while skip < min(3, len(tail)) and 0x80 <= tail[skip] < 0xC0:  # start on a character boundary
            skip += 1
        self.close()
        marker = f"\n… [{self.dropped_bytes + skip} bytes / {self.dropped_lines} lines elided{self._where()}] …\n"
        return head + marker + tail[skip:].decode("utf-8", "replace")


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    """True while a process (not a zombie) remains in the group. Zombies hold no resources and may
    linger where PID 1 does not reap orphans, so on Linux they are not counted."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if not os.path.isdir("/proc/self"):
        return True
    from kimicode.procs import live_processes

    return any(group == pgid for _, group in live_processes().values())


async def _kill_group(proc: asyncio.subprocess.Process) -> None:
    """SIGTERM the process group, SIGKILL it after KILL_GRACE seconds, and reap the shell."""
    pgid = proc.pid
    try:
        _signal_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + KILL_GRACE
        while time.monotonic() < deadline and _group_alive(pgid):
            await asyncio.sleep(0.05)
    finally:
        _signal_group(pgid, signal.SIGKILL)  # whatever survived SIGTERM (or we were interrupted)
        if proc.returncode is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), 5.0)


async def run_shell(
    command: str,
    *,
    cwd: str,
    env: Mapping[str, str],
    timeout: float,
    wrap: Callable[[Sequence[str]], list[str]] | None = None,
    mask: Masker | None = None,
    spill_dir: Path | None = None,
) -> ShellOutcome:
    """Run `command` with bash in a new session; stdout+stderr merged, bounded; see module docstring.

    `wrap` turns the argv into the one actually started (the OS sandbox). `mask` masks known secrets in
    the output as it is read, before the head/tail buffer could cut one in two. On cancellation the
    process group is killed and CancelledError propagates. Output beyond the head and tail is saved whole
    in `spill_dir` (the session's directory) so its middle can be read back.
    """
    loop = asyncio.get_running_loop()
    argv = ["/bin/bash", "-c", command]
    if wrap is not None:
        argv = wrap(argv)
    read_fd, write_fd = os.pipe()
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=write_fd,
            stderr=write_fd,
            cwd=cwd,
            env=dict(env),
            start_new_session=True,
        )
    except BaseException:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)  # only the children hold the write end now, so EOF means they are done

    buffer = OutputBuffer(spill_dir=spill_dir)
    reader = asyncio.StreamReader(limit=READ_CHUNK)
    pipe = os.fdopen(read_fd, "rb", buffering=0)
    try:
        transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    except BaseException:
        pipe.close()
        await _kill_group(proc)
        raise

    masking = mask.byte_stream() if mask else None
    live = ByteReporter()  # the terminal shows the tail of a running command

    async def pump() -> None:
        while chunk := await reader.read(READ_CHUNK):
            data = masking.feed(chunk) if masking is not None else chunk
            buffer.feed(data)
            live.feed(data)

    pump_task = asyncio.create_task(pump())
    timed_out = False
    try:
        try:
            await asyncio.wait_for(proc.wait(), timeout)
        except TimeoutError:
            timed_out = True
            await _kill_group(proc)
        if not pump_task.done():
            # The shell is gone; a background process may still hold the pipe open.
            await asyncio.wait({pump_task}, timeout=EOF_GRACE)
            if not pump_task.done():
                _signal_group(proc.pid, signal.SIGKILL)
                await asyncio.wait({pump_task}, timeout=0.5)
    except asyncio.CancelledError:
        await _kill_group(proc)
        raise
    finally:
        pump_task.cancel()
        transport.close()
        if masking is not None:
            rest = masking.flush()
            buffer.feed(rest)
            live.feed(rest)
        buffer.close()
    return ShellOutcome(
        output=buffer.render(),
        returncode=proc.returncode,
        timed_out=timed_out,
        lines=buffer.lines,
        total_bytes=buffer.total_bytes,
    )


def _status(outcome: ShellOutcome, timeout: float) -> tuple[str, str]:
    """The final line for the model and the short status for the summary."""
    if outcome.timed_out:
        return f"[timed out after {timeout:g} s; the command and its children were killed]", (
            f"timed out after {timeout:g} s"
        )
    code = outcome.returncode
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"[killed by signal {name}]", f"killed by {name}"
    return f"[exit code: {code}]", f"exit {code}"


def _short(command: str, width: int = 60) -> str:
    first = command.strip().splitlines()[0] if command.strip() else ""
    if len(first) > width or "\n" in command.strip():
        return first[: width - 1].rstrip() + "…"
    return first


def _command_env(command: str, ctx: ToolContext) -> dict[str, str]:
    """The environment `command` runs with: the context's (or ours, scrubbed of secrets), the shell's settings,
    and for read-only git the settings that keep a repository's own programs from running."""
    env = dict(ctx.env) if ctx.env is not None else scrub_env(os.environ)
    env.update(SHELL_ENV)
    from kimicode.permissions.gitsafe import read_only_git_env  # the program tables: on the first command

    env.update(read_only_git_env(command))  # read-only git runs without the programs a repository names
    return env


def _cgroup_slot(sandbox: Sandbox | None) -> CgroupSlot | None:
    """A cgroup slot for one confined local command, None without cgroups (an editor's terminal gets the
    sandbox and rlimits, not kimicode's cgroups: the caller asks only for local commands)."""
    if sandbox is None or not sandbox.cgroups:
        return None
    return sandbox.cgroups.slot(sandbox.limits)


async def _bash(args: dict[str, Any], ctx: ToolContext, sandbox: Sandbox | None = None) -> ToolResult:
    """Run a command (inside `sandbox` when given); the result is its output plus a status line,
    is_error when it failed."""
    command = _checked_command(args.get("command"))
    timeout = _checked_timeout(args.get("timeout", DEFAULT_TIMEOUT))
    env = _command_env(command, ctx)
    confined = sandbox is not None and not (sandbox.auto and ctx.approved)
    profile = ctx.sandbox_profile
    slot = _cgroup_slot(sandbox) if confined and ctx.commands is None else None

    def wrap(argv: Sequence[str]) -> list[str]:
        assert sandbox is not None
        return [*(slot.prefix if slot is not None else []), *sandbox.wrap(argv, profile)]

    try:
        if ctx.commands is not None:  # an editor's terminal (ACP): the user watches it run, in the sandbox
            shown = shlex.join(wrap(["/bin/bash", "-c", command])) if confined else command
            outcome = await ctx.commands.run(shown, cwd=str(ctx.workspace), env=env, timeout=float(timeout))
        else:
            with sandbox.placeholders(profile) if confined and sandbox is not None else contextlib.nullcontext():
                outcome = await run_shell(
                    command,
                    cwd=str(ctx.workspace),
                    env=env,
                    timeout=float(timeout),
                    wrap=wrap if confined else None,
                    mask=ctx.mask,
                    spill_dir=ctx.session_dir,
                )
    except OSError as exc:  # a missing or unreadable workspace, or no /bin/bash
        raise ToolError(f"cannot run the command in {ctx.workspace}: {exc.strerror or exc}") from None
    finally:
        if slot is not None:
            await asyncio.to_thread(slot.release)
    failed = outcome.timed_out or outcome.returncode != 0
    blocked = None
    if confined and failed and not outcome.timed_out:
        blocked = explain_blocked(outcome.output, ctx.workspace, profile, sandbox, outcome.returncode)
    return _result(command, outcome, timeout, blocked)


def _checked_command(command: Any) -> str:
    """The command, if a program can receive it (a clear ToolError otherwise)."""
    if not isinstance(command, str) or not command.strip():
        raise ToolError("command must be a non-empty shell command")
    if "\x00" in command:
        raise ToolError("the command contains a NUL byte, which no program can receive; remove it")
    try:
        command.encode("utf-8")
    except UnicodeError:
        raise ToolError("the command holds characters that cannot be encoded (a lone surrogate)") from None
    return command


def _checked_timeout(timeout: Any) -> float:
    """The timeout in seconds: 1 to MAX_TIMEOUT, DEFAULT_TIMEOUT when null."""
    if timeout is None:
        timeout = DEFAULT_TIMEOUT
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise ToolError("timeout must be a number of seconds")
    if timeout < 1:
        raise ToolError(f"timeout must be at least 1 second, got {timeout:g}")
    if timeout > MAX_TIMEOUT:
        raise ToolError(
            f"timeout must be at most {MAX_TIMEOUT} seconds, got {timeout:g}; "
            "run longer jobs in the background with their output redirected to a file"
        )
    return timeout


def _result(command: str, outcome: ShellOutcome, timeout: float, blocked: Blocked | None) -> ToolResult:
    """The output and a status line for the model (with why the sandbox blocked it, if it did), a summary."""
    status_line, status = _status(outcome, timeout)
    body = outcome.output if outcome.output else "(no output)"
    if not body.endswith("\n"):
        body += "\n"
    if blocked is not None:
        status_line += "\n" + blocked.for_model
    noun = "line" if outcome.lines == 1 else "lines"
    return ToolResult(
        content=body + status_line,
        is_error=outcome.timed_out or outcome.returncode != 0,
        summary=f"bash: {_short(command)} ({status}, {outcome.lines} {noun})",
        display={"notice": blocked.notice} if blocked is not None else None,
    )


def bash_tool(sandbox: Sandbox | None = None) -> Tool:
    """The bash tool; with `sandbox`, every command runs inside it (see kimicode.tools.sandbox)."""

    async def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return await _bash(args, ctx, sandbox)

    return Tool(
        name="bash",
        description=load_prompt("tools/bash.md"),
        parameters=_BASH_PARAMETERS,
        fn=_bash if sandbox is None else run,
        kind="execute",
    )


_BASH_PARAMETERS: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "description": "The command line, run with /bin/bash -c."},
        "timeout": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_TIMEOUT,
            "description": f"Seconds before the command is killed (default {DEFAULT_TIMEOUT}, max {MAX_TIMEOUT}).",
        },
    },
    "required": ["command"],
    "additionalProperties": False,
}

BASH = bash_tool()
