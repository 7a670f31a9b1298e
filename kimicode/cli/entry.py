"""The `kimicode` console script. `--version` answers before anything heavy is imported."""

from __future__ import annotations

import os
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
    try:
        if args[:1] == ["acp"]:  # an editor starts it: none of the other commands' imports (cli/acp_cmd.py)
            from kimicode.cli.acp_cmd import run_acp

            run_acp(args[1:])
            return
        if args[:1] in (["serve"], ["web"]):  # the HTTP face: only its own imports (cli/serve_cmd.py)
            from kimicode.cli.serve_cmd import run_serve

            run_serve(args)
            return
        if args[:1] == ["attach"]:  # an HTTP client of the running server (cli/attach_cmd.py)
            from kimicode.cli.attach_cmd import run_attach

            run_attach(args[1:])
            return
        from kimicode.cli.claude_args import is_claude_mode

        if is_claude_mode(args, os.environ):  # a Claude Agent SDK drives it (cli/claude_run.py)
            from kimicode.cli.claude_run import run_claude

            raise SystemExit(run_claude(args))
        from kimicode.cli.app import run_app

        run_app()
    finally:
        reap_children()
        _exit_without_collecting()


def _exit_without_collecting() -> None:
    """Move every live object out of the garbage collector's reach before the interpreter tears down.

    Finalization clears each module and runs the cycle collector over everything left: with the `openai`
    SDK's thousands of pydantic classes loaded that took 150-250 ms after the answer was printed (a
    fifth of a one-answer `-p` run). Reference counting still frees and finalizes what it frees, and
    atexit handlers still run; only cyclic garbage is left to the operating system, as Python already
    allows at exit. Called once the application has returned, so it never affects a running session.
    """
    import gc

    gc.freeze()
