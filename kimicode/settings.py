"""Configuration files: `KIMICODE_HOME/config.toml` and the workspace's `.kimicode/config.toml`.

Project settings override user settings; flags and the environment override both (the caller applies
those). Every key is declared in `SCHEMA`, so a typo or a wrong type is reported with the file, the line
and the key instead of being silently ignored.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kimicode.config import ConfigError

# A schema value is a type name, a tuple of allowed literal values, or a nested dict. The key "*" stands
# for any table name (providers.NAME, models.NAME, ...).
Schema = Mapping[str, Any]

SCHEMA: dict[str, Any] = {
    "defaults": {
        "model": "str",
        "thinking": ("low", "high", "max"),
        "permission_mode": ("default", "accept-edits", "plan", "yolo"),
        "max_turns": "int",
        "max_retries": "int",
        "request_timeout": "number",
    },
    "providers": {
        "*": {
            "base_url": "str",
            "api_key_env": "str",
            "headers": {"*": "str"},
            "reasoning_field": ("reasoning_content", "reasoning"),
        }
    },
    "models": {
        "*": {
            "provider": "str",
            "model": "str",
            "context_window": "int",
            "max_completion_tokens": "int",
            "reasoning_effort": ("low", "high", "max"),
            "supports_images": "bool",
            "edit_tool": ("edit_file", "apply_patch"),
            "prices": {"input": "number", "cached_input": "number", "output": "number"},
        }
    },
    "permissions": {"allow": "list[str]", "deny": "list[str]", "ask": "list[str]"},
    "context": {
        "tool_output_cap_tokens": "int",
        "prune_threshold": "number",
        "compact_threshold": "number",
        "tokenizer": "str",
    },
    "ui": {"reasoning": ("show", "hide")},
    "sandbox": {"mode": ("off", "workspace-write"), "network": "bool"},
    "mcp_servers": {
        "*": {
            "command": "str",
            "args": "list[str]",
            "env": {"*": "str"},
            "url": "str",
            "headers": {"*": "str"},
            "type": ("stdio", "http", "streamable-http"),
            "enabled": "bool",
        }
    },
}


@dataclass
class Settings:
    """The merged configuration, with the files it came from."""

    data: dict[str, Any] = field(default_factory=dict)
    sources: list[Path] = field(default_factory=list)

    def get(self, dotted: str, default: Any = None) -> Any:
        """`settings.get("models.kimi-k3.context_window")`; dots separate tables."""
        node: Any = self.data
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node

    def table(self, dotted: str) -> dict[str, Any]:
        """A table (empty when absent)."""
        value = self.get(dotted, {})
        return value if isinstance(value, dict) else {}


def config_paths(workspace: Path, home: Path) -> list[Path]:
    """The files read, lowest precedence first."""
    return [home / "config.toml", workspace / ".kimicode" / "config.toml"]


def load_settings(workspace: Path, home: Path) -> Settings:
    """Read and merge both files; raise ConfigError naming the file, line and key on any problem."""
    settings = Settings()
    for path in config_paths(workspace, home):
        if not path.is_file():
            continue
        data = parse_file(path)
        settings.data = merge(settings.data, data)
        settings.sources.append(path)
    return settings


def parse_file(path: Path) -> dict[str, Any]:
    """Parse and validate one TOML file."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the file ({exc})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    problems = validate(data, SCHEMA, ())
    if problems:
        keypath, message = problems[0]
        line = find_line(text, keypath)
        where = f"{path}:{line}" if line else str(path)
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        raise ConfigError(f"{where}: {'.'.join(keypath)}: {message}{more}")
    return data


def merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge tables; any other value in `over` replaces the one in `base`."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def validate(data: Any, schema: Any, path: tuple[str, ...]) -> list[tuple[tuple[str, ...], str]]:
    """Problems as (key path, message)."""
    problems: list[tuple[tuple[str, ...], str]] = []
    if isinstance(schema, dict):
        if not isinstance(data, dict):
            return [(path, f"must be a table, got {_type_name(data)}")]
        for key, value in data.items():
            sub = schema.get(key, schema.get("*"))
            if sub is None:
                known = ", ".join(k for k in schema if k != "*")
                problems.append(((*path, key), f"unknown key (known keys here: {known})"))
                continue
            problems.extend(validate(value, sub, (*path, key)))
        return problems
    if isinstance(schema, tuple):
        if data not in schema:
            return [(path, f"must be one of {', '.join(map(str, schema))}, got {data!r}")]
        return []
    ok = {
        "str": isinstance(data, str),
        "int": isinstance(data, int) and not isinstance(data, bool),
        "number": isinstance(data, (int, float)) and not isinstance(data, bool),
        "bool": isinstance(data, bool),
        "list[str]": isinstance(data, list) and all(isinstance(x, str) for x in data),
    }[schema]
    if not ok:
        want = {"str": "a string", "int": "an integer", "number": "a number", "bool": "true or false",
                "list[str]": "a list of strings"}[schema]
        return [(path, f"must be {want}, got {_type_name(data)} {data!r}")]
    return []


def _type_name(value: Any) -> str:
    return {dict: "a table", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number"}.get(type(value), type(value).__name__)


def find_line(text: str, keypath: tuple[str, ...]) -> int | None:
    """Best-effort line number of a key: inside its table header if there is one, else anywhere."""
    lines = text.splitlines()
    key = keypath[-1] if keypath else ""
    table = keypath[:-1]
    start = 0
    if table:
        header = re.compile(r"^\s*\[+\s*" + r"\s*\.\s*".join(_key_re(p) for p in table) + r"\s*\]+\s*(#.*)?$")
        for i, line in enumerate(lines):
            if header.match(line):
                start = i + 1
                break
    key_re = re.compile(r"^\s*(?:[\w\-\"'.]+\.)?" + _key_re(key) + r"\s*=")
    for i in range(start, len(lines)):
        if key_re.match(lines[i]):
            return i + 1
    for i, line in enumerate(lines):  # dotted keys or inline tables
        if re.search(r"(^|[\s.{,])" + _key_re(key) + r"\s*=", line):
            return i + 1
    return None


def _key_re(key: str) -> str:
    escaped = re.escape(key)
    return rf"(?:{escaped}|\"{escaped}\"|'{escaped}')"
