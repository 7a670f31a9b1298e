"""`!command` at the prompt: the user's own shell command, run at once in the workspace (as if typed in
their shell: no approval and no sandbox, since the user typed it, not the model), its output shown as it
comes and sent to the model with the next message, so "!pytest -x" then "fix that" works as in Claude
Code. Esc or Ctrl-C stops it (its whole process group).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from typing import TYPE_CHECKING

from kimicode.context.output import DEFAULT_CAP_CHARS
from kimicode.termsafe import sanitize

if TYPE_CHECKING:
    from kimicode.ui.app import Session

SHELL_CAP = DEFAULT_CAP_CHARS
"""Characters of a command's output sent to the model (the end is kept: errors come last)."""


async def _run(session: Session, command: str, out: list[str]) -> int:
    proc = await asyncio.create_subprocess_exec(
        os.environ.get("SHELL") or "/bin/sh",
        "-c",
        command,
        cwd=session.workspace,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    assert proc.stdout is not None
    try:
        while line := await proc.stdout.readline():
            text = line.decode("utf-8", "replace")
            out.append(text)
            session.say("  " + sanitize(text.rstrip("\n"), sequences="escape", newlines=False), "dim")
        return await proc.wait()
    finally:
        if proc.returncode is None:  # cancelled (Esc / Ctrl-C): stop the command and what it started
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()


async def run_shell(session: Session, command: str) -> None:
    """Run `command`, show its output, and keep it for the next message (`with_shell_output`)."""
    out: list[str] = []
    try:
        code: int | None = await session.run_cancellable(_run(session, command, out))
    except asyncio.CancelledError:
        code = None
    except OSError as exc:
        session.say(f"! could not run it: {exc}", "red")
        return
    text = "".join(out)
    if len(text) > SHELL_CAP:
        text = f"[… {len(text) - SHELL_CAP} earlier characters left out]\n" + text[-SHELL_CAP:]
    status = "stopped (esc)" if code is None else f"exit {code}"
    session.say(f"  ⎿ {status} · the output goes to the model with your next message", "dim")
    session.shell_output.append(
        f'<user-shell-command command="{command}" status="{status}">\n{text.rstrip()}\n</user-shell-command>'
    )


def with_shell_output(session: Session, message: str) -> str:
    """`message` followed by the commands the user ran with `!` since the last message (then forgotten)."""
    if not session.shell_output:
        return message
    blocks, session.shell_output = session.shell_output, []
    return message + "\n\nCommands I ran in my shell before this message, and their output:\n" + "\n".join(blocks)
