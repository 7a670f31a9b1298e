"""Moonshot's built-in `$web_search`, as its server runs it, for the fake server.

The flow on Moonshot's API (platform.moonshot.ai, "Use the Kimi API's internet search"): the request
declares `{"type": "builtin_function", "function": {"name": "$web_search"}}` among its tools; the model
answers with a tool call of type `builtin_function` named `$web_search` whose arguments carry a
`search_result` id and the `usage.total_tokens` the results will add; the client sends a `tool` message
(same id, `name: "$web_search"`) whose content is those arguments, unchanged; the server then runs the
search and the model answers from its results (their tokens count as prompt tokens of that request).

`web_search_flow(answer)` scripts both halves and checks the client's side as the real server does: a
request without the declaration, or a tool message that does not echo the arguments, gets a 400.
"""

from __future__ import annotations

import json
from typing import Any

from kimicode.testing.replies import ErrorReply, RecordedRequest, Reply, ScriptItem, ToolCall

NAME = "$web_search"
"""The built-in function's name."""


def declared(request: RecordedRequest) -> bool:
    """Whether the request offers the built-in `$web_search` to the model."""
    tools = request.body.get("tools") if isinstance(request.body, dict) else None
    return any(
        isinstance(t, dict) and t.get("type") == "builtin_function" and (t.get("function") or {}).get("name") == NAME
        for t in tools or ()
    )


def web_search_flow(
    answer: str, *, search_id: str = "search-0001", tokens: int = 1200, call_id: str = "web_search:0"
) -> list[ScriptItem]:
    """Two script items: the model's `$web_search` call, then (when the client echoed it back) `answer`."""
    arguments = {"search_result": {"search_id": search_id}, "usage": {"total_tokens": tokens}}

    def call(request: RecordedRequest) -> Reply | ErrorReply:
        if not declared(request):
            return ErrorReply(
                400,
                "fake server: the model can call $web_search only when the request declares it "
                "as a builtin_function tool",
                "invalid_request_error",
            )
        return Reply(tool_calls=[ToolCall(NAME, arguments, id=call_id, type="builtin_function")])

    def answered(request: RecordedRequest) -> Reply | ErrorReply:
        messages: list[dict[str, Any]] = request.body.get("messages") or [] if isinstance(request.body, dict) else []
        echo = next((m for m in messages if m.get("role") == "tool" and m.get("tool_call_id") == call_id), None)
        try:
            echoed = json.loads(echo["content"]) if echo is not None else None
        except (TypeError, ValueError):
            echoed = None
        if echoed != arguments or (echo or {}).get("name") != NAME:
            return ErrorReply(
                400,
                'fake server: the tool message for $web_search must carry name "$web_search" '
                "and its arguments unchanged",
                "invalid_request_error",
            )
        return Reply(
            content=answer, usage={"prompt_tokens": tokens + 100, "completion_tokens": 20, "total_tokens": tokens + 120}
        )

    return [call, answered]
