"""Every slash command a setup brings, for the terminal: kimicode's and Claude Code's command folders,
enabled plugins' commands (`/PLUGIN:NAME`) and skills (`/NAME`, or `/skill:NAME` when a command has the
name). Project folders count only in a trusted workspace.

Precedence, lowest first: plugins, `~/.claude/commands`, `KIMICODE_HOME/commands`, then the project's
`.claude/commands` and `.kimicode/commands`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from kimicode.commands import CustomCommand, load_dir
from kimicode.config.endpoint import ConfigError
from kimicode.extensions.discover import discover, plugin_places
from kimicode.extensions.places import folders
from kimicode.permissions.claude import parse_claude_rule
from kimicode.permissions.policy import Policy, Rule, parse_rule


def load_commands(workspace: Path, home: Path, *, trusted: bool) -> dict[str, CustomCommand]:
    """Every command by name (without the slash), sorted."""
    found = discover(workspace, home, trusted=trusted)
    places = folders("commands", workspace, home, trusted=trusted, plugins=plugin_places(found.plugins))
    out: dict[str, CustomCommand] = {}
    for place in places:
        out.update({n: c for n, c in load_dir(place.root, place.scope, place.plugin).items() if place.admits(c.path)})
    for skill in found.skills.values():
        name = skill.name if skill.name not in out else f"skill:{skill.name}"
        out[name] = CustomCommand(name, skill.description, skill.activation(), skill.folder / "SKILL.md", "skill")
    return dict(sorted(out.items()))


def grant(policy: Policy, allowed_tools: Sequence[str], source: str) -> tuple[Policy, list[Rule], list[str]]:
    """`policy` plus a command's `allowed-tools` as allow rules (Claude Code's `Bash(git add:*)` syntax),
    for the turn the command starts: (the policy, the rules added, the entries that are not rules). Deny
    and ask rules still win over them, as over any allow rule."""
    added: list[Rule] = []
    problems: list[str] = []
    for text in allowed_tools:
        try:  # Claude Code's reading first (`Bash(git add *)` admits `git add` too), then kimicode's
            added.append(parse_claude_rule(text, source))
        except (ConfigError, ValueError):
            try:
                added.append(parse_rule(text, source))
            except (ConfigError, ValueError) as exc:
                problems.append(f"{source}: allowed-tools {text!r} ignored ({exc})")
    if not added:
        return policy, [], problems
    rules = dataclasses.replace(policy.rules, allow=(*policy.rules.allow, *added))
    return dataclasses.replace(policy, rules=rules), added, problems


def revoke(policy: Policy, added: Sequence[Rule]) -> Policy:
    """`policy` without the rules `grant` added (rules remembered meanwhile stay)."""
    if not added:
        return policy
    keep = tuple(r for r in policy.rules.allow if not any(r is a for a in added))
    return dataclasses.replace(policy, rules=dataclasses.replace(policy.rules, allow=keep))
