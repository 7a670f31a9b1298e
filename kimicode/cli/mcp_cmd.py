"""`kimicode mcp list`: the configured MCP servers, whether they start, and their tools."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Any

import typer

mcp_app = typer.Typer(
    name="mcp",
    help="MCP servers (from .mcp.json and the configuration files).",
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)


@mcp_app.command("list")
def list_servers(
    cwd: Annotated[Path | None, typer.Option("-C", "--cwd", help="Workspace directory (default: current).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Start each configured server (plugins' too), then show its status and tools (exit 1 if any failed)."""
    from kimicode.cli.config_cmd import workspace_settings
    from kimicode.config.endpoint import kimicode_home
    from kimicode.extensions.claudeplugins import plugins_in_use
    from kimicode.extensions.plugins import plugin_servers
    from kimicode.mcp.config import load_server_configs

    workspace, settings = workspace_settings(cwd)
    home = kimicode_home()
    configs, problems = load_server_configs(workspace, settings, extra=plugin_servers(plugins_in_use(home)))
    rows: list[dict[str, Any]] = []
    if configs:
        rows = asyncio.run(probe_servers(configs, workspace, home))
    failed = bool(problems) or any(r["status"] != "ready" for r in rows)
    if as_json:
        typer.echo(json.dumps({"servers": rows, "problems": problems}, indent=2))
        raise typer.Exit(1 if failed else 0)
    if not rows and not problems:
        typer.echo(
            f"No MCP servers configured (add them to {workspace / '.mcp.json'} or [mcp_servers] in config.toml)."
        )
        return
    for row in rows:
        where = row["url"] or " ".join([row["command"], *row["args"]])
        typer.echo(f"{row['name']}  {row['transport']}  {row['status']}  ({where})")
        if row["status"] == "ready":
            names = ", ".join(row["tools"]) or "(no tools)"
            typer.echo(f"    {len(row['tools'])} tools: {names}")
        else:
            typer.echo(f"    {row['error']}")
    for problem in problems:
        typer.echo(f"problem: {problem}")
    raise typer.Exit(1 if failed else 0)


async def probe_servers(configs: list[Any], workspace: Path, home: Path) -> list[dict[str, Any]]:
    from kimicode.mcp.manager import McpManager

    manager = McpManager(configs, workspace, log_dir=home / "logs")
    try:
        await manager.start()
        return [
            {
                "name": s.config.name,
                "transport": s.config.transport,
                "command": s.config.command,
                "args": list(s.config.args),
                "url": s.config.url,
                "source": s.config.source,
                "status": s.status,
                "error": s.error,
                "tools": [t.name for t in s.tools],
                "startup_seconds": round(s.startup_seconds, 2),
            }
            for s in manager.servers
        ]
    finally:
        await manager.aclose()
