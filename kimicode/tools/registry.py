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

    def replace(self, old: str, new: Tool) -> None:
        """Put `new` where the tool `old` is, keeping the order (it is part of the cached prompt prefix)."""
        self._tools = {
            (new.name if name == old else name): (new if name == old else t) for name, t in self._tools.items()
        }

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
        raise ValueError(f"arguments are nested {depth} levels deep; at most {MAX_ARGUMENT_DEPTH} are accepted")
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
    """Check `value` against a tool's JSON Schema (draft 2020-12, as MCP servers send it: `anyOf`, `$ref`,
    `pattern`, ...); return problems the model can act on, each naming the path (`arguments.items[2].id`).

    A schema that is itself broken, or refers to documents we do not have, is not enforced here: the
    tool (or its server) still checks its arguments, and one bad schema must not make a tool uncallable.
    """
    from jsonschema.exceptions import SchemaError, UnknownType
    from referencing.exceptions import Unresolvable

    validator = _validator(schema)
    if validator is None:
        return []
    problems: list[str] = []
    try:
        errors = sorted(validator.iter_errors(value), key=lambda e: (list(map(str, e.absolute_path)), e.validator))
        for error in errors:
            for problem in _describe_error(error, path):
                if problem not in problems:
                    problems.append(problem)
    except (SchemaError, UnknownType, Unresolvable):
        return []
    return problems


_VALIDATORS: dict[int, tuple[Mapping[str, Any], Any]] = {}


def _validator(schema: Mapping[str, Any]) -> Any:
    """A compiled validator per schema object (tool schemas live as long as their tool)."""
    hit = _VALIDATORS.get(id(schema))
    if hit is not None and hit[0] is schema:
        return hit[1]
    from jsonschema.exceptions import SchemaError

    cls = _validator_class()
    try:
        cls.check_schema(schema)
        validator: Any = cls(schema)
    except SchemaError:
        validator = None
    if len(_VALIDATORS) > 1024:
        _VALIDATORS.clear()
    _VALIDATORS[id(schema)] = (schema, validator)
    return validator


_CLASS: list[Any] = []


def _validator_class() -> Any:
    """Draft 2020-12, except that `1.0` is not an integer: tools index and slice with their integers."""
    if not _CLASS:
        from jsonschema import Draft202012Validator, validators

        checker = Draft202012Validator.TYPE_CHECKER.redefine(
            "integer", lambda _checker, v: isinstance(v, int) and not isinstance(v, bool)
        )
        _CLASS.append(validators.extend(Draft202012Validator, type_checker=checker))
    return _CLASS[0]


def _where(base: str, parts: Iterable[Any]) -> str:
    return base + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)


def _describe_error(error: Any, base: str) -> list[str]:
    """One jsonschema error as sentences in the agent's words."""
    path = _where(base, error.absolute_path)
    kind, rule, instance = error.validator, error.validator_value, error.instance
    simple = _must(kind, rule, instance)
    if simple is not None:
        return [f"{path} must {simple}"]
    if kind == "required" and isinstance(instance, dict):
        return [f"{path} is missing required property {key!r}" for key in rule if key not in instance]
    if kind == "additionalProperties" and rule is False and isinstance(instance, dict):
        return _unknown_properties(error.schema, path, instance)
    if kind in ("anyOf", "oneOf") and error.context:
        return [_no_form_matched(error, base, path, kind)]
    return [f"{path}: {error.message}"]


_BOUNDS = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}


def _must(kind: str, rule: Any, instance: Any) -> str | None:
    """What a value must be, for the rules that need only the rule and the value (None for the others)."""
    if kind == "type":
        names = [rule] if isinstance(rule, str) else list(rule)
        return f"be of type {' or '.join(names)}, got {_json_type(instance)}"
    if kind == "enum":
        return f"be one of {json.dumps(rule)}, got {json.dumps(instance)}"
    if kind == "const":
        return f"be {json.dumps(rule)}, got {json.dumps(instance)}"
    if kind in _BOUNDS:
        return f"be {_BOUNDS[kind]} {rule}, got {instance}"
    if kind == "pattern":
        return f"match the pattern {rule!r}, got {json.dumps(instance)}"
    return None


def _unknown_properties(schema: Mapping[str, Any], path: str, instance: dict[str, Any]) -> list[str]:
    props = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    allowed = ", ".join(props) or "none"
    import re

    extra = [k for k in instance if k not in props and not any(re.search(p, k) for p in patterns)]
    return [f"{path} has unknown property {key!r} (allowed: {allowed})" for key in extra]


def _no_form_matched(error: Any, base: str, path: str, kind: str) -> str:
    """anyOf/oneOf: what each allowed form objected to, in the schema's order."""
    branches: dict[Any, list[str]] = {}
    for sub in error.context:
        branch = sub.relative_schema_path[0] if sub.relative_schema_path else 0
        for text in _describe_error(sub, base):
            text = text[len(path) :].lstrip(" :") if text.startswith(path) else text
            if text not in branches.setdefault(branch, []):
                branches[branch].append(text)
    forms = "; or ".join(", ".join(texts[:2]) for _, texts in sorted(branches.items(), key=lambda kv: str(kv[0])))
    how = "exactly one" if kind == "oneOf" else "one"
    return f"{path} must match {how} of the allowed forms: {forms}"


def _json_type(value: Any) -> str:
    for name, py in _JSON_TYPES.items():
        if isinstance(value, bool):
            return "boolean"
        if isinstance(value, py):
            return name
    return type(value).__name__
