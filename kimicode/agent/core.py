"""The agent: the turn loop that alternates model steps and tool calls, emitting typed events.

One `Agent` is one conversation. `stream()` yields events for a turn; `run()` and `run_sync()` wrap it.
The headless command line, the terminal UI and library users all consume the same events.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import platform
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from kimicode.agent.ecosystem import after_compaction, close_extras, start_extras, user_content
from kimicode.agent.events import (
    ContentDelta,
    ContextUpdated,
    Event,
    MessageCommitted,
    Notice,
    PermissionDenied,
    ReasoningDelta,
    Retrying,
    StepStarted,
    ToolArgumentsDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnFinished,
    TurnStarted,
    TurnStatus,
    UsageUpdated,
)
from kimicode.agent.permissions import MODES, decide, denial_message, target_path
from kimicode.agent.policy import Rules
from kimicode.config import kimicode_home
from kimicode.context.accounting import Breakdown
from kimicode.context.compact import CompactionResult
from kimicode.context.manager import ContextManager, ContextSettings
from kimicode.context.output import DEFAULT_CAP_CHARS, DEFAULT_CAP_TOKENS
from kimicode.llm.accumulate import usage_numbers
from kimicode.llm.errors import LLMError
from kimicode.llm.profiles import profile_for
from kimicode.prompts import load_prompt
from kimicode.session.log import INTERRUPTED, SessionLog, new_session_id
from kimicode.settings import Settings, load_settings, profile_with, resolve_model, switch_model
from kimicode.tools.base import Tool, ToolContext, ToolError, ToolResult
from kimicode.tools.registry import ToolRegistry, builtin_tools, parse_arguments, validate

if TYPE_CHECKING:
    from kimicode.llm.client import ChatClient

REPEAT_WARN = 3
REPEAT_STOP = 5


@dataclass(frozen=True)
class ApprovalRequest:
    """An action that needs a yes before it runs: shown to the user or passed to `approve`."""

    call_id: str
    tool: str
    kind: str
    arguments: Mapping[str, Any]
    reason: str
    path: str | None = None


@dataclass(frozen=True)
class Approval:
    """An answer to an ApprovalRequest; `reason` (when denied) is passed on to the model."""

    approved: bool
    reason: str = ""


ApproveResult = bool | Approval
ApproveFn = Callable[[ApprovalRequest], ApproveResult | Awaitable[ApproveResult]]


@dataclass
class RunResult:
    """The outcome of one turn (`Agent.run`)."""

    status: TurnStatus
    result: str
    session_id: str
    num_turns: int
    usage: dict[str, int]
    duration_ms: int
    permission_denials: list[dict[str, Any]]
    error: str | None = None
    error_kind: str | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    """The messages this turn added to the history (user, assistant and tool), as sent to the model."""
    context: dict[str, int] = field(default_factory=dict)
    """Context window use after the turn: `used` and `window` tokens."""
    changes: dict[str, list[str]] | None = None
    """Files the turn added, modified and deleted (None when no checkpoint was taken: nothing changed)."""
    checkpoint: str | None = None
    """The checkpoint taken before the turn's first change (`kimicode undo` restores it)."""

    @property
    def ok(self) -> bool:
        return self.status == "success"


class Agent:
    """A multi-turn coding agent over an OpenAI-compatible endpoint.

    Calling `run` again continues the same conversation. All network and tool work happens inside
    `stream`; constructing an Agent only resolves settings.
    """

    def __init__(
        self,
        *,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        workspace: str | Path = ".",
        tools: Iterable[Tool] | None = None,
        extra_tools: Iterable[Tool] = (),
        permission_mode: str = "default",
        approve: ApproveFn | None = None,
        system_prompt: str | None = None,
        append_system_prompt: str | None = None,
        project_instructions: bool = True,
        thinking: str | None = None,
        context_window: int | None = None,
        max_completion_tokens: int | None = None,
        max_turns: int = 200,
        max_retries: int = 5,
        retry_base_delay: float = 1.0,
        request_timeout: float = 300.0,
        tool_output_cap: int = DEFAULT_CAP_CHARS,
        tool_output_tokens: int | None = None,
        prune_threshold: float | None = None,
        compact_threshold: float | None = None,
        prune_keep_tokens: int = 100_000,
        tokenizer_path: str | Path | None = None,
        home: str | Path | None = None,
        persist: bool = True,
        session_id: str | None = None,
        messages: list[dict[str, Any]] | None = None,
        on_event: Callable[[Event], None] | None = None,
        headless: bool = False,
        origin: str | None = None,
        config: Settings | None = None,
        allow: Iterable[str] = (),
        deny: Iterable[str] = (),
        ask: Iterable[str] = (),
        rules: Rules | None = None,
        sandbox: str | None = None,
        sandbox_network: bool | None = None,
    ) -> None:
        self._init_args: dict[str, Any] = {k: v for k, v in locals().items() if k != "self"}  # for fork()
        if permission_mode not in MODES:
            raise ValueError(f"permission_mode must be one of {', '.join(MODES)} (got {permission_mode!r})")
        if thinking is not None and thinking not in ("low", "high", "max"):
            raise ValueError(f"thinking must be low, high or max (got {thinking!r})")
        if origin not in (None, "interactive", "headless", "library"):
            raise ValueError(f"origin must be interactive, headless or library (got {origin!r})")
        self.settings = config if config is not None else load_settings(
            Path(workspace).expanduser().resolve(), Path(home).expanduser() if home is not None else kimicode_home()
        )  # the configuration files; flags (the arguments) and the environment win over them
        self.endpoint, self.model_config = resolve_model(self.settings, model=model, base_url=base_url, api_key=api_key)
        self.profile = profile_with(profile_for(self.endpoint.model), self.model_config)
        self.workspace = Path(workspace).expanduser().resolve()
        if not self.workspace.is_dir():
            raise ValueError(f"workspace is not a directory: {self.workspace}")
        self.tools = ToolRegistry(builtin_tools() if tools is None else tools)
        for t in extra_tools:
            self.tools.add(t)
        self.permission_mode = permission_mode
        self.approve = approve
        self.headless = headless
        self.origin = origin or ("headless" if headless else "library")
        """Which face runs the session (`interactive`, `headless`, `library`), recorded in the log for listings."""
        self.thinking = thinking or self.model_config.reasoning_effort or self.settings.get("defaults.thinking")
        self.context_window = context_window or self.profile.context_window
        self.max_completion_tokens = max_completion_tokens or self.model_config.max_completion_tokens
        self.max_turns = max_turns
        self.max_retries = max_retries
        self.retry_base_delay = retry_base_delay
        self.request_timeout = request_timeout
        self.tool_output_cap = tool_output_cap
        self.on_event = on_event
        self.home = Path(home).expanduser() if home is not None else kimicode_home()
        self.project_instructions = project_instructions
        """Add AGENTS.md / CLAUDE.md files (repository root down to the workspace, and the home's) to the prompt."""
        self.session_id = session_id or new_session_id()
        self.log: SessionLog | None = SessionLog(self.home / "sessions", self.session_id) if persist else None
        spill = self.log.spill_dir if self.log else None
        self.ctx = ToolContext(workspace=self.workspace, session_dir=spill)
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0}
        ctx_cfg = self.settings.table("context")  # [context] in the config files; arguments win
        self.context = ContextManager(
            window=self.context_window,
            reserve=self.max_completion_tokens or self.profile.max_completion_tokens,
            tokenizer_path=tokenizer_path or ctx_cfg.get("tokenizer"),
            settings=ContextSettings(
                prune_threshold=(
                    prune_threshold if prune_threshold is not None else ctx_cfg.get("prune_threshold", 0.70)
                ),
                compact_threshold=(
                    compact_threshold if compact_threshold is not None else ctx_cfg.get("compact_threshold", 0.85)
                ),
                prune_keep_tokens=prune_keep_tokens,
                tool_output_tokens=(
                    tool_output_tokens
                    if tool_output_tokens is not None
                    else ctx_cfg.get("tool_output_cap_tokens", DEFAULT_CAP_TOKENS)
                ),
                tool_output_chars=tool_output_cap,
            ),
            spill_dir=spill,
            log=self.log,
            usage=self.usage,
        )
        self._client: ChatClient | None = None
        self._worker: asyncio.Task[None] | None = None
        self._interrupted = False
        self.resume_warning: str | None = None
        """Set by `resume` when the session was recorded with another model (also sent as a Notice)."""
        self._notices: list[Notice] = []  # emitted at the start of the next turn
        self._notices.extend(Notice(text, "warning") for text in self.settings.ignored)
        self._confine(allow, deny, ask, rules, sandbox, sandbox_network)
        if messages is not None:
            self.messages: list[dict[str, Any]] = messages
            if self.log and not self.log.path.exists():  # a new log for a given history (fork, library)
                self._log_meta()
                for msg in messages:
                    self.log.message(msg)
        else:
            self.messages = [{"role": "system", "content": self._system_prompt(system_prompt, append_system_prompt)}]
            self._log_meta()
            if self.log:
                self.log.message(self.messages[0])
        from kimicode.agent.ecosystem import install

        self.extras = install(self, default_tools=tools is None)
        from kimicode.checkpoints.hooks import open_checkpoints

        self.checkpoints = open_checkpoints(self)
        """This session's workspace checkpoints (None when disabled in `[checkpoints]`); see docs/checkpoints.md."""
        """Edit-tool choice, todo list, subagents, image-aware read_file, web_fetch, MCP (agent/ecosystem.py)."""

    # -- setup ------------------------------------------------------------------------------------

    def _confine(
        self,
        allow: Iterable[str],
        deny: Iterable[str],
        ask: Iterable[str],
        rules: Rules | None,
        sandbox: str | None,
        sandbox_network: bool | None,
    ) -> None:
        """Permission rules (fixed for the session), the OS sandbox for bash, and a secret-free child env."""
        import os

        from kimicode.agent.policy import Policy, secret_env_names, session_rules
        from kimicode.settings import config_paths
        from kimicode.tools.sandbox import setup_sandbox
        from kimicode.tools.shell import BASH, bash_tool, scrub_env

        ignored: list[str] = []  # what an untrusted project's config may not loosen
        project_file = config_paths(self.workspace, self.home)[1]
        if rules is None:
            rules = session_rules(
                self.settings, project_file=project_file, allow=allow, deny=deny, ask=ask, ignored=ignored
            )
        self._init_args["rules"] = rules  # forks and resumes keep exactly these rules
        self.sandbox, self.sandbox_warning = setup_sandbox(
            sandbox, sandbox_network, self.settings, self.workspace, self.home,
            project_file=project_file, ignored=ignored,
        )
        self._notices.extend(Notice(text, "warning") for text in ignored)
        """`sandbox_warning` says why a requested sandbox is not used (also sent once as a Notice)."""
        sandboxed = False
        if self.sandbox is not None and self.tools.get("bash") is BASH:
            self.tools.add(bash_tool(self.sandbox))
            sandboxed = True
        self.policy = Policy(rules, kimicode_home=self.home, sandboxed=sandboxed)
        self.ctx.env = scrub_env(
            os.environ,
            names=secret_env_names(self.settings, self.endpoint.key_source),
            values=(self.endpoint.api_key,),
        )
        if self.sandbox_warning:
            self._notices.append(Notice(self.sandbox_warning, "warning"))

    def _system_prompt(self, replace: str | None, append: str | None) -> str:
        text = replace if replace is not None else load_prompt("system.md")
        text = (
            text.replace("{workspace}", str(self.workspace))
            .replace("{platform}", f"{platform.system()} {platform.machine()}")
            .replace("{date}", date.today().isoformat())
        )
        if self.project_instructions:
            from kimicode.agentsmd import project_instructions

            section = project_instructions(self.workspace, self.home)
            if section:
                text += "\n\n" + section
        if append:
            text += "\n\n" + append
        return text

    def _log_meta(self) -> None:
        if self.log:
            self.log.append(
                {
                    "type": "meta",
                    "session_id": self.session_id,
                    "model": self.endpoint.model,
                    "base_url": self.endpoint.base_url,
                    "workspace": str(self.workspace),
                    "permission_mode": self.permission_mode,
                    "thinking": self.thinking,
                    "origin": self.origin,
                }
            )

    def _log_settings(self, reason: str, **extra: Any) -> None:
        """Record the model and settings in effect from now on (resume, fork, a model change)."""
        if self.log:
            self.log.append(
                {
                    "type": "settings",
                    "reason": reason,
                    "model": self.endpoint.model,
                    "base_url": self.endpoint.base_url,
                    "workspace": str(self.workspace),
                    "permission_mode": self.permission_mode,
                    "thinking": self.thinking,
                    "origin": self.origin,
                    **extra,
                }
            )

    @property
    def client(self) -> ChatClient:
        """The model client, created on first use (importing the HTTP stack is not free)."""
        if self._client is None:
            from kimicode.llm.client import ChatClient, ClientConfig

            self._client = ChatClient(
                ClientConfig(
                    base_url=self.endpoint.base_url,
                    api_key=self.endpoint.api_key,
                    model=self.endpoint.model,
                    profile=self.profile,
                    effort=self.thinking,
                    max_completion_tokens=self.max_completion_tokens,
                    session_id=self.session_id,
                    max_retries=self.max_retries,
                    retry_base_delay=self.retry_base_delay,
                    timeout=self.request_timeout,
                    reasoning_field=self.model_config.reasoning_field,
                    extra_headers=dict(self.model_config.headers),
                    key_source=self.endpoint.key_source,
                )
            )
        return self._client

    # -- public API -------------------------------------------------------------------------------

    async def stream(self, prompt: str) -> AsyncIterator[Event]:
        """Run one turn for `prompt`, yielding every event as it happens; the last is TurnFinished."""
        if self._worker is not None and not self._worker.done():
            raise RuntimeError("a turn is already running on this agent")
        queue: asyncio.Queue[Event] = asyncio.Queue()
        self._interrupted = False

        def emit(event: Event) -> None:
            if self.on_event is not None:
                self.on_event(event)
            queue.put_nowait(event)

        self._worker = asyncio.create_task(self._turn(prompt, emit))
        worker = self._worker
        try:
            while True:
                event = await queue.get()
                yield event
                if isinstance(event, TurnFinished):
                    break
            await worker
        finally:
            if not worker.done():
                worker.cancel()
                # Let the worker write synthetic results for unfinished tool calls before we leave.
                await asyncio.wait([worker])

    async def run(self, prompt: str) -> RunResult:
        """Run one turn and return its result (the conversation continues on the next call)."""
        start = time.monotonic()
        added: list[dict[str, Any]] = []  # collected from events: compaction may rewrite the history
        finished: TurnFinished | None = None
        async for event in self.stream(prompt):
            if isinstance(event, MessageCommitted):
                added.append(cast(dict[str, Any], event.message))  # the committed dict itself
            elif isinstance(event, TurnFinished):
                finished = event
        assert finished is not None
        return RunResult(
            status=finished.status,
            result=finished.result,
            session_id=self.session_id,
            num_turns=finished.num_steps,
            usage=dict(self.usage),
            duration_ms=int((time.monotonic() - start) * 1000),
            permission_denials=[dict(d) for d in finished.permission_denials],
            error=finished.error,
            error_kind=finished.error_kind,
            messages=added,
            context={"used": self.context.used, "window": self.context_window},
            **_checkpoint_fields(self),
        )

    def run_sync(self, prompt: str) -> RunResult:
        """`run` for scripts without an event loop."""
        return asyncio.run(self._run_and_close(prompt))

    async def _run_and_close(self, prompt: str) -> RunResult:
        try:
            return await self.run(prompt)
        finally:
            await self.aclose()

    @classmethod
    def resume(cls, session_id: str, *, fork: bool = False, **kwargs: Any) -> Agent:
        """An Agent continuing a saved session (id or unique prefix), like `kimicode -r ID`.

        Takes the same keyword arguments as the constructor. The model, thinking effort and workspace
        default to the recorded ones; the permission mode does not carry over. The session keeps its id
        (and so its prompt cache key) unless `fork=True`, which copies the history into a new session and
        leaves the original untouched. Raises `SessionError` (a ValueError) for an unknown id.
        """
        from kimicode.session.resume import resume_agent

        return resume_agent(cls, session_id, fork=fork, **kwargs)

    def fork(self, **overrides: Any) -> Agent:
        """A new Agent with a new session id and a copy of this conversation (`--fork`).

        It has this agent's settings unless `overrides` (constructor arguments) change them; the two
        conversations continue independently. `workspace="worktree"` gives the fork its own working tree
        (a git worktree on a new branch; a copy outside git), `"copy"` a copy, `"shared"` (or a path)
        the same tree: see docs/checkpoints.md.
        """
        from kimicode.session.resume import fork_agent

        return fork_agent(self, **overrides)

    async def rewind(self, turn: int | None = None, *, files: bool = True, conversation: bool = True,
                     force: bool = False) -> Any:
        """Undo turn `turn` and every turn after it (default: the last turn): put back the files they
        changed (`files`) and take them out of the history (`conversation`). Files changed outside
        kimicode since are not overwritten (RestoreConflict) unless `force`. See docs/checkpoints.md."""
        if self._worker is not None and not self._worker.done():
            raise RuntimeError("cannot rewind while a turn is running")
        from kimicode.checkpoints.hooks import rewind

        return await rewind(self, turn, files=files, conversation=conversation, force=force)

    def set_model(self, model: str) -> None:
        """Switch the model for the following requests (the history is kept as it is)."""
        self.endpoint, self.model_config = switch_model(self.settings, self.endpoint, model)
        self.profile = profile_with(profile_for(self.endpoint.model), self.model_config)
        self.context_window = self.profile.context_window
        from kimicode.agent.ecosystem import refresh

        refresh(self)  # e.g. apply_patch instead of edit_file for GPT models
        self._reset_client()
        self._log_settings("model")

    def set_thinking(self, effort: str | None) -> None:
        """Change the reasoning effort (`low`, `high`, `max`, or None for the model's default)."""
        if effort is not None and effort not in ("low", "high", "max"):
            raise ValueError(f"thinking must be low, high or max (got {effort!r})")
        self.thinking = effort
        self._reset_client()
        self._log_settings("thinking")

    def _reset_client(self) -> None:
        if self._client is not None:
            client = self._client
            self._client = None
            try:
                asyncio.get_running_loop().create_task(client.aclose())
            except RuntimeError:
                pass  # no loop running: the pool is released with the object

    async def compact(self, instructions: str | None = None) -> CompactionResult | None:
        """Summarise the older history now (`/compact`); `instructions` tell the summariser what to keep.

        Returns what was replaced, or None when there was nothing to compact. Events go to `on_event`.
        """
        if self._worker is not None and not self._worker.done():
            raise RuntimeError("cannot compact while a turn is running")

        def emit(event: Event) -> None:
            if self.on_event is not None:
                self.on_event(event)

        self.context.set_window(self.context_window, self.max_completion_tokens or self.profile.max_completion_tokens)
        kinds = {t.name: t.kind for t in self.tools}
        result = await self.context.compact(
            self.messages, self.tools.schemas(), self.client, emit, instructions=instructions, tool_kinds=kinds
        )
        after_compaction(self)
        if result is not None:
            self.context.used = self.context.estimate(self.messages, self.tools.schemas())
            emit(ContextUpdated(self.context.used, self.context_window))
        if self.log:
            self.log.sync()
        return result

    def context_breakdown(self) -> Breakdown:
        """Estimated tokens of the next request by category (system, tools, user, assistant, ...)."""
        return self.context.breakdown(self.messages, self.tools.schemas())

    def interrupt(self) -> None:
        """Stop the running turn (the stream or the running tools); history stays valid."""
        self._interrupted = True
        if self._worker is not None and not self._worker.done():
            self._worker.cancel()

    async def aclose(self) -> None:
        """Release the HTTP connection pool, stop the MCP servers and close the session log."""
        await close_extras(self)
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        if self.log:
            self.log.close()

    # -- the turn ---------------------------------------------------------------------------------

    def _commit(self, message: dict[str, Any], emit: Callable[[Event], None]) -> None:
        message = _utf8_safe(message)
        self.messages.append(message)
        if self.log:
            self.log.message(message)
        emit(MessageCommitted(message))

    async def _turn(self, prompt: str, emit: Callable[[Event], None]) -> None:
        steps = 0
        denials: list[dict[str, Any]] = []
        pending: list[dict[str, Any]] = []  # tool calls of the current step still without a result
        emit(TurnStarted(prompt, self.session_id))
        for notice in self._notices:  # e.g. the resumed session was recorded with another model
            emit(notice)
        self._notices.clear()

        def finish(status: TurnStatus, result: str = "", error: str | None = None, kind: str | None = None) -> None:
            if self.checkpoints is not None:
                from kimicode.checkpoints.hooks import end_turn

                end_turn(self, emit)
            if self.log:
                self.log.append({"type": "turn_end", "status": status, "steps": steps, "usage": dict(self.usage)})
                self.log.sync()
            emit(TurnFinished(status, result, steps, error, kind, tuple(denials)))

        if self.checkpoints is not None:
            self.checkpoints.begin_turn(prompt, len(self.messages))  # the user message goes at this index
        try:
            await start_extras(self, emit)  # MCP servers (bounded by their startup timeout)
            self._commit({"role": "user", "content": user_content(self, prompt)}, emit)  # + attached images
            repeats = _RepeatTracker()
            while True:
                if steps >= self.max_turns:
                    finish("max_turns", self._last_text(), f"stopped after reaching --max-turns {self.max_turns}")
                    return
                steps += 1
                emit(StepStarted(steps))
                completion = await self._model_step(emit)
                message = completion.message
                self._commit(message, emit)
                calls = list(message.get("tool_calls") or ())
                if completion.finish_reason == "content_filter":
                    finish("error", message.get("content") or "", "the provider's content filter blocked the response")
                    return
                if not calls:
                    if completion.finish_reason == "length":
                        emit(Notice("the answer was cut off at max_completion_tokens", "warning"))
                    finish("success", message.get("content") or "")
                    return
                pending[:] = calls
                stop = await self._run_tools(calls, completion.finish_reason, repeats, denials, pending, emit)
                if stop:
                    finish("max_turns", self._last_text(), stop)
                    return
        except asyncio.CancelledError:
            for call in pending:
                self._commit({"role": "tool", "tool_call_id": call.get("id", ""), "content": INTERRUPTED}, emit)
            pending.clear()
            finish("interrupted", self._last_text(), "interrupted by user")
            if not self._interrupted:
                raise  # cancelled from outside (library cancellation): propagate
        except LLMError as err:
            finish("error", self._last_text(), err.message, "transient" if err.transient else err.kind)
        except Exception as exc:  # a bug must end the turn with a valid history, never leave the caller waiting
            error = f"internal error: {type(exc).__name__}: {exc}"
            try:
                for call in pending:
                    result = {"role": "tool", "tool_call_id": call.get("id", ""), "content": f"Error: {error}"}
                    self._commit(result, emit)
                pending.clear()
                finish("error", self._last_text(), error, "internal")
            except Exception:
                emit(TurnFinished("error", self._last_text(), steps, error, "internal", tuple(denials)))

    def _last_text(self) -> str:
        for msg in reversed(self.messages):
            if msg.get("role") == "assistant" and msg.get("content"):
                return str(msg["content"])
        return ""

    async def _model_step(self, emit: Callable[[Event], None]) -> Any:
        from kimicode.llm.client import Completion, StreamDelta, StreamRetry

        tools = self.tools.schemas()
        kinds = {t.name: t.kind for t in self.tools}
        self.context.set_window(self.context_window, self.max_completion_tokens or self.profile.max_completion_tokens)
        await self.context.prepare(self.messages, tools, self.client, emit, kinds)  # prune/compact to fit
        after_compaction(self)  # keep the todo list visible to the model
        completion: Completion | None = None
        for attempt in range(2):
            try:
                async for ev in self.client.stream(self.messages, tools):
                    if isinstance(ev, StreamDelta):
                        if ev.kind == "reasoning":
                            emit(ReasoningDelta(ev.text))
                        elif ev.kind == "content":
                            emit(ContentDelta(ev.text))
                        else:
                            emit(ToolArgumentsDelta(ev.index, ev.text))
                    elif isinstance(ev, StreamRetry):
                        emit(Retrying(ev.attempt, ev.max_retries, ev.delay, ev.error))
                    else:
                        completion = ev
                break
            except LLMError as err:  # too long for the server after all: compact, then retry once
                if err.kind != "context_length" or attempt:
                    raise
                if not await self.context.recover(err, self.messages, tools, self.client, emit, kinds):
                    raise
        assert completion is not None
        prompt_t, completion_t, cached_t = usage_numbers(completion.usage)
        self.usage["prompt_tokens"] += prompt_t
        self.usage["completion_tokens"] += completion_t
        self.usage["cached_tokens"] += cached_t
        emit(
            UsageUpdated(
                prompt_t,
                completion_t,
                cached_t,
                self.usage["prompt_tokens"],
                self.usage["completion_tokens"],
                self.usage["cached_tokens"],
            )
        )
        if self.log and completion.usage:
            self.log.append({"type": "usage", "usage": completion.usage})
        used = self.context.observe(self.messages, tools, completion.message, completion.usage)
        emit(ContextUpdated(used, self.context_window, cached_t))
        return completion

    # -- tools ------------------------------------------------------------------------------------

    async def _run_tools(
        self,
        calls: list[dict[str, Any]],
        finish_reason: str | None,
        repeats: _RepeatTracker,
        denials: list[dict[str, Any]],
        pending: list[dict[str, Any]],
        emit: Callable[[Event], None],
    ) -> str | None:
        """Run one step's tool calls (consecutive reads concurrently), committing results in order.

        Returns a reason to stop the turn, or None.
        """
        prepared = [self._prepare(call, finish_reason) for call in calls]
        stop: str | None = None
        for prep in prepared:
            count = repeats.see(prep.signature)
            if count >= REPEAT_STOP:
                prep.error = (
                    f"Not run: this exact call was repeated {count} times in a row. The turn is stopped."
                )
                stop = f"stopped: the same {prep.name} call was repeated {count} times in a row"
            elif count >= REPEAT_WARN:
                prep.warning = (
                    f"\n\n[warning: you have made this exact call {count} times in a row; it will not give a "
                    "different result. Change your approach; at "
                    f"{REPEAT_STOP} repetitions the turn is stopped.]"
                )
        i = 0
        while i < len(prepared):
            batch = [prepared[i]]
            if prepared[i].concurrent:
                while i + len(batch) < len(prepared) and prepared[i + len(batch)].concurrent:
                    batch.append(prepared[i + len(batch)])
            # Permission decisions (and approvals) happen before anything in the batch runs.
            for prep in batch:
                await self._authorize(prep, denials, emit)
            if self.checkpoints is not None:
                from kimicode.checkpoints.hooks import before_change, may_change

                if any(p.error is None and p.tool is not None and may_change(self, p.tool, p.args) for p in batch):
                    await before_change(self, emit)  # a snapshot before the turn's first change
            results = await asyncio.gather(*(self._execute(prep, emit) for prep in batch))
            for prep, content in zip(batch, results, strict=True):
                self._commit({"role": "tool", "tool_call_id": prep.call_id, "content": content}, emit)
                pending[:] = [c for c in pending if c.get("id") != prep.call_id]
            i += len(batch)
        attached = [(prep.call_id, prep.name, prep.images) for prep in prepared if prep.images]
        if attached:  # images cannot go in tool messages: one user message after the step's results
            from kimicode.tools.images import images_message

            self._commit(images_message(attached), emit)
        return stop

    def _prepare(self, call: dict[str, Any], finish_reason: str | None) -> _Prepared:
        fn = call.get("function") or {}
        name = str(fn.get("name") or "")
        raw = fn.get("arguments") or ""
        prep = _Prepared(call_id=str(call.get("id") or ""), name=name, raw=raw)
        tool = self.tools.get(name)
        if tool is None:
            prep.error = f"Unknown tool {name!r}. Available tools: {', '.join(self.tools.names)}."
            return prep
        prep.tool = tool
        try:
            args = parse_arguments(raw)
        except ValueError as exc:
            if finish_reason == "length":
                prep.error = (
                    "The tool call's arguments were cut off because the response reached the output token "
                    "limit (max_completion_tokens). Send a smaller call, e.g. write the file in parts."
                )
            else:
                prep.error = f"Invalid arguments for {name}: {exc}. Received: {raw[:300]!r}"
            return prep
        problems = validate(tool.parameters, args)
        if problems:
            prep.error = f"Invalid arguments for {name}: " + "; ".join(problems[:5])
            return prep
        prep.args = args
        prep.canonical = json.dumps(args, sort_keys=True, ensure_ascii=False)
        prep.concurrent = tool.kind == "read"
        return prep

    async def _authorize(self, prep: _Prepared, denials: list[dict[str, Any]], emit: Callable[[Event], None]) -> None:
        if prep.error is not None or prep.tool is None:
            return
        tool = prep.tool
        decision = decide(tool, prep.args, self.permission_mode, self.ctx, self.policy)
        if decision.verdict == "allow":
            return
        reason = decision.reason
        approved = False
        user_reason = ""
        if decision.verdict == "ask" and self.approve is not None:
            request = ApprovalRequest(
                prep.call_id, tool.name, tool.kind, prep.args, reason, target_path(tool, prep.args, self.ctx)
            )
            answer = self.approve(request)
            if inspect.isawaitable(answer):
                answer = await answer
            if isinstance(answer, Approval):
                approved, user_reason = answer.approved, answer.reason
            else:
                approved = bool(answer)
        if approved:
            return
        headless = self.approve is None
        message = denial_message(tool, self.permission_mode, reason, headless, decision)
        if user_reason:
            message += f" The user said: {user_reason}"
        prep.error = message
        denial = {"tool_name": tool.name, "tool_use_id": prep.call_id, "tool_input": dict(prep.args), "reason": reason}
        denials.append(denial)
        emit(
            PermissionDenied(
                prep.call_id, tool.name, prep.args, reason, decision.suggestion, decision.by_rule, tool.kind
            )
        )

    async def _execute(self, prep: _Prepared, emit: Callable[[Event], None]) -> str:
        """Run one prepared call; every failure becomes an error result for the model."""
        if prep.error is not None or prep.tool is None:
            content = prep.error or "error"
            emit(ToolCallFinished(prep.call_id, prep.name, content, True, f"{prep.name}: error"))
            return content
        emit(ToolCallStarted(prep.call_id, prep.name, prep.args))
        started = time.monotonic()
        try:
            out = await prep.tool.fn(prep.args, self.ctx)
            result = out if isinstance(out, ToolResult) else ToolResult(str(out))
            prep.images = list(getattr(result, "images", ()) or ())  # an ImageResult (tools/images.py)
        except ToolError as exc:
            result = ToolResult(f"Error: {exc}", is_error=True, summary=f"{prep.name}: {exc}"[:200])
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug in a tool must not end the session
            result = ToolResult(
                f"Error: the tool failed unexpectedly ({type(exc).__name__}: {exc})",
                is_error=True,
                summary=f"{prep.name}: internal error",
            )
        content = self.context.cap_tool_output(result.content, f"{prep.name}-{prep.call_id}")
        if prep.warning:
            content += prep.warning
        emit(
            ToolCallFinished(
                prep.call_id,
                prep.name,
                content,
                result.is_error,
                result.summary,
                result.display,
                int((time.monotonic() - started) * 1000),
            )
        )
        return content


def _checkpoint_fields(agent: Agent) -> dict[str, Any]:
    entry = agent.checkpoints.last if agent.checkpoints is not None else None
    if entry is None or entry.before is None:
        return {}
    return {"changes": entry.changes.as_dict() if entry.after else None, "checkpoint": entry.before}


def _utf8_safe(message: dict[str, Any]) -> dict[str, Any]:
    """`message` itself when all its text can be encoded as UTF-8; otherwise a copy with the lone
    surrogates (e.g. a file name with invalid bytes echoed in an error) replaced by U+FFFD, since such
    text can be neither written to the session log nor sent to the model."""
    try:
        json.dumps(message, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return cast(dict[str, Any], _fix_text(message))
    return message


def _fix_text(value: Any) -> Any:
    if isinstance(value, str):
        try:  # bytes smuggled in by surrogateescape (os.fsdecode) come back as the bytes they were
            return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        except UnicodeEncodeError:
            return value.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    if isinstance(value, dict):
        return {_fix_text(k): _fix_text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_fix_text(v) for v in value]
    return value


@dataclass
class _Prepared:
    call_id: str
    name: str
    raw: str
    tool: Tool | None = None
    args: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    warning: str = ""
    concurrent: bool = False
    canonical: str | None = None
    images: list[Mapping[str, Any]] = field(default_factory=list)

    @property
    def signature(self) -> str:
        return f"{self.name}\x00{self.canonical if self.canonical is not None else self.raw.strip()}"


class _RepeatTracker:
    """Counts identical consecutive tool calls across the steps of a turn."""

    def __init__(self) -> None:
        self.last: str | None = None
        self.count = 0

    def see(self, signature: str) -> int:
        if signature == self.last:
            self.count += 1
        else:
            self.last, self.count = signature, 1
        return self.count

