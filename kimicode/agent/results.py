"""What a turn returns and what approvals exchange: `RunResult`, `ApprovalRequest`, `Approval`."""

from __future__ import annotations

import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from kimicode import errors
from kimicode.events import MessageCommitted, TurnFinished, TurnStatus
from kimicode.llm.errors import LLMError
from kimicode.permissions.policy import Rule, parse_rule

if TYPE_CHECKING:
    from kimicode.agent.streams import EventStream
    from kimicode.checkpoints.session import SessionCheckpoints
    from kimicode.context.manager import ContextManager

T = TypeVar("T")


@dataclass(frozen=True)
class ApprovalRequest:
    """An action that needs a yes before it runs: shown to the user or passed to `approve`."""

    call_id: str
    tool: str
    kind: str
    arguments: Mapping[str, Any]
    reason: str
    path: str | None = None
    preview: str | None = None
    """For tools that change files: the exact unified diff the call would apply, computed by the tool
    itself (CRLF and staleness included); "" when nothing would change."""
    preview_error: str | None = None
    """Why the call would fail as it stands (the file changed, old_string not found, ...)."""


@dataclass(frozen=True)
class Approval:
    """An answer to an ApprovalRequest; `reason` (when denied) is passed on to the model.

    `remember`, with a yes, is a rule in the language of `--allow` (`bash(npm test)`,
    `Bash(git status:*)`, `edit(src/app.py)`) added to the session's allow rules: "don't ask again",
    decided by the same engine as every other rule. A rule that cannot be parsed raises ConfigError."""

    approved: bool
    reason: str = ""
    remember: str | Rule | None = None

    def __post_init__(self) -> None:
        if isinstance(self.remember, str):  # a bad rule fails where it is written, naming the rule
            parse_rule(self.remember, "Approval.remember")


ApproveResult = bool | Approval
ApproveFn = Callable[[ApprovalRequest], ApproveResult | Awaitable[ApproveResult]]


@dataclass
class RunResult(Generic[T]):
    """The outcome of one turn (`Agent.run`); `RunResult[Model]` from `run(prompt, output_type=Model)`."""

    status: TurnStatus
    result: str
    session_id: str
    num_turns: int
    usage: dict[str, int]
    duration_ms: int
    permission_denials: list[dict[str, Any]]
    error: errors.ErrorInfo | None = None
    """Why the turn did not succeed: a string (as before) that also carries `kind`, `status` (HTTP) and
    `retry_after`."""
    error_kind: str | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    """The messages this turn added to the history (user, assistant and tool), as sent to the model."""
    context: dict[str, int] = field(default_factory=dict)
    """Context window use after the turn: `used` and `window` tokens."""
    turn_usage: dict[str, int] = field(default_factory=dict)
    """Tokens of this turn alone (`usage` is the running total of the agent)."""
    hook_errors: list[str] = field(default_factory=list)
    """What the `on_event` hook raised during the turn (the turn itself went on)."""
    changes: dict[str, list[str]] | None = None
    """Files the turn added, modified and deleted (None when no checkpoint was taken: nothing changed)."""
    checkpoint: str | None = None
    """The checkpoint taken before the turn's first change (`kimicode undo` restores it)."""
    output: T = None  # type: ignore[assignment]  # typed as the value a successful run has (check `ok` first)
    """With `run(prompt, output_type=...)`: the answer, validated, as that type (a pydantic model's instance,
    or the JSON value for a schema dict); None otherwise or when it never matched (status `invalid_output`:
    the type says T, so check `ok` or call `raise_for_status()` first)."""
    cost: float | None = None
    """USD this turn cost (its `turn_usage`, subagents included) at the agent's prices: the `prices=`
    option, else the model's configured prices, else Moonshot's list prices on Moonshot's API; None when
    no price is known, or when the server sent no usage (unknown, not free)."""
    total_cost: float | None = None
    """USD the agent's whole session has cost so far (its `usage`, from the totals its log recorded for a
    resumed session), None when no price is known."""

    @property
    def ok(self) -> bool:
        return self.status == "success"

    @classmethod
    def from_finished(cls, finished: TurnFinished, **fields: Any) -> RunResult[Any]:
        """The result of a turn that ended with `finished`; `fields` are the rest (session, usage, ...)."""
        error = finished.error
        if error is not None and not isinstance(error, errors.ErrorInfo):
            error = errors.ErrorInfo(error, finished.error_kind or "internal")
        return cls(
            status=finished.status,
            result=finished.result,
            num_turns=finished.num_steps,
            permission_denials=[dict(d) for d in finished.permission_denials],
            error=error,
            error_kind=finished.error_kind,
            output=finished.output,
            **fields,
        )

    def raise_for_status(self) -> RunResult[T]:
        """Return self when the turn succeeded; otherwise raise the matching `KimicodeError`.

        A model failure raises its `ModelError` subclass (`AuthError`, `RateLimitError`, ...); a turn that
        stopped at a limit, was interrupted or failed internally raises `TurnError`. The exception's
        `result` attribute is this RunResult.
        """
        if self.ok:
            return self
        exc: Exception
        if self.status == "error" and self.error is not None and self.error.kind not in ("internal", "hook"):
            exc = self.error.exception()
        else:
            exc = errors.TurnError(str(self.error or f"the turn ended with status {self.status}"), self.status)
        exc.result = self  # type: ignore[attr-defined]
        raise exc


class Collected(Protocol):
    """What `collect` reads of the agent whose turn it consumes (named here, not `Agent`, so that this module
    stays below agent/core.py even for the type checker)."""

    @property
    def usage(self) -> dict[str, int]: ...
    @property
    def context(self) -> ContextManager: ...
    @property
    def checkpoints(self) -> SessionCheckpoints | None: ...
    @property
    def session_id(self) -> str: ...
    @property
    def context_window(self) -> int: ...


async def collect(
    agent: Collected, events: EventStream[Any], cost: Callable[[Mapping[str, int]], float | None]
) -> RunResult[Any]:
    """`Agent.run`: consume a turn's stream (every attempt of a structured one) into its RunResult; `cost`
    prices a usage at the agent's current prices."""
    start = time.monotonic()
    before = dict(agent.usage)
    added: list[dict[str, Any]] = []  # collected from events: compaction may rewrite the history
    finished: TurnFinished | None = None
    steps = 0
    async with events:
        async for event in events:
            if isinstance(event, MessageCommitted):
                added.append(event.message)  # type: ignore[arg-type]  # a read-only copy (events.frozen)
            elif isinstance(event, TurnFinished):
                finished, steps = event, steps + event.num_steps
    assert finished is not None
    turn_usage = {k: v - before.get(k, 0) for k, v in agent.usage.items()}
    result = RunResult.from_finished(
        finished,
        session_id=agent.session_id,
        usage=dict(agent.usage),
        duration_ms=int((time.monotonic() - start) * 1000),
        messages=added,
        context={"used": agent.context.used, "window": agent.context_window},
        turn_usage=turn_usage,
        hook_errors=list(events.hook_errors),
        cost=cost(turn_usage) if any(turn_usage.values()) else None,  # no usage: unknown
        total_cost=cost(agent.usage),
        **(agent.checkpoints.last_turn_fields() if agent.checkpoints is not None else {}),
    )
    result.num_turns = steps
    return result


def turn_error(error: str | None, kind: str) -> errors.ErrorInfo | None:
    """Why a turn failed, as `RunResult.error` carries it; called while handling a model error, it keeps
    that error's HTTP status, retry-after and type."""
    if error is None:
        return None
    handling = sys.exc_info()[1]
    if isinstance(handling, LLMError) and handling.message == error:
        return errors.ErrorInfo(error, kind, handling.status, handling.retry_after, handling.error_type)
    return errors.ErrorInfo(error, kind)
