"""`kimicode acp` as real clients use it (issue 37): reconnecting on every prompt (acpx), loading a session that
never had a prompt, a bad line on the pipe, slash commands, a question right after a cancel, a server's
content filter, a long command's end."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from acp import PROTOCOL_VERSION, text_block
from acp_editor import Editor, capabilities, kimicode_acp
from helpers import kimicode_command
from test_acp import acp_env

from kimicode.testing import ErrorReply, FakeServer, Reply, ToolCall

pytestmark = pytest.mark.slow


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 60))


async def connect(editor: Editor, server: FakeServer, workspace: Path, tmp_path: Path) -> Any:
    return kimicode_acp(
        editor, [*kimicode_command(), "acp"], acp_env(server, tmp_path / "home"), workspace, tmp_path / "acp-stderr.log"
    )


def test_plan_mode_survives_load_in_a_new_process(server: FakeServer, workspace: Path, tmp_path: Path) -> None:
    """acpx: `set-mode plan`, then each prompt reconnects (session/load in a new process): the write is refused."""
    server.add(
        Reply(content="planned"),
        Reply(tool_calls=[ToolCall("write_file", {"path": "x.txt", "content": "x"})]),
        Reply(content="could not write"),
    )

    async def first() -> str:
        async with await connect(Editor(), server, workspace, tmp_path) as (conn, _):
            await conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=capabilities(fs=False))
            sid = (await conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id
            await conn.set_session_mode(session_id=sid, mode_id="plan")
            await conn.prompt(session_id=sid, prompt=[text_block("plan it")])
            return str(sid)

    sid = run(first())
    editor = Editor(answers=["allow_once"])

    async def second() -> str:
        async with await connect(editor, server, workspace, tmp_path) as (conn, _):
            await conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=capabilities(fs=False))
            loaded = await conn.load_session(cwd=str(workspace), session_id=sid, mcp_servers=[])
            await conn.prompt(session_id=sid, prompt=[text_block("now write x.txt")])
            return str(loaded.modes.current_mode_id)

    assert run(second()) == "plan"
    assert not (workspace / "x.txt").exists() and not editor.questions  # plan refuses; nothing was asked
    assert "plan" in server.requests[2].body["messages"][-1]["content"]


def test_a_session_with_no_prompt_yet_loads_in_another_process(
    server: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    server.add(Reply(content="hello again"))

    async def first() -> str:
        async with await connect(Editor(), server, workspace, tmp_path) as (conn, _):
            await conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=capabilities())
            return str((await conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id)

    sid = run(first())
    editor = Editor()

    async def second() -> str:
        async with await connect(editor, server, workspace, tmp_path) as (conn, _):
            await conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=capabilities())
            await conn.load_session(cwd=str(workspace), session_id=sid, mcp_servers=[])
            return str((await conn.prompt(session_id=sid, prompt=[text_block("hi")])).stop_reason)

    assert run(second()) == "end_turn"
    assert editor.text() == "hello again"


def test_bad_lines_are_answered_and_the_process_lives_on(tmp_path: Path, workspace: Path, server: FakeServer) -> None:
    proc = subprocess.Popen(
        [*kimicode_command(), "acp"],
        env=acp_env(server, tmp_path / "home"),
        cwd=workspace,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": PROTOCOL_VERSION}}
    try:
        proc.stdin.write("42\n[]\nthis is not json\n" + json.dumps(init) + "\n")
        proc.stdin.flush()
        answers = [json.loads(proc.stdout.readline()) for _ in range(4)]
    finally:
        proc.stdin.close()
        proc.wait(30)
    codes = [a.get("error", {}).get("code") for a in answers[:3]]
    assert codes == [-32600, -32600, -32700] and all(a["id"] is None for a in answers[:3])
    assert answers[3]["id"] == 1 and answers[3]["result"]["agentCapabilities"]["loadSession"] is True


def test_slash_commands_answer_with_text(server: FakeServer, workspace: Path, tmp_path: Path) -> None:
    editor = Editor()

    async def go() -> list[str]:
        async with await connect(editor, server, workspace, tmp_path) as (conn, _):
            await conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=capabilities())
            sid = (await conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id
            out = []
            for text in ("/compact", "/frobnicate now"):
                before = editor.text()
                done = await conn.prompt(session_id=sid, prompt=[text_block(text)])
                assert done.stop_reason == "end_turn"
                out.append(editor.text()[len(before) :])
            return out

    compact, unknown = run(go())
    assert compact.startswith("Nothing to compact yet")
    assert unknown.startswith("Unknown command /frobnicate") and "/compact" in unknown
    assert not server.requests  # neither went to the model


def test_a_prompt_right_after_cancel_waits_and_runs(server: FakeServer, workspace: Path, tmp_path: Path) -> None:
    server.add(Reply(tool_calls=[ToolCall("bash", {"command": "sleep 20"})]), Reply(content="second"))
    editor = Editor()

    async def go() -> tuple[str, str]:
        async with await connect(editor, server, workspace, tmp_path) as (conn, _):
            await conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=capabilities())
            sid = (await conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id
            await conn.set_session_mode(session_id=sid, mode_id="yolo")
            first = asyncio.ensure_future(conn.prompt(session_id=sid, prompt=[text_block("wait")]))
            while not [u for u in editor.kinds("tool_call_update") if u.status == "in_progress"]:
                await asyncio.sleep(0.02)
            await conn.cancel(session_id=sid)
            second = await conn.prompt(session_id=sid, prompt=[text_block("next question")])  # first not awaited
            return str((await first).stop_reason), str(second.stop_reason)

    assert run(go()) == ("cancelled", "end_turn")
    assert editor.text().endswith("second")


def test_a_content_filter_400_is_a_refusal(server: FakeServer, workspace: Path, tmp_path: Path) -> None:
    server.add(ErrorReply(400, "The request was rejected because it was considered high risk", "content_filter"))

    async def go() -> str:
        async with await connect(Editor(), server, workspace, tmp_path) as (conn, _):
            await conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=capabilities())
            sid = (await conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id
            return str((await conn.prompt(session_id=sid, prompt=[text_block("something risky")])).stop_reason)

    assert run(go()) == "refusal"


def test_the_final_tool_update_shows_the_end_of_a_long_command(
    server: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    command = "for i in $(seq 1 3000); do echo line $i; done; echo 'error: the build broke here'; exit 3"
    server.add(Reply(tool_calls=[ToolCall("bash", {"command": command})]), Reply(content="it failed"))
    editor = Editor()

    async def go() -> None:
        async with await connect(editor, server, workspace, tmp_path) as (conn, _):
            await conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=capabilities())
            sid = (await conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id
            await conn.set_session_mode(session_id=sid, mode_id="yolo")
            await conn.prompt(session_id=sid, prompt=[text_block("build")])

    run(go())
    final = [u for u in editor.kinds("tool_call_update") if u.status in ("completed", "failed")][-1]
    shown = final.content[0].content.text
    assert shown.startswith("line 1\n") and "error: the build broke here" in shown and "[exit code: 3]" in shown
    assert "characters not shown" in shown and len(shown) < 9000


def test_list_resume_and_close(server: FakeServer, workspace: Path, tmp_path: Path) -> None:
    """The session lifecycle clients use for thread history: list, resume (no replay), close."""
    server.add(Reply(content="first answer"), Reply(content="resumed answer"))
    editor = Editor()

    async def first() -> tuple[str, Any, Any]:
        async with await connect(editor, server, workspace, tmp_path) as (conn, _):
            init = await conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=capabilities())
            caps = init.agent_capabilities.session_capabilities
            sid = (await conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id
            await conn.prompt(session_id=sid, prompt=[text_block("remember the word tangerine")])
            listed = await conn.list_sessions(cwd=str(workspace))
            await conn.close_session(session_id=sid)
            return str(sid), caps, listed

    sid, caps, listed = run(first())
    assert caps.list is not None and caps.resume is not None and caps.close is not None
    assert [s.session_id for s in listed.sessions] == [sid]
    assert listed.sessions[0].title == "remember the word tangerine" and listed.sessions[0].cwd == str(workspace)
    again = Editor()

    async def second() -> str:
        async with await connect(again, server, workspace, tmp_path) as (conn, _):
            await conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=capabilities())
            resumed = await conn.resume_session(session_id=sid, cwd=str(workspace), mcp_servers=[])
            assert resumed.modes.current_mode_id == "default"
            return str((await conn.prompt(session_id=sid, prompt=[text_block("which word?")])).stop_reason)

    assert run(second()) == "end_turn"
    assert not again.kinds("user_message_chunk")  # resume does not stream the history back
    sent = server.requests[1].body["messages"]
    assert [m["content"] for m in sent if m["role"] == "user"][-2:] == ["remember the word tangerine", "which word?"]


def test_reasoning_streamed_before_a_cancel_stays_in_the_history(
    server: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    server.add(Reply(reasoning="a long thought " * 300, chunk_size=4, chunk_delay=0.03), Reply(content="next"))
    editor = Editor()

    async def go() -> None:
        async with await connect(editor, server, workspace, tmp_path) as (conn, _):
            await conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=capabilities())
            sid = (await conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id
            first = asyncio.ensure_future(conn.prompt(session_id=sid, prompt=[text_block("think")]))
            while len(editor.kinds("agent_thought_chunk")) < 5:
                await asyncio.sleep(0.02)
            await conn.cancel(session_id=sid)
            assert (await first).stop_reason == "cancelled"
            await conn.prompt(session_id=sid, prompt=[text_block("go on")])

    run(go())
    shown = editor.text("agent_thought_chunk")
    kept = next(m for m in server.requests[1].body["messages"] if m["role"] == "assistant")
    assert kept["reasoning_content"] == shown and shown.startswith("a long thought")  # what was streamed, whole


def test_a_commands_tool_call_comes_before_its_permission_question(
    server: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    server.add(Reply(tool_calls=[ToolCall("bash", {"command": "touch a.txt"})]), Reply(content="ok"))
    messages: list[dict[str, Any]] = []
    editor = Editor(answers=["allow_once"])

    async def go() -> None:
        env = acp_env(server, tmp_path / "home")
        async with kimicode_acp(editor, [*kimicode_command(), "acp"], env, workspace, tmp_path / "log", messages) as (
            conn,
            _,
        ):
            await conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=capabilities(fs=False))
            sid = (await conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id
            await conn.prompt(session_id=sid, prompt=[text_block("touch it")])

    run(go())
    order = []
    for m in messages:
        body = m["message"]
        if body.get("method") == "session/request_permission":
            order.append("question")
        elif body.get("method") == "session/update" and body["params"]["update"]["sessionUpdate"] == "tool_call":
            order.append("tool_call")
    assert order == ["tool_call", "question"] and (workspace / "a.txt").exists()
