"""`kimicode "fix the failing test"`: a positional argument that is not a subcommand opens the interactive
session with that first prompt (as `claude "..."` and `codex "..."` do). The command line is rewritten
before typer parses it: the words become `--first-prompt TEXT`. A single word close to a subcommand's
name (`kimicode doctr`) is refused as a typo instead of being sent to the model."""

from __future__ import annotations

import difflib
from collections.abc import Collection

from kimicode.cli.sessions import VALUE_OPTIONS

FIRST_PROMPT = "--first-prompt"


class NotACommand(ValueError):
    """A word that looks like a misspelt subcommand."""


def first_prompt_args(argv: list[str], commands: Collection[str]) -> list[str]:
    """`argv` with the positional words of the main command (when the first is not a subcommand) moved
    into `--first-prompt`; unchanged when there are none or the first names a subcommand."""
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
            takes = arg in VALUE_OPTIONS or (arg in ("-r", "--resume") and i + 1 < len(argv)
                                             and not argv[i + 1].startswith("-") and argv[i + 1] not in commands)
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
            raise NotACommand(f"no command {text!r} (did you mean {close[0]!r}?); to start a session with it as the "
                              f'first prompt, write: kimicode -- "{text}"')
    rest = [a for n, a in enumerate(argv) if n not in words and n != forced]
    return [*rest, FIRST_PROMPT, text]
