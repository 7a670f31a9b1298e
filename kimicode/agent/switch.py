"""Moving a conversation onto another model: who wrote each assistant message, and what the switch policy
does to the messages another model wrote.

A message stays the exact JSON object sent over the wire, so the model that wrote it is kept beside it
(`Authorship`) and in its session-log record (`{"type": "message", "model": ...}`), never inside it.
The policies (docs/models.md):
- `keep`: every earlier message is sent as it was, reasoning included;
- `strip`: the content and tool calls stay (ids and arguments unchanged, so the history stays valid for
  every server); the reasoning another model wrote is left out (its field is kept, empty);
- `compact`: the history is summarised by the new model before its first answer, then stripped as above.
A strip is logged as a `prune` record (`reason: "model-switch"`), so resume and fork replay exactly what
was sent.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Protocol

from kimicode.config.choices import SwitchPolicy
from kimicode.llm.accumulate import REASONING_FIELDS


class RecordLog(Protocol):
    """Where a strip is recorded (the session log)."""

    def append(self, record: dict[str, Any]) -> None: ...


class Authorship:
    """The model that wrote each assistant message of a history (held beside the messages)."""

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[dict[str, Any], str]] = {}  # the message is held so its id stays unique

    def record(self, message: dict[str, Any], model: str | None) -> None:
        """Note that `model` wrote `message` (only assistant messages are kept)."""
        if model and message.get("role") == "assistant":
            self._by_id[id(message)] = (message, model)

    def author(self, message: dict[str, Any]) -> str | None:
        """The model that wrote `message`, or None when unknown (given by a caller, a summary)."""
        hit = self._by_id.get(id(message))
        return hit[1] if hit is not None and hit[0] is message else None

    def forget_missing(self, messages: Sequence[dict[str, Any]]) -> None:
        """Drop the entries of messages no longer in the history (after a compaction or a rewind)."""
        live = {id(m) for m in messages}
        self._by_id = {k: v for k, v in self._by_id.items() if k in live}

    def adopt(self, messages: Sequence[dict[str, Any]], authors: Sequence[str | None]) -> None:
        """Record `authors[i]` as the author of `messages[i]` (a replayed or copied history)."""
        for message, model in zip(messages, authors, strict=False):
            self.record(message, model)


def replay_authors(records: Iterable[dict[str, Any]]) -> list[str | None]:
    """Who wrote each message of the history a session log replays to (None: unknown or not a model),
    following its `message`, `prune` and `compaction` records as `session.replay` does."""
    authors: list[str | None] = []
    for record in records:
        kind = record.get("type")
        if kind == "message" and isinstance(record.get("message"), dict):
            model = record.get("model")
            authors.append(model if isinstance(model, str) else None)
        elif kind == "compaction":
            start, end, new = record.get("start"), record.get("end"), record.get("messages")
            if isinstance(start, int) and isinstance(end, int) and isinstance(new, list) and 0 <= start <= end:
                authors[start:end] = [None] * len(new)
    return authors


class ModelSwitches:
    """An agent's model-switch state: who wrote each message, and a compaction the `compact` policy left
    for the start of the next turn."""

    def __init__(self) -> None:
        self.authorship = Authorship()
        self.compact_pending = False

    def apply(self, policy: SwitchPolicy, messages: list[dict[str, Any]], model: str, log: RecordLog | None) -> int:
        """Apply `policy` after a move onto `model`; returns how many messages were stripped now."""
        if policy == "strip":
            return self.strip(messages, model, log)
        if policy == "compact":
            self.compact_pending = any(m.get("role") == "assistant" for m in messages)
        return 0

    async def compact(
        self,
        summarise: Callable[[], Awaitable[Any]],
        messages: list[dict[str, Any]],
        model: str,
        log: RecordLog | None,
        turn: Any = None,
    ) -> None:
        """The pending `compact` policy: `summarise` the history (the agent's compaction), strip what it
        kept whole, and move the current turn's checkpoint index (`turn.at`) past the summary."""
        self.compact_pending = False
        await summarise()
        self.strip(messages, model, log)
        self.authorship.forget_missing(messages)
        if turn is not None:
            turn.at = len(messages)  # the user message goes after the summary

    def strip(self, messages: list[dict[str, Any]], model: str, log: RecordLog | None) -> int:
        """Leave out, in place, the reasoning of the assistant messages `model` did not write (content and
        tool calls unchanged), logged as a `prune` record; returns how many messages changed."""
        replacements = foreign_reasoning(messages, self.authorship, model)
        for i, stripped in replacements:
            author = self.authorship.author(messages[i])
            messages[i] = stripped
            self.authorship.record(stripped, author or "unknown")
        if replacements and log is not None:
            log.append({"type": "prune", "reason": "model-switch", "replace": [list(r) for r in replacements]})
        return len(replacements)


def reasoning_of(message: dict[str, Any]) -> str:
    """The reasoning text of an assistant message ("" when none)."""
    for name in REASONING_FIELDS:
        value = message.get(name)
        if isinstance(value, str) and value:
            return value
    return ""


def without_reasoning(message: dict[str, Any]) -> dict[str, Any]:
    """A copy of `message` with its reasoning emptied in place of its text (field and key order kept)."""
    return {k: ("" if k in REASONING_FIELDS and isinstance(v, str) else v) for k, v in message.items()}


def foreign_reasoning(
    messages: Sequence[dict[str, Any]], authorship: Authorship, model: str
) -> list[tuple[int, dict[str, Any]]]:
    """The replacements that leave out reasoning `model` did not write: `(index, stripped copy)` for each
    assistant message with reasoning whose author is another model or unknown."""
    out: list[tuple[int, dict[str, Any]]] = []
    for i, message in enumerate(messages):
        if message.get("role") != "assistant" or not reasoning_of(message):
            continue
        if authorship.author(message) == model:
            continue
        out.append((i, without_reasoning(message)))
    return out


def switch_notice(old: str, new: str, policy: str, stripped: int) -> str:
    """The one line that says a conversation moved to another model and what that means."""
    if policy == "keep":
        what = f"earlier messages are sent whole, including reasoning {old} wrote"
    elif policy == "strip":
        what = (
            f"the reasoning of {stripped} earlier message{'s' if stripped != 1 else ''} by other models is left out "
            "(content and tool calls kept)"
            if stripped
            else "no earlier reasoning by another model to leave out"
        )
    else:
        what = f"the history is summarised by {new} before its first answer"
    return f"Model switched from {old} to {new}: {what} (on_switch = {policy}; see docs/models.md)."
