"""The `kimicode` console script. `--version` answers before anything heavy is imported."""

from __future__ import annotations

import sys


def main() -> None:
    """Entry point: fast path for `--version`, else the typer application.

    The process first makes itself non-dumpable and a child subreaper (kimicode.config.redact), and whatever
    the bash tool started that is still running when the application ends (`setsid … &`) is killed.
    """
    args = sys.argv[1:]
    if args in (["--version"], ["-V"]):
        from kimicode._version import __version__

        sys.stdout.write(f"kimicode {__version__}\n")
        return
    from kimicode.procs import harden_process, reap_children

    harden_process(subreaper=True)
    from kimicode.cli.app import run_app

    try:
        run_app()
    finally:
        reap_children()
