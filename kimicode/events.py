"""Typed events: the only thing faces (headless printer, terminal, library hooks) consume.

Events are small immutable records. The messages and arguments inside them are read-only copies
(`frozen`: made once, shared by the stream, the hook and `RunResult`): a consumer that edits one gets a
TypeError and can never change the history, the next request or what a tool receives.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NoReturn


def _refuse(self: object, *args: object, **kwargs: object) -> NoReturn:
    raise TypeError(
        "this is a read-only copy of kimicode's data (a message or tool arguments): "
        "copy.deepcopy() it to get one you can change"
    )


class ReadOnlyDict(dict[str, Any]):
    """A dict that refuses changes (json.dumps, ==, isinstance(dict) work); deepcopy gives a plain dict."""

    __slots__ = ()
    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _refuse  # type: ignore[assignment]

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return thawed(self)  # type: ignore[no-any-return]

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (dict(self),))


class ReadOnlyList(list[Any]):
    """A list that refuses changes (json.dumps, ==, isinstance(list) work); deepcopy gives a plain list."""

    __slots__ = ()
    __setitem__ = __delitem__ = __iadd__ = __imul__ = append = extend = insert = pop = remove = clear = _refuse  # type: ignore[assignment]
    sort = reverse = _refuse  # type: ignore[assignment]

    def __copy__(self) -> list[Any]:
        return list(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        return thawed(self)  # type: ignore[no-any-return]

    def __reduce__(self) -> tuple[Any, ...]:
        return (list, (list(self),))


def frozen(value: Any) -> Any:
    """A read-only deep copy of JSON-like data (dicts and lists; other values are shared as they are)."""
    if isinstance(value, dict):
        return value if type(value) is ReadOnlyDict else ReadOnlyDict({k: frozen(v) for k, v in value.items()})
    if isinstance(value, list):
        return value if type(value) is ReadOnlyList else ReadOnlyList(frozen(v) for v in value)
    if type(value) is tuple:
        return tuple(frozen(v) for v in value)
    return value


def thawed(value: Any) -> Any:
    """A plain, changeable deep copy of `frozen` data."""
    if isinstance(value, dict):
        return {k: thawed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [thawed(v) for v in value]
    return value


TurnStatus = Literal["success", "error", "max_turns", "repeat_limit", "interrupted", "invalid_output"]
"""`invalid_output`: structured output whose answers never matched the schema (agent/structured.py)."""


@dataclass(frozen=True)
class TurnStarted:
    """A user prompt was accepted and the turn begins."""

    prompt: str
    session_id: str


@dataclass(frozen=True)
class StepStarted:
    """A model request is about to be sent (step numbers count from 1 within the turn)."""

    step: int


@dataclass(frozen=True)
class ReasoningDelta:
    """A piece of the model's reasoning text."""

    text: str


@dataclass(frozen=True)
class ContentDelta:
    """A piece of the answer text."""

    text: str


@dataclass(frozen=True)
class ToolArgumentsDelta:
    """A fragment of a tool call's JSON arguments as it streams."""

    index: int
    text: str


@dataclass(frozen=True)
class Retrying:
    """The request failed transiently; partial output of this step must be discarded."""

    attempt: int
    max_retries: int
    delay: float
    error: str


@dataclass(frozen=True)
class MessageCommitted:
    """A message was appended to the history (and the session log), exactly as sent to the model."""

    message: Mapping[str, Any]


@dataclass(frozen=True)
class ToolCallStarted:
    """A tool call is about to run (after validation and permission checks)."""

    call_id: str
    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True)
class ToolOutputDelta:
    """A piece of a running tool's output (bash streams its stdout/stderr), for showing progress live.

    Only for display: the result the model sees is `ToolCallFinished.content`, capped and complete.
    """

    call_id: str
    text: str


@dataclass(frozen=True)
class ToolCallFinished:
    """A tool call produced its result (`content` is what the model will see)."""

    call_id: str
    name: str
    content: str
    is_error: bool
    summary: str = ""
    display: Mapping[str, Any] | None = None
    duration_ms: int = 0


@dataclass(frozen=True)
class PermissionDenied:
    """A tool call was not run because the permission policy or the user refused it."""

    call_id: str
    name: str
    arguments: Mapping[str, Any]
    reason: str
    suggestion: str = ""
    """A rule that would allow the call (`bash(npm test)`), when the policy has one to offer."""
    by_rule: bool = False
    """True when a `deny` rule (not the permission mode) refused it: no flag short of editing it allows it."""
    kind: str = ""
    """The tool's kind (`read`, `edit`, `execute`, ...), so faces can name the mode that would allow it."""
    hook: str = ""
    """When a hook refused it: the hook (its command and the file it came from), which faces name instead
    of a flag (no flag allows what a hook refuses)."""


@dataclass(frozen=True)
class UsageUpdated:
    """Token usage of the last request and running totals for the session."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    total_prompt_tokens: int
    total_completion_tokens: int
    total_cached_tokens: int


@dataclass(frozen=True)
class ContextUpdated:
    """How full the context window is after a step."""

    used: int
    window: int
    cached_tokens: int = 0


@dataclass(frozen=True)
class Notice:
    """A one-line status worth showing (a warning, a compaction, a limit approaching)."""

    text: str
    level: Literal["info", "warning", "error"] = "info"


@dataclass(frozen=True)
class TurnFinished:
    """The turn ended. `result` is the final answer text; `error` says why when status isn't success."""

    status: TurnStatus
    result: str
    num_steps: int
    error: str | None = None
    error_kind: str | None = None
    permission_denials: tuple[Mapping[str, Any], ...] = field(default_factory=tuple)
    output: Any = None
    """With `stream(prompt, output_type=...)`: the validated answer on the last attempt's TurnFinished."""


@dataclass(frozen=True)
class SubagentEvent:
    """Something a subagent (the task tool) did, inside the parent's call `parent_call_id`: its committed
    messages (tool calls and results) and its permission denials, so they are as visible as the parent's."""

    parent_call_id: str
    description: str
    event: MessageCommitted | PermissionDenied


@dataclass(frozen=True)
class HookRan:
    """A configured hook command ran for `hook_event` (`PreToolUse`, `Stop`, ...) and answered.

    `outcome` is `ok`, `allow`, `ask`, `deny`, `block`, `context` (it added context), `stop` (it ended the
    turn), `failed` (crashed or timed out; what it guards went ahead) or `refused` (crashed or timed out
    and failed closed). `call_id` is the tool call it judged, for tool events.
    """

    hook_event: str
    command: str
    outcome: str
    exit_code: int | None
    duration_ms: int
    message: str = ""
    call_id: str = ""
    source: str = ""


Event = (
    TurnStarted
    | StepStarted
    | ReasoningDelta
    | ContentDelta
    | ToolArgumentsDelta
    | Retrying
    | MessageCommitted
    | ToolCallStarted
    | ToolOutputDelta
    | ToolCallFinished
    | PermissionDenied
    | UsageUpdated
    | ContextUpdated
    | Notice
    | TurnFinished
    | SubagentEvent
    | HookRan
)
