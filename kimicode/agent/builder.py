"""Turn `AgentOptions` plus the resolved configuration into a ready Agent: endpoint and model profile,
tools, permission engine and sandbox, context manager, session log, system prompt, extras.

Nothing here talks to the network or writes a file: the session log is created by its first record
(a turn), and the HTTP client (`make_client`) is built on first use, off the event loop.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kimicode.agent.sysprompt import PromptParts, build_system_prompt
from kimicode.config.choices import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_SCOPE,
    Scope,
    SwitchPolicy,
)
from kimicode.config.endpoint import kimicode_home
from kimicode.config.settings import ModelConfig, Settings, resolve_model
from kimicode.context.manager import ContextManager, ContextSettings
from kimicode.context.output import set_spill_limit
from kimicode.llm.discovery import resolve_window
from kimicode.llm.profiles import ModelProfile, profile_for, profile_with
from kimicode.session.log import SessionLog, new_session_id
from kimicode.tools.base import Tool, ToolContext
from kimicode.tools.registry import ToolRegistry, builtin_tools
from kimicode.tools.workers import is_async_callable

if TYPE_CHECKING:
    from kimicode.agent.core import Agent
    from kimicode.agent.options import AgentOptions
    from kimicode.llm.client import ChatClient


def build(agent: Agent, tools: Iterable[Tool] | None, extra_tools: Iterable[Tool],
          messages: list[dict[str, Any]] | None) -> None:
    """Set up every part of `agent` from `agent.options` (its collaborators are already stored)."""
    if messages is not None:
        from kimicode.agent.history import check_history

        check_history(messages)  # a clear error now, not a server's 400 at the first request
    o = agent.options
    agent.settings = o.config if o.config is not None else Settings()  # hermetic: no file read
    agent.endpoint, agent.model_config = resolve_model(agent.settings, model=o.model, base_url=o.base_url,
                                                       api_key=o.api_key)
    agent.profile = profile_with(profile_for(agent.endpoint.model), agent.model_config)
    agent.workspace = o.workspace.expanduser().resolve()
    if not agent.workspace.is_dir():
        raise ValueError(f"workspace is not a directory: {agent.workspace}")
    given = None if tools is None else _tool_list(tools, "tools")
    if given is not None:
        names = [t.name for t in given]
        if dupes := sorted({n for n in names if names.count(n) > 1}):
            raise ValueError(f"tools= has more than one tool named {', '.join(map(repr, dupes))} (names are unique)")
    agent.tools = ToolRegistry(builtin_tools() if given is None else given)
    for t in _tool_list(extra_tools, "extra_tools"):
        agent.tools.add(t)
    agent.origin = o.origin or ("headless" if o.headless else "library")
    agent.scope = resolve_scope(o)
    config = agent.settings.config  # every section typed, with its defaults (kimicode/config/sections.py)
    agent.thinking = o.thinking or agent.model_config.reasoning_effort or config.defaults.thinking
    agent.context_window, agent.window_origin = resolve_window(
        o.context_window, agent.model_config.context_window, agent.endpoint.model, agent.profile.context_window
    )
    cfg = config.context  # [context]; the options win
    agent.max_completion_tokens = o.max_completion_tokens or agent.model_config.max_completion_tokens or cfg.max_tokens
    agent.window_discovered = False  # asked even with a set window: the template and calibration come with the answer
    agent.home = o.home.expanduser() if o.home is not None else kimicode_home()
    agent.session_id = o.session_id or new_session_id()
    agent.log = SessionLog(agent.home / "sessions", agent.session_id) if o.persist else None
    spill = agent.log.spill_dir if agent.log else None
    agent.ctx = ToolContext(workspace=agent.workspace, session_dir=spill, extra_dirs=o.add_dirs)
    agent.usage = {"prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0}
    if spill is not None:  # bound the disk the session's saved tool outputs may use
        set_spill_limit(spill, cfg.spill_max_bytes)
    agent.context = ContextManager(
        window=agent.context_window,
        reserve=agent.answer_reserve,
        tokenizer_path=o.tokenizer_path or cfg.tokenizer,
        settings=ContextSettings(
            prune_threshold=_first(o.prune_threshold, cfg.prune_threshold),
            compact_threshold=_first(o.compact_threshold, cfg.compact_threshold),
            prune_keep_tokens=o.prune_keep_tokens,
            tool_output_tokens=_first(o.tool_output_tokens, cfg.tool_output_cap_tokens),
            tool_output_chars=o.tool_output_cap,
        ),
        spill_dir=spill,
        log=agent.log,
        usage=agent.usage,
        reserve_explicit=agent.max_completion_tokens is not None,
    )
    for text in agent.settings.ignored:
        agent.notify(text, "warning")
    confine(agent)
    if messages is not None:
        agent.messages = messages
        if agent.log and not agent.log.path.exists():  # a new log for a given history (fork, library)
            log_meta(agent)
            for msg in messages:
                agent.log.message(msg)
    else:
        agent.messages = [{"role": "system", "content": system_prompt(agent)}]
        log_meta(agent)
        if agent.log:
            agent.log.message(agent.messages[0])
    from kimicode.agent.ecosystem import install

    agent.extras = install(agent, default_tools=tools is None)
    from kimicode.agent.checkpointing import open_checkpoints

    agent.checkpoints = open_checkpoints(agent)


def _first(*values: Any) -> Any:
    return next(v for v in values if v is not None)


def confine(agent: Agent) -> None:
    """Permission rules (fixed for the session), the OS sandbox for bash, and a secret-free child env."""
    from kimicode.config.redact import Masker, known_secrets
    from kimicode.config.settings import config_paths
    from kimicode.permissions.policy import Policy, secret_env_names, session_rules
    from kimicode.procs import harden_process
    from kimicode.tools.sandbox import setup_sandbox
    from kimicode.tools.shell import BASH, bash_tool, scrub_env

    o = agent.options
    ignored: list[str] = []  # what an untrusted project's config may not loosen
    project_file = config_paths(agent.workspace, agent.home)[1]
    rules = o.rules
    if rules is None:
        rules = session_rules(agent.settings, project_file=project_file, allow=o.allow, deny=o.deny, ask=o.ask,
                              ignored=ignored)
        agent.options = o.replace(rules=rules)  # forks, resumes and subagents keep exactly these rules
    agent.sandbox, agent.sandbox_warning = setup_sandbox(
        o.sandbox, o.sandbox_network, agent.settings, agent.workspace, agent.home,
        project_file=project_file, ignored=ignored, session_dir=agent.log.spill_dir if agent.log else None,
    )
    for text in ignored:
        agent.notify(text, "warning")
    sandboxed = False
    ours = agent.tools.get("bash") is BASH
    if agent.sandbox is not None and ours:
        sandboxed = not agent.sandbox.auto  # auto confines what runs unasked; it changes no decision
    agent.policy = Policy(
        rules, kimicode_home=agent.home, sandboxed=sandboxed, workspace=agent.workspace,
        session_dir=agent.ctx.session_dir, read_only_sandbox=agent.sandbox is not None, extra_dirs=o.add_dirs,
    )
    if agent.sandbox is not None:  # the places read(...) rules open are visible in the sandbox too
        agent.sandbox = dataclasses.replace(agent.sandbox, visible=(*agent.policy.read_rule_roots(), *o.add_dirs))
        if ours:
            agent.tools.add(bash_tool(agent.sandbox))
    agent.ctx.env = scrub_env(
        os.environ,
        names=secret_env_names(agent.settings, agent.endpoint.key_source),
        values=(agent.endpoint.api_key,),
    )
    harden_process()  # children cannot read the key under /proc/<pid>/environ
    agent.masker = Masker(known_secrets(os.environ, api_key=agent.endpoint.api_key, settings=agent.settings))
    if agent.log is not None:
        agent.log.masker = agent.masker
    agent.ctx.mask = agent.masker  # command output is masked as it is read
    if agent.sandbox_warning:
        agent.notify(agent.sandbox_warning, "warning")


def prompt_parts(agent: Agent) -> PromptParts:
    """What the system prompt of `agent` is built from: `system_prompt` (it replaces kimicode's prompt),
    the model profile's addition, the scope, the AGENTS.md files when `project_instructions`, and
    `append_system_prompt` (kimicode/agent/sysprompt.py gives the order)."""
    o = agent.options
    instructions = None
    if o.system_prompt is None and o.project_instructions:
        from kimicode.config.agentsmd import project_instructions

        instructions = project_instructions(agent.workspace, agent.home) or None
    return PromptParts(
        workspace=agent.workspace,
        scope=agent.scope,
        headless=o.headless,
        profile_addition=agent.profile.prompt_addition,
        custom=o.system_prompt,
        instructions=instructions,
        append="\n\n".join(filter(None, [o.append_system_prompt, _added_dirs(o.add_dirs)])) or None,
    )


def _added_dirs(dirs: tuple[Path, ...]) -> str:
    """What the model is told of `--add-dir` directories."""
    if not dirs:
        return ""
    return ("Besides the workspace, the user gave you these directories to read and change files in (use "
            "absolute paths for them): " + ", ".join(str(d) for d in dirs) + ".")


def system_prompt(agent: Agent) -> str:
    """The system prompt `agent` starts a session with."""
    return build_system_prompt(prompt_parts(agent))


def resolve_scope(o: AgentOptions) -> Scope:
    """The scope: the option, else the config's `[agent] scope`, else normal."""
    if o.scope is not None:
        return o.scope
    return o.config.config.agent.scope if o.config is not None else DEFAULT_SCOPE


def switch_policy(o: AgentOptions, mc: ModelConfig, profile: ModelProfile) -> SwitchPolicy:
    """What moving onto the model `mc` does to earlier assistant messages: the option, else the model's
    `on_switch`, else `[model] on_switch`, else the model profile's default."""
    if o.on_switch is not None:
        return o.on_switch
    if mc.on_switch is not None:
        return mc.on_switch
    configured = o.config.config.model.on_switch if o.config is not None else None
    return configured if configured is not None else profile.on_switch


def settings_record(agent: Agent) -> dict[str, Any]:
    """The settings a session log records (its `meta` record, and a `settings` record on each change)."""
    return {
        "model": agent.endpoint.model,
        "base_url": agent.endpoint.base_url,
        "workspace": str(agent.workspace),
        "permission_mode": agent.permission_mode,
        "thinking": agent.thinking,
        "origin": agent.origin,
    }


def log_meta(agent: Agent) -> None:
    if agent.log:
        agent.log.append({"type": "meta", "session_id": agent.session_id, **settings_record(agent)})


def make_client(agent: Agent) -> ChatClient:
    """The model client for the agent's current endpoint, model and effort."""
    from kimicode.llm.client import ChatClient, ClientConfig

    o = agent.options
    return ChatClient(
        ClientConfig(
            base_url=agent.endpoint.base_url,
            api_key=agent.endpoint.api_key,
            model=agent.endpoint.model,
            profile=agent.profile,
            effort=agent.thinking,
            session_id=agent.session_id,
            max_retries=o.max_retries,
            retries_explicit=o.max_retries != DEFAULT_MAX_RETRIES,
            tool_choice=o.tool_choice or agent.model_config.tool_choice,
            retry_base_delay=o.retry_base_delay,
            timeout=o.request_timeout,
            reasoning_field=agent.model_config.reasoning_field,
            extra_body={"response_format": dict(o.response_format)} if o.response_format else {},
            extra_headers=dict(agent.model_config.headers),
            key_source=agent.endpoint.key_source,
            url_source=agent.endpoint.url_source,
        )
    )


def _tool_list(tools: Any, where: str) -> list[Tool]:
    """`tools=` / `extra_tools=` as a list of Tools, or a TypeError saying what was wrong."""
    if isinstance(tools, str | bytes | Tool) or not isinstance(tools, Iterable):
        raise TypeError(f"{where} must be a list of tools (got {type(tools).__name__})")
    items = list(tools)
    for item in items:
        if not isinstance(item, Tool):
            hint = " (decorate a function with @tool to make it one)" if callable(item) else ""
            raise TypeError(f"{where} must contain Tool objects, not {type(item).__name__} {item!r}{hint}")
    return items


def check_callbacks(approve: Any, on_event: Any) -> None:
    """TypeError now for a callback of the wrong kind (it would fail mid-turn, or never run)."""
    for what, value in (("approve", approve), ("on_event", on_event)):
        if value is not None and not callable(value):
            raise TypeError(f"{what} must be a function or None (got {type(value).__name__} {value!r})")
    if on_event is not None and is_async_callable(on_event):
        raise TypeError("on_event must be a plain function: an async hook would never be awaited "
                        "(use `async for event in agent.stream(...)` for async handling)")
