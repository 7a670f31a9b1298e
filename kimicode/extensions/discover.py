"""Everything a setup brings, found once per agent: enabled plugins, skills and subagent definitions."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kimicode.extensions.agents import AgentDef, load_agents
from kimicode.extensions.claudeplugins import plugins_in_use
from kimicode.extensions.places import Place, folders
from kimicode.extensions.plugins import Plugin
from kimicode.extensions.skills import Skill, load_skills


@dataclass
class Found:
    plugins: list[Plugin] = field(default_factory=list)
    skills: dict[str, Skill] = field(default_factory=dict)
    agents: dict[str, AgentDef] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def plugin_places(plugins: list[Plugin]) -> list[Place]:
    return [Place(p.root, "plugin", p.name) for p in plugins]


def discover(workspace: Path, home: Path, *, trusted: bool) -> Found:
    """The enabled plugins, skills and subagents for `workspace` (project ones only when `trusted`)."""
    found = Found(plugins=plugins_in_use(home))
    places = plugin_places(found.plugins)
    skills = load_skills(folders("skills", workspace, home, trusted=trusted, plugins=places))
    agents = load_agents(folders("agents", workspace, home, trusted=trusted, plugins=places))
    found.skills, found.agents = skills.skills, agents.agents
    found.problems = skills.problems + agents.problems
    return found
