"""What an Agent adds around the built-in tools: the edit tool its model prefers, tools bound to the agent
(todo_write, task, image-aware read_file), web_fetch, and the MCP servers of the configuration.

Kept out of `core.py` so the turn loop stays small: the agent calls `install` once when it is made,
`choose_edit_tool` when its model changes, `Extras.start` before each turn (MCP startup, queued notices),
`after_compaction` after the context was compacted, and `Extras.aclose` when it is closed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kimicode.config.settings import prefers_apply_patch
from kimicode.tools.base import Tool

if TYPE_CHECKING:
    from kimicode.agent.core import Agent
    from kimicode.agent.hooking import AgentHooks
    from kimicode.agent.parts import Resolved
    from kimicode.config.settings import ModelConfig, Settings
    from kimicode.events import Event
    from kimicode.extensions.discover import Found
    from kimicode.extensions.hookrun import Hooks
    from kimicode.mcp.manager import McpManager
    from kimicode.tools.registry import ToolRegistry
    from kimicode.tools.todo import TodoList


@dataclass
class Extras:
    """The per-agent state of the extras (reachable as `agent.extras`)."""

    default_tools: bool
    """True when the agent uses the default tool set (no `tools=` given): extras may add and swap tools."""
    todos: TodoList
    mcp: McpManager | None = None
    """The MCP servers (None when none is configured); `mcp.begin()` starts them in the background."""
    notices: list[tuple[str, str]] = field(default_factory=list)
    """(text, level) reported at the start of the next turn."""
    compactions_seen: int = 0
    mcp_tools_added: bool = False
    pending_images: list[Mapping[str, Any]] = field(default_factory=list)
    """Image parts attached to the next prompt (`attach_image`)."""
    steering: list[str] = field(default_factory=list)
    """Messages for the running turn (`steer`): sent after the current step's tool results, then emptied;
    what the turn ends before sending stays here (the terminal sends it as the next prompt)."""
    subagent: bool = False
    """A task subagent: its Stop hooks are SubagentStop, and it has no session hooks."""
    found: Found | None = None
    """Enabled plugins, skills and subagent definitions (None for a hermetic agent)."""
    hooking: AgentHooks = field(init=False)
    """The agent's hooks and their state (agent/hooking.py); set by `install`."""

    @property
    def hooks(self) -> Hooks | None:
        """The configured hooks; None when there are none."""
        return self.hooking.hooks

    def user_content(self, prompt: str) -> str | list[dict[str, Any]]:
        """The content of a turn's user message: the prompt, plus the attached images (which are consumed)."""
        from kimicode.tools.images import user_content as build

        images, self.pending_images = self.pending_images, []
        return build(prompt, images)

    async def start(self, tools: ToolRegistry, emit: Callable[[Event], None]) -> None:
        """Before a turn: wait for the MCP servers (each bounded by its startup timeout), add their tools
        to `tools` once, and report what failed and what was queued."""
        from kimicode.events import Notice

        await self.start_mcp(tools)
        for text, level in self.notices:
            emit(Notice(text, "warning" if level == "warning" else "info"))
        self.notices.clear()

    async def start_mcp(self, tools: ToolRegistry) -> None:
        """Wait for the MCP servers and add their tools to `tools` once; failures are queued as notices."""
        manager = self.mcp
        if manager is None:
            return
        await manager.start()
        if not self.mcp_tools_added:
            self.mcp_tools_added = True
            for tool in manager.tools():
                if tools.get(tool.name) is None:
                    tools.add(tool)
            self.notices.extend((p, "warning") for p in manager.problems())

    async def aclose(self) -> None:
        """Stop the MCP servers (they start again if the agent runs another turn)."""
        if self.mcp is not None:
            await self.mcp.aclose()


def choose_edit_tool(tools: ToolRegistry, model: ModelConfig) -> None:
    """Offer the edit tool `model` prefers: apply_patch (GPT models) or edit_file, in the same place."""
    from kimicode.tools.files import EDIT_FILE
    from kimicode.tools.patch import APPLY_PATCH

    names = tools.names
    if prefers_apply_patch(model):
        if "edit_file" in names and "apply_patch" not in names:
            tools.replace("edit_file", APPLY_PATCH)
    elif "apply_patch" in names and "edit_file" not in names:
        tools.replace("apply_patch", EDIT_FILE)


BOUND_NAMES = ("todo_write", "task", "read_file")


def is_bound(tool: Tool) -> bool:
    """True for a tool bound to one agent (its function is a method of that agent's state)."""
    bound = getattr(tool.fn, "__self__", None) is not None
    return bound and (tool.name in BOUND_NAMES or tool.name.startswith("mcp__"))


def install(agent: Agent, default_tools: bool) -> Extras:
    """Set up the extras of a freshly built agent (its history is already in place).

    A tool list holding tools bound to another agent (a fork's copy of its parent's tools) counts as the
    default set: those tools are rebound to this agent.
    """
    from kimicode.tools.todo import TodoList

    default_tools = default_tools or any(is_bound(t) for t in agent.tools)
    for t in list(agent.tools):
        if t.name.startswith("mcp__") and is_bound(t):
            agent.tools.remove(t.name)  # this agent starts its own MCP connections
    records = agent.log.records() if agent.log is not None else []
    extras = Extras(default_tools=default_tools, todos=TodoList.from_history(agent.messages, records))
    agent.extras = extras
    extras.compactions_seen = agent.context.compactions
    log = agent.log
    if log is not None:
        extras.todos.record = lambda items: log.append({"type": "todos", "items": items})
    _install_vision(agent.tools, agent.parts.resolved)
    from kimicode.agent.hooking import AgentHooks, load

    hooks = load(
        agent.options.config,
        agent.workspace,
        agent.home,
        agent.endpoint.api_key,
        lambda text: agent.notify(text, "warning"),
    )
    extras.hooking = AgentHooks(agent, hooks)
    _discover(agent.options.config, agent.parts.resolved, extras)
    if default_tools:
        choose_edit_tool(agent.tools, agent.model_config)
        agent.tools.add(_web_fetch(agent.settings))
        if (search := _web_search(agent.settings, agent.endpoint.base_url, extras.notices)) is not None:
            if search.name.startswith("$") and not _search_allowed(agent, search):
                extras.notices.append(
                    (
                        "Moonshot's built-in $web_search is not offered: it cannot ask before each search (the "
                        f"server runs it), and permission mode {agent.permission_mode!r} would ask; "
                        "--allow web_search (or --yolo) offers it",
                        "info",
                    )
                )
            else:
                agent.tools.add(search)
        agent.tools.add(extras.todos.tool())
        from kimicode.agent.subagent import TaskRunner

        agent.tools.add(TaskRunner(agent).tool())
        if extras.found is not None and extras.found.skills:
            from kimicode.extensions.skills import skill_tool

            agent.tools.add(skill_tool(extras.found.skills))
        _setup_mcp(agent.options.config, agent.parts.resolved, extras)
    return extras


def _discover(settings: Settings | None, r: Resolved, extras: Extras) -> None:
    """Plugins, skills and subagent definitions (kimicode/extensions), for agents with a configuration."""
    if settings is None:
        return
    from kimicode.extensions.discover import discover

    extras.found = discover(r.workspace, r.home, trusted=settings.trusted)
    extras.notices.extend((p, "warning") for p in extras.found.problems)
    from kimicode.extensions.claudesetup import notice

    unused = notice(r.workspace, trusted=settings.trusted)  # nothing of a Claude Code setup left out silently
    if unused:
        extras.notices.append((unused, "warning"))


def _setup_mcp(config: Settings | None, r: Resolved, extras: Extras) -> None:
    """Create the MCP manager when servers are configured (the SDK is imported only when they start)."""
    if config is None:
        return  # hermetic (no configuration asked for): the workspace's .mcp.json is not read either
    from kimicode.extensions.plugins import plugin_servers
    from kimicode.mcp.config import load_server_configs

    servers = plugin_servers(extras.found.plugins if extras.found is not None else [])
    configs, problems = load_server_configs(r.workspace, r.settings, extra=servers)
    extras.notices.extend((f"MCP configuration: {p}", "warning") for p in problems)
    if not configs:
        return
    from kimicode.mcp.manager import McpManager

    extras.mcp = McpManager(
        configs,
        r.workspace,
        log_dir=r.home / "logs",
        tool_timeout=r.settings.config.mcp.tool_timeout,
        supports_images=lambda: r.profile.supports_images,  # the model's now (`r` follows set_model)
    )


async def start_mcp(agent: Agent) -> None:
    """Wait for the agent's MCP servers and add their tools (faces call it early, e.g. before printing the
    tool list): `Extras.start_mcp`."""
    await agent.extras.start_mcp(agent.tools)


def attach_image(agent: Agent, path: str | Path) -> None:
    """Attach an image file to the next prompt (`@shot.png`); ToolError (one line) when the model cannot see
    images or the file is not a usable image."""
    from kimicode.tools.base import ToolError
    from kimicode.tools.images import image_part

    if not agent.profile.supports_images:
        raise ToolError(f"the current model ({agent.endpoint.model}) cannot see images")
    p = Path(path).expanduser()
    if not p.is_absolute():
        p = agent.workspace / p
    images = agent.settings.config.images
    agent.extras.pending_images.append(image_part(p, images.max_side, images.max_bytes))


def steer(agent: Agent, text: str) -> None:
    """Mid-turn steering (Kimi Code's Ctrl-S): `text` goes to the model as a user message after the
    running step's tool results (agent/toolcalls.py), so the next step already reads it."""
    agent.extras.steering.append(text)


def _web_fetch(settings: Settings) -> Tool:
    from kimicode.tools.web import web_fetch_tool

    web = settings.config.web_fetch
    return web_fetch_tool(web.max_chars, web.max_redirects, web.timeout)


def _web_search(settings: Settings, base_url: str, notices: list[tuple[str, str]]) -> Tool | None:
    """`[web_search]`: Moonshot's built-in `$web_search` on Moonshot's endpoint (`auto`) or when named, a
    configured provider's `web_search` tool, or none (tools/websearch.py)."""
    from urllib.parse import urlsplit

    from kimicode.tools.websearch import MOONSHOT_PRICE, Provider, moonshot_web_search, provider_web_search

    search = settings.config.web_search
    name = search.provider
    host = urlsplit(base_url).hostname or ""
    if name == "moonshot" or (name == "auto" and host.endswith(("moonshot.ai", "moonshot.cn"))):
        price = search.price_per_search
        return moonshot_web_search(price if price is not None else MOONSHOT_PRICE)
    try:
        provider = Provider.from_settings(search.model_dump(exclude_none=True)) if name != "auto" else None
    except ValueError as exc:
        notices.append((f"{exc}: no web_search tool", "warning"))
        return None
    return provider_web_search(provider) if provider is not None else None


def _search_allowed(agent: Agent, search: Tool) -> bool:
    """Whether the permission rules and mode let a web search run without asking (Moonshot's built-in
    search cannot be refused once called: the server needs its arguments back unchanged)."""
    from kimicode.permissions.engine import decide
    from kimicode.tools.base import ToolContext

    ctx = ToolContext(workspace=agent.workspace)
    return decide(search, {}, agent.permission_mode, ctx, agent.policy).verdict == "allow"


def _install_vision(tools: ToolRegistry, r: Resolved) -> None:
    """Make read_file send images to models that see them (the built-in read_file, or a fork's copy)."""
    from kimicode.tools.files import READ_FILE
    from kimicode.tools.images import VisionReader

    current = tools.get("read_file")
    if current is None:
        return
    owner = getattr(current.fn, "__self__", None)
    if isinstance(owner, VisionReader):
        inner = owner.inner
    elif current is READ_FILE:
        inner = current
    else:
        return  # the user's own read_file
    images = r.settings.config.images

    def limits() -> tuple[int, int]:
        return images.max_side, images.max_bytes

    reader = VisionReader(inner, lambda: r.profile.supports_images, lambda: r.endpoint.model, limits)
    tools.add(reader.tool())


TODO_HEADER = "Current task list (kept with todo_write; it survived the compaction):"


def after_compaction(agent: Agent) -> None:
    """After a compaction: if the todo list is no longer visible in the history, append it to the summary.

    The summary message is replaced (messages are never mutated) and the change is logged as a `prune`
    record, which replay applies as a plain replacement, so a resumed session sees the same history.
    """
    from kimicode.context.compact import is_summary

    extras = agent.extras
    if agent.context.compactions == extras.compactions_seen:
        return
    extras.compactions_seen = agent.context.compactions
    if not extras.todos.items:
        return
    for msg in agent.messages:
        for call in msg.get("tool_calls") or ():
            if (call.get("function") or {}).get("name") == "todo_write":
                return  # the last list is still in the history
    for i in range(len(agent.messages) - 1, -1, -1):
        msg = agent.messages[i]
        if is_summary(msg):
            new = {**msg, "content": f"{msg['content']}\n\n{TODO_HEADER}\n{extras.todos.render()}"}
            agent.messages[i] = new
            if agent.log is not None:
                agent.log.append({"type": "prune", "replace": [[i, new]], "freed_tokens": 0, "reason": "todos"})
            return
