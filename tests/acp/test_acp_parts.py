"""The ACP face's parts without a process: the recorded exchange against the schema, event translation,
permission mapping (the rule "always" remembers is the terminal's), stop reasons and errors."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import pytest
from acp import RequestError
from acp.schema import AllowedOutcome, DeniedOutcome, RequestPermissionResponse
from acp_schema import check_exchange
from helpers import FIXTURES

from kimicode.acp.approve import Approver, rule_for
from kimicode.acp.session import stop_reason
from kimicode.acp.updates import Translator, diff_contents, plan_update, tool_title
from kimicode.agent.results import ApprovalRequest
from kimicode.events import (
    ContentDelta,
    MessageCommitted,
    Notice,
    ReasoningDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnFinished,
)
from kimicode.ui.approvals import remember_rule

FIXTURE = FIXTURES / "acp" / "exchange.jsonl"


def recorded() -> list[dict[str, Any]]:
    return [json.loads(line) for line in FIXTURE.read_text().splitlines()]


@pytest.mark.prepush
def test_recorded_exchange_is_valid_acp() -> None:
    messages = recorded()
    check_exchange(messages)
    methods = {m["message"].get("method") for m in messages}
    assert {"session/request_permission", "fs/write_text_file", "session/cancel", "session/load"} <= methods


@pytest.mark.prepush
@pytest.mark.parametrize("tamper", ["stop", "kind", "option", "diff"])
def test_the_schema_check_can_fail(tamper: str) -> None:
    """Each tampering makes one message invalid, and the checker says so."""
    messages = copy.deepcopy(recorded())
    for record in messages:
        msg = record["message"]
        result, params = msg.get("result") or {}, msg.get("params") or {}
        update = params.get("update") or {}
        if tamper == "stop" and "stopReason" in result:
            result["stopReason"] = "done"
            break
        if tamper == "kind" and update.get("sessionUpdate") == "tool_call":
            update["kind"] = "teleport"
            break
        if tamper == "option" and msg.get("method") == "session/request_permission":
            params["options"][0]["kind"] = "allow_forever"
            break
        listed = update.get("content") if isinstance(update.get("content"), list) else []
        if tamper == "diff" and any(c.get("type") == "diff" for c in listed):
            next(c for c in listed if c.get("type") == "diff").pop("newText")
            break
    else:
        pytest.fail(f"nothing to tamper with for {tamper}")
    with pytest.raises(AssertionError):
        check_exchange(messages)


def test_diff_contents_per_hunk_and_created_files() -> None:
    diff = (
        "--- a/x.py\n+++ b/x.py\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n@@ -10,2 +10,3 @@\n j\n k\n+l\n"
        "\\ No newline at end of file\n"
    )
    first, second = diff_contents(diff, "/w/x.py")
    assert (first.old_text, first.new_text, first.path) == ("a\nb\nc", "a\nB\nc", "/w/x.py")
    assert (second.old_text, second.new_text) == ("j\nk", "j\nk\nl")
    (created,) = diff_contents("--- /dev/null\n+++ b/n.txt\n@@ -0,0 +1,2 @@\n+one\n+two\n", "/w/n.txt")
    assert created.old_text is None and created.new_text == "one\ntwo"
    assert diff_contents("", "/w/x") == []


def test_events_become_updates(tmp_path: Path) -> None:
    t = Translator(tmp_path, lambda name: {"edit_file": "edit"}.get(name, "other"))
    assert t.updates(ContentDelta("hi"))[0].content.text == "hi"
    assert t.updates(ReasoningDelta("hmm"))[0].session_update == "agent_thought_chunk"
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "edit_file", "arguments": json.dumps({"path": "a.py", "old_string": "x"})},
    }
    (start,) = t.updates(MessageCommitted({"role": "assistant", "content": "", "tool_calls": [call]}))
    assert (start.kind, start.status, start.title) == ("edit", "pending", "Edit a.py")
    assert start.locations[0].path == str(tmp_path / "a.py")
    assert t.updates(ToolCallStarted("c1", "edit_file", {}))[0].status == "in_progress"
    diff = "--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-x\n+y\n"
    done = t.updates(ToolCallFinished("c1", "edit_file", "Edited", False, display={"diff": diff, "path": "a.py"}))
    assert done[0].status == "completed" and done[0].content[0].type == "diff"
    failed = t.updates(ToolCallFinished("c1", "edit_file", "Error: nope", True))
    assert failed[0].status == "failed" and failed[0].content[0].content.text == "Error: nope"
    todos = t.updates(
        ToolCallFinished(
            "c2",
            "todo_write",
            "ok",
            False,
            display={
                "todos": [
                    {"id": "1", "content": "write tests", "status": "done"},
                    {"id": "2", "content": "ship", "status": "pending"},
                ]
            },
        )
    )
    plan = todos[1]
    assert plan.session_update == "plan"
    assert [(e.content, e.status) for e in plan.entries] == [("write tests", "completed"), ("ship", "pending")]
    assert t.updates(Notice("just info")) == []
    assert "careful" in t.updates(Notice("careful", "warning"))[0].content.text
    assert plan_update([]).entries == []
    assert tool_title("bash", {"command": "pytest -q\nmore"}) == "bash: pytest -q"


def test_replay_shows_the_history(tmp_path: Path) -> None:
    t = Translator(tmp_path, lambda name: "read")
    history = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            ],
        },
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "think",
            "tool_calls": [{"id": "r1", "function": {"name": "read_file", "arguments": '{"path": "a"}'}}],
        },
        {"role": "tool", "tool_call_id": "r1", "content": "Error: file not found: a"},
        {"role": "assistant", "content": "done"},
    ]
    kinds = [u.session_update for u in t.replay(history)]
    assert kinds == [
        "user_message_chunk",
        "user_message_chunk",
        "agent_thought_chunk",
        "tool_call",
        "tool_call_update",
        "agent_message_chunk",
    ]
    assert t.replay(history)[4].status == "failed"


def request(kind: str, **args: Any) -> ApprovalRequest:
    path = str(args.get("path")) if kind == "edit" else None
    return ApprovalRequest(
        "call-1", {"execute": "bash", "edit": "edit_file"}.get(kind, "web_fetch"), kind, args, "it asks", path
    )


def answering(option: str | None, seen: list[Any]) -> Any:
    async def ask(tool_call: Any, options: Any) -> RequestPermissionResponse:
        seen.append((tool_call, options))
        if option is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=option))

    return ask


def test_always_remembers_the_terminals_rule(tmp_path: Path) -> None:
    for req, answer in (
        (request("execute", command="npm test"), "command"),
        (request("edit", path="/w/src/app.py"), "file"),
    ):
        seen: list[Any] = []
        approval = asyncio.run(Approver(answering("allow_always", seen), tmp_path)(req))
        assert approval.approved and approval.remember == remember_rule(req, answer)
        assert rule_for(req) == remember_rule(req, answer)
        assert [o.kind for o in seen[0][1]] == ["allow_once", "allow_always", "reject_once"]


def test_once_reject_cancel_and_exact_calls(tmp_path: Path) -> None:
    seen: list[Any] = []
    cmd = request("execute", command="make")
    once = asyncio.run(Approver(answering("allow_once", seen), tmp_path)(cmd))
    assert once.approved and once.remember is None
    assert not asyncio.run(Approver(answering("reject_once", seen), tmp_path)(cmd)).approved
    assert not asyncio.run(Approver(answering(None, seen), tmp_path)(cmd)).approved
    assert not asyncio.run(Approver(answering("made-up", seen), tmp_path)(cmd)).approved  # unknown: refuse
    fetch = request("other", url="https://example.com")
    approver = Approver(answering("allow_always", seen), tmp_path)
    asked = len(seen)
    assert asyncio.run(approver(fetch)).approved and asyncio.run(approver(fetch)).approved
    assert len(seen) == asked + 1  # the exact call was remembered, in this session only
    other = request("other", url="https://example.org")
    asyncio.run(approver(other))
    assert len(seen) == asked + 2


def test_stop_reasons_and_errors() -> None:
    assert stop_reason(TurnFinished("success", "x", 1)).stop_reason == "end_turn"
    assert stop_reason(TurnFinished("interrupted", "", 1)).stop_reason == "cancelled"
    assert stop_reason(TurnFinished("max_turns", "", 3)).stop_reason == "max_turn_requests"
    assert stop_reason(TurnFinished("error", "", 1, "blocked", "content_filter")).stop_reason == "refusal"
    with pytest.raises(RequestError) as err:
        stop_reason(TurnFinished("error", "", 1, "invalid API key (401)", "auth"))
    assert err.value.code == -32000 and str(err.value) == "invalid API key (401)"
    with pytest.raises(RequestError) as err:
        stop_reason(TurnFinished("error", "", 1, "server overloaded", "transient"))
    assert err.value.code == -32603 and err.value.data == {"kind": "transient", "status": "error"}


@pytest.mark.prepush
def test_nothing_but_protocol_on_stdout() -> None:
    """Once the protocol streams are open, prints, fd 1 writes and children land on stderr."""
    import subprocess
    import sys

    code = (
        "import asyncio, os, sys\n"
        "from kimicode.acp.server import protocol_streams\n"
        "async def main():\n"
        "    reader, writer = await protocol_streams()\n"
        "    print('a stray print')\n"
        "    os.write(1, b'a raw write\\n')\n"
        "    os.system('echo a child process')\n"
        '    writer.write(b\'{"jsonrpc": "2.0"}\\n\')\n'
        "    await writer.drain()\n"
        "asyncio.run(main())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == '{"jsonrpc": "2.0"}\n'
    assert "a stray print" in done.stderr and "a raw write" in done.stderr and "a child process" in done.stderr


def test_loading_a_session_open_elsewhere_is_refused(make_agent: Any, server: Any, workspace: Path) -> None:
    """A session a terminal (here: another agent) has open is not taken over by session/load."""
    from kimicode.acp.server import KimicodeAcp
    from kimicode.testing import Reply

    server.add(Reply(content="hi"))

    async def go() -> None:
        agent = make_agent()
        await agent.run("hello")
        face = KimicodeAcp({"base_url": server.base_url, "api_key": "sk-test"})
        try:
            with pytest.raises(RequestError) as err:
                await face.load_session(cwd=str(workspace), session_id=agent.session_id)
            assert err.value.code == -32603 and err.value.data["kind"] == "session_busy"
            with pytest.raises(RequestError) as err:
                await face.load_session(cwd=str(workspace), session_id="20990101-000000-nope")
            assert err.value.code == -32002
        finally:
            await agent.aclose()
            await face.aclose()

    asyncio.run(go())


def test_a_running_commands_output_is_shown_live_and_throttled(tmp_path: Path) -> None:
    from kimicode.events import ToolOutputDelta

    t = Translator(tmp_path, lambda name: "execute")
    now = [100.0]
    t.clock = lambda: now[0]
    first = t.updates(ToolOutputDelta("b1", "line 1\n"))
    assert first[0].content[0].content.text == "line 1\n"
    assert t.updates(ToolOutputDelta("b1", "line 2\n")) == []  # too soon: kept
    now[0] += 1
    later = t.updates(ToolOutputDelta("b1", "line 3\n"))
    assert later[0].content[0].content.text == "line 1\nline 2\nline 3\n"
    assert t.updates(ToolCallFinished("b1", "bash", "all of it\n[exit code: 0]", False))[0].status == "completed"
    assert "b1" not in t.live
