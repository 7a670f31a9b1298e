"""`kimicode completion bash|zsh|fish|powershell`: the shell's tab-completion script for kimicode (its
subcommands, options and choices), printed to stdout to be installed once. The script calls kimicode back
with `_KIMICODE_COMPLETE` set; `run_app` then answers from typer's completion classes."""

from __future__ import annotations

import os
from enum import StrEnum
from typing import Annotated

import typer

COMPLETE_VAR = "_KIMICODE_COMPLETE"

INSTALL = {
    "bash": 'eval "$(kimicode completion bash)"   # in ~/.bashrc, or save it as '
    "~/.local/share/bash-completion/completions/kimicode",
    "zsh": 'kimicode completion zsh > "${fpath[1]}/_kimicode"   # then start a new shell '
    '(or eval "$(kimicode completion zsh)" in ~/.zshrc after compinit)',
    "fish": "kimicode completion fish > ~/.config/fish/completions/kimicode.fish",
    "powershell": "kimicode completion powershell >> $PROFILE",
}


class Shell(StrEnum):
    bash = "bash"
    zsh = "zsh"
    fish = "fish"
    powershell = "powershell"


def completion_command(
    shell: Annotated[Shell, typer.Argument(help="bash, zsh, fish or powershell.")],
) -> None:
    """Print the shell's completion script for kimicode (how to install it is said on stderr)."""
    from typer._completion_shared import get_completion_script

    typer.echo(get_completion_script(prog_name="kimicode", complete_var=COMPLETE_VAR, shell=shell.value))
    typer.echo(f"# install: {INSTALL[shell.value]}", err=True)


def answering_completion() -> bool:
    """True when a completion script is asking (the variable is set): typer's completion classes are
    registered so that click can answer it (kimicode turns typer's own completion options off)."""
    if not os.environ.get(COMPLETE_VAR):
        return False
    from typer._completion_classes import completion_init

    completion_init()
    return True
