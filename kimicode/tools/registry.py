"""The tool registry: built-in tools by name, and argument validation against JSON schemas."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from kimicode.tools.base import Tool

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


def builtin_tools() -> list[Tool]:
    """The default tool set, in the order the model sees them."""
    from kimicode.tools.files import EDIT_FILE, READ_FILE, WRITE_FILE
    from kimicode.tools.search import GLOB, GREP
    from kimicode.tools.shell import BASH

    return [READ_FILE, WRITE_FILE, EDIT_FILE, GLOB, GREP, BASH]


class ToolRegistry:
    """Tools by name, in a stable order (the schemas are part of the cached prompt prefix)."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for t in tools:
            self.add(t)

    def add(self, tool: Tool) -> None:
        """Add or replace a tool by name."""
        self._tools[tool.name] = tool

    def remove(self, name: str) -> None:
        """Remove a tool; unknown names are ignored."""
        self._tools.pop(name, None)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def __iter__(self) -> Any:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def schemas(self) -> list[dict[str, Any]]:
        """The `tools` array of a request."""
        return [t.schema() for t in self._tools.values()]


MAX_ARGUMENT_DEPTH = 64
"""Deeper JSON in a tool call's arguments is refused with an error the model sees (no tool needs it, and
parsing, validating and logging it would recurse past Python's limit)."""


def _nesting(raw: str) -> int:
    """The deepest `[`/`{` nesting of a JSON text, ignoring brackets inside strings; linear time."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in raw:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def parse_arguments(raw: str) -> dict[str, Any]:
    """Parse a tool call's argument string; `""` means `{}`. Raises ValueError with a clear message."""
    if raw is None or not raw.strip():
        return {}
    brackets = raw.count("[") + raw.count("{")
    depth = _nesting(raw) if brackets > MAX_ARGUMENT_DEPTH else 0
    if depth > MAX_ARGUMENT_DEPTH:  # checked before parsing: json.loads itself would hit RecursionError
        raise ValueError(
            f"arguments are nested {depth} levels deep; at most {MAX_ARGUMENT_DEPTH} are accepted"
        )
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"arguments are not valid JSON ({exc.msg} at position {exc.pos})") from None
    except RecursionError:
        raise ValueError("arguments are nested too deeply to parse") from None
    if not isinstance(value, dict):
        raise ValueError(f"arguments must be a JSON object, got {type(value).__name__}")
    return value


def validate(schema: Mapping[str, Any], value: Any, path: str = "arguments") -> list[str]:
    """Check `value` against the subset of JSON Schema tools use; return a list of problems."""
    problems: list[str] = []
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else list(types)
        ok = False
        for name in names:
            py = _JSON_TYPES.get(name)
            if py is None:
                ok = True
                break
            if isinstance(value, bool) and name in ("integer", "number"):
                continue
            if isinstance(value, py):
                ok = True
                break
        if not ok:
            return [f"{path} must be of type {' or '.join(names)}, got {_json_type(value)}"]
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{path} must be one of {json.dumps(schema['enum'])}, got {json.dumps(value)}")
    if isinstance(value, dict):
        props: Mapping[str, Any] = schema.get("properties", {})
        for key in schema.get("required", ()):
            if key not in value:
                problems.append(f"{path} is missing required property {key!r}")
        for key, item in value.items():
            if key in props:
                problems.extend(validate(props[key], item, f"{path}.{key}"))
            elif schema.get("additionalProperties") is False:
                allowed = ", ".join(props) or "none"
                problems.append(f"{path} has unknown property {key!r} (allowed: {allowed})")
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for i, item in enumerate(value):
            problems.extend(validate(schema["items"], item, f"{path}[{i}]"))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            problems.append(f"{path} must be >= {schema['minimum']}, got {value}")
        if "maximum" in schema and value > schema["maximum"]:
            problems.append(f"{path} must be <= {schema['maximum']}, got {value}")
    return problems


def _json_type(value: Any) -> str:
    for name, py in _JSON_TYPES.items():
        if isinstance(value, bool):
            return "boolean"
        if isinstance(value, py):
            return name
    return type(value).__name__
