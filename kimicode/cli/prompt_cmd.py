"""`kimicode prompt show`: the system prompt and tool definitions the model gets, with token counts.

The agent is built exactly as `kimicode` or `kimicode -p` would build it in the workspace (the same flags,
config files and AGENTS.md), and nothing is sent: what is printed is what the first request carries.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

prompt_app = typer.Typer(
    name="prompt",
    help="Show what the model is told: the system prompt and the tool definitions.",
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)


@prompt_app.command("show")
def show(
    cwd: Annotated[
        Path | None, typer.Option("-C", "--cwd", help="Workspace directory (default: the current one).")
    ] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="Model id (env KIMI_MODEL).")] = None,
    scope: Annotated[str | None, typer.Option("--scope", help="normal or strict.")] = None,
    headless: Annotated[bool, typer.Option("--headless", help="As `kimicode -p` would send it.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object: system, tools, tokens.")] = False,
) -> None:
    """Print the full system prompt and every tool definition, with their token counts."""
    from kimicode.agent.core import Agent
    from kimicode.agent.options import AgentOptions
    from kimicode.agent.sysprompt import PromptReport
    from kimicode.config.endpoint import ConfigError

    workspace = (cwd or Path.cwd()).expanduser()
    settings: dict[str, Any] = {k: v for k, v in (("model", model), ("scope", scope)) if v is not None}
    try:
        options = AgentOptions.from_workspace(workspace, headless=headless, persist=False, **settings)
        agent = Agent(options)
    except (ConfigError, ValueError, TypeError) as exc:
        typer.echo(f"kimicode: {exc}", err=True)
        raise typer.Exit(2) from None
    report = PromptReport.of_agent(agent)
    typer.echo(json.dumps(report.as_dict(), ensure_ascii=False) if as_json else report.text())
