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
from typing import TYPE_CHECKING, Any

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
from kimicode.config import kimicode_home, resolve_endpoint
from kimicode.context.output import DEFAULT_CAP_CHARS, cap_output
from kimicode.llm.accumulate import usage_numbers
from kimicode.llm.errors import LLMError
from kimicode.llm.profiles import profile_for
from kimicode.prompts import load_prompt
from kimicode.session.log import INTERRUPTED, SessionLog, new_session_id
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
        thinking: str | None = None,
        context_window: int | None = None,
        max_completion_tokens: int | None = None,
        max_turns: int = 200,
        max_retries: int = 5,
        retry_base_delay: float = 1.0,
        request_timeout: float = 300.0,
        tool_output_cap: int = DEFAULT_CAP_CHARS,
        home: str | Path | None = None,
        persist: bool = True,
        session_id: str | None = None,
        messages: list[dict[str, Any]] | None = None,
        on_event: Callable[[Event], None] | None = None,
        headless: bool = False,
    ) -> None:
        if permission_mode not in MODES:
            raise ValueError(f"permission_mode must be one of {', '.join(MODES)} (got {permission_mode!r})")
        if thinking is not None and thinking not in ("low", "high", "max"):
            raise ValueError(f"thinking must be low, high or max (got {thinking!r})")
        self.endpoint = resolve_endpoint(model=model, base_url=base_url, api_key=api_key)
        self.profile = profile_for(self.endpoint.model)
        self.workspace = Path(workspace).expanduser().resolve()
        if not self.workspace.is_dir():
            raise ValueError(f"workspace is not a directory: {self.workspace}")
        self.tools = ToolRegistry(builtin_tools() if tools is None else tools)
        for t in extra_tools:
            self.tools.add(t)
        self.permission_mode = permission_mode
        self.approve = approve
        self.headless = headless
        self.thinking = thinking
        self.context_window = context_window or self.profile.context_window
        self.max_completion_tokens = max_completion_tokens
        self.max_turns = max_turns
        self.max_retries = max_retries
        self.retry_base_delay = retry_base_delay
        self.request_timeout = request_timeout
        self.tool_output_cap = tool_output_cap
        self.on_event = on_event
        self.home = Path(home).expanduser() if home is not None else kimicode_home()
        self.session_id = session_id or new_session_id()
        self.log: SessionLog | None = SessionLog(self.home / "sessions", self.session_id) if persist else None
        spill = self.log.spill_dir if self.log else None
        self.ctx = ToolContext(workspace=self.workspace, session_dir=spill)
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0}
        self._client: ChatClient | None = None
        self._worker: asyncio.Task[None] | None = None
        self._interrupted = False
        if messages is not None:
            self.messages: list[dict[str, Any]] = messages
        else:
            self.messages = [{"role": "system", "content": self._system_prompt(system_prompt, append_system_prompt)}]
            self._log_meta()
            if self.log:
                self.log.message(self.messages[0])

    # -- setup ------------------------------------------------------------------------------------

    def _system_prompt(self, replace: str | None, append: str | None) -> str:
        text = replace if replace is not None else load_prompt("system.md")
        text = (
            text.replace("{workspace}", str(self.workspace))
            .replace("{platform}", f"{platform.system()} {platform.machine()}")
            .replace("{date}", date.today().isoformat())
        )
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
        first = len(self.messages)
        finished: TurnFinished | None = None
        async for event in self.stream(prompt):
            if isinstance(event, TurnFinished):
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
            messages=self.messages[first:],
        )

    def run_sync(self, prompt: str) -> RunResult:
        """`run` for scripts without an event loop."""
        return asyncio.run(self._run_and_close(prompt))

    async def _run_and_close(self, prompt: str) -> RunResult:
        try:
            return await self.run(prompt)
        finally:
            await self.aclose()

    def interrupt(self) -> None:
        """Stop the running turn (the stream or the running tools); history stays valid."""
        self._interrupted = True
        if self._worker is not None and not self._worker.done():
            self._worker.cancel()

    async def aclose(self) -> None:
        """Release the HTTP connection pool and close the session log."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        if self.log:
            self.log.close()

    # -- the turn ---------------------------------------------------------------------------------

    def _commit(self, message: dict[str, Any], emit: Callable[[Event], None]) -> None:
        self.messages.append(message)
        if self.log:
            self.log.message(message)
        emit(MessageCommitted(message))

    async def _turn(self, prompt: str, emit: Callable[[Event], None]) -> None:
        steps = 0
        denials: list[dict[str, Any]] = []
        pending: list[dict[str, Any]] = []  # tool calls of the current step still without a result
        emit(TurnStarted(prompt, self.session_id))

        def finish(status: TurnStatus, result: str = "", error: str | None = None, kind: str | None = None) -> None:
            if self.log:
                self.log.append({"type": "turn_end", "status": status, "steps": steps, "usage": dict(self.usage)})
                self.log.sync()
            emit(TurnFinished(status, result, steps, error, kind, tuple(denials)))

        try:
            self._commit({"role": "user", "content": prompt}, emit)
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

    def _last_text(self) -> str:
        for msg in reversed(self.messages):
            if msg.get("role") == "assistant" and msg.get("content"):
                return str(msg["content"])
        return ""

    async def _model_step(self, emit: Callable[[Event], None]) -> Any:
        from kimicode.llm.client import Completion, StreamDelta, StreamRetry

        completion: Completion | None = None
        async for ev in self.client.stream(self.messages, self.tools.schemas()):
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
        if prompt_t:
            emit(ContextUpdated(prompt_t + completion_t, self.context_window, cached_t))
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
            results = await asyncio.gather(*(self._execute(prep, emit) for prep in batch))
            for prep, content in zip(batch, results, strict=True):
                self._commit({"role": "tool", "tool_call_id": prep.call_id, "content": content}, emit)
                pending[:] = [c for c in pending if c.get("id") != prep.call_id]
            i += len(batch)
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
        decision = decide(tool, prep.args, self.permission_mode, self.ctx)
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
        message = denial_message(tool, self.permission_mode, reason, headless)
        if user_reason:
            message += f" The user said: {user_reason}"
        prep.error = message
        denial = {"tool_name": tool.name, "tool_use_id": prep.call_id, "tool_input": dict(prep.args), "reason": reason}
        denials.append(denial)
        emit(PermissionDenied(prep.call_id, tool.name, prep.args, reason))

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
        content = cap_output(result.content, self.tool_output_cap, self.ctx.session_dir, f"{prep.name}-{prep.call_id}")
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

