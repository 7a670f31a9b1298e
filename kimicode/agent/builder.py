"""Turn `AgentOptions` plus the resolved configuration into an agent's parts (agent/parts.py): the
resolved settings (endpoint and model profile, window, answer limit), tools, permission engine and sandbox,
context manager, session log, system prompt, checkpoints. `Agent` holds what `build_parts` returns.

Nothing here talks to the network or writes a file: the session log is created by its first record
(a turn), and kimicode's HTTP client is made on first use, off the event loop (`parts.ModelClients`).
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from kimicode.agent.parts import ModelClients, Parts, Resolved
from kimicode.agent.sysprompt import PromptParts, build_system_prompt
from kimicode.config.choices import DEFAULT_SCOPE, Scope, SwitchPolicy
from kimicode.config.endpoint import ConfigError, MissingKeyError, kimicode_home
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
    from kimicode.agent.options import AgentOptions
    from kimicode.config.endpoint import Endpoint
    from kimicode.config.redact import Masker
    from kimicode.llm.protocol import ModelClient
    from kimicode.permissions.policy import Policy
    from kimicode.session.protocol import SessionStore
    from kimicode.tools.sandbox import Sandbox


def build_parts(
    options: AgentOptions,
    *,
    tools: Iterable[Tool] | None = None,
    extra_tools: Iterable[Tool] = (),
    messages: list[dict[str, Any]] | None = None,
    client: ModelClient | None = None,
    session_store: SessionStore | None = None,
) -> Parts:
    """Every part of an agent made from `options` (its extras, bound to the agent, come later: `install`).

    `client` is the caller's own model client (else kimicode's, made on first use), `session_store` the
    caller's own place for the session's records (else `KIMICODE_HOME/sessions`, unless `persist=False`)."""
    if messages is not None:
        from kimicode.agent.history import check_history

        check_history(messages)  # a clear error now, not a server's 400 at the first request
    o = options
    r = resolve(o, own_client=client is not None)
    config = r.settings.config  # every section typed, with its defaults (kimicode/config/sections.py)
    given = None if tools is None else _tool_list(tools, "tools")
    if given is not None:
        names = [t.name for t in given]
        if dupes := sorted({n for n in names if names.count(n) > 1}):
            raise ValueError(f"tools= has more than one tool named {', '.join(map(repr, dupes))} (names are unique)")
    registry = ToolRegistry(builtin_tools() if given is None else given)
    for t in _tool_list(extra_tools, "extra_tools"):
        registry.add(t)
    log = None
    if o.persist or session_store is not None:
        log = SessionLog(r.home / "sessions", r.session_id, store=session_store)
    spill = log.spill_dir if log else None
    ctx = ToolContext(workspace=r.workspace, session_dir=spill, extra_dirs=o.add_dirs)
    usage = {"prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0}
    cfg = config.context  # [context]; the options win
    if spill is not None:  # bound the disk the session's saved tool outputs may use
        set_spill_limit(spill, cfg.spill_max_bytes)
    context = ContextManager(
        window=r.context_window,
        reserve=r.answer_reserve,
        tokenizer_path=o.tokenizer_path or cfg.tokenizer,
        settings=ContextSettings(
            prune_threshold=_first(o.prune_threshold, cfg.prune_threshold),
            compact_threshold=_first(o.compact_threshold, cfg.compact_threshold),
            prune_keep_tokens=o.prune_keep_tokens,
            tool_output_tokens=_first(o.tool_output_tokens, cfg.tool_output_cap_tokens),
            tool_output_chars=o.tool_output_cap,
        ),
        spill_dir=spill,
        log=log,
        usage=usage,
        reserve_explicit=r.max_completion_tokens is not None,
    )
    warnings = list(r.settings.ignored)
    fence = confine(o, r, registry, ctx, log, warnings)
    o = fence.options
    if messages is None:
        messages = [{"role": "system", "content": shared(system_prompt(o, r))}]
        if log:
            log.append({"type": "meta", "session_id": r.session_id, **r.record(o.permission_mode)})
            log.message(messages[0])
    elif log and not log.saved:  # a new log for a given history (fork, library)
        log.append({"type": "meta", "session_id": r.session_id, **r.record(o.permission_mode)})
        for msg in messages:
            log.message(msg)
    parts = Parts(
        resolved=r,
        options=o,
        tools=registry,
        log=log,
        ctx=ctx,
        usage=usage,
        context=context,
        policy=fence.policy,
        sandbox=fence.sandbox,
        sandbox_warning=fence.sandbox_warning,
        masker=fence.masker,
        messages=messages,
        client=ModelClients(lambda: _chat_client(parts), client),
        window_discovered=client is not None,  # a caller's client: no server of ours to ask
        warnings=warnings,
    )
    from kimicode.agent.checkpointing import open_checkpoints

    parts.checkpoints = open_checkpoints(r, o, log, warnings.append)
    return parts


def _chat_client(parts: Parts) -> ModelClient:
    from kimicode.llm.client import ChatClient

    return ChatClient(parts.resolved.client_config(parts.options))


def _endpoint_and_model(o: AgentOptions, settings: Settings, own_client: bool) -> tuple[Endpoint, ModelConfig]:
    """The endpoint and model `o` names in `settings`; with a caller's own client no API key is needed, and a
    library caller's error names the options (`model=`), not the command line's flags."""
    try:
        return resolve_model(settings, model=o.model, base_url=o.base_url, api_key=o.api_key)
    except MissingKeyError:
        if not own_client:
            raise
        endpoint, model_config = resolve_model(settings, model=o.model, base_url=o.base_url, api_key="-")
        return dataclasses.replace(endpoint, api_key="", key_source="the caller's client"), model_config
    except ConfigError as exc:
        if (o.origin or ("headless" if o.headless else "library")) != "library":
            raise
        from kimicode.agent.options import option_names
        from kimicode.agent.outgoing import library_words

        # `model=`, not `--model`: what the caller can change
        raise type(exc)(library_words(str(exc), option_names())) from None


def resolve(o: AgentOptions, *, own_client: bool = False) -> Resolved:
    """The settings `o` resolves to with its configuration: endpoint and model, profile, window, answer
    limit, workspace, home and session id. With a caller's own client (`own_client`) no API key is needed."""
    settings = o.config if o.config is not None else Settings()  # hermetic: no file read
    endpoint, model_config = _endpoint_and_model(o, settings, own_client)
    profile = profile_with(profile_for(endpoint.model), model_config)
    workspace = o.workspace.expanduser().resolve()
    if not workspace.is_dir():
        raise ValueError(f"workspace is not a directory: {workspace}")
    config = settings.config
    window, origin = resolve_window(
        o.context_window, model_config.context_window, endpoint.model, profile.context_window
    )
    return Resolved(
        settings=settings,
        endpoint=endpoint,
        model_config=model_config,
        profile=profile,
        workspace=workspace,
        home=o.home.expanduser() if o.home is not None else kimicode_home(),
        session_id=o.session_id or new_session_id(),
        origin=o.origin or ("headless" if o.headless else "library"),
        scope=resolve_scope(o),
        thinking=o.thinking or model_config.reasoning_effort or config.defaults.thinking,
        context_window=window,
        window_origin=origin,
        max_completion_tokens=(
            o.max_completion_tokens or model_config.max_completion_tokens or config.context.max_tokens
        ),
        own_client=own_client,
    )


T = TypeVar("T")
_SHARED: dict[Any, Any] = {}


def shared(value: T) -> T:
    """One copy of equal read-only values (a scrubbed environment, a system prompt) for the agents of a
    process: 200 agents of a service held 200 copies of each. Bounded: past 64 kinds it starts over."""
    key = tuple(sorted(value.items())) if isinstance(value, dict) else value
    if len(_SHARED) >= 64 and key not in _SHARED:
        _SHARED.clear()
    return _SHARED.setdefault(key, value)  # type: ignore[no-any-return]


def _first(*values: Any) -> Any:
    return next(v for v in values if v is not None)


@dataclass(frozen=True)
class Confinement:
    """What `confine` sets up: the permission engine, the sandbox, the masker, and the options with the
    session's rules fixed."""

    options: AgentOptions
    policy: Policy
    sandbox: Sandbox | None
    sandbox_warning: str | None
    masker: Masker


def confine(
    o: AgentOptions, r: Resolved, tools: ToolRegistry, ctx: ToolContext, log: SessionLog | None, warnings: list[str]
) -> Confinement:
    """Permission rules (fixed for the session), the OS sandbox for bash (the registry's own bash is
    replaced by a sandboxed one), and a secret-free, masked environment for the tools (`ctx`)."""
    from kimicode.config.redact import Masker, known_secrets
    from kimicode.config.settings import config_paths
    from kimicode.permissions.policy import Policy, secret_env_names
    from kimicode.permissions.sources import session_rules
    from kimicode.procs import harden_process
    from kimicode.tools.sandbox import setup_sandbox
    from kimicode.tools.shell import BASH, bash_tool, scrub_env

    ignored: list[str] = []  # what an untrusted project's config may not loosen
    project_file = config_paths(r.workspace, r.home)[1]
    rules = o.rules
    if rules is None:
        rules = session_rules(
            r.settings,
            project_file=project_file,
            allow=o.allow,
            deny=o.deny,
            ask=o.ask,
            ignored=ignored,
            claude_workspace=r.workspace if o.config is not None else None,
        )
        o = o.replace(rules=rules)  # forks, resumes and subagents keep exactly these rules
    sandbox, sandbox_warning = setup_sandbox(
        o.sandbox,
        o.sandbox_network,
        r.settings,
        r.workspace,
        r.home,
        project_file=project_file,
        ignored=ignored,
        session_dir=log.spill_dir if log else None,
    )
    warnings.extend(ignored)
    ours = tools.get("bash") is BASH
    sandboxed = sandbox is not None and ours and not sandbox.auto  # auto confines what runs unasked only
    policy = Policy(
        rules,
        kimicode_home=r.home,
        sandboxed=sandboxed,
        workspace=r.workspace,
        session_dir=ctx.session_dir,
        read_only_sandbox=sandbox is not None,
        extra_dirs=o.add_dirs,
    )
    if sandbox is not None:  # the places read(...) rules open are visible in the sandbox too
        sandbox = dataclasses.replace(sandbox, visible=(*policy.read_rule_roots(), *o.add_dirs))
        if ours:
            tools.add(bash_tool(sandbox))
    ctx.env = shared(
        scrub_env(
            os.environ,
            names=secret_env_names(r.settings, r.endpoint.key_source),
            values=(r.endpoint.api_key,) if r.endpoint.api_key else (),
        )
    )
    harden_process()  # children cannot read the key under /proc/<pid>/environ
    masker = Masker(known_secrets(os.environ, api_key=r.endpoint.api_key, settings=r.settings))
    if log is not None:
        log.masker = masker
    ctx.mask = masker  # command output is masked as it is read
    if sandbox_warning:
        warnings.append(sandbox_warning)
    return Confinement(o, policy, sandbox, sandbox_warning, masker)


def prompt_parts(o: AgentOptions, r: Resolved) -> PromptParts:
    """What the system prompt is built from: `system_prompt` (it replaces kimicode's prompt), the model
    profile's addition, the scope, the AGENTS.md files when `project_instructions`, and
    `append_system_prompt` (kimicode/agent/sysprompt.py gives the order)."""
    instructions = None
    if o.system_prompt is None and o.project_instructions:
        from kimicode.config.agentsmd import project_instructions

        instructions = project_instructions(r.workspace, r.home) or None
    return PromptParts(
        workspace=r.workspace,
        scope=r.scope,
        headless=o.headless,
        profile_addition=r.profile.prompt_addition,
        custom=o.system_prompt,
        instructions=instructions,
        permission_mode=o.permission_mode,
        append="\n\n".join(filter(None, [o.append_system_prompt, _added_dirs(o.add_dirs)])) or None,
    )


def _added_dirs(dirs: tuple[Path, ...]) -> str:
    """What the model is told of `--add-dir` directories."""
    if not dirs:
        return ""
    return (
        "Besides the workspace, the user gave you these directories to read and change files in (use "
        "absolute paths for them): " + ", ".join(str(d) for d in dirs) + "."
    )


def system_prompt(o: AgentOptions, r: Resolved) -> str:
    """The system prompt a session with these options and settings starts with."""
    return build_system_prompt(prompt_parts(o, r))


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
        raise TypeError(
            "on_event must be a plain function: an async hook would never be awaited "
            "(use `async for event in agent.stream(...)` for async handling)"
        )


def check_collaborators(client: Any, session_store: Any) -> None:
    """TypeError now for a `client=` or `session_store=` that lacks what the agent calls (it would fail
    mid-turn): the protocols are `kimicode.ModelClient` and `kimicode.SessionStore`."""
    needs = {
        "client": (
            "ModelClient",
            ("stream", "aclose"),
            "stream(messages, tools, *, max_completion_tokens) "
            "yielding StreamDelta/StreamRetry/Completion, and async aclose()",
        ),
        "session_store": ("SessionStore", ("append", "load"), "append(session_id, record) and load(session_id)"),
    }
    for what, value in (("client", client), ("session_store", session_store)):
        if value is None:
            continue
        protocol, methods, described = needs[what]
        missing = [m for m in methods if isinstance(value, type) or not callable(getattr(value, m, None))]
        if missing:
            got = (
                f"the class {value.__name__}; pass an instance"
                if isinstance(value, type)
                else (f"{type(value).__name__}, without {' or '.join(missing)}")
            )
            raise TypeError(f"{what} must implement kimicode.{protocol}: {described} (got {got})")
    if client is not None and not is_async_callable(client.aclose):
        raise TypeError(f"client.aclose must be a coroutine function (async def) (got {client.aclose!r})")
    if client is not None and inspect.iscoroutinefunction(client.stream):  # `async def` without `yield`
        raise TypeError(
            "client.stream must be an async generator (`async def stream(...)` that yields the events) "
            "or a function returning an async iterator, not a coroutine function"
        )
    calls: list[tuple[str, Any, str, tuple[Any, ...], dict[str, Any]]] = [
        ("client.stream", client, "stream", ([], []), {"max_completion_tokens": None}),
        ("session_store.append", session_store, "append", ("id", {}), {}),
        ("session_store.load", session_store, "load", ("id",), {}),
    ]
    for name, value, method, args, kwargs in calls:  # the calls the agent makes, tried on the signature only
        if value is not None:
            _check_signature(name, getattr(value, method), args, kwargs)


def _check_signature(name: str, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """TypeError naming `name` when `fn` cannot be called as the agent calls it (another Agent passed as a
    client, a store's `append(record)` without the session id)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # no signature to read (a builtin): the call itself will tell
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        shown = ", ".join([*("..." for _ in args), *(f"{k}=..." for k in kwargs)])
        raise TypeError(
            f"{name} cannot be called as the agent calls it, {name.split('.')[-1]}({shown}): "
            f"{exc} (its signature is {signature})"
        ) from None
