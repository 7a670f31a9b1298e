"""`kimicode plugin add|list|remove|enable|disable`: plugins in Claude Code's format (kimicode/extensions/plugins.py).

`add` shows exactly what the plugin would run (its hooks' commands and its MCP servers' commands) and
what it adds (commands, skills, subagents), then asks; `--yes` answers for scripts.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer

from kimicode.termsafe import sanitize

plugin_app = typer.Typer(
    name="plugin",
    help="Plugins: commands, skills, subagents, hooks and MCP servers in Claude Code's plugin format.",
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)


def can_ask() -> bool:
    """Whether there is a terminal to ask in."""
    return sys.stdin.isatty()


def _fail(message: str) -> None:
    typer.echo(f"kimicode: {message}", err=True)
    raise typer.Exit(1)


def _describe(contents: dict[str, list[str]]) -> str:
    lines: list[str] = []
    for kind, items in contents.items():
        if items:
            lines.append(f"  {kind}:")
            lines += [f"    {sanitize(item, sequences='escape')}" for item in items]
    return "\n".join(lines) if lines else "  (nothing: no commands, skills, agents, hooks or MCP servers)"


@plugin_app.command("add")
def add(
    source: Annotated[str, typer.Argument(help="A plugin folder, or a git URL (https://, git@host:, file://).")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Install without asking.")] = False,
) -> None:
    """Install a plugin under KIMICODE_HOME/plugins/ (after showing what it runs) and enable it."""
    from kimicode.config.endpoint import kimicode_home
    from kimicode.extensions.plugins import PluginError, install, stage

    home = kimicode_home()
    with tempfile.TemporaryDirectory(prefix="kimicode-plugin-") as scratch:
        try:
            plugin = stage(source, Path(scratch))
        except PluginError as exc:
            _fail(str(exc))
            return
        contents = plugin.contents()
        runs = contents["hooks"] or contents["mcp servers"]
        version = f" {plugin.version}" if plugin.version else ""
        typer.echo(
            f"Plugin {plugin.name}{version}: {sanitize(plugin.description, sequences='escape')}\n{_describe(contents)}"
        )
        if runs:
            typer.echo("Its hooks and MCP servers run these commands on your machine, in every workspace.")
        unloadable = _unloadable(plugin)
        if not yes:
            if not can_ask():
                _fail("not installed: pass --yes to install without a terminal to ask in")
            if not typer.confirm(f"Install {plugin.name}?", default=False):
                typer.echo("Not installed.")
                raise typer.Exit(1)
        try:
            installed = install(home, plugin)
        except (PluginError, OSError) as exc:
            _fail(str(exc))
            return
    typer.echo(
        f"Installed {installed.name} in {installed.root} (enabled; `kimicode plugin disable "
        f"{installed.name}` turns it off)."
    )
    if unloadable:
        typer.echo(
            f"kimicode: {installed.name} was installed, but {len(unloadable)} of its files will not load "
            "(listed above).",
            err=True,
        )


def _unloadable(plugin: Any) -> list[str]:
    """Print (to stderr) each agent, skill, command or hook file of `plugin` that kimicode cannot load, and
    return them: an install must not report success while files are silently lost."""
    from kimicode.extensions.pluginscan import scan_plugin

    problems = scan_plugin(plugin).problems
    if problems:
        typer.echo(f"kimicode cannot load {len(problems)} of its files:", err=True)
        for problem in problems:
            typer.echo(f"  {sanitize(problem, sequences='escape')}", err=True)
    return problems


@plugin_app.command("list")
def list_plugins(as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False) -> None:
    """The installed plugins, enabled or not, and what each brings."""
    from kimicode.config.endpoint import kimicode_home
    from kimicode.extensions.claudeplugins import claude_plugins
    from kimicode.extensions.plugins import installed_plugins

    plugins = installed_plugins(kimicode_home())
    names = {p.name for p in plugins}
    claude = claude_plugins()
    theirs = claude.plugins
    if as_json:
        rows: list[dict[str, Any]] = [
            {
                "name": p.name,
                "enabled": p.enabled and not (p in theirs and p.name in names),
                "version": p.version,
                "source": p.source,
                "path": str(p.root),
                "claude_code": p in theirs,
                **p.contents(),
            }
            for p in [*plugins, *theirs]
        ]
        typer.echo(json.dumps({"plugins": rows, "not_used": claude.not_used}, indent=2))
        return
    if not plugins and not theirs:
        typer.echo(
            "No plugins installed. `kimicode plugin add PATH|GIT_URL` installs one"
            + (" (Claude Code's installed plugins are used as they are)." if not claude.not_used else ".")
        )
    for p in plugins:
        state = "enabled" if p.enabled else "disabled"
        typer.echo(f"{p.name} {p.version} ({state}) from {p.source}\n{_describe(p.contents())}")
    for p in theirs:
        if p.name in names:
            state = f"not used: kimicode's plugin {p.name} has the name"
        else:
            state = "enabled" if p.enabled else "disabled in Claude Code's enabledPlugins"
        typer.echo(f"{p.name} {p.version} ({state}) from {p.source} at {p.root}\n{_describe(p.contents())}")
    for line in claude.not_used:
        typer.echo(sanitize(line, sequences="escape"))


@plugin_app.command("remove")
def remove(name: Annotated[str, typer.Argument(help="The plugin's name.")]) -> None:
    """Delete an installed plugin."""
    from kimicode.config.endpoint import kimicode_home
    from kimicode.extensions.plugins import PluginError
    from kimicode.extensions.plugins import remove as remove_plugin

    try:
        remove_plugin(kimicode_home(), name)
    except (PluginError, OSError) as exc:
        _fail(_claudes(name) or str(exc))
    typer.echo(f"Removed {name}.")


def _claudes(name: str) -> str:
    """For a plugin Claude Code installed: that it is Claude Code's to change (empty for any other name)."""
    from kimicode.extensions.claudeplugins import claude_plugins

    found = next((p for p in claude_plugins().plugins if p.name == name), None)
    if found is None:
        return ""
    return (
        f"{name} is Claude Code's plugin ({found.source}); kimicode uses it while `enabledPlugins` in Claude "
        "Code's settings.json has it true: change it there (or with Claude Code's /plugin)"
    )


def _toggle(name: str, enabled: bool) -> None:
    from kimicode.config.endpoint import kimicode_home
    from kimicode.extensions.plugins import PluginError, set_enabled

    try:
        set_enabled(kimicode_home(), name, enabled)
    except (PluginError, OSError) as exc:
        _fail(_claudes(name) or str(exc))
    typer.echo(f"{name} {'enabled' if enabled else 'disabled'} (from the next session).")


@plugin_app.command("enable")
def enable(name: Annotated[str, typer.Argument(help="The plugin's name.")]) -> None:
    """Enable an installed plugin."""
    _toggle(name, True)


@plugin_app.command("disable")
def disable(name: Annotated[str, typer.Argument(help="The plugin's name.")]) -> None:
    """Disable an installed plugin (it stays installed)."""
    _toggle(name, False)
