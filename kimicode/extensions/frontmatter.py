"""YAML front matter (between `---` lines at the top of a Markdown file), as skills, subagents and
commands carry it in Claude Code's formats."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kimicode.extensions.places import read_text


class FrontMatterError(ValueError):
    """The front matter is not valid YAML, or not a mapping."""


def split(text: str) -> tuple[dict[str, Any], str]:
    """(front matter, body); ({}, text) when the file has none. Raises FrontMatterError when it is broken."""
    import yaml

    if not text.startswith("---"):
        return {}, text
    lines = text.splitlines()
    if lines[0].strip() != "---":
        return {}, text
    for i in range(1, len(lines)):
        if lines[i].strip() == "---":
            raw = "\n".join(lines[1:i])
            try:
                data = yaml.safe_load(raw) if raw.strip() else {}
            except yaml.YAMLError as exc:
                mark = getattr(exc, "problem_mark", None)
                where = f" (line {mark.line + 2})" if mark is not None else ""
                raise FrontMatterError(f"invalid YAML front matter{where}: {getattr(exc, 'problem', exc)}") from None
            if not isinstance(data, dict):
                raise FrontMatterError("the front matter must be `key: value` lines")
            return {str(k).lower(): v for k, v in data.items()}, "\n".join(lines[i + 1 :])
    return {}, text  # no closing line: not front matter


def names(value: Any) -> list[str]:
    """A list of names from `Read, Grep, Glob`, `[Read, Grep]` or a YAML list; [] for nothing."""
    if value is None:
        return []
    items = value if isinstance(value, list) else str(value).replace("\n", ",").split(",")
    out: list[str] = []
    for item in items:
        text = str(item).strip()
        if text:
            out.append(text)
    return out


def text(value: Any) -> str:
    """A one-line string from a front matter value (folded, trimmed)."""
    return " ".join(str(value).split()) if value is not None else ""


def read_split(path: Path) -> tuple[dict[str, Any], str]:
    """`path`'s (front matter, body); ValueError naming the file when it cannot be read or its front matter
    is broken (a skill's SKILL.md, a subagent's file)."""
    raw = read_text(path)
    if raw is None:
        raise ValueError(f"{path}: cannot read the file")
    try:
        return split(raw)
    except FrontMatterError as exc:
        raise ValueError(f"{path}: {exc}") from None
