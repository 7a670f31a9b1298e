"""`kimicode acp` end to end: the ACP SDK's client side drives the real command, the fake server is the model.

One whole exchange (initialize, new session, a prompt whose edit needs permission and goes through the
editor's fs/write_text_file, a command remembered with "always", a cancelled turn, the session loaded
again in a new process) is checked message by message against the protocol's JSON Schema, built from
the SDK's schema models (tests/acp_schema.py), and recorded in tests/fixtures/acp/exchange.jsonl.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest
from acp import PROTOCOL_VERSION, RequestError, text_block
from acp_editor import Editor, capabilities, kimicode_acp
from acp_schema import check_exchange
from helpers import FIXTURES, kimicode_command

from kimicode.testing import FakeServer, Reply, ToolCall

pytestmark = pytest.mark.slow

FIXTURE = FIXTURES / "acp" / "exchange.jsonl"


def acp_env(server: FakeServer, home: Path) -> dict[str, str]:
    return {
        "KIMI_API_KEY": "sk-acp-test-key",
        "KIMI_BASE_URL": server.base_url,
        "KIMI_MODEL": "kimi-k3",
        "KIMICODE_HOME": str(home),
        "KIMICODE_RETRY_BASE_DELAY": "0.01",
        "PATH": os.environ.get("PATH", ""),
    }


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_whole_exchange(server: FakeServer, workspace: Path, tmp_path: Path) -> None:
    """Edit through the editor's buffer after approval, a remembered command, cancel, load again."""
    hello = workspace / "hello.py"
    hello.write_text("print('helo')\n")
    buffers = {str(hello): "print('helo')  # unsaved in the editor\n"}
    server.add(
        Reply(reasoning="Let me look at the file first.", tool_calls=[ToolCall("read_file", {"path": "hello.py"})]),
        Reply(tool_calls=[ToolCall("edit_file", {"path": "hello.py", "old_string": "helo", "new_string": "hello"})]),
        Reply(content="Fixed the greeting."),
        Reply(tool_calls=[ToolCall("bash", {"command": "touch made.txt"})]),
        Reply(tool_calls=[ToolCall("bash", {"command": "touch made.txt"})], id_style="openai"),
        Reply(content="Made it twice."),
        Reply(content="a long answer that the user stops " * 40, chunk_size=4, chunk_delay=0.05),
    )
    editor = Editor(answers=["allow_once", "allow_always"], buffers=buffers)
    messages: list[dict[str, Any]] = []
    env, log = acp_env(server, tmp_path / "home"), tmp_path / "acp-stderr.log"

    async def first() -> str:
        async with kimicode_acp(editor, [*kimicode_command(), "acp"], env, workspace, log, messages) as (conn, _):
            init = await conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=capabilities())
            assert init.agent_capabilities.load_session is True
            assert init.agent_capabilities.prompt_capabilities.image is True
            assert init.agent_capabilities.prompt_capabilities.embedded_context is True
            new = await conn.new_session(cwd=str(workspace), mcp_servers=[])
            assert new.modes is not None and new.modes.current_mode_id == "default"
            assert {m.id for m in new.modes.available_modes} == {"default", "accept-edits", "plan", "yolo"}
            sid = new.session_id

            done = await conn.prompt(session_id=sid, prompt=[text_block("fix the greeting in hello.py")])
            assert done.stop_reason == "end_turn"

            done = await conn.prompt(session_id=sid, prompt=[text_block("make the file, twice")])
            assert done.stop_reason == "end_turn"

            editor.got_update.clear()
            before = len(editor.updates)
            turn = asyncio.ensure_future(conn.prompt(session_id=sid, prompt=[text_block("write an essay")]))
            while len(editor.kinds("agent_message_chunk")) < 4 or len(editor.updates) == before:
                await asyncio.sleep(0.02)
            await conn.cancel(session_id=sid)
            assert (await turn).stop_reason == "cancelled"
            return sid

    sid = run(first())
    # the read saw the editor's unsaved buffer, not the disk
    sent = json.dumps(server.requests[1].body["messages"])
    assert "unsaved in the editor" in sent
    assert set(editor.reads) == {str(hello)}  # read_file, the approval preview, the edit
    # the edit asked first, then went through fs/write_text_file into the buffer; the disk is untouched
    tool_call, options = editor.questions[0]
    assert tool_call.kind == "edit" and tool_call.tool_call_id == "functions.edit_file:1"
    assert [o.kind for o in options] == ["allow_once", "allow_always", "reject_once"]
    assert f"edit({hello})" in options[1].name  # the rule the terminal writes for "this file"
    assert any(c.type == "diff" for c in tool_call.content)
    assert editor.writes == [(str(hello), "print('hello')  # unsaved in the editor\n")]
    assert hello.read_text() == "print('helo')\n"
    # reasoning streamed as thoughts, the answer as message chunks
    assert editor.text("agent_thought_chunk") == "Let me look at the file first."
    assert "Fixed the greeting." in editor.text()
    starts = {u.tool_call_id: u for u in editor.kinds("tool_call")}
    assert starts["functions.read_file:0"].kind == "read"
    assert starts["functions.read_file:0"].locations[0].path == str(hello)
    finals = [u for u in editor.kinds("tool_call_update") if u.status in ("completed", "failed")]
    edit_done = next(u for u in finals if u.tool_call_id == "functions.edit_file:1")
    assert edit_done.status == "completed"
    diff = next(c for c in edit_done.content if c.type == "diff")
    assert diff.path == str(hello) and "hello" in diff.new_text and "helo'" in diff.old_text
    # "always" remembered `bash(touch made.txt)`: the second identical command did not ask
    assert len(editor.questions) == 2
    assert "bash(touch made.txt)" in editor.questions[1][1][1].name
    assert (workspace / "made.txt").exists()
    bash_ids = ("functions.bash", "call_")
    bash_done = [u for u in finals if u.status == "completed" and u.tool_call_id.startswith(bash_ids)]
    assert len(bash_done) == 2
    # the slash commands were announced
    assert editor.kinds("available_commands_update")[0].available_commands[0].name == "compact"

    # load the session again in a new process: the history streams back before the response
    loaded = Editor()

    async def second() -> None:
        async with kimicode_acp(loaded, [*kimicode_command(), "acp"], env, workspace, log, messages) as (conn, _):
            await conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=capabilities())
            response = await conn.load_session(cwd=str(workspace), session_id=sid, mcp_servers=[])
            assert response is not None and response.modes is not None
            with pytest.raises(RequestError) as err:
                await conn.load_session(cwd=str(workspace), session_id="no-such-session", mcp_servers=[])
            assert "no-such-session" in json.dumps(err.value.data) + str(err.value)

    run(second())
    users = loaded.text("user_message_chunk")
    assert "fix the greeting in hello.py" in users and "write an essay" in users
    assert "Fixed the greeting." in loaded.text()
    assert loaded.text("agent_thought_chunk").startswith("Let me look at the file first.")
    assert any(u.kind == "edit" for u in loaded.kinds("tool_call"))

    check_exchange(messages)  # every message valid against the protocol's schema
    methods = {m["message"].get("method") for m in messages}
    assert {
        "initialize",
        "session/new",
        "session/prompt",
        "session/request_permission",
        "fs/read_text_file",
        "fs/write_text_file",
        "session/cancel",
        "session/load",
        "session/update",
    } <= methods
    if os.environ.get("RECORD_ACP_EXCHANGE"):
        FIXTURE.parent.mkdir(parents=True, exist_ok=True)
        text = "".join(json.dumps(m, ensure_ascii=False) + "\n" for m in messages)
        FIXTURE.write_text(text.replace(str(tmp_path), "/tmp/acp-demo"))  # stable paths in the recording
    stdout_lines = [m for m in messages if m["direction"] == "incoming"]
    assert stdout_lines  # nothing but protocol reached the client (a stray line would have failed to parse)
    assert "Traceback" not in log.read_text()


def test_client_terminal_modes_and_errors(server: FakeServer, workspace: Path, tmp_path: Path) -> None:
    """Commands run in the editor's terminal; accept-edits set over session/set_mode; a model error is a
    JSON-RPC error with kimicode's message; a rejected call is reported to the model."""
    server.add(
        Reply(tool_calls=[ToolCall("bash", {"command": "echo from-the-editor > seen.txt; echo done"})]),
        Reply(content="ran it"),
        Reply(tool_calls=[ToolCall("write_file", {"path": "new.txt", "content": "x\n"})]),
        Reply(content="wrote it"),
        Reply(tool_calls=[ToolCall("bash", {"command": "rm -rf build"})]),
        Reply(content="ok, not removed"),
    )
    editor = Editor(answers=["allow_once", "reject_once"])
    env, log = acp_env(server, tmp_path / "home"), tmp_path / "acp-stderr.log"

    async def go() -> None:
        async with kimicode_acp(editor, [*kimicode_command(), "acp"], env, workspace, log) as (conn, _):
            await conn.initialize(
                protocol_version=PROTOCOL_VERSION, client_capabilities=capabilities(fs=False, terminal=True)
            )
            sid = (await conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id
            assert (await conn.prompt(session_id=sid, prompt=[text_block("run it")])).stop_reason == "end_turn"
            await conn.set_session_mode(session_id=sid, mode_id="accept-edits")
            assert (await conn.prompt(session_id=sid, prompt=[text_block("write it")])).stop_reason == "end_turn"
            assert (await conn.prompt(session_id=sid, prompt=[text_block("clean")])).stop_reason == "end_turn"
            with pytest.raises(RequestError) as err:
                await conn.set_session_mode(session_id=sid, mode_id="reckless")
            assert err.value.code == -32602
            server.add(server.error("auth"))
            with pytest.raises(RequestError) as err:
                await conn.prompt(session_id=sid, prompt=[text_block("again")])
            assert err.value.code == -32000 and str(err.value)  # kimicode's message, not a traceback
            with pytest.raises(RequestError):
                await conn.new_session(cwd="relative/dir", mcp_servers=[])

    run(go())
    assert editor.commands and editor.commands[0][:2] == ["/bin/bash", "-c"]
    assert (workspace / "seen.txt").read_text() == "from-the-editor\n"
    assert any(c.type == "terminal" for u in editor.kinds("tool_call_update") for c in (u.content or ()))
    assert (workspace / "new.txt").read_text() == "x\n"  # accept-edits: no question, local write (no fs caps)
    assert len(editor.questions) == 2  # the command, then rm -rf (rejected)
    rejected = server.requests[5].body["messages"][-1]
    assert rejected["role"] == "tool" and rejected["content"].startswith("Permission denied by the user")


def test_prompt_contents_and_bad_requests(server: FakeServer, workspace: Path, tmp_path: Path) -> None:
    """Images and embedded files reach the model; a busy session, an unknown session, an empty prompt and
    bad image data are JSON-RPC errors, and the session still works after them."""
    from acp import embedded_text_resource, image_block, resource_block, resource_link_block

    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
    server.add(Reply(content="seen"), Reply(content="slow " * 100, chunk_size=3, chunk_delay=0.05), Reply(content="ok"))
    editor = Editor()
    env, log = acp_env(server, tmp_path / "home"), tmp_path / "acp-stderr.log"

    async def go() -> None:
        async with kimicode_acp(editor, [*kimicode_command(), "acp"], env, workspace, log) as (conn, _):
            await conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=capabilities())
            sid = (await conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id
            prompt = [
                text_block("look at these"),
                image_block(png, "image/png"),
                resource_block(embedded_text_resource(f"file://{workspace}/notes.md", "remember the milk")),
                resource_link_block("spec.md", f"file://{workspace}/spec.md"),
            ]
            assert (await conn.prompt(session_id=sid, prompt=prompt)).stop_reason == "end_turn"
            for bad in ([text_block("   ")], [image_block("not base64!!", "image/png")]):
                with pytest.raises(RequestError) as err:
                    await conn.prompt(session_id=sid, prompt=bad)
                assert err.value.code == -32602
            with pytest.raises(RequestError):
                await conn.prompt(session_id="no-such-session", prompt=[text_block("hi")])
            slow = asyncio.ensure_future(conn.prompt(session_id=sid, prompt=[text_block("long")]))
            while not editor.kinds("agent_message_chunk")[1:]:
                await asyncio.sleep(0.02)
            with pytest.raises(RequestError) as err:
                await conn.prompt(session_id=sid, prompt=[text_block("meanwhile")])
            assert "already running" in json.dumps(err.value.data)
            await conn.cancel(session_id=sid)
            assert (await slow).stop_reason == "cancelled"
            await conn.cancel(session_id=sid)  # nothing running: nothing happens
            assert (await conn.prompt(session_id=sid, prompt=[text_block("still there?")])).stop_reason == "end_turn"

    run(go())
    content = server.requests[0].body["messages"][-1]["content"]
    assert content[0]["type"] == "text" and content[1]["image_url"]["url"] == f"data:image/png;base64,{png}"
    assert '<context uri="file://' in content[0]["text"] and "remember the milk" in content[0]["text"]
    assert f"{workspace}/spec.md" in content[0]["text"]
    assert len(server.requests) == 3
