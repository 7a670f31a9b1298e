"""Every slash command a setup brings, for the terminal: kimicode's and Claude Code's command folders,
enabled plugins' commands (`/PLUGIN:NAME`) and skills (`/NAME`, or `/skill:NAME` when a command has the
name). Project folders count only in a trusted workspace.

Precedence, lowest first: plugins, `~/.claude/commands`, `KIMICODE_HOME/commands`, then the project's
`.claude/commands` and `.kimicode/commands`.
"""

from __future__ import annotations

from pathlib import Path

from kimicode.commands import CustomCommand, load_dir
from kimicode.extensions.discover import discover, plugin_places
from kimicode.extensions.places import folders


def load_commands(workspace: Path, home: Path, *, trusted: bool) -> dict[str, CustomCommand]:
    """Every command by name (without the slash), sorted."""
    found = discover(workspace, home, trusted=trusted)
    places = folders("commands", workspace, home, trusted=trusted, plugins=plugin_places(found.plugins))
    out: dict[str, CustomCommand] = {}
    for place in places:
        out.update(load_dir(place.root, place.scope, place.plugin))
    for skill in found.skills.values():
        name = skill.name if skill.name not in out else f"skill:{skill.name}"
        out[name] = CustomCommand(name, skill.description, skill.activation(),
                                  skill.folder / "SKILL.md", "skill")
    return dict(sorted(out.items()))
