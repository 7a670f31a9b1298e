"""Checks a history given to `Agent(messages=...)` before anything is sent or written: a server rejects
an invalid one at the first request (or, worse, some accept it and answer nonsense), long after the
mistake, so the caller gets a clear error naming the message instead."""

from __future__ import annotations

from typing import Any

from kimicode import errors

ROLES = ("system", "user", "assistant", "tool")


def check_history(messages: Any) -> None:
    """Raise UsageError naming the first message that breaks the chat-completions shape: a role it does
    not know, missing content, a tool result without its call, or a tool call left without a result."""
    if not isinstance(messages, list):
        raise errors.UsageError(f"messages must be a list of message dicts (got {type(messages).__name__})")
    open_calls: list[str] = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise errors.UsageError(f"{where} must be a dict with a role and content (got {type(message).__name__})")
        role = message.get("role")
        if role not in ROLES:
            raise errors.UsageError(f"{where} has role {role!r}; a message's role is one of {', '.join(ROLES)}")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in open_calls:
                raise errors.UsageError(
                    f"{where} is a tool result for call {call_id!r}, which the assistant message before it "
                    "did not make (or which already has a result)"
                )
            open_calls.remove(call_id)
            continue
        if open_calls:
            raise errors.UsageError(
                f"{where} comes before the result of tool call(s) {', '.join(map(repr, open_calls))}: each call "
                "of an assistant message needs a tool message with its result right after it"
            )
        if role == "assistant":
            calls = message.get("tool_calls") or []
            if not isinstance(calls, list) or not all(isinstance(c, dict) and c.get("id") for c in calls):
                raise errors.UsageError(f"{where} has tool_calls that are not a list of calls with ids")
            open_calls = [str(c["id"]) for c in calls]
            if "content" not in message and not calls:
                raise errors.UsageError(f"{where} (assistant) has neither content nor tool_calls")
        elif "content" not in message:
            raise errors.UsageError(f"{where} ({role}) has no content")
    if open_calls:
        raise errors.UsageError(
            f"messages[-1]: the tool call(s) {', '.join(map(repr, open_calls))} have no result: add a tool "
            "message for each (e.g. content 'interrupted by user') to the history"
        )
