"""Claude Code's slash command names in the terminal: each does kimicode's equivalent (`/hooks`, `/agents`,
`/plugin`, `/mcp`, `/memory`, `/status`) or names the command that does it (`/doctor`, `/export`), so a
Claude Code user's habit never meets "Unknown command" or a misleading suggestion."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kimicode.termsafe import sanitize
from kimicode.ui.toolbar import short_path

if TYPE_CHECKING:
    from kimicode.permissions.policy import Rules
    from kimicode.ui.host import SessionHost

__all__ = ["CLAUDE_COMMANDS", "rule_lines"]


def _clean(text: str, width: int = 160) -> str:
    flat = " ".join(sanitize(text, sequences="escape").split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _tail(text: str, width: int = 70) -> str:
    """A file name cut from the left (its end says most): `…/.claude/settings.json: permissions.deny`."""
    flat = " ".join(sanitize(text, sequences="escape").split())
    return flat if len(flat) <= width else "…" + flat[-(width - 1) :]


def rule_lines(rules: Rules) -> list[str]:
    """One line per configured rule (deny first, the order they apply in): action, rule, its file."""
    out: list[str] = []
    for action in ("deny", "ask", "allow"):
        for rule in getattr(rules, action):
            if rule.source == "session":
                continue  # the session's answers are listed on their own
            out.append(f"  {action:<5} {_clean(rule.raw, 50)}  ({_tail(rule.source)})")
    return out


async def cmd_hooks(session: SessionHost, arg: str) -> None:
    """/hooks: every hook of the session, by event, with its file."""
    hooks = session.agent.extras.hooks
    specs = hooks.set.all() if hooks is not None else []
    if not specs:
        session.say(
            "No hooks. kimicode reads them from ~/.claude/settings.json, KIMICODE_HOME/config.toml, "
            "plugins and (trusted workspaces) .claude/settings*.json and .kimicode/config.toml; edit "
            "those files to add one (docs/extensions.md)."
        )
        return
    session.say("Hooks (edit the file named to change one; they apply from the next session):")
    for spec in specs:
        matcher = f" [{_clean(spec.matcher, 40)}]" if spec.matcher else ""
        session.say(f"  {spec.event}{matcher}: {_clean(spec.command, 80)}  ({_tail(spec.source, 50)})", "dim")


async def cmd_agents(session: SessionHost, arg: str) -> None:
    """/agents: the custom subagents the task tool can run."""
    found = session.agent.extras.found
    agents = found.agents if found is not None else {}
    if not agents:
        session.say(
            "No custom subagents. Put one in ~/.claude/agents/NAME.md, KIMICODE_HOME/agents/ or (trusted "
            "workspaces) .claude/agents/; plugins bring theirs."
        )
        return
    session.say("Custom subagents (the model runs one with task(agent=NAME); edit the file to change it):")
    for name, agent in agents.items():
        session.say(f"  {name}  {_clean(agent.description, 90)} ({short_path(agent.path, 50)})", "dim")


async def cmd_plugin(session: SessionHost, arg: str) -> None:
    """/plugin: the plugins in use; installing is `kimicode plugin add` in a shell."""
    found = session.agent.extras.found
    plugins = found.plugins if found is not None else []
    if plugins:
        session.say("Plugins in use:")
        for p in plugins:
            session.say(f"  {p.name} {p.version} from {_clean(p.source or str(p.root), 80)}", "dim")
    else:
        session.say("No plugins in use.")
    session.say(
        "kimicode installs plugins from a shell: `kimicode plugin add PATH|GIT_URL`, `kimicode plugin list` "
        "(Claude Code's installed and enabled plugins are used as they are); changes apply from the next "
        "session.",
        "dim",
    )


async def cmd_mcp(session: SessionHost, arg: str) -> None:
    """/mcp: the MCP servers of the session and their state."""
    manager = session.agent.extras.mcp
    if manager is None or not manager.servers:
        session.say(
            "No MCP servers. `kimicode mcp add` adds one ([mcp_servers.NAME] in config.toml, or a trusted "
            "workspace's .mcp.json)."
        )
        return
    session.say("MCP servers (`kimicode mcp list` checks them from a shell):")
    for state in manager.servers:
        extra = f": {_clean(state.error, 100)}" if state.error else f", {len(state.tools)} tools"
        session.say(f"  {state.config.name} ({state.status}{extra})  {_clean(state.config.source, 60)}", "dim")


async def cmd_memory(session: SessionHost, arg: str) -> None:
    """/memory: the instruction files in the system prompt (Claude Code's memory)."""
    from kimicode.config.agentsmd import instruction_files

    files = instruction_files(session.workspace, session.home)
    if not files:
        session.say(
            "No instruction files. kimicode reads ~/.claude/CLAUDE.md, KIMICODE_HOME/AGENTS.md, and AGENTS.md "
            "(else CLAUDE.md) from the repository root down to here; /init writes one."
        )
        return
    session.say(
        "Instruction files in the system prompt (edit them with your editor; /clear starts a session "
        "that reads them again):"
    )
    for f in files:
        session.say(f"  {short_path(f.path, 100)}" + (" (cut)" if f.truncated else ""), "dim")


async def cmd_status(session: SessionHost, arg: str) -> None:
    """/status: the model, endpoint, workspace, mode and session."""
    agent = session.agent
    session.say(f"Model: {agent.endpoint.model} at {_clean(agent.endpoint.base_url, 80)}")
    session.say(f"Workspace: {short_path(agent.workspace, 100)}; permission mode: {agent.permission_mode}", "dim")
    session.say(
        f"Session: {agent.session_id} (/context for the window, /cost for tokens, `kimicode doctor` "
        "checks the whole setup)",
        "dim",
    )


async def cmd_doctor(session: SessionHost, arg: str) -> None:
    session.say(
        "kimicode's check is a shell command: `kimicode doctor` (key, endpoint, model, context window, "
        "sandbox, MCP servers, and what of a Claude Code setup is not used)."
    )


async def cmd_export(session: SessionHost, arg: str) -> None:
    session.say(
        f"kimicode exports from a shell: `kimicode sessions export {session.agent.session_id}` (Markdown "
        "or JSON of this session)."
    )


CLAUDE_COMMANDS = (
    ("hooks", "the hooks of this session and their files", cmd_hooks),
    ("agents", "the custom subagents", cmd_agents),
    ("plugin", "the plugins in use (install: kimicode plugin add)", cmd_plugin),
    ("mcp", "the MCP servers and their state", cmd_mcp),
    ("memory", "the instruction files (AGENTS.md, CLAUDE.md) in use", cmd_memory),
    ("status", "model, endpoint, workspace, mode and session", cmd_status),
    ("doctor", "how to check the setup (kimicode doctor)", cmd_doctor),
    ("export", "how to export this session (kimicode sessions export)", cmd_export),
)
"""(name, summary, handler) of Claude Code's command names kimicode answers."""
