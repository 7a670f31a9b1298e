"""The hints of a refused bash command: a rule that would allow a part of it (`bash(npm test)`; for
`python -m pytest` the module's command), and one refusal naming such a rule for every part of a command
line that needs one, so that following the hint runs the whole line. Split from bashcheck.py."""

from __future__ import annotations

from collections.abc import Sequence

from kimicode.permissions.decision import Decision
from kimicode.permissions.shellparse import SimpleCommand


def combined_refusal(wanting: Sequence[Decision]) -> Decision | None:
    """The refusal of the first part no rule admits, its suggestion naming a rule for every such part
    (one per line), so that allowing what the hint says runs the whole line, not just its first part."""
    if not wanting:
        return None
    rules = list(dict.fromkeys(d.suggestion for d in wanting))
    reason = wanting[0].reason
    if len(wanting) > 1:
        reason += f" (nor {len(wanting) - 1} more part{'s' if len(wanting) > 2 else ''} of the line)"
    return Decision("ask", reason, "\n".join(rules))


def show_word(text: str) -> str:
    """A word as a rule shows it: quoted when it has spaces."""
    return f"'{text}'" if any(c.isspace() for c in text) else text


def suggest_rule(cmd: SimpleCommand, module: Sequence[str] | None = None) -> str:
    """A rule that would allow `cmd`: the command itself, or its first words and `*` when it is long.
    For `python -m MODULE ARGS` the rule names the module's command (`bash(pytest -q)`), which admits
    both spellings."""
    text = " ".join(show_word(w) for w in module) if module else cmd.text
    if len(text) <= 60 and "(" not in text and ")" not in text:
        return f"bash({text})"
    words = list(module) if module else [w.text for w in cmd.words[: len(cmd.assignments) + 2]]
    head = " ".join(words[:2])
    return f"bash({head[:60]}*)" if "(" not in head and ")" not in head else ""
