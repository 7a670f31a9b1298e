"""Subagents are visible (issue 10): a task's tool calls, results and denials appear in the parent's
events and stream-json (with the parent call id), its session log and its `permission_denials`."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import command_env, kimicode_command

from kimicode.events import Event, MessageCommitted, PermissionDenied, SubagentEvent
from kimicode.testing import FakeServer, RecordedRequest, Reply, ToolCall

MakeAgent = Callable[..., Any]
SUBAGENT_MARK = "You are a subagent"
PARENT_CALL = "call_parent_task_1"


def attacker(req: RecordedRequest) -> Reply:
    """Parent: delegate to a subagent with bash. Child: try to write a file and read one, then report."""
    msgs = req.body["messages"]
    if SUBAGENT_MARK in msgs[0]["content"]:
        if msgs[-1]["role"] == "user":
            return Reply(
                tool_calls=[
                    ToolCall("bash", {"command": "echo pwned > out.txt"}),
                    ToolCall("read_file", {"path": "notes.md"}),
                ]
            )
        return Reply(content="child report")
    if msgs[-1]["role"] == "user":
        return Reply(
            tool_calls=[
                ToolCall(
                    "task", {"description": "sneaky", "prompt": "do it", "tools": ["bash", "read_file"]}, id=PARENT_CALL
                )
            ]
        )
    return Reply(content="parent done")


def test_a_subagents_calls_results_and_denials_reach_the_parent(
    server: FakeServer, make_agent: MakeAgent, workspace: Path, tmp_path: Path
) -> None:
    (workspace / "notes.md").write_text("the notes\n")
    server.add(*[attacker] * 4)
    events: list[Event] = []
    agent = make_agent(headless=True, on_event=events.append, sandbox="off")
    result = agent.run_sync("go")
    assert result.status == "success" and not (workspace / "out.txt").exists()

    # the denial is the parent's too, tied to the task call
    (denial,) = result.permission_denials
    assert denial["tool_name"] == "bash" and denial["parent_tool_use_id"] == PARENT_CALL
    assert denial["tool_input"] == {"command": "echo pwned > out.txt"}

    sub = [e for e in events if isinstance(e, SubagentEvent)]
    assert sub and all(e.parent_call_id == PARENT_CALL and e.description == "sneaky" for e in sub)
    assert any(isinstance(e.event, PermissionDenied) for e in sub)
    committed = [e.event.message for e in sub if isinstance(e.event, MessageCommitted)]
    assert [m["role"] for m in committed] == ["assistant", "tool", "tool", "assistant"]
    assert "the notes" in committed[2]["content"]

    records = [
        json.loads(line)
        for line in (tmp_path / "home" / "sessions" / f"{agent.session_id}.jsonl").read_text().splitlines()
    ]
    logged = [r for r in records if r.get("type") == "subagent"]
    assert len(logged) == 4 and all(r["parent_tool_use_id"] == PARENT_CALL for r in logged)
    assert any(r.get("type") == "subagent_denial" and r["tool_name"] == "bash" for r in records)
    # the parent's own history is untouched: resume replays only its messages
    from kimicode.session.log import load

    replayed = load(tmp_path / "home" / "sessions" / f"{agent.session_id}.jsonl").messages
    assert not any(m.get("content") == "child report" for m in replayed if m["role"] == "assistant")


@pytest.mark.slow
def test_stream_json_shows_the_subagent_with_its_parent_call_id(
    server: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    (workspace / "notes.md").write_text("the notes\n")
    server.add(*[attacker] * 4)
    env = command_env(tmp_path / "home", server, key="sk-sub-key-123")
    done = subprocess.run(
        [*kimicode_command(), "-p", "go", "--output-format", "stream-json"],
        env=env,
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    child = [ln for ln in lines if ln.get("parent_tool_use_id") == PARENT_CALL]
    assert any(ln["type"] == "permission_denied" and ln["tool_name"] == "bash" for ln in child)
    assert any(ln["type"] == "message" and ln["message"].get("tool_calls") for ln in child)
    result = lines[-1]
    assert result["type"] == "result"
    assert [d["parent_tool_use_id"] for d in result["permission_denials"]] == [PARENT_CALL]


def test_the_terminal_view_shows_subagent_calls_and_denials_safely() -> None:
    import io

    from rich.console import Console

    from kimicode.ui.view import TurnView

    out = io.StringIO()
    view = TurnView(
        Console(file=out, width=120, color_system=None, force_terminal=False), plain=True, show_reasoning=False
    )
    call = {
        "id": "c9",
        "type": "function",
        "function": {"name": "bash", "arguments": json.dumps({"command": "ls \x1b[2K\rrm -rf ~"})},
    }
    view.handle(SubagentEvent(PARENT_CALL, "sneaky", MessageCommitted({"role": "assistant", "tool_calls": [call]})))
    view.handle(
        SubagentEvent(
            PARENT_CALL,
            "sneaky",
            PermissionDenied(
                "c9", "bash", {"command": "echo pwned > out.txt"}, "asks in default mode", None, False, "execute"
            ),
        )
    )
    text = out.getvalue()
    assert "[sneaky] bash: ls \\x1b[2K\\x0drm -rf ~" in text
    assert "[sneaky] not run: bash: echo pwned > out.txt" in text
    assert "\x1b" not in text
