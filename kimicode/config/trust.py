"""What a repository's own `.kimicode/config.toml` may set: an allowlist, not a list of dangers.

A key applies from a project that is not trusted only when `kimicode.config.sections` gives it a direction,
and only when the project's value moves it that way from yours (your own config, else the default): a lower
limit, `checkpoints.enabled = true`, a stricter permission mode. Everything else (a key nobody thought
about included) is dropped, and one notice names every dropped key and says how to trust the workspace.

In a trusted workspace everything applies; a value that loosens one of your settings is still said, in one
notice (a `git pull` may bring it: trust is the user's decision, silence is not).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kimicode.config.sections import STRICTNESS, Config, default_of, direction, has_directions, schema_of

SCHEMA = schema_of(Config)
NO_LIMIT_AT_ZERO = frozenset(
    {
        "checkpoints.max_age_days",
        "checkpoints.max_store_mb",
        "sandbox.max_processes",
        "sandbox.max_memory_mb",
        "sandbox.max_file_size_mb",
        "sandbox.max_cpu_seconds",
    }
)
"""Keys where 0 or less (or unset) means no limit, the highest value."""
UNSET_IS = {"defaults.permission_mode": "default", "sandbox.mode": "auto"}
"""What an unset `stricter` key means (its place on the scale)."""


def filter_project(
    data: dict[str, Any], user: Mapping[str, Any], *, trusted: bool, project_path: Path, user_path: Path
) -> tuple[dict[str, Any], list[str]]:
    """The part of a project's settings `data` that applies, and the notices (at most one)."""
    dropped: list[str] = []
    loosened: list[str] = []
    kept = _walk(data, (), SCHEMA, user, trusted, dropped, loosened)
    notices = []
    if dropped:
        notices.append(
            f"{project_path}: this workspace is not trusted: {', '.join(dropped)}. To apply them, add the "
            f"workspace to [trust] workspaces in {user_path} (or run with --trust-workspace)"
        )
    if loosened:
        notices.append(f"{project_path}: this workspace is trusted: {', '.join(loosened)}")
    return kept, notices


def _walk(
    table: Mapping[str, Any],
    path: tuple[str, ...],
    schema: Any,
    user: Mapping[str, Any],
    trusted: bool,
    dropped: list[str],
    loosened: list[str],
) -> dict[str, Any]:
    kept: dict[str, Any] = {}
    for name, value in table.items():
        keypath = (*path, name)
        sub = schema.get(name, schema.get("*")) if isinstance(schema, dict) else None
        if isinstance(sub, dict) and isinstance(value, dict) and has_directions(keypath):  # judge each key
            inner = _walk(value, keypath, sub, user, trusted, dropped, loosened)
            if inner:
                kept[name] = inner
            continue
        way = direction(keypath)
        label = ".".join(keypath) if not isinstance(value, dict) else f"[{'.'.join(keypath)}]"
        why = None if way in ("any", "rules") else _why_looser(keypath, way, value, user)
        if trusted:
            kept[name] = value
            if why is not None and way is not None:
                loosened.append(f"{label} = {_toml(value)} applies ({why})")
        elif way is None:
            dropped.append(f"{label} ignored")
        elif why is not None:
            dropped.append(f"{label} = {_toml(value)} ignored ({why})")
        else:
            kept[name] = value
    return kept


def _why_looser(keypath: tuple[str, ...], way: str | None, value: Any, user: Mapping[str, Any]) -> str | None:
    """Why `value` loosens the key against the user's own setting, or None when it tightens (or keeps) it."""
    if way is None:
        return "a project may not set it"
    dotted = ".".join(keypath)
    mine = _lookup(user, keypath)
    if mine is None:
        mine = default_of(keypath)
    if way == "true":
        return None if value is True else "a project may only set it to true"
    if way == "false":
        return None if value is False or mine is True else "a project may only set it to false"
    if way == "stricter":
        if dotted == "sandbox.mode" and value == "workspace-write" and mine != "workspace-write":
            return "it lets every command run without asking"
        scale = STRICTNESS[dotted]
        floor = scale.get(str(mine if mine is not None else UNSET_IS.get(dotted)), 0)
        if scale.get(str(value), -1) >= floor:
            return None
        return "a project may only make kimicode stricter than your own settings"
    ours, theirs = _number(dotted, mine), _number(dotted, value)
    if way == "lower":
        return None if theirs <= ours else f"a project may only lower it (yours: {_toml(mine)})"
    return None if theirs >= ours else f"a project may only raise it (yours: {_toml(mine)})"


def _number(dotted: str, value: Any) -> float:
    """A limit as a number: unset is no limit (infinite); for `NO_LIMIT_AT_ZERO` keys 0 or less is too."""
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        return math.inf
    if dotted in NO_LIMIT_AT_ZERO and value <= 0:
        return math.inf
    return float(value)


def _lookup(data: Mapping[str, Any], keypath: tuple[str, ...]) -> Any:
    node: Any = data
    for part in keypath:
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{...}"
    return repr(value)
