"""A model client's stream as the agent may rely on it, whoever wrote the client.

`Agent(client=...)` takes any object with the `kimicode.ModelClient` methods, so what its `stream` yields
is checked where the agent reads it: only `StreamDelta`, `StreamRetry` and one `Completion` whose message
is an assistant message the history can keep (tool calls with unique ids, names, and arguments as a JSON
string). Anything else ends the turn with a `ProtocolError` naming the mistake, before the message enters
the history, instead of an internal error or a history a server refuses at the next request. A
`kimicode.ModelError` the client raises (the documented way to fail) is the agent's `LLMError` of the same
kind, so it is reported, and a `context_length` one recovered from, as kimicode's own client's are.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from kimicode.errors import ModelError
from kimicode.llm.errors import LLMError
from kimicode.llm.protocol import Completion, StreamDelta, StreamEvent, StreamRetry


def _refuse(what: str) -> LLMError:
    return LLMError(f"the model client {what}", "protocol")


async def checked_stream(events: Any) -> AsyncIterator[StreamEvent]:
    """`events` (what `client.stream(...)` returned), checked item by item (see the module's notes)."""
    if not hasattr(events, "__aiter__"):
        raise _refuse(
            f"returned {type(events).__name__} from stream(), not an async iterator "
            "(write stream as an async generator: `async def stream(...)` with `yield`)"
        )
    completed = False
    try:
        async for event in events:
            if completed:  # the answer is the last thing: a second one would be silently one of two
                raise _refuse(
                    f"yielded {type(event).__name__} after its Completion; stream() yields one "
                    "Completion per request, last"
                )
            if isinstance(event, StreamDelta | StreamRetry):
                yield event
            elif isinstance(event, Completion):
                if (problem := message_problem(event.message)) is not None:
                    raise _refuse(f"returned an assistant message that cannot join the history: {problem}")
                if event.usage is not None and not isinstance(event.usage, dict):  # e.g. the SDK's CompletionUsage
                    raise _refuse(
                        f"returned Completion.usage as a {type(event.usage).__name__}, not a dict "
                        "(or None): give the usage object's fields as a dict (`.model_dump()`)"
                    )
                completed = True
                yield event
            else:
                raise _refuse(
                    f"yielded {type(event).__name__} {str(event)[:80]!r}; stream() yields "
                    "StreamDelta, StreamRetry and, last, one Completion"
                )
    except LLMError:
        raise
    except ModelError as err:  # the caller's client failed the documented way: the same error, as kimicode's
        raise LLMError(err.message, err.kind, err.status, err.retry_after, err.error_type) from err  # type: ignore[arg-type]


def message_problem(message: Any) -> str | None:
    """What makes `message` unfit to be an assistant message of the history, or None."""
    if not isinstance(message, dict):
        return f"Completion.message is a {type(message).__name__}, not a dict"
    if message.get("role") != "assistant":
        return f"its role is {message.get('role')!r}, not 'assistant'"
    try:
        json.dumps(message)  # it is stored and sent as JSON
    except (TypeError, ValueError) as exc:
        return f"it is not JSON ({exc})"
    calls = message.get("tool_calls")
    if calls is None:
        return None
    if not isinstance(calls, list):
        return f"tool_calls is a {type(calls).__name__}, not a list"
    seen: set[str] = set()
    for i, call in enumerate(calls):
        where = f"tool_calls[{i}]"
        if not isinstance(call, dict):
            return f"{where} is a {type(call).__name__}, not a dict"
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            return f"{where} has no id (each call needs one, echoed by its result)"
        if call_id in seen:
            return f"{where} repeats the id {call_id!r} (ids are unique within a message)"
        seen.add(call_id)
        fn = call.get("function")
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            return f"{where} has no function name"
        if not isinstance(fn.get("arguments"), str):
            return f"{where}'s function.arguments is a {type(fn.get('arguments')).__name__}, not a JSON string"
    return None
