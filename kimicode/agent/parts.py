"""The parts an Agent is made of, as objects: what agent/builder.py returns and `Agent` holds.

`Parts` holds the working parts (model client, context manager, session log, permission engine, sandbox,
checkpoints, tool registry, masker, extras) and the conversation; `Resolved` holds the settings resolved
from the options and the configuration (endpoint, model profile, window, answer reserve, ...). The
Agent's attributes of the same names (`agent.context`, `agent.endpoint`, ...) are the parts themselves
(the `Part` and `Setting` descriptors below): there is one copy of each, here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast

from kimicode.config.choices import DEFAULT_MAX_RETRIES, Scope

if TYPE_CHECKING:
    from kimicode.agent.ecosystem import Extras
    from kimicode.agent.options import AgentOptions
    from kimicode.checkpoints.session import SessionCheckpoints
    from kimicode.config.endpoint import Endpoint
    from kimicode.config.redact import Masker
    from kimicode.config.settings import ModelConfig, Settings
    from kimicode.context.manager import ContextManager
    from kimicode.events import Event
    from kimicode.llm.client import ClientConfig
    from kimicode.llm.profiles import ModelProfile
    from kimicode.llm.protocol import ModelClient
    from kimicode.permissions.policy import Policy
    from kimicode.session.log import SessionLog
    from kimicode.tools.base import ToolContext
    from kimicode.tools.registry import ToolRegistry
    from kimicode.tools.sandbox import Sandbox


@dataclass
class Resolved:
    """The settings an agent resolved from its options and configuration: where it talks to which model,
    how large its window is and what it records. `set_model`, `set_thinking` and window discovery change
    them; forks and subagents start from them (`agent/options.derived_options`)."""

    settings: Settings
    endpoint: Endpoint
    model_config: ModelConfig
    profile: ModelProfile
    workspace: Path
    home: Path
    session_id: str
    origin: str
    """Which face runs the session (`interactive`, `headless`, `library`), recorded in the log for listings."""
    scope: Scope  # `strict` or `normal` (docs/models.md)
    thinking: str | None
    context_window: int
    window_origin: str  # where `context_window` came from (`window_source` adds "learnt")
    max_completion_tokens: int | None
    """The answer's token limit when set (option, model config, `[context] max_tokens`); else fitted. It
    reaches the request one way: `answer_reserve` -> the context's budget -> each request's limit."""
    own_client: bool = False
    """The caller's client sends the requests (`Agent(client=...)`): the endpoint above is not where they go."""

    @property
    def answer_reserve(self) -> int:
        """Tokens reserved for the answer: `max_completion_tokens`, else the model profile's (the one fallback)."""
        return self.max_completion_tokens or self.profile.max_completion_tokens

    def record(self, permission_mode: str) -> dict[str, Any]:
        """The settings a session log records (its `meta` record, and a `settings` record on each change)."""
        return {
            "model": self.endpoint.model,
            "base_url": self.endpoint.base_url,
            "workspace": str(self.workspace),
            "permission_mode": permission_mode,
            "thinking": self.thinking,
            "origin": self.origin,
        }

    def client_config(self, o: AgentOptions) -> ClientConfig:
        """What kimicode's own model client is made from: the current endpoint, model and effort."""
        from kimicode.llm.client import ClientConfig

        return ClientConfig(
            base_url=self.endpoint.base_url,
            api_key=self.endpoint.api_key,
            model=self.endpoint.model,
            profile=self.profile,
            effort=self.thinking,
            session_id=self.session_id,
            max_retries=o.max_retries,
            retries_explicit=o.max_retries != DEFAULT_MAX_RETRIES,
            tool_choice=o.tool_choice or self.model_config.tool_choice,
            retry_base_delay=o.retry_base_delay,
            timeout=o.request_timeout,
            reasoning_field=self.model_config.reasoning_field,
            extra_body={"response_format": dict(o.response_format)} if o.response_format else {},
            extra_headers=dict(self.model_config.headers),
            key_source=self.endpoint.key_source,
            url_source=self.endpoint.url_source,
        )

    def prices(self, o: AgentOptions) -> tuple[Mapping[str, float], str]:
        """The `prices=` option, else the configured or known prices of the current model and endpoint."""
        from kimicode.config.pricing import model_prices

        if o.prices is not None:
            return o.prices, "option"
        found, source = model_prices(self.model_config.prices, self.endpoint.model, self.endpoint.base_url)
        if self.own_client and source == "builtin":  # a list price of an API the caller's client may not use
            return {}, ""
        return found, source

    def cost(self, o: AgentOptions, usage: Mapping[str, int]) -> float | None:
        """Dollars for `usage` at the current prices (cached tokens at the cached price), None when unpriced."""
        from kimicode.config.settings import estimate_cost

        prices, _ = self.prices(o)
        return estimate_cost(usage, prices) if prices else None


class ModelClients:
    """The agent's model client: the caller's own (`Agent(client=...)`, used as it is, never replaced),
    or kimicode's `ChatClient`, made on first use from `make()` and made again after a change of model,
    effort, key or retry settings (`reset`)."""

    def __init__(self, make: Callable[[], ModelClient], given: ModelClient | None = None) -> None:
        self.make = make
        self.given = given
        """The caller's client, or None when kimicode makes its own."""
        self.current: ModelClient | None = given
        self.borrowed = False
        """The caller's client came from the agent this one was made from (a fork, a subagent): that agent
        (the one the caller gave it to) closes it, not this one."""

    def get(self) -> ModelClient:
        """The client, made now if needed (in the calling thread: `ready` makes it off the event loop)."""
        if self.current is None:
            self.current = self.make()
        return self.current

    async def ready(self) -> ModelClient:
        """The client, made in a worker thread the first time: importing `openai` and building its TLS
        context take a second or more, which must not stall the event loop (other agents, timers, the UI)."""
        usable = getattr(self.current, "usable_here", None)  # not `isinstance(.., ChatClient)`: that import
        if self.given is None and usable is not None and not usable():  # is the one to make in the thread
            self.current = None  # its connections belong to an earlier event loop (a second asyncio.run)
        if self.current is None:
            await asyncio.to_thread(self.get)
        return self.get()

    def reset(self) -> None:
        """Drop kimicode's own client (the next request makes one for the current settings); a caller's
        client stays."""
        client, self.current = self.current, self.given
        if client is None or client is self.given:
            return
        try:
            asyncio.get_running_loop().create_task(client.aclose())
        except RuntimeError:
            pass  # no loop running: the pool is released with the object

    async def aclose(self) -> None:
        """Close the client (the caller's too: `agent.aclose()` releases everything the agent uses), unless it
        is `borrowed`: a subagent closing its parent's client would break the parent's next request."""
        client, self.current = self.current, self.given
        if client is not None and not (self.borrowed and client is self.given):
            await client.aclose()


@dataclass
class Parts:
    """Everything an Agent works with, made by `agent.builder.build_parts` from its options."""

    resolved: Resolved
    options: AgentOptions
    """The options with what building them fixed (the session's permission rules)."""
    tools: ToolRegistry
    log: SessionLog | None
    """The session log (to `KIMICODE_HOME/sessions`, or to the caller's `session_store`); None: `persist=False`."""
    ctx: ToolContext
    usage: dict[str, int]
    context: ContextManager
    policy: Policy
    sandbox: Sandbox | None
    sandbox_warning: str | None
    """Why a requested sandbox is not used (also sent once as a Notice)."""
    masker: Masker
    """Masks every known secret in tool results, the session log, notices and errors."""
    messages: list[dict[str, Any]]
    client: ModelClients
    checkpoints: SessionCheckpoints | None = None
    """This session's workspace checkpoints (None when disabled in `[checkpoints]`); see docs/checkpoints.md."""
    extras: Extras | None = None
    """Edit-tool choice, todo list, subagents, image-aware read_file, web_fetch, MCP (agent/ecosystem.py);
    installed once the Agent holds these parts (its extras are bound to it)."""
    window_discovered: bool = False
    """The server was asked for its window (once, at the first step; a caller's own client: never)."""
    warnings: list[str] = field(default_factory=list)
    """What building found to warn about (ignored config keys, no sandbox), and what a background thread of
    the parts reports later (the automatic checkpoint prune): each turn's start takes them as Notices."""

    def take_warnings(self) -> list[str]:
        """The warnings not yet taken, removed (a background thread may append while this runs: `pop`
        takes each one exactly once)."""
        taken: list[str] = []
        while self.warnings:
            taken.append(self.warnings.pop(0))
        return taken

    # -- the window and the token estimate's calibration (the model step calls these) -----------------

    async def discover_window(self, emit: Callable[[Event], None]) -> None:
        """Ask the server about its window and template once per process (bounded; its last real answer is
        cached under KIMICODE_HOME); a flag or config window wins. Then start from the calibration learnt
        against this same server, and let a server that can count the first request count it."""
        from kimicode.events import ContextUpdated, Notice
        from kimicode.llm.discovery import discover_server
        from kimicode.llm.errors import LLMError

        r, context = self.resolved, self.context
        self.window_discovered = True
        info = await discover_server(
            r.endpoint.base_url,
            r.endpoint.api_key,
            r.endpoint.model,
            r.home,
            headers=dict(r.model_config.headers),
        )
        if info is None:
            self.restore_calibration("", emit)
            return
        if info.tools_rendered is not None:  # /props: whether the chat template renders tools (trusted over counts)
            context.accountant.tools_said = context.accountant.tools_in_prompt = info.tools_rendered
        self.restore_calibration(info.fingerprint, emit)
        context.server_counts = info.counts and not info.cached
        found = info.window
        if r.window_origin in ("flag", "config") or not found:
            return
        if context.server_limit and context.server_limit != found and not info.cached:
            context.forget_window()  # learnt from an earlier server: this one says what it serves now
        stale = " (its last answer: it does not answer now)" if info.cached else ""
        if found != r.context_window:
            r.context_window, r.window_origin = found, "server"
            emit(Notice(f"context: the server reports a window of {found:,} tokens for {r.endpoint.model}{stale}"))
            try:
                context.set_window(found, r.answer_reserve)
            except ValueError as exc:  # e.g. a 1k window, or --max-tokens larger than the server's window
                raise LLMError(
                    f"the server serves {r.endpoint.model} with a {found:,}-token window: {exc}", "context_length"
                ) from None
            emit(ContextUpdated(context.used, r.context_window))
        else:
            r.window_origin = "server"

    def restore_calibration(self, fingerprint: str, emit: Callable[[Event], None]) -> None:
        """Start from the calibration of this session (resume, -c, fork) or of this endpoint and model, when it
        was learnt against the same server (fingerprint); say so when the server changed since."""
        from kimicode.context import calibration
        from kimicode.events import Notice

        ctx, r = self.context, self.resolved
        ctx.fingerprint = fingerprint
        recorded = ctx.calibration_record
        if recorded is not None and recorded.get("fingerprint") == fingerprint and ctx.restore_calibration(recorded):
            return
        stored = calibration.load(r.home, r.endpoint.base_url, r.endpoint.model, fingerprint)
        if stored is not None and ctx.restore_calibration(stored):
            return
        if recorded is not None and fingerprint and recorded.get("fingerprint") not in (None, fingerprint):
            ctx.forget_window()
            emit(
                Notice(
                    "context: the server changed since this session last ran (another model file, window or "
                    "build): the token estimate is calibrated again from its counts"
                )
            )

    async def count_first_request(self, tools: list[dict[str, Any]]) -> None:
        """llama.cpp renders and counts the request before it is sent: the estimate starts exact (its chat
        template may leave the tool definitions out, which no estimate can know)."""
        from kimicode.llm.discovery import count_request

        ctx, endpoint = self.context, self.resolved.endpoint
        ctx.server_counts = False
        counted = await count_request(
            endpoint.base_url, endpoint.api_key, self.messages, tools, headers=dict(self.resolved.model_config.headers)
        )
        if counted:
            ctx.accountant.observe(self.messages, tools, counted, ctx.estimate(self.messages, tools))
            ctx.calibration_source = "probe"

    def restore_window(self, records: list[dict[str, Any]], *, record: bool = False) -> None:
        """Keep the window a server showed in this session (its last `context_window` record) and the
        calibration learnt, unless the model or endpoint changed since (resume; `record`: a fork's new log
        records the window again)."""
        from kimicode.context.calibration import from_records

        learnt: int | None = None
        for rec in records:
            if rec.get("type") == "settings" and rec.get("reason") == "model":
                learnt = None  # learnt for another model
            elif rec.get("type") == "context_window" and isinstance(rec.get("window"), int):
                learnt = rec["window"]
        settings = [r for r in records if r.get("type") in ("meta", "settings")]
        endpoint = self.resolved.endpoint
        same = not settings or (
            settings[-1].get("model") in (None, endpoint.model)
            and settings[-1].get("base_url") in (None, endpoint.base_url)
        )
        if learnt and same:
            self.context.learn_window(learnt, record=record)
        if same:
            self.context.calibration_record = from_records(records)

    def save_calibration(self) -> None:
        """Keep what calibration learnt: in the session log when it changed, and per endpoint and model."""
        from kimicode.context import calibration

        state = self.context.record_calibration()
        if state is not None and self.context.accountant.calibrated:
            r = self.resolved
            calibration.save(r.home, r.endpoint.base_url, r.endpoint.model, state)


class HasParts(Protocol):
    """What the descriptors below need of their owner (the Agent)."""

    parts: Parts


V = TypeVar("V")


class Part(Generic[V]):
    """An Agent attribute that is one of its parts (`agent.context` is `agent.parts.context`)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, agent: HasParts | None, owner: type) -> V:
        return cast(V, getattr(agent.parts, self.name)) if agent is not None else cast(V, self)

    def __set__(self, agent: HasParts, value: V) -> None:
        setattr(agent.parts, self.name, value)


class Setting(Part[V]):
    """An Agent attribute that is one of its resolved settings (`agent.endpoint` is
    `agent.parts.resolved.endpoint`)."""

    def __get__(self, agent: HasParts | None, owner: type) -> V:
        return cast(V, getattr(agent.parts.resolved, self.name)) if agent is not None else cast(V, self)

    def __set__(self, agent: HasParts, value: V) -> None:
        setattr(agent.parts.resolved, self.name, value)
