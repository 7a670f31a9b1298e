"""Starting the interactive session: the command line's options, the console, and `run_interactive`.

Split from `app.py` (which re-exports these names); the `Session` itself lives there.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from kimicode._version import __version__
from kimicode.config.endpoint import ConfigError
from kimicode.safeio import private_dirs, private_open


class SessionOptions:
    """How the terminal session opens: its workspace, the session to resume, and the Agent settings the
    command line gave (names of `AgentOptions` fields; the rest come from `AgentOptions.from_workspace`).

    `workspace=None` means the current directory for a new session and the session's own workspace
    when resuming. `resume` is a session id (or unique prefix), `LATEST`, or None for a new session.
    """

    def __init__(
        self,
        *,
        workspace: str | Path | None = None,
        resume: str | None = None,
        fork: bool = False,
        fork_workspace: str = "shared",
        first_prompt: str | None = None,
        **settings: Any,
    ) -> None:
        from kimicode.agent.options import check_names

        check_names(settings, "SessionOptions()")
        self.workspace = Path(workspace) if workspace is not None else None
        self.resume = resume
        self.fork = fork
        self.fork_workspace = fork_workspace
        """`worktree`: the fork gets its own working tree (`--fork --worktree`)."""
        self.first_prompt = first_prompt
        """Sent as the first message once the session is open (`kimicode "PROMPT"`)."""
        self.settings: dict[str, Any] = dict(settings)


AgentOptions = SessionOptions
"""The name this class had before kimicode.agent.options.AgentOptions existed."""


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
        private_dirs(home)
        with private_open(log, "a") as fh:
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
    workspace: str | Path | None = None,
    resume: str | None = None,
    fork: bool = False,
    fork_workspace: str = "shared",
    first_prompt: str | None = None,
    **settings: Any,
) -> int:
    """Run the interactive terminal session; return the process exit code.

    `resume` continues a saved session (an id or unique prefix; `LATEST`, the empty string, for the most
    recent one of the workspace, as `kimicode -c`), in a copy when `fork` is true. `workspace=None` is
    the current directory, or the resumed session's own workspace. `settings` are AgentOptions fields
    (`model`, `permission_mode`, `allow`, `sandbox`, ...). Configuration problems (no API key, a bad
    base URL, a broken config file, an unknown session) are reported in one line on stderr (exit 2).
    """
    if fork and resume is None:
        sys.stderr.write("kimicode: --fork needs a session to fork (-c or -r ID)\n")
        return 2
    try:
        options = SessionOptions(workspace=workspace, resume=resume, fork=fork, fork_workspace=fork_workspace,
                                 first_prompt=first_prompt, **settings)
    except TypeError as exc:
        sys.stderr.write(f"kimicode: {exc}\n")
        return 2
    from kimicode.ui.app import Session

    if not settings.get("config"):  # the trust question, once per workspace (kimicode/ui/trust_cmds.py)
        from kimicode.config.endpoint import kimicode_home
        from kimicode.ui.trust_cmds import ask_trust

        ask_trust(Path(workspace or "."), Path(settings["home"]) if settings.get("home") else kimicode_home())
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
