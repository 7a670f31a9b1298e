"""The system prompt, assembled from its parts in a fixed order: what never changes between workspaces
comes first, so that every session of one model, scope and face sends the same leading tokens and the
server's prefix cache serves them; per-workspace text (the workspace path, the date, AGENTS.md) comes
after it.

Order: kimicode's prompt (or the caller's `system_prompt`), the model profile's addition, the scope
section, then `# Environment`, the project's AGENTS.md files and `append_system_prompt`.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kimicode.agent.modes import MODE_NOTES, mode_text
from kimicode.config.choices import Scope
from kimicode.prompts import load_prompt

if TYPE_CHECKING:
    from kimicode.agent.core import Agent

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
    permission_mode: str = "default"
    """The mode the session starts in: said after the per-workspace facts (the shared prefix stays the same)."""
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
        if parts.permission_mode != "default" and parts.permission_mode in MODE_NOTES:
            pieces.append(mode_text(parts.permission_mode))  # the mode the session starts in (agent/modes.py)
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


@dataclass(frozen=True)
class PromptReport:
    """What the model is told before the conversation: the system prompt and the tool definitions exactly
    as the next request sends them, with their token counts (`kimicode prompt show`, `/prompt`)."""

    system: str
    tools: tuple[dict[str, Any], ...]
    system_tokens: int
    stable_tokens: int
    """Tokens of the part of the system prompt that is the same in every workspace."""
    tool_tokens: tuple[int, ...]

    @classmethod
    def of(cls, system: str, tools: Sequence[dict[str, Any]], count: Callable[[str], int]) -> PromptReport:
        """Count `system` and each tool (as its JSON) with `count`, the context manager's token counter."""
        return cls(
            system=system,
            tools=tuple(tools),
            system_tokens=count(system),
            stable_tokens=count(stable_prefix(system)),
            tool_tokens=tuple(count(json.dumps(t, ensure_ascii=False)) for t in tools),
        )

    @classmethod
    def of_agent(cls, agent: Agent) -> PromptReport:
        """What `agent`'s next request sends: its system message and tool definitions, counted by its context
        manager (`kimicode prompt show` and `/prompt` both show this)."""
        system = agent.messages[0].get("content", "") if agent.messages else ""
        return cls.of(str(system), agent.tools.schemas(), agent.context.accountant.text_tokens)

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data (`--json`): the exact system text and tool definitions."""
        return {
            "system": self.system,
            "tools": list(self.tools),
            "tokens": {
                "system": self.system_tokens,
                "stable_prefix": self.stable_tokens,
                "tools": sum(self.tool_tokens),
                "per_tool": {_tool_name(t): n for t, n in zip(self.tools, self.tool_tokens, strict=True)},
            },
        }

    def text(self) -> str:
        """The report for a person: the prompt in full, then each tool's definition."""
        rule = "─" * 72
        lines = [
            f"System prompt: {self.system_tokens:,} tokens (the first {self.stable_tokens:,} are the same in every "
            "workspace and cached by the server)",
            rule,
            self.system,
            rule,
            f"Tools: {len(self.tools)}, {sum(self.tool_tokens):,} tokens",
        ]
        for tool, n in zip(self.tools, self.tool_tokens, strict=True):
            lines += [f"{rule}\n{_tool_name(tool)} ({n:,} tokens)", json.dumps(tool, indent=2, ensure_ascii=False)]
        return "\n".join(lines)


def _tool_name(tool: dict[str, Any]) -> str:
    function = tool.get("function")
    return str(function.get("name") if isinstance(function, dict) else tool.get("name", "?"))
