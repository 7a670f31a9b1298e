"""Flags CI jobs need on `kimicode -p`: --mcp-config, --trust-workspace, --system-prompt-file, --max-budget-usd.

Kept out of app.py so the flag handling can be tested directly and app.py stays small.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kimicode.config.settings import Settings


class FlagError(ValueError):
    """A CI flag's value cannot be used (the message names the flag and the file)."""


def read_mcp_config(path: Path) -> dict[str, dict[str, Any]]:
    """The servers of an `--mcp-config` file (`{"mcpServers": {NAME: {...}}}`, the .mcp.json format)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FlagError(f"--mcp-config: no such file: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise FlagError(f"--mcp-config: cannot read {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise FlagError(f"--mcp-config: {path}:{exc.lineno}: invalid JSON: {exc.msg}") from None
    servers = data.get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        raise FlagError(f'--mcp-config: {path}: expected an object with an "mcpServers" object')
    bad = [str(name) for name, entry in servers.items() if not isinstance(entry, dict)]
    if bad:
        raise FlagError(f"--mcp-config: {path}: mcpServers.{bad[0]} must be an object")
    return {str(name): dict(entry) for name, entry in servers.items()}


def ci_settings(settings: Settings, *, mcp_config: Path | None) -> Settings:
    """`settings` (read once, with `--trust-workspace` applied) plus the `--mcp-config` servers, as a copy.

    The servers of an `--mcp-config` file are started even in an untrusted workspace: the user named the
    file on the command line, which is the trust a repository's own `.mcp.json` lacks.
    """
    if mcp_config is None:
        return settings
    return settings.with_changes({"mcp_servers": read_mcp_config(mcp_config)})


def read_system_prompt(path: Path) -> str:
    """The text of `--system-prompt-file` (it replaces kimicode's system prompt)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FlagError(f"--system-prompt-file: no such file: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise FlagError(f"--system-prompt-file: cannot read {path}: {exc}") from None
    if not text.strip():
        raise FlagError(f"--system-prompt-file: {path} is empty")
    return text


def check_budget(agent: Any, budget: float | None) -> None:
    """A budget needs a price: refuse to start rather than run unbounded."""
    if budget is None:
        return
    from kimicode.agent.costs import agent_prices
    from kimicode.config.pricing import unknown_price_hint

    prices, _ = agent_prices(agent)
    if not prices:
        raise FlagError(
            f"--max-budget-usd needs the model's price: {unknown_price_hint(agent.endpoint.model, agent.home)}"
        )
