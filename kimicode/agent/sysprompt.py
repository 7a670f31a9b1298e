"""The system prompt, assembled from its parts in a fixed order: what never changes between workspaces
comes first, so that every session of one model, scope and face sends the same leading tokens and the
server's prefix cache serves them; per-workspace text (the workspace path, the date, AGENTS.md) comes
after it.

Order: kimicode's prompt (or the caller's `system_prompt`), the model profile's addition, the scope
section, then `# Environment`, the project's AGENTS.md files and `append_system_prompt`.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from kimicode.config.choices import Scope
from kimicode.prompts import load_prompt

ENVIRONMENT_HEADING = "# Environment"
"""Where the per-workspace part begins: everything before it is the same in every workspace."""

_ASK = (
    "When the request is ambiguous or could be read in more than one way, ask one short question and wait "
    "for the answer before changing anything."
)
_STOP = (
    "Nobody can answer questions during this run: when the request is ambiguous, state the assumption you "
    "would need, and stop without changing anything."
)


@dataclass(frozen=True)
class PromptParts:
    """What the system prompt is built from (all plain values, so the prompt can be shown before a run)."""

    workspace: Path
    scope: Scope = "normal"
    headless: bool = False
    profile_addition: str | None = None
    """A file under `prompts/` (the model profile's addition), or None."""
    custom: str | None = None
    """The caller's `system_prompt`: replaces kimicode's prompt, the profile addition and the normal scope
    text (a strict scope is still added: it was asked for explicitly)."""
    instructions: str | None = None
    """The AGENTS.md section (per workspace)."""
    append: str | None = None


def scope_section(scope: Scope, headless: bool) -> str:
    """The scope limits: strict ones tell the model to ask (terminal, library) or to stop (headless)."""
    if scope == "strict":
        return load_prompt("scope/strict.md").replace("{ambiguity}", _STOP if headless else _ASK)
    return load_prompt("scope/normal.md")


def environment_section(workspace: Path) -> str:
    """The per-workspace facts: the workspace root, the platform, today's date."""
    return _fill(load_prompt("environment.md"), workspace)


def _fill(text: str, workspace: Path) -> str:
    return (
        text.replace("{workspace}", str(workspace))
        .replace("{platform}", f"{platform.system()} {platform.machine()}")
        .replace("{date}", date.today().isoformat())
    )


def build_system_prompt(parts: PromptParts) -> str:
    """The whole system prompt for `parts`."""
    if parts.custom is not None:
        pieces = [_fill(parts.custom, parts.workspace)]
        if parts.scope == "strict":
            pieces.append(scope_section(parts.scope, parts.headless))
    else:
        pieces = [load_prompt("system.md")]
        if parts.profile_addition:
            pieces.append(load_prompt(parts.profile_addition))
        pieces.append(scope_section(parts.scope, parts.headless))
        pieces.append(environment_section(parts.workspace))
        if parts.instructions:
            pieces.append(parts.instructions)
    if parts.append:
        pieces.append(parts.append)
    return "\n\n".join(pieces)


def stable_prefix(prompt: str) -> str:
    """The part of a system prompt that is the same in every workspace (all of it when it has no
    `# Environment` section, as a caller's own prompt may not)."""
    head, sep, _ = prompt.partition("\n\n" + ENVIRONMENT_HEADING + "\n")
    return head if sep else prompt
