"""The `kimicode` console script. `--version` answers before anything heavy is imported."""

from __future__ import annotations

import sys


def main() -> None:
    """Entry point: fast path for `--version`, else the typer application."""
    args = sys.argv[1:]
    if args in (["--version"], ["-V"]):
        from kimicode._version import __version__

        sys.stdout.write(f"kimicode {__version__}\n")
        return
    from kimicode.cli.app import run_app

    run_app()
