"""`kimicode acp`: serve the Agent Client Protocol on stdio for an editor (docs/editors.md)."""

from __future__ import annotations

import asyncio
from enum import StrEnum
from typing import Annotated, Any

import typer

from kimicode.config.choices import EFFORTS, PERMISSION_MODES, SANDBOX_MODES

AcpThinking = StrEnum("AcpThinking", [(v, v) for v in EFFORTS])  # type: ignore[misc]
AcpMode = StrEnum("AcpMode", [(v.replace("-", "_"), v) for v in PERMISSION_MODES])  # type: ignore[misc]
AcpSandbox = StrEnum("AcpSandbox", [(v.replace("-", "_"), v) for v in SANDBOX_MODES])  # type: ignore[misc]


def acp_command(
    model: Annotated[str | None, typer.Option("--model", "-m", help="Model id (env KIMI_MODEL).")] = None,
    base_url: Annotated[str | None, typer.Option("--base-url", help="Endpoint (env KIMI_BASE_URL).")] = None,
    thinking: Annotated[AcpThinking | None, typer.Option("--thinking", help="Reasoning effort.")] = None,
    permission_mode: Annotated[
        AcpMode | None,
        typer.Option("--permission-mode", help="The sessions' starting mode (the editor can change it)."),
    ] = None,
    allow: Annotated[
        list[str] | None,
        typer.Option("--allow", metavar="RULE", help="Run matching calls without asking (repeatable)."),
    ] = None,
    deny: Annotated[
        list[str] | None, typer.Option("--deny", metavar="RULE", help="Never run matching calls (repeatable).")
    ] = None,
    sandbox: Annotated[
        AcpSandbox | None,
        typer.Option(
            "--sandbox",
            help="How kimicode's own bash is confined when the editor "
            "offers no terminals (auto, workspace-write, off).",
        ),
    ] = None,
    max_turns: Annotated[int | None, typer.Option("--max-turns", min=1, help="Maximum model steps per prompt.")] = None,
) -> None:
    """Serve the Agent Client Protocol on stdin/stdout for an editor (Zed, JetBrains, Neovim): docs/editors.md."""
    settings: dict[str, Any] = {
        "model": model,
        "base_url": base_url,
        "thinking": thinking.value if thinking is not None else None,
        "permission_mode": permission_mode.value if permission_mode is not None else None,
        "allow": tuple(allow or ()),
        "deny": tuple(deny or ()),
        "sandbox": sandbox.value if sandbox is not None else None,
        "max_turns": max_turns,
    }
    settings = {k: v for k, v in settings.items() if v not in (None, ())}
    from kimicode.acp import serve

    raise typer.Exit(asyncio.run(serve(settings)))


def run_acp(args: list[str]) -> None:
    """`kimicode acp ARGS` without loading the main application (the editor waits for `initialize`)."""
    app = typer.Typer(
        add_completion=False,
        rich_markup_mode=None,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.command()(acp_command)
    app(args=args, prog_name="kimicode acp")
