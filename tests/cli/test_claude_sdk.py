"""The real Claude Agent SDK (Python) drives kimicode through `cli_path`, against the fake server: the program
is written for Claude Code, and only `cli_path` points at kimicode (docs/programs.md)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from helpers import kimicode_command

from kimicode.testing import FakeServer, Reply, ToolCall

sdk = pytest.importorskip("claude_agent_sdk", reason="claude-agent-sdk is in the dev extra")

from claude_agent_sdk import (  # noqa: E402
    AssistantMessage,
    ClaudeAgentOptions,
    ClaudeSDKClient,
    HookMatcher,
    PermissionResultAllow,
    PermissionResultDeny,
    ResultMessage,
    StreamEvent,
    TextBlock,
    ThinkingBlock,
    ToolPermissionContext,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
    create_sdk_mcp_server,
    query,
    tool,
)

pytestmark = pytest.mark.slow


def options(server: FakeServer, tmp_path: Path, workspace: Path, **kw: Any) -> ClaudeAgentOptions:
    """What a Claude Agent SDK program passes, plus `cli_path` (the one change) and the test's environment."""
    env = {
        "KIMICODE_HOME": str(tmp_path / "home"),
        "KIMI_API_KEY": "sk-test-secret-key",
        "KIMI_BASE_URL": server.base_url,
        "KIMICODE_RETRY_BASE_DELAY": "0.01",
    }
    errors: list[str] = kw.pop("errors", [])
    return ClaudeAgentOptions(cli_path=kimicode_command()[0], cwd=str(workspace), env=env, stderr=errors.append, **kw)


def priced(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text('[models."kimi-k3"]\nprices = { input = 1.0, output = 2.0 }\n')


async def collect(prompt: str, opts: ClaudeAgentOptions) -> list[Any]:
    return [m async for m in query(prompt=prompt, options=opts)]


def test_query_with_a_tool_returns_claude_messages_and_a_priced_result(
    server: FakeServer, tmp_path: Path, workspace: Path
) -> None:
    priced(tmp_path)
    server.add(
        Reply(
            reasoning="I will look first.",
            content="Listing.",
            tool_calls=[ToolCall("bash", {"command": "echo from-the-tool"})],
        ),
        Reply(content="The tool said from-the-tool."),
    )
    messages = anyio.run(
        collect, "what does echo say?", options(server, tmp_path, workspace, permission_mode="bypassPermissions")
    )
    assistants = [m for m in messages if isinstance(m, AssistantMessage)]
    assert len(assistants) == 2
    first = assistants[0].content
    assert isinstance(first[0], ThinkingBlock) and first[0].thinking == "I will look first."
    assert isinstance(first[1], TextBlock) and first[1].text == "Listing."
    assert isinstance(first[2], ToolUseBlock) and first[2].name == "bash"
    assert first[2].input == {"command": "echo from-the-tool"}
    results = [b for m in messages if isinstance(m, UserMessage) and isinstance(m.content, list) for b in m.content]
    assert isinstance(results[0], ToolResultBlock) and "from-the-tool" in str(results[0].content)
    assert results[0].tool_use_id == first[2].id and results[0].is_error is False
    result = messages[-1]
    assert isinstance(result, ResultMessage)
    assert result.subtype == "success" and result.is_error is False and result.result == "The tool said from-the-tool."
    assert result.num_turns == 2 and result.total_cost_usd is not None and result.total_cost_usd > 0
    assert result.usage is not None and result.usage["input_tokens"] > 0 and result.duration_api_ms >= 0


def test_client_streams_partials_interrupts_and_keeps_reasoning_verbatim(
    server: FakeServer, tmp_path: Path, workspace: Path
) -> None:
    server.add(
        Reply(reasoning="A thought, kept verbatim.\n  Indented.", content="first"),
        Reply(content="a very long answer " * 300, chunk_size=5, chunk_delay=0.02),
        Reply(content="third"),
    )
    seen: dict[str, Any] = {"events": [], "results": []}

    async def run() -> None:
        async with ClaudeSDKClient(options(server, tmp_path, workspace, include_partial_messages=True)) as client:
            await client.query("one")
            async for m in client.receive_response():
                if isinstance(m, StreamEvent):
                    seen["events"].append(m.event)
                elif isinstance(m, ResultMessage):
                    seen["results"].append(m)
            await client.query("two")
            async for m in client.receive_response():
                if isinstance(m, StreamEvent) and m.event["type"] == "content_block_delta" and "ack" not in seen:
                    started = time.monotonic()
                    await client.interrupt()  # returns once kimicode acknowledged it
                    seen["ack"] = time.monotonic() - started
                elif isinstance(m, ResultMessage):
                    seen["results"].append(m)
            await client.query("three")
            async for m in client.receive_response():
                if isinstance(m, ResultMessage):
                    seen["results"].append(m)

    anyio.run(run)
    kinds = [e["type"] for e in seen["events"]]
    assert kinds[0] == "message_start" and "message_stop" in kinds
    deltas = [e["delta"] for e in seen["events"] if e["type"] == "content_block_delta"]
    assert "".join(d.get("thinking", "") for d in deltas) == "A thought, kept verbatim.\n  Indented."
    assert "".join(d.get("text", "") for d in deltas) == "first"
    first, interrupted, third = seen["results"]
    assert first.subtype == "success" and third.subtype == "success" and third.result == "third"
    assert "ack" in seen and interrupted.subtype == "error_during_execution" and interrupted.is_error
    assert len({first.session_id, interrupted.session_id, third.session_id}) == 1
    last = server.requests[2].body["messages"]
    replayed = next(m for m in last if m["role"] == "assistant")
    assert replayed["reasoning_content"] == "A thought, kept verbatim.\n  Indented."  # across turns, byte for byte


def test_can_use_tool_decides_each_bash_call(server: FakeServer, tmp_path: Path, workspace: Path) -> None:
    server.add(
        Reply(tool_calls=[ToolCall("bash", {"command": "touch allowed.txt"})]),
        Reply(tool_calls=[ToolCall("bash", {"command": "touch refused.txt"})]),
        Reply(content="done"),
    )
    asked: list[tuple[str, dict[str, Any]]] = []

    async def can_use_tool(name: str, data: dict[str, Any], context: ToolPermissionContext) -> Any:
        asked.append((name, data))
        if "refused" in data.get("command", ""):
            return PermissionResultDeny(message="not that file")
        return PermissionResultAllow()

    async def run() -> list[Any]:
        async def prompt() -> Any:
            yield {"type": "user", "message": {"role": "user", "content": "touch two files"}}

        opts = options(server, tmp_path, workspace, can_use_tool=can_use_tool)
        return [m async for m in query(prompt=prompt(), options=opts)]

    messages = anyio.run(run)
    assert [(n, d["command"]) for n, d in asked] == [("bash", "touch allowed.txt"), ("bash", "touch refused.txt")]
    assert (workspace / "allowed.txt").exists() and not (workspace / "refused.txt").exists()
    result = messages[-1]
    assert isinstance(result, ResultMessage) and result.subtype == "success"
    assert [d["tool_input"]["command"] for d in result.permission_denials or []] == ["touch refused.txt"]
    refused = server.requests[2].body["messages"][-1]
    assert refused["role"] == "tool" and "not that file" in refused["content"]


def test_an_sdk_tool_and_a_hook_function_run_in_the_program(
    server: FakeServer, tmp_path: Path, workspace: Path
) -> None:
    @tool("add", "Add two numbers", {"a": int, "b": int})
    async def add(args: dict[str, Any]) -> dict[str, Any]:
        return {"content": [{"type": "text", "text": f"sum={args['a'] + args['b']}"}]}

    hooked: list[dict[str, Any]] = []

    async def no_rm(data: Any, tool_use_id: str | None, context: Any) -> dict[str, Any]:
        hooked.append(data)
        if "rm " in data["tool_input"].get("command", ""):
            return {
                "hookSpecificOutput": {
                    "hookEventName": "PreToolUse",
                    "permissionDecision": "deny",
                    "permissionDecisionReason": "rm is not allowed here",
                }
            }
        return {}

    server.add(
        Reply(tool_calls=[ToolCall("mcp__calc__add", {"a": 2, "b": 3})]),
        Reply(tool_calls=[ToolCall("bash", {"command": "rm -rf build"})]),
        Reply(content="five"),
    )
    calc = create_sdk_mcp_server("calc", tools=[add])
    opts = options(
        server,
        tmp_path,
        workspace,
        mcp_servers={"calc": calc},
        allowed_tools=["mcp__calc__add"],
        permission_mode="bypassPermissions",
        hooks={"PreToolUse": [HookMatcher(matcher="Bash", hooks=[no_rm])]},
    )
    messages = anyio.run(collect, "add 2 and 3", opts)
    assert "mcp__calc__add" in server.requests[0].body["tools"][-1]["function"]["name"]
    assert server.requests[1].body["messages"][-1]["content"] == "sum=5"
    assert len(hooked) == 1 and hooked[0]["tool_name"] == "Bash" and hooked[0]["hook_event_name"] == "PreToolUse"
    assert "rm is not allowed here" in server.requests[2].body["messages"][-1]["content"]
    assert isinstance(messages[-1], ResultMessage) and messages[-1].result == "five"


def test_a_flag_kimicode_cannot_take_ends_the_sdk_run_at_once(
    server: FakeServer, tmp_path: Path, workspace: Path
) -> None:
    errors: list[str] = []
    opts = options(server, tmp_path, workspace, extra_args={"no-such-flag": None}, errors=errors)
    started = time.monotonic()
    with pytest.raises(Exception) as caught:
        anyio.run(collect, "hi", opts)
    assert time.monotonic() - started < 30  # the SDK saw the exit; it did not wait for its 60 s timeout
    assert "exit code 2" in str(caught.value)
    assert any("--no-such-flag" in line for line in errors)
    assert not server.requests


def test_kimicodes_own_stream_json_is_unchanged_without_the_sdk(
    server: FakeServer, tmp_path: Path, workspace: Path
) -> None:
    import subprocess

    from helpers import command_env, stream_json_user

    server.add(Reply(content="mine"))
    done = subprocess.run(
        [*kimicode_command(), "--input-format", "stream-json", "--output-format", "stream-json"],
        input=stream_json_user("hi"),
        env=command_env(tmp_path / "home", server),
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = [json.loads(x) for x in done.stdout.splitlines()]
    assert lines[0]["type"] == "init" and lines[-1]["type"] == "result" and lines[-1]["status"] == "success"
