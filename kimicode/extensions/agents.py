"""Custom subagents: Markdown files with front matter (`name`, `description`, `tools`, `model`) whose body
is the subagent's system prompt, in Claude Code's format.

Found in `KIMICODE_HOME/agents/`, `~/.claude/agents/`, enabled plugins' `agents/` and, in a trusted
workspace, `.kimicode/agents/` and `.claude/agents/` (a later place wins for a name). The `task` tool takes
`agent: NAME`; the subagent gets the tools its file lists (Claude Code's names or kimicode's) that its
parent has, and the parent's permission mode, rules and approvals, so it can never do more than the parent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kimicode.extensions.frontmatter import names, read_split, text
from kimicode.extensions.places import Place, Scope
from kimicode.extensions.toolnames import CLAUDE_NAMES

NAME_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,80}$")
_FROM_CLAUDE: dict[str, list[str]] = {}
for _mine, _theirs in CLAUDE_NAMES.items():
    _FROM_CLAUDE.setdefault(_theirs, []).append(_mine)
_FROM_CLAUDE["MultiEdit"] = ["edit_file", "apply_patch"]
_FROM_CLAUDE["LS"] = ["glob"]
_FROM_CLAUDE["WebSearch"] = []


@dataclass(frozen=True)
class AgentDef:
    """One subagent definition."""

    name: str
    description: str
    prompt: str
    path: Path
    scope: Scope
    tools: tuple[str, ...] | None = None
    """The tools it asks for as written (None: its parent's tools)."""
    model: str = ""

    def tool_names(self, available: list[str]) -> tuple[list[str], list[str]]:
        """(kimicode tools it gets out of `available`, names it asked for that are not available)."""
        if self.tools is None:
            return list(available), []
        got: list[str] = []
        missing: list[str] = []
        for wanted in self.tools:
            bare = wanted.split("(", 1)[0].strip()  # `Bash(git:*)`: the tool, its rule is the parent's
            candidates = [bare] if bare in available else _FROM_CLAUDE.get(bare, [])
            hits = [c for c in candidates if c in available]
            if hits:
                got.extend(h for h in hits if h not in got)
            elif bare.startswith("mcp__") and bare.endswith("*"):
                got.extend(a for a in available if a.startswith(bare[:-1]) and a not in got)
            else:
                missing.append(wanted)
        return got, missing


@dataclass
class AgentSet:
    agents: dict[str, AgentDef] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def read_agent(path: Path, scope: Scope, plugin: str = "") -> AgentDef:
    meta, body = read_split(path)
    written = text(meta.get("name"))
    name = written if written and NAME_OK.match(written) else path.stem  # a display name: the file's, as Claude
    if plugin:
        name = f"{plugin}:{name}"
    if not NAME_OK.match(name):
        raise ValueError(f"{path}: agent name {name!r} must be letters, digits, '-', '_', '.' or ':'")
    description = text(meta.get("description"))
    if not description:
        raise ValueError(f"{path}: no `description` in the front matter (the model chooses by it)")
    if not body.strip():
        raise ValueError(f"{path}: the body (the subagent's system prompt) is empty")
    tools = tuple(names(meta.get("tools"))) if "tools" in meta else None
    return AgentDef(name, description, body.strip(), path, scope, tools, text(meta.get("model")))


def load_agents(places: list[Place]) -> AgentSet:
    """Every subagent definition in `places` (lowest precedence first)."""
    found = AgentSet()
    for place in places:
        if not place.root.is_dir():
            continue
        for path in sorted(place.root.rglob("*.md")):
            if path.name.lower() == "readme.md":
                continue
            if not place.admits(path):
                found.problems.append(f"{path}: links outside the workspace; skipped")
                continue
            try:
                agent = read_agent(path, place.scope, place.plugin)
            except ValueError as exc:
                found.problems.append(str(exc))
                continue
            found.agents[agent.name] = agent
    return found


def agent_parameter(agents: dict[str, AgentDef]) -> tuple[dict[str, Any], str]:
    """The task tool's `agent` property and the lines its description gains ({} and "" without any)."""
    if not agents:
        return {}, ""
    listing = "\n".join(f"- {a.name}: {a.description[:300]}" for a in agents.values())
    prop = {
        "type": "string",
        "enum": list(agents),
        "description": "Run this custom subagent (its own instructions and tools) instead of a generic one.",
    }
    return {"agent": prop}, f"\n\nCustom subagents (pass `agent`):\n{listing}"


def model_for(agent: AgentDef, configured: list[str], current: str) -> str:
    """The subagent's model: its `model` when that names a configured model, else the parent's (Claude
    Code's `sonnet`/`opus`/`haiku`/`inherit` mean nothing here)."""
    return agent.model if agent.model in configured else current
