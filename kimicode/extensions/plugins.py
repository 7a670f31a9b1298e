"""Plugins: a folder (or git repository) bundling commands, skills, agents, hooks and MCP servers, with
Claude Code's manifest `.claude-plugin/plugin.json` read as it is (`.kimicode-plugin/plugin.json` too).

Installed plugins are copies under `KIMICODE_HOME/plugins/NAME/`; `KIMICODE_HOME/plugins/installed.json`
records where each came from and whether it is enabled. A plugin's commands are `/NAME:COMMAND`, its hooks
get `${CLAUDE_PLUGIN_ROOT}` (its folder), and its MCP servers start like the configuration's.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kimicode.extensions.places import read_json

PLUGINS_DIR = "plugins"
REGISTRY = "installed.json"
MANIFESTS = (".kimicode-plugin/plugin.json", ".claude-plugin/plugin.json")
NAME_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
GIT_URL = re.compile(r"^(?:https://|ssh://|file://|git@[A-Za-z0-9.-]+:)[^\s]")
"""The git sources `plugin add` clones: https, ssh (both spellings) and file URLs. Nothing else: `ext::`
and other transports run programs, http:// and git:// are unauthenticated."""
MAX_PLUGIN_BYTES = 50 * 1024 * 1024


class PluginError(ValueError):
    """A plugin that cannot be added, found or changed (the message says what to do)."""


@dataclass
class Plugin:
    """One plugin folder and what it brings."""

    name: str
    root: Path
    manifest: dict[str, Any] = field(default_factory=dict)
    enabled: bool = True
    source: str = ""

    @property
    def description(self) -> str:
        return str(self.manifest.get("description") or "")

    @property
    def version(self) -> str:
        return str(self.manifest.get("version") or "")

    def hook_commands(self) -> list[tuple[str, str]]:
        """(event, command) of every hook it defines, read by the parser that loads them (`parse_hooks`:
        Claude Code's table and Kimi Code's flat list alike), so what is shown is what runs; a file that
        cannot be read or parsed is shown as such (it runs nothing, the loader reports it)."""
        from kimicode.extensions.hooks import HookConfigError, parse_hooks

        path = self.root / "hooks" / "hooks.json"
        data, problem = read_json(path)
        if problem:
            return [("(unreadable)", problem)]
        if data is None:
            return []
        try:
            specs, _ = parse_hooks(data.get("hooks"), str(path), "plugin", self.root, self.root)
        except HookConfigError as exc:
            return [("(invalid, not run)", str(exc))]
        return [(spec.event, spec.command) for spec in specs]

    def mcp_servers(self, *, expand: bool = True) -> dict[str, dict[str, Any]]:
        """Its MCP servers (`.mcp.json`, or `mcpServers` in the manifest), `${CLAUDE_PLUGIN_ROOT}` filled in
        unless `expand` is false."""
        servers: Any = self.manifest.get("mcpServers")
        if isinstance(servers, str):
            inside = _inside(self.root, self.root / servers)
            data, _ = read_json(self.root / servers) if inside else (None, None)
            servers = (data or {}).get("mcpServers", data)
        if not isinstance(servers, dict):
            data, _ = read_json(self.root / ".mcp.json")
            servers = (data or {}).get("mcpServers", {})
        text = json.dumps(servers if isinstance(servers, dict) else {})
        if expand:
            text = text.replace("${CLAUDE_PLUGIN_ROOT}", str(self.root).replace("\\", "\\\\").replace('"', '\\"'))
        filled = json.loads(text)
        return {str(k): v for k, v in filled.items() if isinstance(v, dict)}

    def contents(self) -> dict[str, list[str]]:
        """What it brings, by kind, for listings and the question before adding it."""

        def names(sub: str, pattern: str) -> list[str]:
            folder = self.root / sub
            return (
                sorted(p.parent.name if p.name == "SKILL.md" else p.stem for p in folder.glob(pattern))
                if folder.is_dir()
                else []
            )

        return {
            "commands": [f"/{self.name}:{n}" for n in names("commands", "*.md")],
            "skills": [f"{self.name}:{n}" for n in names("skills", "*/SKILL.md")],
            "agents": [f"{self.name}:{n}" for n in names("agents", "*.md")],
            "hooks": [f"{event}: {command}" for event, command in self.hook_commands()],
            "mcp servers": [
                f"{name}: {_server_command(entry)}" for name, entry in self.mcp_servers(expand=False).items()
            ],
        }


def _server_command(entry: dict[str, Any]) -> str:
    if entry.get("url"):
        return str(entry["url"])
    raw = entry.get("args")
    args: list[Any] = raw if isinstance(raw, list) else []
    return " ".join([str(entry.get("command") or "?"), *(str(a) for a in args)])


def read_plugin(root: Path, *, name: str | None = None) -> Plugin:
    """The plugin in folder `root` (PluginError when its manifest is broken or names it badly)."""
    manifest: dict[str, Any] = {}
    for rel in MANIFESTS:
        data, problem = read_json(root / rel)
        if problem:
            raise PluginError(problem)
        if data is not None:
            manifest = data
            break
    plugin_name = name or str(manifest.get("name") or root.name)
    if not NAME_OK.match(plugin_name):
        raise PluginError(f"{root}: plugin name {plugin_name!r} must be letters, digits, '-', '_' or '.'")
    return Plugin(plugin_name, root, manifest)


def plugins_dir(home: Path) -> Path:
    return home / PLUGINS_DIR


def _registry(home: Path) -> dict[str, dict[str, Any]]:
    data, _ = read_json(plugins_dir(home) / REGISTRY)
    entries = (data or {}).get("plugins")
    return {str(k): v for k, v in entries.items() if isinstance(v, dict)} if isinstance(entries, dict) else {}


def _save_registry(home: Path, entries: dict[str, dict[str, Any]]) -> None:
    folder = plugins_dir(home)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = folder / f".{REGISTRY}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps({"plugins": entries}, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.chmod(tmp, 0o600)
    os.replace(tmp, folder / REGISTRY)


def installed_plugins(home: Path) -> list[Plugin]:
    """Every installed plugin (enabled or not), by name."""
    out: list[Plugin] = []
    for name, entry in sorted(_registry(home).items()):
        root = plugins_dir(home) / name
        if not root.is_dir():
            continue
        try:
            plugin = read_plugin(root, name=name)
        except PluginError:
            plugin = Plugin(name, root)
        plugin.enabled = entry.get("enabled", True) is not False
        plugin.source = str(entry.get("source") or "")
        out.append(plugin)
    return out


def enabled_plugins(home: Path) -> list[Plugin]:
    """The installed plugins that are enabled (cheap when none is installed); with Claude Code's own:
    kimicode.extensions.claudeplugins.plugins_in_use."""
    if not (plugins_dir(home) / REGISTRY).exists():
        return []
    return [p for p in installed_plugins(home) if p.enabled]


def plugin_servers(plugins: list[Plugin]) -> dict[str, tuple[dict[str, Any], str]]:
    """The MCP servers of `plugins` as `load_server_configs(extra=...)` takes them: name -> (entry, source)."""
    return {name: (entry, f"plugin {p.name}") for p in plugins for name, entry in p.mcp_servers().items()}


def fetch_source(source: str, scratch: Path) -> Path:
    """A local folder for `source`: the folder itself, or a shallow clone of a git URL into `scratch`."""
    local = Path(source).expanduser()
    if local.is_dir():
        return local.resolve()
    if not GIT_URL.match(source):
        raise PluginError(
            f"{source}: not a folder, and not a git URL kimicode clones (https://..., ssh://..., "
            "git@host:..., file://...)"
        )
    dest = scratch / "clone"
    try:
        done = subprocess.run(
            ["git", "clone", "--depth", "1", "--quiet", "--", source, str(dest)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            env={**os.environ, "GIT_TERMINAL_PROMPT": "0"},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PluginError(f"git clone {source} failed: {exc}") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise PluginError(f"git clone {source} failed: {last}")
    return dest


def _size(root: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, f)).st_size
    return total


def stage(source: str, scratch: Path) -> Plugin:
    """Fetch `source` into `scratch` and read it, without installing anything (for the question)."""
    root = fetch_source(source, scratch)
    if _size(root) > MAX_PLUGIN_BYTES:
        raise PluginError(f"{source}: larger than {MAX_PLUGIN_BYTES // (1024 * 1024)} MB; not a plugin")
    plugin = read_plugin(root)
    _check_confined(plugin)
    plugin.source = source
    return plugin


def _inside(root: Path, path: Path) -> bool:
    real = os.path.realpath(root)
    return os.path.commonpath([real, os.path.realpath(path)]) == real


def _check_confined(plugin: Plugin) -> None:
    """What `add` shows must be what runs: no link and no manifest path may lead outside the plugin (a
    file there could be rewritten after the question was answered). PluginError otherwise."""
    for dirpath, dirs, files in os.walk(plugin.root):
        dirs[:] = [d for d in dirs if d != ".git"] if dirpath == str(plugin.root) else dirs
        for name in (*dirs, *files):
            path = Path(dirpath, name)
            if path.is_symlink() and not _inside(plugin.root, path):
                raise PluginError(f"{path}: a link to outside the plugin ({os.readlink(path)}); not installing it")
    servers = plugin.manifest.get("mcpServers")
    if isinstance(servers, str) and not _inside(plugin.root, plugin.root / servers):
        raise PluginError(f"{plugin.root}: mcpServers {servers!r} is outside the plugin; not installing it")


def install(home: Path, plugin: Plugin) -> Plugin:
    """Copy a staged plugin to `KIMICODE_HOME/plugins/NAME` and enable it (PluginError when a plugin of
    that name is installed)."""
    entries = _registry(home)
    dest = plugins_dir(home) / plugin.name
    if plugin.name in entries or dest.exists():
        raise PluginError(f"a plugin named {plugin.name} is installed; `kimicode plugin remove {plugin.name}` first")
    plugins_dir(home).mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = Path(tempfile.mkdtemp(prefix=f".{plugin.name}.", dir=plugins_dir(home)))
    try:
        shutil.copytree(plugin.root, tmp / "p", symlinks=True, ignore=shutil.ignore_patterns(".git"))
        os.replace(tmp / "p", dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    source = plugin.source
    if Path(source).expanduser().is_dir():
        source = str(Path(source).expanduser().resolve())
    entries[plugin.name] = {
        "source": source,
        "enabled": True,
        "version": plugin.version,
        "installed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    _save_registry(home, entries)
    return read_plugin(dest, name=plugin.name)


def _known(home: Path, name: str) -> dict[str, dict[str, Any]]:
    entries = _registry(home)
    if name not in entries:
        have = ", ".join(sorted(entries)) or "none"
        raise PluginError(f"no plugin named {name} is installed (installed: {have})")
    return entries


def remove(home: Path, name: str) -> None:
    """Delete an installed plugin."""
    entries = _known(home, name)
    del entries[name]
    _save_registry(home, entries)
    target = plugins_dir(home) / name
    if NAME_OK.match(name) and target.is_dir() and not target.is_symlink():
        shutil.rmtree(target)


def set_enabled(home: Path, name: str, enabled: bool) -> None:
    """Enable or disable an installed plugin (it stays installed)."""
    entries = _known(home, name)
    entries[name]["enabled"] = enabled
    _save_registry(home, entries)
