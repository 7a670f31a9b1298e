"""`kimicode "fix the failing test"`: a positional argument that is not a subcommand opens the interactive
session with that first prompt (as `claude "..."` and `codex "..."` do). The command line is rewritten
before typer parses it: the words become `--first-prompt TEXT`. A single word close to a subcommand's
name (`kimicode doctr`) is refused as a typo instead of being sent to the model."""

from __future__ import annotations

import difflib
from collections.abc import Collection
from typing import Any

FIRST_PROMPT = "--first-prompt"


class NotACommand(ValueError):
    """A word that looks like a misspelt subcommand."""


def value_options(command: Any) -> set[str]:
    """The option names of a click command that take a value (`-m`, `--model`, ...), read from the command
    itself so a new option is never mistaken for the start of a prompt."""
    names: set[str] = set()
    for param in getattr(command, "params", ()):
        if (
            getattr(param, "param_type_name", "") == "option"
            and not getattr(param, "is_flag", False)
            and getattr(param, "nargs", 1) > 0
            and not getattr(param, "count", False)
        ):
            names.update(param.opts)
    return names - {"-r", "--resume"}  # its value is optional (sessions.optional_resume_value)


def first_prompt_args(argv: list[str], commands: Collection[str], takes_value: Collection[str]) -> list[str]:
    """`argv` with the positional words of the main command (when the first is not a subcommand) moved
    into `--first-prompt`; unchanged when there are none or the first names a subcommand. `takes_value`:
    the options whose next word is their value (`value_options` of the main command)."""
    words: list[int] = []
    forced = None
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            forced = i
            words.extend(range(i + 1, len(argv)))
            break
        if arg.startswith("-") and arg != "-":
            takes = arg in takes_value or (
                arg in ("-r", "--resume")
                and i + 1 < len(argv)
                and not argv[i + 1].startswith("-")
                and argv[i + 1] not in commands
            )
            i += 2 if takes else 1
            continue
        if not words and arg in commands:
            return list(argv)  # `kimicode sessions list`, `kimicode -v doctor`
        words.append(i)
        i += 1
    if not words:
        return list(argv)
    text = " ".join(argv[n] for n in words)
    if forced is None and len(words) == 1 and " " not in text:
        close = difflib.get_close_matches(text, list(commands), n=1, cutoff=0.75)
        if close:
            raise NotACommand(
                f"no command {text!r} (did you mean {close[0]!r}?); to start a session with it as the "
                f'first prompt, write: kimicode -- "{text}"'
            )
    rest = [a for n, a in enumerate(argv) if n not in words and n != forced]
    return [*rest, FIRST_PROMPT, text]


def whole_short_helps(group: Any) -> None:
    """Give every subcommand (and theirs) its docstring's first sentence as the one-liner `--help` lists,
    whole: click would otherwise cut it at about 45 characters with `...`."""
    import re

    for command in getattr(group, "commands", {}).values():
        if not getattr(command, "short_help", None) and getattr(command, "help", None):
            text = " ".join(command.help.split("\n\n", 1)[0].split())
            ends = [
                m.start()
                for m in re.finditer(r"(?<![.])[.!?](?=\s)", text)
                if text[: m.start()].count("(") == text[: m.start()].count(")")
            ]
            command.short_help = text[: ends[0]] if ends else text.rstrip(".")
        whole_short_helps(command)
