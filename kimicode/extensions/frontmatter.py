"""YAML front matter (between `---` lines at the top of a Markdown file), as skills, subagents and
commands carry it in Claude Code's formats."""

from __future__ import annotations

import re
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
                data = lenient(raw)  # as Claude Code: `description: ... Examples: <example>Context: ...`
                if data is None:
                    mark = getattr(exc, "problem_mark", None)
                    where = f" (line {mark.line + 2})" if mark is not None else ""
                    raise FrontMatterError(
                        f"invalid YAML front matter{where}: {getattr(exc, 'problem', exc)}"
                    ) from None
            if not isinstance(data, dict):
                data = lenient(raw)
                if data is None:
                    raise FrontMatterError("the front matter must be `key: value` lines")
            return {str(k).lower(): v for k, v in data.items()}, "\n".join(lines[i + 1 :])
    return {}, text  # no closing line: not front matter


KNOWN_KEYS = frozenset(
    {
        "name",
        "description",
        "tools",
        "disallowedTools",
        "model",
        "color",
        "version",
        "allowed-tools",
        "argument-hint",
        "license",
        "disable-model-invocation",
        "user-invocable",
        "when_to_use",
        "metadata",
        "permissionMode",
        "skills",
        "hooks",
        "mcpServers",
        "context",
        "agent",
        "compatibility",
    }
)
"""Keys of Claude Code's agent, skill and command front matter: in a block that is not valid YAML, such a
key at the start of a line starts a new value; any other `word:` line continues the value above it."""
_KEY_LINE = re.compile(r"^([A-Za-z][A-Za-z0-9_-]*):(?:\s+(.*)|)$")


def lenient(raw: str) -> dict[str, Any] | None:
    """The front matter read as Claude Code reads what strict YAML rejects: a value is the rest of its line,
    and the lines after it (up to the next key) continue it (multi-line descriptions, `<example>` blocks);
    a value that is valid YAML on its own (`["Read", "Write"]`, `"quoted"`) is taken as that. None when
    no line is a `key: value` line."""
    data: dict[str, Any] = {}
    key: str | None = None
    parts: list[str] = []
    after_key = True  # the previous line started a value: an unknown `word:` line there is a key too

    def close() -> None:
        if key is not None:
            data[key] = _value(parts)

    for line in raw.splitlines():
        m = _KEY_LINE.match(line)
        if m and (m.group(1) in KNOWN_KEYS or key is None or (after_key and m.group(1) not in data)):
            close()
            key, parts, after_key = m.group(1), [m.group(2) or ""], True
            continue
        if key is None:
            if line.strip() and not line.lstrip().startswith("#"):
                return None
            continue
        parts.append(line)
        after_key = False
    close()
    return data or None


def _value(parts: list[str]) -> Any:
    """One value of a lenient block: a YAML list of `- item` lines, a value that is YAML on its own, or
    the text (its lines joined)."""
    import yaml

    first, rest = parts[0].strip(), [p for p in parts[1:]]
    items = [p.strip()[2:].strip() for p in rest if p.strip()]
    if not first and rest and all(p.strip().startswith("- ") for p in rest if p.strip()):
        return items
    if not any(p.strip() for p in rest) and first[:1] in ("[", '"', "'", "{"):
        try:
            loaded = yaml.safe_load(first)
        except yaml.YAMLError:
            loaded = None
        if isinstance(loaded, str | list):
            return loaded
    return "\n".join([first, *rest]).strip()


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
