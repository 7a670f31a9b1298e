"""`kimicode login`: paste an API key (hidden), checked with the endpoint at once (as `kimicode doctor`
does: a refused key is asked for again), stored in `KIMICODE_HOME/config.toml` (mode 0600), replacing a
key stored before. `/login` does the same inside a session (kimicode/ui/login.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer


def login_command(
    model: Annotated[str | None, typer.Option("--model", "-m", help="Check the key for this model's endpoint.")] = None,
    base_url: Annotated[str | None, typer.Option("--base-url", help="Check the key with this endpoint.")] = None,
    no_check: Annotated[bool, typer.Option("--no-check", help="Store the key without asking the endpoint.")] = False,
) -> None:
    """Paste an API key (hidden): checked with the endpoint, then stored in config.toml (mode 0600)."""
    from kimicode.cli.firstrun import ask_and_store
    from kimicode.config.endpoint import kimicode_home
    from kimicode.ui.login import env_key_note, key_verifier

    home = kimicode_home()
    verify = None if no_check else key_verifier(Path.cwd(), home, model, base_url)
    if not ask_and_store(home, out=sys.stderr, verify=verify, replace=True):
        raise typer.Exit(1)
    if note := env_key_note():
        typer.echo(f"kimicode: {note}", err=True)
