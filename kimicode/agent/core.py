"""The agent: the turn loop that alternates model steps and tool calls, emitting typed events.

One `Agent` is one conversation. `stream()` yields events for a turn; `run()` and `run_sync()` wrap it.
The headless command line, the terminal UI and library users all consume the same events. Its settings
are an `AgentOptions` (agent/options.py), turned into working parts by agent/builder.py; a step's tool
calls are run by agent/toolcalls.py.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Coroutine, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from kimicode import errors
from kimicode.agent import hooking
from kimicode.agent.builder import build_parts, check_callbacks, check_collaborators, switch_policy
from kimicode.agent.checkpointing import end_turn
from kimicode.agent.closing import close_after_run
from kimicode.agent.ecosystem import after_compaction, choose_edit_tool, install
from kimicode.agent.interrupted import NO_ANSWER, retract_unsent
from kimicode.agent.modes import note_needed, turn_message
from kimicode.agent.options import AgentOptions, OptionAttribute, option_names
from kimicode.agent.outgoing import library_event, masked_event, utf8_safe
from kimicode.agent.parts import Part, Parts, Setting
from kimicode.agent.results import Approval, ApprovalRequest, ApproveFn, ApproveResult, RunResult, collect, turn_error
from kimicode.agent.step import model_step, truncation
from kimicode.agent.streams import same_loop
from kimicode.agent.structured import OutputSpec, structured_turns
from kimicode.agent.switch import ModelSwitches, switch_notice
from kimicode.agent.toolcalls import RepeatTracker, run_tools
from kimicode.branches.api import Explorer
from kimicode.config.choices import EFFORTS, PERMISSION_MODES, SWITCH_POLICIES, SwitchPolicy, check_choice
from kimicode.config.settings import switch_model
from kimicode.context.accounting import Breakdown
from kimicode.context.compact import CompactionResult
from kimicode.events import (
    ContextUpdated,
    Event,
    MessageCommitted,
    Notice,
    StepStarted,
    TurnFinished,
    TurnStarted,
    TurnStatus,
    frozen,
)
from kimicode.llm.discovery import resolve_window
from kimicode.llm.errors import LLMError
from kimicode.llm.profiles import profile_for, profile_with
from kimicode.session.log import INTERRUPTED, SessionWriteError

if TYPE_CHECKING:
    from kimicode.agent.ecosystem import Extras
    from kimicode.agent.streams import Emit, EventStream
    from kimicode.checkpoints.session import SessionCheckpoints
    from kimicode.config.choices import Scope
    from kimicode.config.endpoint import Endpoint
    from kimicode.config.redact import Masker
    from kimicode.config.settings import ModelConfig, Settings
    from kimicode.context.manager import ContextManager
    from kimicode.llm.profiles import ModelProfile
    from kimicode.llm.protocol import ModelClient
    from kimicode.permissions.policy import Policy
    from kimicode.session.log import SessionLog
    from kimicode.session.protocol import SessionStore
    from kimicode.tools.base import Tool, ToolContext
    from kimicode.tools.registry import ToolRegistry
    from kimicode.tools.sandbox import Sandbox

__all__ = ["Agent", "AgentOptions", "Approval", "ApprovalRequest", "ApproveFn", "ApproveResult", "RunResult"]

T = TypeVar("T")


class Agent(Explorer):
    """A multi-turn coding agent over an OpenAI-compatible endpoint.

    `Agent(options, tools=..., approve=..., on_event=...)`: the settings are an `AgentOptions` (keyword
    settings, `Agent(model="x", max_turns=3)`, build or change it); the rest are collaborators. Calling
    `run` again continues the same conversation. All network and tool work happens inside `stream`;
    constructing an Agent reads no file (unless the options came from `AgentOptions.from_workspace`).
    """

    max_turns = OptionAttribute[int]()
    repeat_limit = OptionAttribute[int | None]()
    """Identical consecutive tool calls that end the turn (status `repeat_limit`); None: no limit."""
    tool_timeout = OptionAttribute[float | None]()
    """Seconds any tool call may run (a tool's own `timeout` wins); None: no limit."""
    max_retries = OptionAttribute[int]()
    retry_base_delay = OptionAttribute[float]()
    request_timeout = OptionAttribute[float]()
    tool_output_cap = OptionAttribute[int]()
    headless = OptionAttribute[bool]()

    # the parts (agent/parts.py), made by agent/builder.py: `agent.context` is `agent.parts.context`
    options: Part[AgentOptions] = Part()
    """The settings; `set_model`, `set_thinking` and `set_permission_mode` keep them current."""
    tools: Part[ToolRegistry] = Part()
    log: Part[SessionLog | None] = Part()
    ctx: Part[ToolContext] = Part()
    usage: Part[dict[str, int]] = Part()
    context: Part[ContextManager] = Part()
    policy: Part[Policy] = Part()
    sandbox: Part[Sandbox | None] = Part()
    sandbox_warning: Part[str | None] = Part()
    masker: Part[Masker] = Part()
    messages: Part[list[dict[str, Any]]] = Part()
    extras: Part[Extras] = Part()
    checkpoints: Part[SessionCheckpoints | None] = Part()
    window_discovered: Part[bool] = Part()
    # the resolved settings (`agent.endpoint` is `agent.parts.resolved.endpoint`)
    settings: Setting[Settings] = Setting()
    endpoint: Setting[Endpoint] = Setting()
    model_config: Setting[ModelConfig] = Setting()
    profile: Setting[ModelProfile] = Setting()
    workspace: Setting[Path] = Setting()
    home: Setting[Path] = Setting()
    session_id: Setting[str] = Setting()
    origin: Setting[str] = Setting()
    scope: Setting[Scope] = Setting()
    thinking: Setting[str | None] = Setting()
    context_window: Setting[int] = Setting()
    window_origin: Setting[str] = Setting()
    max_completion_tokens: Setting[int | None] = Setting()

    def __init__(
        self,
        options: AgentOptions | None = None,
        *,
        tools: Iterable[Tool] | None = None,
        extra_tools: Iterable[Tool] = (),
        approve: ApproveFn | None = None,
        on_event: Callable[[Event], None] | None = None,
        messages: list[dict[str, Any]] | None = None,
        client: ModelClient | None = None,
        session_store: SessionStore | None = None,
        **settings: Any,
    ) -> None:
        if options is not None and not isinstance(options, AgentOptions):
            raise TypeError(f"Agent() takes an AgentOptions as its only positional argument (got {options!r})")
        base = options if options is not None else AgentOptions()
        check_callbacks(approve, on_event)
        check_collaborators(client, session_store)
        self.approve = approve
        self.on_event = on_event
        self._worker: asyncio.Task[Any] | None = None
        self._owner: weakref.ref[EventStream[Any]] | None = None  # the stream consuming `_worker`
        self.interrupted = False  # `interrupt()` stopped the running turn (not a library cancellation)
        self._turn_text = ""
        self.resume_warning: str | None = None
        """Set by `resume` when the session was recorded with another model (also sent as a Notice)."""
        self._notices: list[Notice] = []  # emitted at the start of the next turn
        self.turn_emit: Callable[[Event], None] | None = None
        """The running turn's emit (subagents report through it)."""
        self.turn_denials: list[dict[str, Any]] = []
        """The running turn's permission denials (subagents add theirs)."""
        self.switches = ModelSwitches()
        """Which model wrote each assistant message, and a pending switch compaction (agent/switch.py)."""
        self.parts: Parts = build_parts(
            base.replace(**settings) if settings else base,
            tools=tools,
            extra_tools=extra_tools,
            messages=messages,
            client=client,
            session_store=session_store,
        )
        """What the agent is made of (agent/parts.py); its attributes above are these parts."""
        self.extras = install(self, default_tools=tools is None)

    # -- settings ---------------------------------------------------------------------------------

    @property
    def project_instructions(self) -> bool:
        """Whether AGENTS.md / CLAUDE.md files were added to the prompt."""
        return self.options.project_instructions

    @property
    def permission_mode(self) -> str:
        """What may run without asking; assigning it is `set_permission_mode`."""
        return self.options.permission_mode

    @permission_mode.setter
    def permission_mode(self, mode: str) -> None:
        self.set_permission_mode(mode)

    @property
    def busy(self) -> bool:
        """True while a turn or a compaction runs."""
        return self._worker is not None and not self._worker.done()

    def notify(self, text: str, level: Literal["info", "warning", "error"] = "info") -> None:
        """Queue a Notice for the start of the next turn."""
        self._notices.append(Notice(text, level))

    def record_settings(self, reason: str, **extra: Any) -> None:
        """Record the model and settings in effect from now on (resume, fork, a change of model, effort or
        permission mode) in the session log."""
        if self.log:
            self.log.append(
                {"type": "settings", "reason": reason, **self.parts.resolved.record(self.permission_mode), **extra}
            )

    @property
    def client(self) -> ModelClient:
        """The model client: the caller's own (`client=`), else kimicode's, made on first use."""
        return self.parts.client.get()

    async def ensure_client(self) -> ModelClient:
        """The client, made in a worker thread the first time (importing the HTTP stack is not free)."""
        return await self.parts.client.ready()

    # -- public API -------------------------------------------------------------------------------

    @overload
    def stream(self, prompt: str, *, output_type: type[T]) -> EventStream[T | None]: ...
    @overload
    def stream(self, prompt: str, *, output_type: Mapping[str, Any] | None = None) -> EventStream[Any]: ...
    def stream(self, prompt: str, *, output_type: type[Any] | Mapping[str, Any] | None = None) -> EventStream[Any]:
        """Run one turn for `prompt`, yielding every event as it happens; the last is TurnFinished.

        The turn starts at the first iteration (or `async with`). Leaving early (`break`, an exception,
        `aclose()`, the consumer being cancelled) cancels the turn: unfinished tool calls get an
        `interrupted` result and the agent can run again. Each event is queued before `on_event` sees it,
        and a raising hook is reported (a Notice, `RunResult.hook_errors`) without affecting the turn.
        With `output_type` (as for `run`) each correction is a turn of its own and the last TurnFinished
        carries `output` (awaiting the stream returns it), or the status `invalid_output`.
        """
        if not isinstance(prompt, str):  # before anything is written or sent
            raise TypeError(f"the prompt must be a str (got {type(prompt).__name__})")
        if output_type is None:
            return self._event_stream(lambda emit: self._turn(prompt, emit))
        spec = OutputSpec.of(output_type)  # a bad type fails here, before anything is sent
        return self._event_stream(lambda emit: structured_turns(self, spec, prompt, emit, self._turn))

    def _event_stream(self, work: Callable[[Emit], Coroutine[Any, Any, T]]) -> EventStream[T]:
        from kimicode.agent.streams import EventStream

        def on_start(task: asyncio.Task[Any]) -> None:
            self._worker, self._owner = task, ref
            task.add_done_callback(
                lambda t: self.__dict__.update(_worker=None, turn_emit=None) if self._worker is t else None
            )  # a finished task (and its emit) holds its stream and queue

        stream = EventStream(work, lambda: self.on_event, self._claim, on_start, self._outgoing)
        ref = weakref.ref(stream)
        return stream

    def _outgoing(self, event: Event) -> Event:
        """Every event once, before the consumer and the hook see it: known secrets masked (and, for a library
        caller, options named instead of the command line's flags)."""
        event = masked_event(event, self.masker)
        return library_event(event, option_names()) if self.origin == "library" else event

    async def _claim(self, stream: EventStream[Any]) -> None:
        """Before new work starts: refuse while a live consumer runs a turn; finish an abandoned one."""
        worker = self._worker
        if worker is not None and not worker.done():
            same_loop(worker)
            owner = self._owner() if self._owner is not None else None
            if owner is not None and owner is not stream and not owner.closed:
                if owner.consumer is not asyncio.current_task() or owner.entered:  # still being consumed
                    raise errors.UsageError("a turn is already running on this agent")
                owner.closed = True  # the task that consumed it moved on (`break` without `async with`)
            worker.cancel()  # its consumer left without closing it: stop it and let it clean up
            await asyncio.wait([worker])
        self.interrupted = False

    @overload
    async def run(self, prompt: str, *, output_type: type[T]) -> RunResult[T]: ...
    @overload
    async def run(self, prompt: str, *, output_type: Mapping[str, Any] | None = None) -> RunResult[Any]: ...
    async def run(self, prompt: str, *, output_type: type[Any] | Mapping[str, Any] | None = None) -> RunResult[Any]:
        """Run one turn and return its result (the conversation continues on the next call).

        With `output_type` (a pydantic model, any type pydantic describes, or a JSON Schema dict) the answer
        must be JSON of that type (validated with jsonschema; an invalid answer is sent back, 3 answers in
        all): `RunResult.output`, else the status `invalid_output` (kimicode/agent/structured.py)."""
        return await collect(
            self,
            self.stream(prompt, output_type=output_type),
            lambda usage: self.parts.resolved.cost(self.options, usage),
        )

    @overload
    def run_sync(self, prompt: str, *, output_type: type[T]) -> RunResult[T]: ...
    @overload
    def run_sync(self, prompt: str, *, output_type: Mapping[str, Any] | None = None) -> RunResult[Any]: ...
    def run_sync(self, prompt: str, *, output_type: type[Any] | Mapping[str, Any] | None = None) -> RunResult[Any]:
        """`run` for scripts without an event loop (closes the agent's connections afterwards).

        Inside a running event loop (async code, a notebook) it raises `UsageError`: `await agent.run()`.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            if self.busy:  # running on an event loop in another thread: neither join nor disturb it
                raise errors.UsageError("a turn is already running on this agent (in another thread)") from None
            return asyncio.run(self._run_and_close(prompt, output_type))
        raise errors.UsageError(
            "run_sync() cannot be used inside a running event loop (async code, a Jupyter notebook): "
            "use `await agent.run(prompt)` instead"
        )

    async def _run_and_close(self, prompt: str, output_type: Any) -> RunResult[Any]:
        try:
            return await self.run(prompt, output_type=output_type)
        finally:
            await close_after_run(self)  # a failure to close is a warning: the turn's result is not lost

    @classmethod
    def resume(cls, session_id: str, *, fork: bool = False, **kwargs: Any) -> Agent:
        """An Agent continuing a saved session (id or unique prefix), like `kimicode -r ID`.

        Takes `options=` (an AgentOptions, or a function of the workspace such as
        `lambda ws: AgentOptions.from_workspace(ws)`) and the constructor's keyword arguments. The model,
        thinking effort and workspace default to the recorded ones; the permission mode does not carry
        over (a session recorded in `yolo` resumes in the mode it is given). The session keeps its id
        (and so its prompt cache key) unless `fork=True`, which copies the history into a new session and
        leaves the original untouched. Raises `SessionError` (a ValueError) for an unknown id.
        """
        from kimicode.agent.resume import resume_agent

        return resume_agent(cls, session_id, fork=fork, **kwargs)

    def fork(self, **overrides: Any) -> Agent:
        """A new Agent with a new session id and a copy of this conversation (`--fork`).

        It has this agent's settings unless `overrides` (constructor arguments) change them; the two
        conversations continue independently. `workspace="worktree"` gives the fork its own working tree
        (a git worktree on a new branch; a copy outside git), `"copy"` a copy, `"shared"` (or a path)
        the same tree: see docs/checkpoints.md.
        """
        from kimicode.agent.resume import fork_agent

        return fork_agent(self, **overrides)

    async def rewind(
        self, turn: int | None = None, *, files: bool = True, conversation: bool = True, force: bool = False
    ) -> Any:
        """Undo turn `turn` and every turn after it (default: the last turn): put back the files they
        changed (`files`) and take them out of the history (`conversation`). Files changed outside
        kimicode since are not overwritten (RestoreConflict) unless `force`. See docs/checkpoints.md."""
        if self._worker is not None and not self._worker.done():
            raise errors.UsageError("cannot rewind while a turn is running")
        from kimicode.agent.checkpointing import rewind

        return await rewind(self, turn, files=files, conversation=conversation, force=force)

    def set_model(self, model: str, *, on_switch: SwitchPolicy | None = None) -> None:
        """Switch the model; earlier messages are treated as `on_switch` (else as configured) says."""
        check_choice("on_switch", on_switch, SWITCH_POLICIES, optional=True)
        if (old := self.endpoint.model) != model and self.busy:
            raise errors.UsageError("cannot switch the model while a turn is running: wait for it, or interrupt() it")
        self.endpoint, self.model_config = switch_model(self.settings, self.endpoint, model)
        self.options = self.options.replace(model=self.model_config.name)
        self.profile = profile_with(profile_for(self.endpoint.model), self.model_config)
        self.context_window, self.window_origin = resolve_window(
            None, self.model_config.context_window, self.endpoint.model, self.profile.context_window
        )
        self.window_discovered = self.parts.client.given is not None  # a caller's client: no server to ask
        self.context.forget_window()
        if self.extras.default_tools:  # e.g. apply_patch instead of edit_file for GPT models
            choose_edit_tool(self.tools, self.model_config)
        self.reset_client()
        if old == self.endpoint.model:
            return self.record_settings("model")
        self.notify(self.apply_switch(old, on_switch))

    def apply_switch(self, old: str, policy: SwitchPolicy | None = None) -> str:
        """Record and apply a move from model `old` with `policy` (None: as configured; agent/switch.py);
        returns the line that says what it did."""
        policy = policy or switch_policy(self.options, self.model_config, self.profile)
        self.record_settings("model", on_switch=policy, switched_from=old)
        if stripped := self.switches.apply(policy, self.messages, self.endpoint.model, self.log):
            self.context.used = self.context.estimate(self.messages, self.tools.schemas())
        return switch_notice(old, self.endpoint.model, policy, stripped)

    def set_api_key(self, key: str, source: str = "config.toml") -> None:
        """Send `key` from the next request on (`/login` after a refused key); it stays in memory only."""
        from dataclasses import replace

        self.endpoint = replace(self.endpoint, api_key=key, key_source=source)
        self.reset_client()

    def set_thinking(self, effort: str | None) -> None:
        """Change the reasoning effort (`low`, `high`, `max`, or None for the model's default)."""
        if effort is not None and effort not in EFFORTS:
            raise ValueError(f"thinking must be low, high or max (got {effort!r})")
        self.options = self.options.replace(thinking=effort)
        self.thinking = effort
        self.reset_client()
        self.record_settings("thinking")

    def set_permission_mode(self, mode: str) -> None:
        """Change what may run without asking (`default`, `accept-edits`, `plan`, `yolo`) from the next
        tool call on; the model is told at its next step, and the change is logged."""
        check_choice("permission_mode", mode, PERMISSION_MODES)
        if mode == self.options.permission_mode:
            return
        self.options = self.options.replace(permission_mode=mode)
        self.record_settings("permission_mode")

    def forget_session_rules(self) -> None:
        """Drop the rules added by `Approval.remember` answers (the configured rules stay)."""
        self.policy = self.policy.without_session_rules()

    def reset_client(self) -> None:
        """Drop kimicode's model client; the next request makes one for the current endpoint, key and
        options (a caller's own client stays)."""
        self.parts.client.reset()

    def compact(self, instructions: str | None = None) -> EventStream[CompactionResult | None]:
        """Summarise the older history now (`/compact`); `instructions` tell the summariser what to keep.

        `await agent.compact()` returns what was replaced, or None when there was nothing to compact;
        `async for event in agent.compact()` streams its events (Notice, ContextUpdated, ...) like a turn,
        with the same guarantees (`on_event` sees them too; leaving early cancels the compaction).
        """
        return self._event_stream(lambda emit: self._compact(instructions, emit))

    async def _compact(self, instructions: str | None, emit: Emit) -> CompactionResult | None:
        client = await self.ensure_client()
        self.context.set_window(self.context_window, self.answer_reserve)
        kinds = {t.name: t.kind for t in self.tools}
        result = await self.context.compact(
            self.messages, self.tools.schemas(), client, emit, instructions=instructions, tool_kinds=kinds
        )
        after_compaction(self)
        if result is not None:
            self.context.used = self.context.estimate(self.messages, self.tools.schemas())
            emit(ContextUpdated(self.context.used, self.context_window))
        if self.log:
            self.log.sync()
        return result

    @property
    def window_source(self) -> str:
        """Where the context window came from: flag, config, server, known, default, or learnt (from a
        server's context-length error in this session)."""
        if self.context.server_limit and self.context.server_limit < self.context_window:
            return "learnt"
        return self.window_origin

    @property
    def answer_reserve(self) -> int:
        """Tokens reserved for the answer: `max_completion_tokens`, else the model profile's (the one fallback)."""
        return self.parts.resolved.answer_reserve

    @property
    def effective_window(self) -> int:
        """The window requests are fitted to: the configured one, or smaller when the server said so."""
        return min(self.context_window, self.context.server_limit or self.context_window)

    def context_breakdown(self) -> Breakdown:
        """Estimated tokens of the next request by category (system, tools, user, assistant, ...)."""
        return self.context.breakdown(self.messages, self.tools.schemas())

    def interrupt(self) -> None:
        """Stop the running turn (the stream or the running tools); history stays valid."""
        self.interrupted = True
        if self._worker is not None and not self._worker.done():
            self._worker.cancel()

    async def aclose(self) -> None:
        """Release the HTTP connection pool, stop the MCP servers and close the session log.

        A turn or compaction still running (its stream abandoned) is cancelled and waited for first."""
        worker = self._worker
        if worker is not None and not worker.done():
            same_loop(worker)
            self.interrupted = True  # like interrupt(): a run() in flight returns `interrupted`
            worker.cancel()
            await asyncio.wait([worker])
        await self.extras.hooking.session_end("exit")  # SessionEnd hooks
        try:
            await self.extras.aclose()
            await self.parts.client.aclose()
        finally:  # a client (the caller's) failing to close must not leave the session log open and locked
            if self.log:
                self.log.close()

    # -- the turn ---------------------------------------------------------------------------------

    def commit(self, message: dict[str, Any], emit: Callable[[Event], None]) -> None:
        """The one way a message enters the history: the session log and the stream get it too."""
        message = utf8_safe(message)
        if self.log:  # first: a message the log refused is not in the history either (one copy of each result)
            self.log.message(message, self.endpoint.model)
        self.messages.append(message)
        self.switches.authorship.record(message, self.endpoint.model)
        if message.get("role") == "assistant" and message.get("content"):
            self._turn_text = str(message["content"])
        emit(MessageCommitted(frozen(message)))  # one read-only copy for the stream, the hook and RunResult

    def _answer_pending(self, pending: list[dict[str, Any]], content: str, emit: Emit | None) -> None:
        """Give each call of the step still without a result `content` (only kept in memory, not logged, when
        `emit` is None: the log cannot be written), so the history stays valid."""
        for call in pending:
            message = {"role": "tool", "tool_call_id": call.get("id", ""), "content": content}
            if emit is None:
                self.messages.append(message)
            else:
                self.commit(message, emit)
        pending.clear()

    def _log_turn_end(self, status: str, steps: int) -> str | None:
        """Log the turn's end; why the log refused it (raising in `finish`, inside an `except`, escaped run())."""
        try:
            if self.log:
                self.log.append({"type": "turn_end", "status": status, "steps": steps, "usage": dict(self.usage)})
                self.log.sync()
        except SessionWriteError as err:
            return str(err)
        return None

    async def _open_turn(self, prompt: str, emit: Callable[[Event], None]) -> None:
        """A turn's start up to its user message: MCP servers started, a pending switch's compaction, the
        prompt hooks, and the user message committed with kimicode's notes (the permission mode's, the hooks')."""
        await self.extras.start(self.tools, emit)  # MCP servers (bounded by their startup timeout)
        if self.switches.compact_pending:  # the `compact` switch policy: summarise before the new model answers
            await self.switches.compact(
                lambda: self._compact(None, emit),
                self.messages,
                self.endpoint.model,
                self.log,
                self.checkpoints.current if self.checkpoints else None,
            )
        notes = await self.extras.hooking.prompt_submitted(prompt, emit)  # SessionStart, UserPromptSubmit hooks
        if self.messages[-1].get("role") == "user":  # the last turn ended before the model answered
            self.commit({"role": "assistant", "content": NO_ANSWER}, emit)  # no two user messages in a row
        mode = note_needed(self.messages, self.permission_mode)  # the mode changed (or a session starts in one)
        self.commit(turn_message(self.extras.user_content(prompt), [*([mode] if mode else []), *notes]), emit)

    async def _turn(self, prompt: str, emit: Callable[[Event], None]) -> None:
        steps = 0
        denials: list[dict[str, Any]] = []
        self.turn_denials = denials
        self.turn_emit = emit  # subagents (tools/task.py) report through the parent's stream
        pending: list[dict[str, Any]] = []  # tool calls of the current step still without a result
        self._turn_text = ""
        emit(TurnStarted(prompt, self.session_id))
        late = [Notice(text, "warning") for text in self.parts.take_warnings()]  # building, background threads
        for notice in [*late, *self._notices]:  # e.g. the resumed session was recorded with another model
            emit(notice)
        self._notices.clear()

        def finish(status: TurnStatus, result: str = "", error: str | None = None, kind: str | None = None) -> None:
            end_turn(self.checkpoints, emit)  # the turn's checkpoint (none when they are off)
            info = turn_error(error, kind or status)  # with the status and retry-after of a model error
            if (refused := self._log_turn_end(status, steps)) and info is None:  # else the turn's own failure
                status, result, kind, info = "error", "", "session_log", turn_error(refused, "session_log")
            emit(TurnFinished(status, result, steps, info, kind, tuple(denials)))

        if self.checkpoints is not None:
            self.checkpoints.begin_turn(prompt, len(self.messages), noted=True)  # the user message's index
        asked: dict[str, Any] | None = None  # the turn's user message, once committed
        try:
            await self._open_turn(prompt, emit)
            asked = self.messages[-1]  # kimicode's notes first, the user's words last (agent/modes.py)
            repeats = RepeatTracker(self.repeat_limit)
            while True:
                if steps >= self.max_turns:
                    finish("max_turns", self.turn_text, f"stopped after reaching --max-turns {self.max_turns}")
                    return
                if (note := note_needed(self.messages, self.permission_mode)) is not None:
                    self.commit({"role": "user", "content": note}, emit)  # changed mid-turn: after the tool results
                steps += 1
                emit(StepStarted(steps))
                completion = await model_step(self, emit)
                message = completion.message
                self.commit(message, emit)
                calls = list(message.get("tool_calls") or ())
                if completion.finish_reason == "content_filter":
                    blocked = "the provider's content filter blocked the response"
                    finish("error", message.get("content") or "", blocked, "content_filter")
                    return
                if not calls:
                    if cut := truncation(self.context, completion.finish_reason):  # cut by a limit the user did not set
                        return finish("error", message.get("content") or "", cut, "truncated")
                    if (why := await self.extras.hooking.stop_blocked(message.get("content") or "", emit)) is not None:
                        self.commit({"role": "user", "content": f"[Stop hook] {why}"}, emit)  # back to work
                        continue
                    if completion.finish_reason == "length":
                        emit(Notice("the answer was cut off at max_completion_tokens", "warning"))
                    finish("success", message.get("content") or "")
                    return
                pending[:] = calls
                stop = await run_tools(self, calls, completion.finish_reason, repeats, denials, pending, emit)
                if stop:
                    finish("repeat_limit", self.turn_text, stop)
                    return
                self.extras.hooking.check_stop()  # a hook answered `continue: false`: raises HookStop
        except hooking.HookStop as stop:
            finish("error", self.turn_text, str(stop), stop.kind)
        except asyncio.CancelledError:
            self._answer_pending(pending, INTERRUPTED, emit)
            finish("interrupted", self.turn_text, "interrupted by user")
            if not self.interrupted:
                raise  # cancelled from outside (library cancellation): propagate
        except LLMError as err:  # a request that cannot fit leaves no unanswered prompt to grow the next one
            if err.kind == "context_length" and (unsent := retract_unsent(self, asked)):
                emit(Notice(unsent, "warning"))
            finish("error", "", err.message, "transient" if err.transient else err.kind)  # no stale answer
        except SessionWriteError as err:  # a full disk or unwritable KIMICODE_HOME: stop, say it once
            self._answer_pending(pending, INTERRUPTED, None)
            finish("error", "", str(err), "session_log")
        except Exception as exc:  # a bug must end the turn with a valid history, never leave the caller waiting
            error = f"internal error: {type(exc).__name__}: {exc}"
            try:
                self._answer_pending(pending, f"Error: {error}", emit)
                finish("error", "", error, "internal")
            except Exception:
                emit(TurnFinished("error", "", steps, error, "internal", tuple(denials)))

    @property
    def turn_text(self) -> str:
        """The last assistant text of the current (or last) turn: "" when it has none, never an older answer.
        What a caller that stopped a turn from outside (a batch timeout) reports as its partial result."""
        return self._turn_text
