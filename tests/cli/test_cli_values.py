"""Every option of the main command that takes a value is read from the command itself, so no new flag's
value is ever taken for a first prompt or for `-r`'s missing id (a hand-written list missed `--scope`,
`--on-switch`, `--branches` and `--verify` within an hour of their landing)."""

from __future__ import annotations

import typer

from kimicode.cli.app import app
from kimicode.cli.firstprompt import first_prompt_args, value_options
from kimicode.cli.sessions import optional_resume_value

COMMAND = typer.main.get_command(app)
COMMANDS = COMMAND.commands  # type: ignore[attr-defined]
TAKES = value_options(COMMAND)


def test_the_value_options_are_the_commands_own() -> None:
    options = value_options(COMMAND)
    assert {"--scope", "--on-switch", "-m", "--model", "-C", "--max-tokens"} <= options
    assert "--yolo" not in options and "--verbose" not in options  # flags take no value
    assert "-r" not in options  # its value is optional


def test_no_option_value_is_taken_for_a_prompt_or_a_missing_resume_id() -> None:
    for option in sorted(value_options(COMMAND)):
        argv = [option, "normal", "-p", "hi"]
        assert first_prompt_args(argv, COMMANDS, TAKES) == argv, option
        assert optional_resume_value([option, "-r"], TAKES) == [option, "-r"], option  # `-r` is the option's value here
    assert optional_resume_value(["-r", "--scope", "strict"], TAKES) == ["--resume=", "--scope", "strict"]
