"""How an answer the user interrupted is kept in the history.

The partial text stays as an ordinary assistant message (with the reasoning streamed before it), with
a last line saying it was cut off. The model then knows why it stopped, "continue" has something to
continue from, and a resumed session shows it. The text is stored and sent again byte for byte.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from kimicode.session.log import SessionLog

INTERRUPTED_MARK = "\n\n[interrupted by the user]"
"""Appended to the partial answer (the model and a reader both see where it stopped)."""

NO_ANSWER = "[no answer: the turn was interrupted or failed before the model answered]"
"""The assistant message put between a turn that ended before the model answered (interrupted, a failed
request) and the next prompt: strict servers refuse two user messages in a row."""


def interrupted_answer(text: str, reasoning: str = "") -> dict[str, Any]:
    """The assistant message that keeps the partial answer `text` and the reasoning streamed before it (in
    the field every kimicode message keeps it in; the client renames it for the server)."""
    message: dict[str, Any] = {"role": "assistant", "content": text + INTERRUPTED_MARK}
    if reasoning:
        message["reasoning_content"] = reasoning
    return message


def is_interrupted_answer(message: Mapping[str, Any]) -> bool:
    """True for a message made by `interrupted_answer`."""
    content = message.get("content")
    return (
        message.get("role") == "assistant"
        and not message.get("tool_calls")
        and isinstance(content, str)
        and content.endswith(INTERRUPTED_MARK)
    )


class _Retracting(Protocol):
    messages: list[dict[str, Any]]

    @property
    def log(self) -> SessionLog | None: ...


UNSENT_NOTE = (
    "your message was not kept in the conversation, so the next turn does not carry it: send it "
    "again shorter, or put the text in a file and ask for it to be read"
)


def retract_unsent(agent: _Retracting, message: Mapping[str, Any] | None) -> str:
    """Take the turn's user `message` out of the history when no request with it could be sent (a context error
    the model never answered: it is still the last message): kept, it would make every later turn fail the same
    way, each one bigger. It stays in the session log as it was written; a `compaction` record (reason `unsent`)
    removes it from the history, so a resumed session agrees. Returns the notice that says so ("" when nothing
    was taken out)."""
    messages = agent.messages
    if message is None or not messages or messages[-1] is not message:
        return ""
    at = len(messages) - 1
    del messages[at]
    if agent.log is not None:
        agent.log.append({"type": "compaction", "reason": "unsent", "start": at, "end": at + 1, "messages": []})
    return UNSENT_NOTE
