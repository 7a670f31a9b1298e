"""Agent Skills: a folder with `SKILL.md` (front matter `name`, `description`, optional `allowed-tools`;
a Markdown body) and any files beside it.

Progressive disclosure: the model sees only each skill's name and description (in the `skill` tool's
description); calling `skill(name)` returns the body and the list of the skill's other files, which the
model reads with `skill(name, file=PATH)` when it needs them (no permission question: the user installed
the skill; paths outside its folder are refused). Skills come from `KIMICODE_HOME/skills/`,
`~/.claude/skills/`, enabled plugins' `skills/` and, in a trusted workspace, `.kimicode/skills/` and
`.claude/skills/` (a later place wins for a name).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kimicode.extensions.frontmatter import names, read_split, text
from kimicode.extensions.places import Place, Scope, read_text
from kimicode.tools.base import Tool, ToolContext, ToolError, ToolResult

SKILL_FILE = "SKILL.md"
MAX_LISTED_FILES = 50
MAX_SKILL_FILE = 512 * 1024
MAX_DESCRIPTION = 1024
NAME_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,80}$")


@dataclass(frozen=True)
class Skill:
    """One skill: what the model sees before activating it (`name`, `description`) and after (`body`)."""

    name: str
    description: str
    folder: Path
    body: str
    scope: Scope
    allowed_tools: tuple[str, ...] = ()
    display_name: str = ""
    """The front matter's `name` when it is a display name ("Agent Development") rather than an identifier:
    the skill is then named after its folder, as Claude Code names it, and /skills shows this beside it."""

    def files(self) -> list[str]:
        """The skill's other files, relative to its folder (at most MAX_LISTED_FILES)."""
        out: list[str] = []
        for path in sorted(self.folder.rglob("*")):
            if path.is_file() and path.name != SKILL_FILE and not any(p.startswith(".") for p in path.parts[-3:]):
                out.append(str(path.relative_to(self.folder)))
                if len(out) >= MAX_LISTED_FILES:
                    break
        return out

    def read(self, rel: str) -> str:
        """The text of one of the skill's files (ToolError for a path outside its folder, or not a text file):
        the skill's own files are read without a permission question, since the user installed the skill."""
        import os

        root = os.path.realpath(self.folder)
        target = os.path.realpath(os.path.join(root, rel))
        if os.path.commonpath([root, target]) != root or target == root:
            raise ToolError(f"{rel!r} is not a file of the skill {self.name}")
        text = read_text(Path(target), MAX_SKILL_FILE)
        if text is None or "\x00" in text:
            raise ToolError(
                f"{rel!r} is not a readable text file of the skill {self.name} (at most {MAX_SKILL_FILE // 1024} KB)"
            )
        return text

    def activation(self) -> str:
        """What the model gets when it activates the skill (and what `/NAME` sends)."""
        parts = [f'<skill name="{self.name}" folder="{self.folder}">', self.body.strip()]
        others = self.files()
        if others:
            parts.append(
                f'Files in this skill\'s folder: read one with skill(name="{self.name}", file=PATH) when the '
                "instructions need it (scripts run from the folder above):\n" + "\n".join(f"- {f}" for f in others)
            )
        if self.allowed_tools:
            parts.append(f"(the skill expects these tools: {', '.join(self.allowed_tools)})")
        parts.append("</skill>")
        return "\n\n".join(parts)


@dataclass
class SkillSet:
    skills: dict[str, Skill] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def read_skill(folder: Path, scope: Scope, plugin: str = "") -> Skill:
    """The skill in `folder` (ValueError naming the file when it cannot be used)."""
    path = folder / SKILL_FILE
    meta, body = read_split(path)
    written = text(meta.get("name"))
    name = written if written and NAME_OK.match(written) else folder.name
    display = written if written and written != name else ""
    description = text(meta.get("description"))
    if not description:
        raise ValueError(f"{path}: no `description` in the front matter (the model decides by it)")
    if plugin:
        name = f"{plugin}:{name}"
    if not NAME_OK.match(name):
        raise ValueError(
            f"{path}: skill name {name!r} (its folder's name) must be letters, digits, '-', '_', '.' or ':'"
        )
    return Skill(
        name,
        description[:MAX_DESCRIPTION],
        folder,
        body.strip(),
        scope,
        tuple(names(meta.get("allowed-tools"))),
        display,
    )


def load_skills(places: list[Place]) -> SkillSet:
    """Every skill in `places` (lowest precedence first: a later place wins for a name)."""
    found = SkillSet()
    for place in places:
        if not place.root.is_dir():
            continue
        for skill_md in sorted(place.root.glob(f"*/{SKILL_FILE}")):
            if not place.admits(skill_md):
                found.problems.append(f"{skill_md}: links outside the workspace; skipped")
                continue
            try:
                skill = read_skill(skill_md.parent, place.scope, place.plugin)
            except ValueError as exc:
                found.problems.append(str(exc))
                continue
            found.skills[skill.name] = skill
    return found


def skill_tool(skills: dict[str, Skill]) -> Tool:
    """The `skill` tool: its description lists the skills; calling it returns one skill's instructions."""
    listing = "\n".join(f"- {s.name}: {s.description}" for s in skills.values())
    description = (
        "Activate a skill: returns its instructions (and the list of its other files, which you read with "
        "read_file when needed). Use a skill when the task matches its description; activate it before "
        f"starting the work it covers.\n\nAvailable skills:\n{listing}"
    )

    async def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        name = str(args.get("name") or "").strip()
        skill = skills.get(name) or next((s for s in skills.values() if s.name.lower() == name.lower()), None)
        if skill is None:
            raise ToolError(f"no skill named {name!r}; available: {', '.join(skills) or 'none'}")
        wanted = str(args.get("file") or "").strip()
        if wanted:
            return ToolResult(skill.read(wanted), summary=f"skill {skill.name}: {wanted}")
        return ToolResult(skill.activation(), summary=f"skill {skill.name}", display={"skill": skill.name})

    return Tool(
        name="skill",
        description=description,
        parameters={
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "The skill's name, as listed."},
                "file": {
                    "type": "string",
                    "description": "A file of the skill's folder to read, as listed when it was activated.",
                },
            },
            "required": ["name"],
            "additionalProperties": False,
        },
        fn=run,
        kind="read",
    )
