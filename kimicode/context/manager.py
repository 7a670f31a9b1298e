"""The context manager: one object per agent that keeps every request within the model's window.

Before each request `prepare` estimates the request (anchored on the server's last count), prunes old
tool results at the prune threshold, compacts at the compaction threshold, and refuses to send a
request that still would not fit. After each response `observe` feeds the server's usage back.
Every change to the history replaces messages (never mutates them), is logged to the session log as
a `prune` or `compaction` record (see `replay.py`) and is announced with a `Notice`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from kimicode.context.accounting import Breakdown, TokenAccountant
from kimicode.context.budget import COMPLETION_FLOOR, Budget, fit_reserve
from kimicode.context.compact import CompactionResult, CompactionSettings, compact_history
from kimicode.context.output import DEFAULT_CAP_CHARS, DEFAULT_CAP_TOKENS, cap_output
from kimicode.context.prune import PruneResult, apply_prune, plan_prune
from kimicode.context.tokens import TokenCounter, default_counter
from kimicode.events import Event, Notice
from kimicode.llm.accumulate import usage_numbers
from kimicode.llm.errors import LLMError
from kimicode.llm.overflow import ContextOverflow, context_overflow

if TYPE_CHECKING:
    from kimicode.llm.protocol import ModelClient

Emit = Callable[[Event], None]


class RecordLog(Protocol):
    """Where the manager writes its edits to the history (the session log, `kimicode.session.log`)."""

    def append(self, record: dict[str, Any]) -> None: ...


@dataclass
class ContextSettings:
    """When to prune and compact, and how much to keep. Shares are of the input budget."""

    prune_threshold: float = 0.70
    compact_threshold: float = 0.85
    prune_keep_tokens: int = 100_000
    """The newest tool output (in tokens) that pruning never touches."""
    prune_min_gain: float = 0.10
    """A prune must free at least this share of the input budget (else the prefix is left alone)."""
    tool_output_tokens: int = DEFAULT_CAP_TOKENS
    tool_output_chars: int = DEFAULT_CAP_CHARS
    margin: int | None = None
    """Tokens kept free for estimation error; default 2% of the window."""
    compaction: CompactionSettings = field(default_factory=CompactionSettings)


class ContextManager:
    """Accounting, budget, flood protection, pruning and compaction for one conversation."""

    def __init__(
        self,
        *,
        window: int,
        reserve: int,
        counter: TokenCounter | None = None,
        tokenizer_path: str | Path | None = None,
        settings: ContextSettings | None = None,
        spill_dir: Path | None = None,
        log: RecordLog | None = None,
        usage: dict[str, int] | None = None,
        reserve_explicit: bool = False,
    ) -> None:
        self.settings = settings or ContextSettings()
        self.reserve_explicit = reserve_explicit
        """True when the completion reservation was set by the user (kept as is, not fitted to the window)."""
        self.counter = counter or default_counter(tokenizer_path)
        self.accountant = TokenAccountant(self.counter)
        self.spill_dir = spill_dir
        self.log = log
        self.usage = usage
        """Totals that the summariser's own usage is added to (the agent's usage dict)."""
        self.budget = self._make_budget(window, reserve)
        self._configured = (window, reserve)
        self.server_limit: int | None = None
        """The window the server reported in a context-length error, when smaller than configured."""
        self.last_max_tokens: int | None = None
        self.retry_cap: int | None = None
        """A completion limit for the next request only: set when a refused limit is retried (`recover`)."""
        """The completion limit sent with the last request (`completion_tokens`)."""
        self.used = 0
        """Tokens of the history after the last step (the server's count plus the new reply)."""
        self.last_estimate = 0
        """Our estimate of the last request sent."""
        self.prunes = 0
        self.compactions = 0
        self.before_compact: Callable[[str, str | None, Emit], Awaitable[None]] | None = None
        """Awaited once when a compaction is about to summarise (reason, instructions, emit): PreCompact hooks."""
        self.calibration_source = "none"
        """Where the estimate's correction comes from: `none` (a guess), `server` (this process's counts),
        `restored` (an earlier process's, same server), `probe` (the server counted the request beforehand)."""
        self._logged_state: dict[str, Any] | None = None
        self._tool_fit: tuple[Any, list[dict[str, Any]]] | None = None
        self._tool_note = ""
        self.calibration_record: dict[str, Any] | None = None
        """The calibration a resumed or forked session starts from (used when the server is the same)."""
        self.server_counts = False
        """The server can count the next request before it is sent (llama.cpp; see agent/step.py)."""
        self.fingerprint = ""
        """The server's fingerprint (see `kimicode.llm.discovery.ServerInfo`) the calibration belongs to."""

    def _make_budget(self, window: int, reserve: int, *, learnt: bool = False) -> Budget:
        s = self.settings
        return Budget.make(
            window,
            fit_reserve(window, reserve, explicit=self.reserve_explicit and not learnt),
            margin=s.margin,
            prune_threshold=s.prune_threshold,
            compact_threshold=s.compact_threshold,
        )

    def set_window(self, window: int, reserve: int) -> None:
        """Follow the agent's settings; a window the server has shown to be smaller (in a context-length
        error) is kept until `forget_window` (a model switch)."""
        self._configured = (window, reserve)
        learnt = bool(self.server_limit and self.server_limit < window)
        effective = min(window, self.server_limit) if self.server_limit else window
        budget = self._make_budget(effective, reserve, learnt=learnt)
        if budget != self.budget:
            self.budget = budget

    def forget_window(self) -> None:
        """Drop the learnt window (another model or endpoint is used from now on)."""
        self.server_limit = None
        self.calibration_record = None

    def learn_window(self, window: int, *, record: bool = True) -> bool:
        """Keep the window a server has shown (in a context-length error) for the rest of the session.

        The completion reservation is fitted to it; with `record` the window is written to the session
        log (`{"type": "context_window", ...}`) so a resumed session starts with it. False when the
        window is not smaller than the current one or too small to hold any request.
        """
        if window >= self.budget.window:
            return False
        try:
            self.budget = self._make_budget(window, self._configured[1], learnt=True)
        except ValueError:
            return False
        self.server_limit = window
        if record and self.log:
            self.log.append(
                {"type": "context_window", "window": window, "source": "learnt", "configured": self._configured[0]}
            )
        return True

    @property
    def completion_floor(self) -> int:
        """The smallest completion limit a request is sent with: a smaller one would cut any real answer."""
        return max(1, min(self.budget.reserve, COMPLETION_FLOOR))

    def completion_tokens(self, estimate: int) -> int:
        """The completion limit for a request of `estimate` input tokens: the reservation, never more
        than what the window leaves after the input (prompt + max_tokens <= window), never less than
        `completion_floor`: when the window cannot hold the prompt plus the floor, LLMError says so."""
        budget = self.budget
        room = budget.window - max(0, estimate)
        floor = self.completion_floor
        if room < floor:
            raise LLMError(
                f"the request takes about {estimate:,} tokens of the {budget.window:,}-token context window, "
                f"leaving {max(0, room):,} for the answer (at least {floor:,} are needed); even after compaction "
                "the current prompt and the tools do not fit: shorten the prompt, or give the server a larger "
                "context (llama.cpp: -c; --context-window when kimicode cannot discover it)",
                "context_length",
            )
        cap, self.retry_cap = self.retry_cap, None
        self.last_max_tokens = min(budget.reserve, room, cap or room)
        return self.last_max_tokens

    def cut_by_room(self) -> bool:
        """True when the last request's completion limit was lowered below the reservation to fit the window."""
        return self.last_max_tokens is not None and self.last_max_tokens < self.budget.reserve

    # -- calibration across processes ---------------------------------------------------------

    def calibration_state(self) -> dict[str, Any]:
        """What calibration has learnt, with the server's fingerprint (see context/calibration.py)."""
        return {**self.accountant.state(), "fingerprint": self.fingerprint}

    def restore_calibration(self, state: Mapping[str, Any]) -> bool:
        """Start from an earlier process's calibration; False when unusable (nothing changes then)."""
        if self.accountant.calibrated or not self.accountant.restore(state):
            return False
        self.calibration_source = "restored"
        return True

    def record_calibration(self) -> dict[str, Any] | None:
        """The state to log when it changed notably since the last logged one (else None)."""
        state = self.calibration_state()
        last = self._logged_state
        if (
            last is not None
            and last.get("fingerprint") == state["fingerprint"]
            and last.get("tools_in_prompt") == state["tools_in_prompt"]
            and abs(float(last.get("correction", 0)) - state["correction"]) < 0.02 * state["correction"]
        ):
            return None
        self._logged_state = state
        if self.log:
            self.log.append({"type": "calibration", **state})
        return state

    def fit_tools(
        self,
        messages: Sequence[dict[str, Any]],
        tools: list[dict[str, Any]],
        emit: Emit,
    ) -> list[dict[str, Any]]:
        """The tools to send: all of them, or a compact set when with the system prompt they would take more
        than half the input budget (see context/toolfit.py). Said once per change."""
        from kimicode.context.toolfit import TOOLS_SHARE, fit_tools, tools_key

        system = [m for m in messages if m.get("role") == "system"]
        limit = int(self.budget.input_budget * TOOLS_SHARE)
        key = (
            tools_key(tools),
            limit,
            round(self.accountant.correction, 3),
            self.accountant.tools_in_prompt,
            len(system),
        )
        if self._tool_fit is not None and self._tool_fit[0] == key:
            return self._tool_fit[1]
        fitted, note = fit_tools(tools, lambda t: self.accountant.estimate_unanchored(system, t), limit)
        if note and note != self._tool_note:
            emit(Notice(f"context: {note}", "warning"))
        self._tool_note = note
        self._tool_fit = (key, fitted)
        return fitted

    # -- accounting -------------------------------------------------------------------------------

    def estimate(self, messages: Sequence[dict[str, Any]], tools: Sequence[Mapping[str, Any]] = ()) -> int:
        """Tokens a request with these messages and tools will take."""
        return self.accountant.estimate(messages, tools)

    def breakdown(self, messages: Sequence[dict[str, Any]], tools: Sequence[Mapping[str, Any]] = ()) -> Breakdown:
        """Tokens by category: system, tools, user, assistant text, reasoning, tool calls, tool results."""
        return self.accountant.breakdown(messages, tools)

    def observe(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        reply: Mapping[str, Any],
        usage: Mapping[str, Any] | None,
    ) -> int:
        """Take the server's usage for the request just answered; return the tokens now in use."""
        prompt, _completion, _cached = usage_numbers(dict(usage) if usage else None)
        if prompt:
            self.accountant.observe(messages, tools, prompt, self.last_estimate or None)
            if self.calibration_source == "none":
                self.calibration_source = "server"
            self.used = prompt + self.accountant.message_tokens(reply)
        else:
            self.used = self.last_estimate + self.accountant.message_tokens(reply)
        return self.used

    # -- flood protection -------------------------------------------------------------------------

    @property
    def tool_output_tokens(self) -> int:
        """The token cap of one tool result: the setting, but never over a quarter of the input budget."""
        return max(256, min(self.settings.tool_output_tokens, self.budget.input_budget // 4))

    def cap_tool_output(self, text: str, label: str) -> str:
        """Cap a tool result (head and tail kept, the full text spilled to the session directory)."""
        return cap_output(
            text,
            self.settings.tool_output_chars,
            self.spill_dir,
            label,
            max_tokens=max(1, int(self.tool_output_tokens / self.accountant.correction)),
            count=self.counter.count,
        )

    # -- making room ------------------------------------------------------------------------------

    async def prepare(
        self,
        messages: list[dict[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        client: ModelClient,
        emit: Emit,
        tool_kinds: Mapping[str, str] | None = None,
    ) -> int:
        """Make the next request fit (prune, then compact); return its estimated size.

        Raises LLMError(kind="context_length") when even a compacted history cannot fit.
        """
        budget = self.budget
        est = self.estimate(messages, tools)
        if est >= budget.prune_at:
            # Prune only in a batch that frees a lot and gets back under the prune threshold; otherwise
            # leave the prefix alone (the server's cache) and let compaction act at its threshold.
            plan = plan_prune(messages, self.accountant, self._keep_tokens())
            gain_ok = plan.freed >= budget.input_budget * self.settings.prune_min_gain
            if plan.indices and gain_ok and est - plan.freed < budget.prune_at:
                self._apply_prune(messages, plan, emit, est)
                est = self.estimate(messages, tools)
        if est >= budget.compact_at:
            if est > budget.input_budget and self.newest_cannot_fit(messages, tools):  # compacting would not help
                raise self.too_long(messages, tools, est)
            await self.compact(messages, tools, client, emit, reason="threshold", tool_kinds=tool_kinds)
            est = self.estimate(messages, tools)
        if est > budget.input_budget:
            plan = plan_prune(messages, self.accountant, 0)
            if plan.indices:
                self._apply_prune(messages, plan, emit, est)
                est = self.estimate(messages, tools)
        if est > budget.input_budget:
            raise self.too_long(messages, tools, est)
        self.last_estimate = est
        return est

    def newest_cannot_fit(self, messages: Sequence[dict[str, Any]], tools: Sequence[Mapping[str, Any]]) -> bool:
        """True when the newest message is the user's and it cannot fit even alone with the system prompt and tools."""
        last = messages[-1] if messages else None
        if last is None or last.get("role") != "user":
            return False
        fixed = self.accountant.estimate_unanchored([m for m in messages if m.get("role") == "system"], tools)
        return fixed + self.accountant.message_tokens(last) > self.budget.input_budget

    def too_long(self, messages: Sequence[dict[str, Any]], tools: Sequence[Mapping[str, Any]], est: int) -> LLMError:
        """The error for a request that does not fit after compaction: it names what cannot shrink (the newest
        user message, or the system prompt and tools) and what the user can do."""
        budget = self.budget
        fixed = self.accountant.estimate_unanchored([m for m in messages if m.get("role") == "system"], tools)
        room = (
            f"{budget.input_budget:,} tokens of input fit in the {budget.window:,}-token context window "
            f"({budget.reserve:,} are reserved for the answer)"
        )
        last = messages[-1] if messages else None
        newest = self.accountant.message_tokens(last) if last is not None and last.get("role") == "user" else 0
        if newest and fixed + newest > budget.input_budget:
            return LLMError(
                f"your message alone takes about {newest:,} tokens; with the system prompt and tool definitions "
                f"(about {fixed:,}) it cannot fit even with everything older compacted away: only {room}. "
                "Shorten it, or save the text to a file and ask for it to be read in parts, or give the server a "
                "larger context (llama.cpp: -c; --context-window when kimicode cannot discover it)",
                "context_length",
            )
        return LLMError(
            f"the request needs about {est:,} tokens but only {room}, even after compaction; the system prompt "
            f"and tool definitions alone take about {fixed:,}",
            "context_length",
        )

    def _keep_tokens(self) -> int:
        return min(self.settings.prune_keep_tokens, int(self.budget.input_budget * 0.2))

    def prune(
        self,
        messages: list[dict[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        emit: Emit,
        keep_tokens: int | None = None,
    ) -> PruneResult | None:
        """Prune now (regardless of thresholds); None when no tool result qualifies."""
        plan = plan_prune(messages, self.accountant, self._keep_tokens() if keep_tokens is None else keep_tokens)
        if not plan.indices:
            return None
        return self._apply_prune(messages, plan, emit, self.estimate(messages, tools))

    def _apply_prune(self, messages: list[dict[str, Any]], plan: Any, emit: Emit, before: int) -> PruneResult:
        result = apply_prune(messages, plan, self.accountant, self.spill_dir)
        self.prunes += 1
        self.accountant.forget_missing(messages)
        if self.log:
            self.log.append(
                {"type": "prune", "replace": [[i, m] for i, m in result.replaced], "freed_tokens": result.freed}
            )
        emit(
            Notice(
                f"context: pruned {len(result.replaced)} old tool result{'s' if len(result.replaced) != 1 else ''}, "
                f"freeing about {result.freed:,} tokens ({before:,} of {self.budget.input_budget:,} were in use)"
            )
        )
        return result

    async def compact(
        self,
        messages: list[dict[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        client: ModelClient,
        emit: Emit,
        *,
        instructions: str | None = None,
        reason: str = "manual",
        tool_kinds: Mapping[str, str] | None = None,
    ) -> CompactionResult | None:
        """Summarise the older history and swap the compacted history into `messages` (in place).

        A compaction at the threshold that finds nothing to fold says nothing (it would say so every turn)."""
        in_use = self.estimate(messages, tools)
        announced = [False, False]  # the notice; the PreCompact hooks

        def announce() -> None:
            if not announced[0]:
                announced[0] = True
                emit(Notice(f"context: compacting ({reason}); {in_use:,} tokens in use"))

        if reason != "threshold":
            announce()

        async def summarize(request: list[dict[str, Any]]) -> tuple[str, int]:
            if self.before_compact is not None and not announced[1]:
                announced[1] = True
                await self.before_compact(reason, instructions, emit)
            announce()
            return await self._summarize(client, request)

        result = await compact_history(
            messages,
            tools,
            accountant=self.accountant,
            budget=self.budget,
            summarize=summarize,
            settings=self.settings.compaction,
            instructions=instructions,
            tool_kinds=tool_kinds,
            spill_dir=self.spill_dir,
            manual=reason in ("manual", "overflow"),
        )
        if result is None:
            if reason == "manual":  # after an overflow the error says what cannot shrink (`too_long`)
                emit(Notice("context: nothing to compact"))
            return None
        announce()
        messages[result.start : result.end] = result.messages
        self.compactions += 1
        self.accountant.forget_missing(messages)
        if self.log:
            self.log.append(
                {
                    "type": "compaction",
                    "reason": reason,
                    "start": result.start,
                    "end": result.end,
                    "messages": result.messages,
                    "fallback": result.fallback,
                    "tokens_before": result.tokens_before,
                    "tokens_after": result.tokens_after,
                }
            )
        emit(Notice(result.describe(), "warning" if result.fallback else "info"))
        return result

    async def _summarize(self, client: ModelClient, request: list[dict[str, Any]]) -> tuple[str, int]:
        from kimicode.llm.checked import checked_stream
        from kimicode.llm.protocol import Completion

        completion: Completion | None = None
        limit = self.completion_tokens(self.accountant.estimate_unanchored(request))
        async for event in checked_stream(client.stream(request, (), max_completion_tokens=limit)):
            if isinstance(event, Completion):
                completion = event
        if completion is None:
            raise LLMError("the summary request ended without a response", "protocol")
        prompt, done, cached = usage_numbers(completion.usage)
        if self.usage is not None:
            self.usage["prompt_tokens"] = self.usage.get("prompt_tokens", 0) + prompt
            self.usage["completion_tokens"] = self.usage.get("completion_tokens", 0) + done
            self.usage["cached_tokens"] = self.usage.get("cached_tokens", 0) + cached
        return str(completion.message.get("content") or ""), prompt

    def capacity(self, error: LLMError, estimate: int, *, window_reported: bool) -> bool:
        """True when a "context exceeded" error cannot be about this request's size: the server gave no number of
        it (llama.cpp's HTTP 500 "Context size has been exceeded.": its slots share one KV cache and the others
        filled it), and the request with its max_tokens is within the window that same server reports. That is a
        busy server, retried with backoff, not a history to compact."""
        overflow = error.overflow
        if not window_reported or overflow is None or error.status not in (None, 500, 503):
            return False
        if overflow.window or overflow.prompt_tokens or overflow.total_tokens or overflow.completion_too_large:
            return False
        return estimate + (self.last_max_tokens or self.completion_floor) <= self.budget.window

    def _learn_overflow(
        self, overflow: ContextOverflow, messages: list[dict[str, Any]], tools: Sequence[Mapping[str, Any]]
    ) -> tuple[int | None, bool, int]:
        """Learn what the server's refusal says (its count of the request, its window): the count it
        implies (None without one), whether a new window was learnt, and the request's estimate now."""
        counted = overflow.prompt_estimate(self.last_max_tokens or self.budget.reserve)
        if overflow.prompt_tokens:  # the server's count of this very request: learnt like usage, both ways
            self.accountant.observe(messages, tools, overflow.prompt_tokens, self.last_estimate or None)
            if self.calibration_source == "none":
                self.calibration_source = "server"
        elif counted:
            self.accountant.overflowed(self.last_estimate, counted)
        learnt = bool(overflow.window and self.learn_window(overflow.window))
        est = self.estimate(messages, tools)
        if not overflow.prompt_tokens:
            est = max(est, counted or 0)
        return counted, learnt, est

    async def recover(
        self,
        error: LLMError,
        messages: list[dict[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        client: ModelClient,
        emit: Emit,
        tool_kinds: Mapping[str, str] | None = None,
        *,
        after_cap: bool = False,
    ) -> bool:
        """After the server said the request was too long: learn its window and count, make room.

        The server's numbers (`error.overflow`, else read from the message) rescale the estimate and
        set the window for the session. When only the requested completion was too large (vLLM's
        `max_tokens is too large`), the smaller reservation is enough; otherwise the history is
        compacted (or its tool results pruned). With `after_cap` (the retry with a smaller limit was refused
        too) the history is compacted. False when nothing could be changed.
        """
        overflow = error.overflow or context_overflow(None, error.message) or ContextOverflow()
        counted, learnt, est = self._learn_overflow(overflow, messages, tools)
        window_note = f"; the server's window is {overflow.window:,} tokens" if overflow.window else ""
        # Servers that count prompt + max_tokens against the window (Moonshot, DeepSeek, SGLang,
        # OpenRouter) say only "too long": once the window is learnt, a smaller reservation may suffice.
        shrunk = learnt and (self.last_max_tokens or 0) > self.budget.reserve
        if (overflow.completion_too_large or shrunk) and est <= self.budget.input_budget and not after_cap:
            before = self.last_max_tokens or self.budget.reserve
            limit = min(self.budget.reserve, self.budget.window - est)
            if limit >= before:  # by these numbers the same request fits: leave the server's count a margin
                limit = max(self.completion_floor, before - max(256, before // 10))
            self.retry_cap = limit  # the retry asks for this much at most, so it differs from the refused one
            emit(
                Notice(
                    f"context: the server refused the answer's token limit{window_note}; "
                    f"retrying with max_tokens {limit:,}",
                    "warning",
                )
            )
            self.last_estimate = est
            return True
        counted_note = f" ({counted:,} tokens by its count)" if counted else ""
        emit(
            Notice(
                f"context: the server rejected the request as too long{counted_note}{window_note}; "
                "making room and retrying",
                "warning",
            )
        )
        result = await self.compact(messages, tools, client, emit, reason="overflow", tool_kinds=tool_kinds)
        est = self.estimate(messages, tools)
        if result is None or est > self.budget.input_budget:
            plan = plan_prune(messages, self.accountant, 0)
            if not plan.indices and result is None:
                if max(est, counted or 0) > self.budget.input_budget:  # say what cannot shrink
                    raise self.too_long(messages, tools, max(est, counted or 0))
                return False
            if plan.indices:
                self._apply_prune(messages, plan, emit, est)
        self.last_estimate = self.estimate(messages, tools)
        return True
