"""Command-line flags → Agent settings, once for every face (the terminal, `-p`, and their resumes).

`flag_settings` keeps only what the user typed (a flag left at its default leaves the setting to the
environment and the config files); `AgentOptions.from_workspace(workspace, **settings)` then resolves
the rest, so `kimicode` and `kimicode -p` build the same options from the same flags, and a library
caller gets them too with `AgentOptions.from_workspace(path, max_turns=..., ...)`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import typer


def given(ctx: typer.Context, name: str) -> bool:
    """True when the flag `name` was on the command line (or in the environment), not its default."""
    source = ctx.get_parameter_source(name)  # typer bundles its own click: compare by name
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def flag_settings(
    ctx: typer.Context,
    *,
    model: str | None = None,
    base_url: str | None = None,
    permission_mode: str | None = None,
    yolo: bool = False,
    thinking: str | None = None,
    max_turns: int | None = None,
    max_retries: int | None = None,
    request_timeout: float | None = None,
    retry_base_delay: float | None = None,
    context_window: int | None = None,
    max_tokens: int | None = None,
    allow: Iterable[str] | None = None,
    deny: Iterable[str] | None = None,
    sandbox: str | None = None,
    sandbox_network: bool = False,
    scope: str | None = None,
    on_switch: str | None = None,
    tool_choice: str | None = None,
) -> dict[str, Any]:
    """The AgentOptions settings the flags set (names of AgentOptions' fields)."""
    out: dict[str, Any] = {
        "model": model,
        "base_url": base_url,
        "thinking": thinking,
        "context_window": context_window,
        "max_completion_tokens": max_tokens,
        "retry_base_delay": retry_base_delay,
        "allow": tuple(allow or ()),
        "deny": tuple(deny or ()),
        "sandbox": sandbox,
        "sandbox_network": True if sandbox_network else None,
        "scope": scope,
        "on_switch": on_switch,
        "tool_choice": tool_choice,
    }
    out = {k: v for k, v in out.items() if v not in (None, ())}
    if yolo:
        out["permission_mode"] = "yolo"
    elif permission_mode is not None and given(ctx, "permission_mode"):
        out["permission_mode"] = permission_mode
    for name, value in (("max_turns", max_turns), ("max_retries", max_retries), ("request_timeout", request_timeout)):
        if value is not None and given(ctx, name):
            out[name] = value
    return out
