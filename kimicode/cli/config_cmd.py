"""`kimicode config show`: the merged configuration with secrets masked, and where it came from."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from kimicode.config.settings import Settings

config_app = typer.Typer(
    name="config",
    help="Show the configuration (KIMICODE_HOME/config.toml and .kimicode/config.toml).",
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)


def _fail(message: str) -> typer.Exit:
    typer.echo(f"kimicode: {message}", err=True)
    return typer.Exit(2)


def workspace_settings(cwd: Path | None) -> tuple[Path, Settings]:
    """The workspace (`-C` or the current directory) and its merged settings; a bad file exits 2."""
    from kimicode.config.endpoint import ConfigError, kimicode_home
    from kimicode.config.settings import load_settings

    workspace = (cwd or Path.cwd()).expanduser().resolve()
    try:
        return workspace, load_settings(workspace, kimicode_home())
    except ConfigError as exc:
        raise _fail(str(exc)) from None


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
    return json.dumps(str(value))


def _toml_key(key: str) -> str:
    bare = key.replace("-", "").replace("_", "").isalnum() and key.isascii()
    return key if bare else json.dumps(key)


def to_toml(data: dict[str, Any], prefix: tuple[str, ...] = ()) -> str:
    """Render nested tables as TOML (values first, then sub-tables with `[a.b]` headers)."""
    lines: list[str] = []
    scalars = {k: v for k, v in data.items() if not isinstance(v, dict) or (prefix and _inline(v))}
    tables = {k: v for k, v in data.items() if k not in scalars}
    if prefix and (scalars or not tables):
        lines.append("[" + ".".join(_toml_key(p) for p in prefix) + "]")
    for key, value in scalars.items():
        lines.append(f"{_toml_key(key)} = {_toml_value(value)}")
    if lines:
        lines.append("")
    for key, value in tables.items():
        lines.append(to_toml(value, (*prefix, key)))
    return "\n".join(lines)


def _inline(table: dict[str, Any]) -> bool:
    """Small tables of plain values (headers, env, prices) are shown inline."""
    return not any(isinstance(v, dict) for v in table.values()) and len(table) <= 4 and bool(table)


def _mask_key(key: str) -> str:
    return "(empty)" if not key else "set (" + str(len(key)) + " characters, not shown)"


@config_app.command("show")
def show(
    cwd: Annotated[Path | None, typer.Option("-C", "--cwd", help="Workspace directory (default: current).")] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="Show how this model resolves.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of TOML.")] = False,
) -> None:
    """Print the merged configuration (secrets masked), the files read, and the resolved model."""
    from kimicode.config.endpoint import ConfigError, kimicode_home
    from kimicode.config.settings import config_paths, resolve_model

    workspace, settings = workspace_settings(cwd)
    home = kimicode_home()
    resolved: dict[str, Any]
    try:
        endpoint, mc = resolve_model(settings, model=model)
        resolved = {
            "model": mc.name,
            "model_id": endpoint.model,
            "provider": mc.provider or "",
            "base_url": endpoint.base_url,
            "api_key_from": endpoint.key_source,
            "api_key": _mask_key(endpoint.api_key),
        }
        if mc.headers:
            resolved["headers"] = dict.fromkeys(mc.headers, "********")
    except ConfigError as exc:
        resolved = {"error": str(exc)}
    data = settings.masked()
    files = [{"path": str(p), "read": p in settings.sources} for p in config_paths(workspace, home)]
    rules, notes = _active_rules(settings, workspace, home)
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "files": files,
                    "settings": data,
                    "resolved": resolved,
                    "permission_rules": rules,
                    "permission_notes": notes,
                },
                indent=2,
            )
        )
        return
    out = ["# configuration files (later ones override earlier ones):"]
    for f in files:
        out.append(f"#   {f['path']}" + ("" if f["read"] else "  (not found)"))
    env_set = [n for n in ("KIMI_MODEL", "KIMI_BASE_URL", "OPENAI_BASE_URL") if os.environ.get(n)]
    if env_set:
        out.append("# environment overrides: " + ", ".join(env_set))
    out.append("")
    body = to_toml(data).strip()
    out.append(body if body else "# (no settings: every value is the default)")
    out.append("")
    out.append("# resolved model (flags and the environment applied):")
    for key, value in resolved.items():
        out.append(f"#   {key}: {value if not isinstance(value, dict) else ', '.join(value)}")
    out += _rules_text(rules, notes)
    typer.echo("\n".join(out))


def _rules_text(rules: list[dict[str, str]], notes: list[str]) -> list[str]:
    out = ["", "# permission rules in effect (deny first, then ask, then allow; each with its file):"]
    out += [f"#   {r['action']:<5} {r['rule']}  ({r['source']})" for r in rules] or ["#   (none)"]
    return out + [f"#   {note}" for note in notes]


def _active_rules(settings: Any, workspace: Path, home: Path) -> tuple[list[dict[str, str]], list[str]]:
    """Every permission rule a session here starts with (kimicode's files and Claude Code's), with its
    file, and the notes on what was ignored or not used."""
    from kimicode.config.endpoint import ConfigError
    from kimicode.config.settings import config_paths
    from kimicode.permissions.claude import claude_rules
    from kimicode.permissions.sources import session_rules

    notes: list[str] = []
    try:
        rules = session_rules(
            settings, project_file=config_paths(workspace, home)[1], ignored=notes, claude_workspace=workspace
        )
    except ConfigError as exc:
        return [], [f"error: {exc}"]
    notes += claude_rules(workspace, trusted=settings.trusted).unused
    rows = [
        {"action": action, "rule": r.raw, "source": r.source}
        for action in ("deny", "ask", "allow")
        for r in getattr(rules, action)
    ]
    return rows, notes
