"""MCP server configuration: the workspace's `.mcp.json` (Claude Code's `mcpServers` format) and the
`[mcp_servers.NAME]` tables of the configuration files.

A server is launched as a subprocess (`command`, `args`, `env`, `cwd`: stdio) or reached over streamable
HTTP (`url`, `headers`). `${VAR}` and `${VAR:-default}` are expanded from the environment in every string.
The configuration files win over `.mcp.json` for a server of the same name (so `enabled = false` there
turns a project's server off). Problems are returned as messages, never raised: a broken server entry
must not stop the session.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from kimicode.config.choices import DEFAULT_MCP_STARTUP_TIMEOUT, DEFAULT_MCP_TOOL_TIMEOUT
from kimicode.config.settings import Settings, expand_env, where

MCP_JSON = ".mcp.json"
DEFAULT_STARTUP_TIMEOUT = DEFAULT_MCP_STARTUP_TIMEOUT
"""Seconds a server may take to start and list its tools before it is skipped."""
DEFAULT_TOOL_TIMEOUT = DEFAULT_MCP_TOOL_TIMEOUT
"""Seconds one MCP tool call may take."""


@dataclass(frozen=True)
class ServerConfig:
    """One MCP server as configured."""

    name: str
    transport: Literal["stdio", "http"]
    source: str
    """Where it was configured (a file path)."""
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT


def _raw_servers(workspace: Path) -> tuple[dict[str, tuple[dict[str, Any], str]], list[str]]:
    path = workspace / MCP_JSON
    if not path.is_file():
        return {}, []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        return {}, [f"{path}: cannot read the file ({exc})"]
    except json.JSONDecodeError as exc:
        return {}, [f"{path}:{exc.lineno}: invalid JSON: {exc.msg}"]
    servers = data.get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        return {}, [f'{path}: expected an object with an "mcpServers" object']
    out: dict[str, tuple[dict[str, Any], str]] = {}
    problems: list[str] = []
    for name, entry in servers.items():
        if isinstance(entry, dict):
            out[str(name)] = (entry, str(path))
        else:
            problems.append(f"{path}: mcpServers.{name} must be an object")
    return out, problems


def _expand(value: Any, env: Mapping[str, str], where: str) -> Any:
    if isinstance(value, str):
        try:
            return expand_env(value, env)
        except KeyError as exc:
            raise ValueError(f"{where}: the environment variable {exc.args[0]} is not set") from None
    if isinstance(value, list):
        return [_expand(v, env, where) for v in value]
    if isinstance(value, dict):
        return {k: _expand(v, env, f"{where}.{k}") for k, v in value.items()}
    return value


def _strings(value: Any, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ValueError(f"{what} must be an object of strings")
    return {str(k): v for k, v in value.items()}


def _one(
    name: str, entry: Mapping[str, Any], source: str, env: Mapping[str, str], default_timeout: float
) -> ServerConfig:
    where = f"{source}: mcp server {name!r}"
    entry = _expand(dict(entry), env, where)
    kind = str(entry.get("type") or ("http" if entry.get("url") else "stdio")).lower()
    if kind == "sse":
        raise ValueError(f"{where}: the SSE transport is not supported; use the server's streamable HTTP URL")
    if kind in ("http", "streamable-http", "streamable_http"):
        url = entry.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f'{where}: an http server needs a "url" starting with http:// or https://')
        transport: Literal["stdio", "http"] = "http"
    elif kind == "stdio":
        url = ""
        transport = "stdio"
    else:
        raise ValueError(f"{where}: unknown type {kind!r} (stdio or http)")
    command = entry.get("command") or ""
    if transport == "stdio" and (not isinstance(command, str) or not command.strip()):
        raise ValueError(f'{where}: a stdio server needs a "command"')
    args = entry.get("args") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ValueError(f'{where}: "args" must be a list of strings')
    timeout = entry.get("startup_timeout", default_timeout)
    if not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ValueError(f'{where}: "startup_timeout" must be a positive number of seconds')
    cwd = entry.get("cwd")
    return ServerConfig(
        name=name,
        transport=transport,
        source=source,
        command=str(command),
        args=tuple(args),
        env=_strings(entry.get("env"), f'{where}: "env"'),
        cwd=str(cwd) if isinstance(cwd, str) and cwd else None,
        url=str(url),
        headers=_strings(entry.get("headers"), f'{where}: "headers"'),
        startup_timeout=float(timeout),
    )


def load_server_configs(
    workspace: Path,
    settings: Settings,
    env: Mapping[str, str] | None = None,
    extra: Mapping[str, tuple[dict[str, Any], str]] | None = None,
) -> tuple[list[ServerConfig], list[str]]:
    """The enabled servers, and a message for each entry that could not be used. `extra` adds servers
    (entry, source) that the user installed elsewhere (plugins'); the project's and the configuration's
    servers of the same name win."""
    env = os.environ if env is None else env
    raw, problems = _raw_servers(workspace)
    if raw and not settings.trusted:
        # `.mcp.json` comes with the repository: its commands must not start until the user trusts it.
        problems.append(
            f"{workspace / MCP_JSON}: {len(raw)} server(s) not started: this workspace is not trusted "
            "(add it to [trust] workspaces in KIMICODE_HOME/config.toml to allow it)"
        )
        raw = {}
    for name, pair in (extra or {}).items():
        raw.setdefault(name, pair)
    for name, server in settings.config.mcp_servers.items():
        base = raw.get(name, ({}, ""))[0]
        entry = server.model_dump(exclude_unset=True)  # what the file says (.mcp.json's entry fills the rest)
        raw[name] = ({**base, **entry}, where(settings, ("mcp_servers", name)))
    timeout = settings.config.mcp.startup_timeout
    servers: list[ServerConfig] = []
    for name, (entry, src) in raw.items():
        if entry.get("enabled") is False or entry.get("disabled") is True:
            continue
        try:
            servers.append(_one(name, entry, src, env, float(timeout)))
        except ValueError as exc:
            problems.append(str(exc))
    return servers, problems


_NAME_BAD = re.compile(r"[^A-Za-z0-9_-]")


def tool_name(server: str, tool: str) -> str:
    """`mcp__SERVER__TOOL`, with characters the API refuses replaced, at most 64 characters."""
    name = f"mcp__{_NAME_BAD.sub('_', server)}__{_NAME_BAD.sub('_', tool)}"
    if len(name) <= 64:
        return name
    import hashlib

    digest = hashlib.sha1(name.encode()).hexdigest()[:8]
    return name[:55] + "_" + digest
