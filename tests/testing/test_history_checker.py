"""The one history-validity checker every test uses (`helpers.history_problems`) finds each problem a strict
chat-completions server refuses, and nothing in a valid history: a checker that saw nothing would let every
test that relies on it pass."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import assert_valid_history, history_problems, valid_history

from kimicode.agent.modes import mode_note

SYSTEM = {"role": "system", "content": "s"}
USER = {"role": "user", "content": "u"}


def call(*ids: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": i, "type": "function", "function": {"name": "glob", "arguments": "{}"}} for i in ids],
    }


def result(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": "r"}


VALID = [SYSTEM, USER, call("a", "b"), result("b"), result("a"), {"role": "assistant", "content": "done"}, USER]


def test_a_valid_history_has_no_problem() -> None:
    assert history_problems(VALID, system_first=True, alternating=True) == []
    assert valid_history(VALID)
    assert_valid_history(VALID)


@pytest.mark.parametrize(
    ("messages", "kw", "said"),
    [
        ([SYSTEM, USER, call("a")], {}, "the calls ['a'] have no result"),
        ([SYSTEM, USER, call("a", "b"), result("a"), USER], {}, "comes before the results of ['b']"),
        ([SYSTEM, USER, result("x")], {}, "a tool result for 'x' without its call"),
        ([SYSTEM, USER, call("a"), result("a"), result("a")], {}, "a tool result for 'a' without its call"),
        ([SYSTEM, USER, call(""), result("")], {}, "a tool call without an id"),
        ([SYSTEM, USER, call("a", "a"), result("a"), result("a")], {}, "two tool calls with the same id"),
        ([SYSTEM, {"role": "robot", "content": "?"}], {}, "unknown role 'robot'"),
        ([USER], {"system_first": True}, "does not start with the system prompt"),
        ([SYSTEM, USER, USER], {"alternating": True}, "two user messages in a row"),
    ],
)
def test_each_problem_is_found_and_named(messages: list[dict[str, Any]], kw: dict[str, Any], said: str) -> None:
    problems = history_problems(messages, **kw)
    assert any(said in p for p in problems), problems
    assert not valid_history(messages, **kw)
    with pytest.raises(AssertionError, match=r"\w"):
        assert_valid_history(messages, **kw)


def test_the_permission_mode_note_after_a_prompt_is_the_one_user_message_allowed_to_follow_another() -> None:
    assert history_problems([SYSTEM, USER, mode_note("plan")], alternating=True) == []
