"""Helpers shared by the tests (importable as `helpers` from every directory of tests/: pyproject's
`[tool.pytest.ini_options] pythonpath` puts tests/ on the path).

The repository's places, named once (tests live one or two directories down, so none computes them itself).

One history-validity checker for every test: what a chat-completions server refuses, said as problems."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kimicode import Agent
from kimicode.agent.modes import noted_mode
from kimicode.testing import FakeServer

ROOT = Path(__file__).resolve().parents[1]
"""The repository's root (pyproject.toml, README.md, docs/, kimicode/)."""
TESTS = ROOT / "tests"
FIXTURES = TESTS / "fixtures"
"""Recorded streams, ACP exchanges, hooks, prompt snapshots, third-party setups."""
MCP_DEMO = TESTS / "mcp" / "demo_server.py"
"""A real stdio MCP server written with the official SDK, for the tests that start one."""


def history_problems(messages: list[dict[str, Any]], *, system_first: bool = False,
                     alternating: bool = False) -> list[str]:
    """What a strict chat-completions server would reject in `messages`, one sentence per problem: a tool
    result without its call (or twice), a message before every call of the assistant message before it has
    its result, a call left without a result, an unknown role; with `system_first`, a history that does not
    start with the system prompt; with `alternating`, two user messages in a row (strict servers refuse them;
    the permission-mode note that follows a prompt is the one allowed)."""
    problems: list[str] = []
    if system_first and (not messages or messages[0].get("role") != "system"):
        problems.append("the history does not start with the system prompt")
    open_calls: list[str] = []
    previous = None
    for i, message in enumerate(messages):
        role = message.get("role")
        if role not in ("system", "user", "assistant", "tool"):
            problems.append(f"message {i}: unknown role {role!r}")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id in open_calls:
                open_calls.remove(call_id)
            else:
                problems.append(f"message {i}: a tool result for {call_id!r} without its call")
        else:
            if open_calls:
                problems.append(f"message {i} ({role}) comes before the results of {open_calls}")
                open_calls = []
            if alternating and role == "user" and previous == "user" and noted_mode(message) is None:
                problems.append(f"message {i}: two user messages in a row")
            if role == "assistant":
                open_calls = [str(c.get("id")) for c in message.get("tool_calls") or ()]
        previous = role
    if open_calls:
        problems.append(f"the calls {open_calls} have no result")
    return problems


def valid_history(messages: list[dict[str, Any]], **kw: Any) -> bool:
    """True when `history_problems` finds nothing (for `assert valid_history(...)`)."""
    return not history_problems(messages, **kw)


def assert_valid_history(messages: list[dict[str, Any]], **kw: Any) -> None:
    """Fail naming every problem `history_problems` finds."""
    problems = history_problems(messages, **kw)
    assert not problems, "; ".join(problems)


def lib_agent(server: FakeServer, tmp_path: Path, **kw: Any) -> Agent:
    """A hermetic library agent pointed at the fake server (as a harness builds one): workspace
    `tmp_path/ws`, home `tmp_path/home`, fast retries."""
    ws = tmp_path / "ws"
    ws.mkdir(parents=True, exist_ok=True)
    settings: dict[str, Any] = {
        "base_url": server.base_url,
        "api_key": "sk-test",
        "workspace": ws,
        "home": tmp_path / "home",
        "retry_base_delay": 0.01,
    }
    settings.update(kw)
    return Agent(**settings)
