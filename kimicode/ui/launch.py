"""Starting the interactive session: the command line's options, the console, and `run_interactive`.

Split from `app.py` (which re-exports these names); the `Session` itself lives there.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.text import Text

from kimicode._version import __version__
from kimicode.config.endpoint import ConfigError


@dataclass(frozen=True)
class AgentOptions:
    """The settings every Agent of the session is built with (the command line's flags).

    `workspace=None` means the current directory for a new session and the session's own workspace
    when resuming. `resume` is a session id (or unique prefix), `LATEST`, or None for a new session.
    """

    model: str | None = None
    base_url: str | None = None
    workspace: Path | None = None
    permission_mode: str = "default"
    thinking: str | None = None
    max_turns: int = 200
    max_retries: int = 5
    retry_base_delay: float = 1.0
    request_timeout: float = 300.0
    context_window: int | None = None
    max_completion_tokens: int | None = None
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    ask: tuple[str, ...] = ()
    sandbox: str | None = None
    sandbox_network: bool | None = None
    resume: str | None = None
    fork: bool = False
    fork_workspace: str = "shared"
    """`worktree`: the fork gets its own working tree (`--fork --worktree`)."""


def endpoint_host(base_url: str) -> str:
    """`api.moonshot.ai`, `127.0.0.1:8080`: where requests go, never the credentials a URL may carry."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(base_url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return ""
    if ":" in host:  # IPv6
        host = f"[{host}]"
    return f"{host}:{port}" if host and port else host


def report_internal_error(console: Console, home: Path, exc: BaseException) -> None:
    """A bug in the UI: one red line (the session goes on), the traceback appended to ui-errors.log."""
    log = home / "ui-errors.log"
    where = ""
    try:
        home.mkdir(parents=True, exist_ok=True)
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} kimicode {__version__}\n")
            fh.write("".join(traceback.format_exception(exc)))
        where = f" (details in {log})"
    except OSError:
        pass
    console.print(Text(f"✗ internal error: {type(exc).__name__}: {exc}{where}. The session continues.", style="red"))


def plain_output() -> bool:
    """True when output must be plain text: stdout is not a terminal, `TERM=dumb`, or `NO_COLOR` is set."""
    return not sys.stdout.isatty() or os.environ.get("TERM", "") == "dumb" or bool(os.environ.get("NO_COLOR"))


def make_console(plain: bool) -> Console:
    if plain:
        return Console(color_system=None, highlight=False, emoji=False, markup=False, force_terminal=False)
    return Console(highlight=False, emoji=False, markup=False)


def run_interactive(
    *,
    model: str | None = None,
    base_url: str | None = None,
    workspace: str | Path | None = None,
    permission_mode: str = "default",
    thinking: str | None = None,
    max_turns: int = 200,
    max_retries: int = 5,
    retry_base_delay: float = 1.0,
    request_timeout: float = 300.0,
    context_window: int | None = None,
    max_completion_tokens: int | None = None,
    resume: str | None = None,
    fork: bool = False,
    fork_workspace: str = "shared",
    allow: Sequence[str] = (),
    deny: Sequence[str] = (),
    ask: Sequence[str] = (),
    sandbox: str | None = None,
    sandbox_network: bool | None = None,
) -> int:
    """Run the interactive terminal session; return the process exit code.

    `resume` continues a saved session (an id or unique prefix; `LATEST`, the empty string, for the most
    recent one of the workspace, as `kimicode -c`), in a copy when `fork` is true. `workspace=None` is
    the current directory, or the resumed session's own workspace. `allow`/`deny`/`ask` are permission rules
    and `sandbox`/`sandbox_network` the bash sandbox, as for `Agent`. Configuration problems (no API
    key, a bad base URL, an unknown session) are reported in one line on stderr (exit 2).
    """
    if fork and resume is None:
        sys.stderr.write("kimicode: --fork needs a session to fork (-c or -r ID)\n")
        return 2
    options = AgentOptions(
        model=model,
        base_url=base_url,
        workspace=Path(workspace) if workspace is not None else None,
        permission_mode=permission_mode,
        thinking=thinking,
        max_turns=max_turns,
        max_retries=max_retries,
        retry_base_delay=retry_base_delay,
        request_timeout=request_timeout,
        context_window=context_window,
        max_completion_tokens=max_completion_tokens,
        allow=tuple(allow),
        deny=tuple(deny),
        ask=tuple(ask),
        sandbox=sandbox,
        sandbox_network=sandbox_network,
        resume=resume,
        fork=fork,
        fork_workspace=fork_workspace,
    )
    from kimicode.ui.app import Session

    plain = plain_output()
    console = make_console(plain)
    try:
        session = Session(options, console, plain)
    except (ConfigError, ValueError) as exc:
        sys.stderr.write(f"kimicode: {exc}\n")
        return 2
    try:
        return asyncio.run(session.run())
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        sys.stderr.write(f"kimicode: unexpected error: {type(exc).__name__}: {exc}\n")
        return 1
