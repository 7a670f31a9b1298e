"""The terminal's console: plain or styled output, the endpoint as the user sees it, and the one red line
an internal error of the UI leaves (its traceback goes to a private log)."""

from __future__ import annotations

import os
import sys
import time
import traceback
from pathlib import Path

from rich.console import Console
from rich.text import Text

from kimicode._version import __version__
from kimicode.safeio import private_dirs, private_open

__all__ = ["endpoint_host", "make_console", "plain_output", "report_internal_error"]


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
