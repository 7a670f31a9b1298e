"""What of a plugin kimicode will load, checked before it is installed: every agent, skill, command and
hook file, read by the same code a session uses. `plugin add` shows what cannot be loaded and why, so an
install never reports success while files are silently lost."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kimicode.extensions.agents import load_agents
from kimicode.extensions.places import Place, read_json
from kimicode.extensions.plugins import Plugin
from kimicode.extensions.skills import SKILL_FILE, load_skills

__all__ = ["PluginScan", "scan_plugin"]


@dataclass
class PluginScan:
    """The names kimicode loads from a plugin, by kind, and one line per file it cannot load."""

    loaded: dict[str, list[str]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def scan_plugin(plugin: Plugin) -> PluginScan:
    """Load `plugin`'s agents, skills, commands and hooks as a session would (see the module doc)."""
    from kimicode.commands import load_dir

    out = PluginScan()
    root = plugin.root
    agents = load_agents([Place(root / "agents", "plugin", plugin.name)])
    skills = load_skills([Place(root / "skills", "plugin", plugin.name)])
    commands = load_dir(root / "commands", "plugin", plugin.name)
    out.loaded = {"commands": [f"/{n}" for n in commands], "skills": list(skills.skills), "agents": list(agents.agents)}
    out.problems += [_relative(p, root) for p in agents.problems + skills.problems]
    out.problems += _unloaded_commands(root / "commands", {c.path for c in commands.values()}, root)
    out.problems += _skill_folders_without_file(root / "skills", root)
    out.problems += _hook_problems(plugin)
    return out


def _relative(problem: str, root: Path) -> str:
    return problem.replace(str(root) + "/", "")


def _unloaded_commands(folder: Path, loaded: set[Path], root: Path) -> list[str]:
    """A `commands/*.md` file that is not loaded, with the reason (load_dir skips it)."""
    from kimicode.commands import MAX_FILE_BYTES

    out: list[str] = []
    if not folder.is_dir():
        return out
    for path in sorted(folder.rglob("*.md")):
        if path in loaded:
            continue
        rel = path.relative_to(root)
        try:
            size = path.stat().st_size
        except OSError as exc:
            out.append(f"{rel}: cannot be read ({exc.strerror})")
            continue
        if size > MAX_FILE_BYTES:
            out.append(f"{rel}: larger than {MAX_FILE_BYTES // 1024} KB")
        elif not path.is_file():
            out.append(f"{rel}: not a regular file")
        else:
            out.append(
                f"{rel}: not a command (its name must be letters, digits, '-', '_' or '.', and its body "
                "must not be empty)"
            )
    return out


def _skill_folders_without_file(folder: Path, root: Path) -> list[str]:
    if not folder.is_dir():
        return []
    return [
        f"{p.relative_to(root)}: a skill folder without {SKILL_FILE}; not a skill"
        for p in sorted(folder.iterdir())
        if p.is_dir() and not (p / SKILL_FILE).is_file() and any(p.glob("*.md"))
    ]


def _hook_problems(plugin: Plugin) -> list[str]:
    from kimicode.extensions.hooks import HookConfigError, parse_hooks

    path = plugin.root / "hooks" / "hooks.json"
    data, problem = read_json(path)
    if problem:
        return [_relative(problem, plugin.root)]
    if data is None:
        return []
    try:
        _specs, problems = parse_hooks(data.get("hooks"), "hooks/hooks.json", "plugin", plugin.root, plugin.root)
    except HookConfigError as exc:
        return [f"{_relative(str(exc), plugin.root)} (no hook of the plugin will run)"]
    return problems
