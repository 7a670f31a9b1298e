"""The verify command: run in a branch's workspace, inside the OS sandbox, with a timeout.

Exit 0 means verified. The command runs as the bash tool runs the model's commands (same scrubbed
environment, same process-group kill on timeout), inside a `workspace-write` sandbox over the branch's
workspace, so tests can write their caches there and nowhere else, without the network unless the
session allows it. Where no sandbox can be made (no bwrap, or the session runs with `--sandbox off`) it
runs as the parent's own commands would, and the result says so.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kimicode.tools.sandbox import setup_sandbox
from kimicode.tools.shell import SHELL_ENV, run_shell, scrub_env

OUTPUT_TAIL = 4000
"""Characters of the verify output kept in the record (the end is where test runners say what failed)."""


@dataclass(frozen=True)
class VerifyOutcome:
    exit_code: int | None
    timed_out: bool
    output: str
    seconds: float
    sandboxed: bool

    @property
    def passed(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


def verify_sandbox(agent: Any) -> Any:
    """The sandbox the verify command runs in: a workspace-write sandbox over the branch's workspace,
    unless the session's sandbox is off; None when none can be made."""
    mode = agent.options.sandbox if agent.options.sandbox is not None else agent.settings.config.sandbox.mode
    if mode == "off":
        return None
    sandbox, _warning = setup_sandbox(
        "workspace-write", agent.options.sandbox_network, agent.settings, Path(agent.workspace), agent.home
    )
    return sandbox


async def run_verify(
    command: str,
    workspace: Path,
    *,
    timeout: float,
    sandbox: Any = None,
    mask: Any = None,
    env: Mapping[str, str] | None = None,
) -> VerifyOutcome:
    """Run `command` with bash in `workspace` (with `env`, else the scrubbed environment); never raises
    for the command's own failure."""
    env = dict(env) if env is not None else scrub_env(os.environ)
    env.update(SHELL_ENV)
    start = time.monotonic()
    try:
        with sandbox.placeholders() if sandbox is not None else contextlib.nullcontext():
            outcome = await run_shell(
                command,
                cwd=str(workspace),
                env=env,
                timeout=timeout,
                wrap=sandbox.wrap if sandbox is not None else None,
                mask=mask,
            )
    except OSError as exc:
        return VerifyOutcome(
            None, False, f"cannot run the verify command: {exc}", time.monotonic() - start, sandbox is not None
        )
    output = outcome.output[-OUTPUT_TAIL:]
    if outcome.timed_out:
        output += f"\n[verify timed out after {timeout:g} s; the command and its children were killed]"
    return VerifyOutcome(
        None if outcome.timed_out else outcome.returncode,
        outcome.timed_out,
        output,
        time.monotonic() - start,
        sandbox is not None,
    )
