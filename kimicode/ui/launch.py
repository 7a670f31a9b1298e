"""Starting the interactive session: `run_interactive` checks the command line's options, asks the trust
question, makes the console and runs the `Session` (kimicode/ui/app.py) until it ends."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from kimicode.config.endpoint import ConfigError, kimicode_home
from kimicode.ui.app import Session
from kimicode.ui.console import make_console, plain_output
from kimicode.ui.options import SessionOptions
from kimicode.ui.trust_cmds import ask_trust

__all__ = ["run_interactive"]


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
        options = SessionOptions(
            workspace=workspace,
            resume=resume,
            fork=fork,
            fork_workspace=fork_workspace,
            first_prompt=first_prompt,
            **settings,
        )
    except TypeError as exc:
        sys.stderr.write(f"kimicode: {exc}\n")
        return 2
    if not settings.get("config"):  # the trust question, once per workspace (kimicode/ui/trust_cmds.py)
        ask_trust(Path(workspace or "."), Path(settings["home"]) if settings.get("home") else kimicode_home())
    plain = plain_output()
    console = make_console(plain)
    try:
        session = Session(options, console, plain)
    except (ConfigError, ValueError) as exc:  # a session `kimicode serve` holds: `kimicode attach` follows it
        from kimicode.config.serve_state import explain_refusal

        home = Path(settings["home"]) if settings.get("home") else kimicode_home()
        sys.stderr.write(f"kimicode: {explain_refusal(exc, home)}\n")
        return 2
    try:
        return asyncio.run(session.run())
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        sys.stderr.write(f"kimicode: unexpected error: {type(exc).__name__}: {exc}\n")
        return 1
