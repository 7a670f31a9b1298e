"""`kimicode doctor`: check the setup a session needs and say what to fix.

Checks, in order: the configuration files (valid, trusted, the stored key's file mode), the API key
(present, where from, masked), the endpoint (reachable, `GET /models`, the model id listed), the context
window (kimicode's versus what the server reports), bubblewrap, ripgrep, and the MCP servers (started
for real). Exit 1 when something is broken, 0 when everything works (warnings included).

The key is only ever shown masked (`sk-…abcd`) and only sent to the configured endpoint.
"""

from __future__ import annotations

import asyncio
import json
import stat
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import typer

Status = Literal["ok", "warn", "fail"]


@dataclass
class Check:
    """One line of the report: what was checked, how it went, and what to do about it."""

    name: str
    status: Status
    detail: str
    fix: str = ""


def mask(key: str) -> str:
    """`sk-…abcd` for a long key; short keys show nothing but their length."""
    return f"{key[:3]}…{key[-4:]}" if len(key) >= 16 else f"(hidden, {len(key)} characters)"


def _config_checks(workspace: Path, home: Path) -> tuple[list[Check], Any]:
    from kimicode.config.endpoint import ConfigError
    from kimicode.config.settings import config_paths, load_settings

    user, project = config_paths(workspace, home)
    try:
        settings = load_settings(workspace, home)
    except ConfigError as exc:
        return [Check("config", "fail", str(exc), "fix the file (the message names the line and key)")], None
    checks: list[Check] = []
    files = [f"{user} (yours)"] if user.is_file() else [f"{user} (none yet)"]
    if project.is_file():
        files.append(f"{project} (project, {'trusted' if settings.trusted else 'not trusted'})")
    checks.append(Check("config", "ok", ", ".join(files)))
    if settings.config.auth.api_key and user.is_file() and stat.S_IMODE(user.stat().st_mode) & 0o077:
        checks.append(Check("config", "fail", f"{user} holds an API key but others can read it", f"chmod 600 {user}"))
    for text in settings.ignored:
        checks.append(
            Check("config", "warn", text, "trust the workspace only if you trust the repository's configuration")
        )
    return checks, settings


def _key_check(settings: Any, model: str | None, base_url: str | None) -> tuple[Check, Any, Any]:
    from kimicode.config.endpoint import ConfigError, MissingKeyError
    from kimicode.config.settings import resolve_model

    try:
        endpoint, mc = resolve_model(settings, model=model, base_url=base_url)
    except MissingKeyError:
        fix = "set KIMI_API_KEY (or MOONSHOT_API_KEY), or run `kimicode` in a terminal to store a key"
        return Check("API key", "fail", "no API key found", fix), None, None
    except ConfigError as exc:
        return Check("API key", "fail", str(exc), "fix the setting the message names"), None, None
    where = "[auth] api_key in config.toml" if endpoint.key_source == "config.toml" else endpoint.key_source
    return Check("API key", "ok", f"{mask(endpoint.api_key)} (from {where})"), endpoint, mc


def _endpoint_checks(endpoint: Any, mc: Any, key_where: str, timeout: float, home: Path) -> list[Check]:
    from kimicode.llm.discovery import fetch_models, window_from_models
    from kimicode.llm.profiles import profile_for, profile_with

    url = endpoint.base_url
    host = urlsplit(url).netloc or url
    status, body, error = fetch_models(url, endpoint.api_key, timeout)
    window = profile_with(profile_for(endpoint.model), mc).context_window
    if status is None:
        fix = f"check the base URL ({url}: --base-url or KIMI_BASE_URL) and that the server runs and is reachable"
        return [
            Check("endpoint", "fail", f"cannot reach {host}: {error}", fix),
            Check("context", "warn", f"{window:,} tokens assumed for {endpoint.model} (not checked)"),
        ]
    if status in (401, 403):
        fix = f"check the key ({key_where}); it may be revoked or for another platform"
        return [Check("endpoint", "fail", f"{url} rejected the key (HTTP {status})", fix)]
    if status >= 500:
        return [Check("endpoint", "fail", f"{url}/models answered HTTP {status}", "try again later")]
    entries = body.get("data") if isinstance(body, dict) else None
    if status >= 400 or not isinstance(entries, list):
        detail = f"{host} is reachable but does not list its models (GET /models: HTTP {status})"
        return [
            Check("endpoint", "warn", detail + f"; model {endpoint.model!r} not verified"),
            Check("context", "ok", f"{window:,} tokens (kimicode's default for {endpoint.model})"),
        ]
    ids = [str(e.get("id")) for e in entries if isinstance(e, dict) and e.get("id")]
    entry = next((e for e in entries if isinstance(e, dict) and e.get("id") == endpoint.model), None)
    if entry is None:
        shown = ", ".join(ids[:10]) + (", …" if len(ids) > 10 else "")
        return [
            Check(
                "endpoint",
                "fail",
                f"model {endpoint.model!r} is not among the {len(ids)} models {host} lists: {shown or 'none'}",
                "pick one with --model or KIMI_MODEL",
            )
        ]
    checks = [Check("endpoint", "ok", f"{url} reachable, model {endpoint.model} listed ({len(ids)} models)")]
    server_window, _ = window_from_models(body, endpoint.model)  # the same reading as window discovery
    info = _discover(endpoint, mc, home, timeout)
    if info is not None and info.window:
        server_window = info.window  # llama.cpp's /props (per slot), LiteLLM's /model/info
    if server_window is not None and server_window < window and mc.context_window:
        fix = f'--context-window {server_window}, or context_window = {server_window} in [models."{mc.name}"]'
        checks.append(
            Check(
                "context", "warn", f"kimicode is set to {window:,} tokens but the server allows {server_window:,}", fix
            )
        )
        return checks
    if server_window:
        window = server_window
    said = (
        f" (as the server reports{' per slot' if info and (info.slots or 1) > 1 else ''})"
        if server_window
        else " (the server does not say)"
    )
    checks.append(_fit_check(window, said, info))
    checks.append(_calibration_check(endpoint, home, info))
    return checks


def _discover(endpoint: Any, mc: Any, home: Path, timeout: float) -> Any:
    from kimicode.llm.discovery import discover_server

    try:
        return asyncio.run(
            discover_server(
                endpoint.base_url,
                endpoint.api_key,
                endpoint.model,
                home,
                headers=dict(mc.headers),
                timeout=min(timeout, 5.0),
            )
        )
    except Exception:  # discovery is a hint here too: the /models check above reported the endpoint
        return None


def _fit_check(window: int, said: str, info: Any) -> Check:
    """Whether a request can fit at all: the system prompt and the tools (as the server's template renders
    them), a short conversation and the smallest answer kimicode asks for."""
    from kimicode.context.accounting import TokenAccountant
    from kimicode.context.budget import COMPLETION_FLOOR, Budget, fit_reserve
    from kimicode.context.tokens import default_counter
    from kimicode.context.toolfit import TOOLS_SHARE, fit_tools
    from kimicode.prompts import load_prompt
    from kimicode.tools.registry import ToolRegistry, builtin_tools

    accountant = TokenAccountant(default_counter())
    if info is not None and info.tools_rendered is False:
        accountant.tools_in_prompt = False
    system = [{"role": "system", "content": load_prompt("system.md")}]
    tools = ToolRegistry(builtin_tools()).schemas()
    try:
        budget = Budget.make(window, fit_reserve(window, 32_768))
    except ValueError as exc:
        return Check(
            "context",
            "fail",
            f"{window:,} tokens{said}: too small for any request ({exc})",
            "give the server a larger context (llama.cpp: -c 8192)",
        )
    fitted, _ = fit_tools(
        tools, lambda t: accountant.estimate_unanchored(system, t), int(budget.input_budget * TOOLS_SHARE)
    )
    fixed = accountant.estimate_unanchored(system, fitted)
    how = "; the server's template leaves the tool definitions out" if not accountant.tools_in_prompt else ""
    if fixed + 512 + COMPLETION_FLOOR > window:
        return Check(
            "context",
            "fail",
            f"{window:,} tokens{said}: the system prompt and tools alone take about "
            f"{fixed:,}{how}, so every request would be refused",
            "give the server a larger context (llama.cpp: -c 8192; vLLM: --max-model-len)",
        )
    if len(fitted) < len(tools):
        return Check(
            "context",
            "warn",
            f"{window:,} tokens{said}: only {len(fitted)} of {len(tools)} tools fit (shortened){how}",
            "a larger window gives the model every tool",
        )
    return Check("context", "ok", f"{window:,} tokens{said}; system prompt and tools about {fixed:,}{how}")


def _calibration_check(endpoint: Any, home: Path, info: Any) -> Check:
    """What kimicode has learnt of this server's counts (context/calibration.py), said as it is."""
    from kimicode.context import calibration

    if info is None:
        return Check("estimate", "ok", "not calibrated: the server's first answer calibrates it")
    stored = calibration.load(home, endpoint.base_url, endpoint.model, info.fingerprint)
    counts = " (the server counts each session's first request itself)" if info.counts else ""
    if stored is None:
        return Check("estimate", "ok", f"not calibrated yet: the first answer calibrates it{counts}")
    tools = "" if stored.get("tools_in_prompt", True) else ", tool definitions not counted by the template"
    return Check(
        "estimate", "ok", f"calibrated on this server's counts: factor {stored.get('correction')}{tools}{counts}"
    )


def _tool_checks(settings: Any) -> list[Check]:
    from kimicode.tools.sandbox import probe
    from kimicode.tools.search import find_ripgrep

    checks: list[Check] = []
    sandbox = probe()
    wanted = settings is not None and settings.config.sandbox.mode == "workspace-write"
    if sandbox.available:
        checks.append(Check("sandbox", "ok", f"bubblewrap works ({sandbox.bwrap})"))
    else:
        mode = (settings.config.sandbox.mode or "auto") if settings is not None else "auto"
        fix = (
            "apt install bubblewrap (or dnf/pacman); without it commands that run without asking are not "
            "confined (--sandbox off silences the notice)"
            if mode != "off"
            else "apt install bubblewrap (or dnf/pacman); the sandbox is off in your config"
        )
        checks.append(Check("sandbox", "fail" if wanted else "warn", sandbox.reason, fix))
    rg = find_ripgrep()
    if rg is None:
        checks.append(
            Check(
                "ripgrep",
                "warn",
                "rg not found: grep and glob use a slower Python engine",
                "pip install ripgrep (in kimicode's environment) or install rg",
            )
        )
    else:
        try:
            version = subprocess.run([rg, "--version"], capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError) as exc:
            checks.append(Check("ripgrep", "fail", f"{rg} cannot run: {exc}", "reinstall ripgrep"))
        else:
            checks.append(Check("ripgrep", "ok", f"{(version.splitlines() or ['rg'])[0]} ({rg})"))
    return checks


def _mcp_checks(workspace: Path, home: Path, settings: Any) -> list[Check]:
    from kimicode.cli.mcp_cmd import probe_servers
    from kimicode.mcp.config import load_server_configs

    configs, problems = load_server_configs(workspace, settings)
    checks = [Check("mcp", "warn", p, "see `kimicode mcp list`") for p in problems]
    if not configs:
        return checks or [Check("mcp", "ok", "no servers configured")]
    for row in asyncio.run(probe_servers(configs, workspace, home)):
        if row["status"] == "ready":
            checks.append(Check("mcp", "ok", f"{row['name']}: ready, {len(row['tools'])} tools"))
        else:
            checks.append(
                Check(
                    "mcp",
                    "fail",
                    f"{row['name']}: {row['status']}: {row['error']}",
                    "fix its command or URL, or set enabled = false",
                )
            )
    return checks


def _claude_checks(workspace: Path, settings: Any) -> list[Check]:
    """A Claude Code setup: each piece found and not used, with the reason and the way to get it."""
    from kimicode.extensions.claudesetup import not_used

    lines = not_used(workspace, trusted=settings is not None and settings.trusted)
    if not lines:
        return [Check("claude", "ok", "everything of Claude Code's setup found here is used")]
    return [Check("claude", "warn", line) for line in lines]


def run_checks(
    workspace: Path, home: Path, *, model: str | None = None, base_url: str | None = None, timeout: float = 10.0
) -> list[Check]:
    """Every check, in report order."""
    checks, settings = _config_checks(workspace, home)
    if settings is not None:
        key, endpoint, mc = _key_check(settings, model, base_url)
        checks.append(key)
        if endpoint is not None:
            checks.extend(_endpoint_checks(endpoint, mc, endpoint.key_source, timeout, home))
    checks.extend(_tool_checks(settings))
    if settings is not None:
        checks.extend(_mcp_checks(workspace, home, settings))
    checks.extend(_claude_checks(workspace, settings))
    return checks


def doctor(
    cwd: Annotated[Path | None, typer.Option("-C", "--cwd", help="Workspace to check (default: current).")] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="Model id to check (env KIMI_MODEL).")] = None,
    base_url: Annotated[str | None, typer.Option("--base-url", help="Endpoint to check (env KIMI_BASE_URL).")] = None,
    timeout: Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds to wait for the endpoint.")] = 10.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Check the key, endpoint, model, context window, sandbox, ripgrep, config files and MCP servers."""
    from kimicode._version import __version__
    from kimicode.config.endpoint import kimicode_home

    workspace = (cwd or Path.cwd()).expanduser().resolve()
    if not workspace.is_dir():
        typer.echo(f"kimicode: -C/--cwd: not a directory: {workspace}", err=True)
        raise typer.Exit(2)
    checks = run_checks(workspace, kimicode_home(), model=model, base_url=base_url, timeout=timeout)
    failed = sum(c.status == "fail" for c in checks)
    warned = sum(c.status == "warn" for c in checks)
    if as_json:
        typer.echo(json.dumps({"ok": not failed, "checks": [asdict(c) for c in checks]}, ensure_ascii=False))
        raise typer.Exit(1 if failed else 0)
    typer.echo(f"kimicode {__version__} doctor: {workspace}")
    label = {"ok": "[ok]  ", "warn": "[warn]", "fail": "[FAIL]"}
    for c in checks:
        typer.echo(f"{label[c.status]} {c.name:<9} {c.detail}")
        if c.fix and c.status != "ok":
            typer.echo(f"{'':17}fix: {c.fix}")
    if failed:
        more = f", {warned} warning(s)." if warned else "."
        typer.echo(f"{failed} problem{'s' if failed != 1 else ''} to fix{more}")
    else:
        typer.echo("Everything kimicode needs works" + (f" ({warned} warning(s))." if warned else "."))
    raise typer.Exit(1 if failed else 0)


__all__ = ["Check", "doctor", "mask", "run_checks"]
