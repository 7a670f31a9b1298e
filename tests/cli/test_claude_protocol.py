"""Claude protocol mode without a process: the command lines the Claude Agent SDK builds (its own builder,
every option set), the control requests kimicode answers, lines it cannot use, the mode selection."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest

from kimicode.cli.claude_args import UsageExit, is_claude_mode, parse_claude_args
from kimicode.cli.claude_run import ClaudeSession
from kimicode.testing import FakeServer, Reply

sdk = pytest.importorskip("claude_agent_sdk", reason="claude-agent-sdk is in the dev extra")


def sdk_command(**options: Any) -> list[str]:
    """The arguments the Python SDK passes its CLI for these options (its own transport builds them)."""
    from claude_agent_sdk import ClaudeAgentOptions
    from claude_agent_sdk._internal.transport.subprocess_cli import SubprocessCLITransport

    transport = SubprocessCLITransport("", ClaudeAgentOptions(cli_path="/bin/kimicode", **options))
    return transport._build_command()[1:]


def test_every_option_of_the_python_sdk_is_accepted(tmp_path: Path) -> None:
    args = sdk_command(
        tools=["Bash", "Read"],
        allowed_tools=["Bash(git status:*)", "Read", "mcp__calc__add"],
        system_prompt={"type": "preset", "preset": "claude_code", "append": "Be brief."},
        mcp_servers={
            "calc": {"type": "sdk", "name": "calc", "instance": object()},  # type: ignore[typeddict-item]
            "files": {"command": "files-server", "args": ["--x"]},
        },
        strict_mcp_config=True,
        permission_mode="acceptEdits",
        continue_conversation=False,
        resume=None,
        max_turns=7,
        max_budget_usd=2.5,
        disallowed_tools=["Bash(rm:*)"],
        model="claude-sonnet-4-5",
        fallback_model="claude-haiku-4-5",
        betas=["context-1m-2025-08-07"],
        permission_prompt_tool_name="stdio",
        settings='{"a": 1}',
        add_dirs=[str(tmp_path)],
        include_partial_messages=True,
        include_hook_events=True,
        fork_session=True,
        setting_sources=["user", "project"],
        effort="high",
        thinking={"type": "adaptive"},
        output_format={"type": "json_schema", "schema": {"type": "object"}},
        extra_args={"debug-to-stderr": None},
    )
    assert "--system-prompt=" not in args  # the preset-with-append form
    parsed = parse_claude_args(args)
    assert parsed.settings["permission_mode"] == "accept-edits" and parsed.settings["max_turns"] == 7
    assert parsed.settings["allow"] == ("Bash(git status:*)", "Read", "mcp__calc__add")
    assert parsed.settings["deny"] == ("Bash(rm:*)",) and parsed.settings["append_system_prompt"] == "Be brief."
    assert parsed.settings["thinking"] == "high" and "model" not in parsed.settings
    assert parsed.budget == 2.5 and parsed.partial and parsed.permission_tool and parsed.fork
    assert parsed.sdk_servers == ["calc"] and parsed.mcp_servers == {
        "files": {"command": "files-server", "args": ["--x"]}
    }
    assert parsed.json_schema == '{"type": "object"}'
    ignored = " ".join(parsed.ignored)
    for flag in (
        "--model claude-sonnet-4-5",
        "--fallback-model",
        "--betas",
        "--settings",
        "--setting-sources",
        "--tools",
        "--thinking",
        "--debug-to-stderr",
        "--strict-mcp-config",
        "--include-hook-events",
    ):
        assert flag in ignored


def test_the_default_options_and_bad_values() -> None:
    args = sdk_command()
    assert args[:3] == ["--output-format", "stream-json", "--verbose"] and "--system-prompt=" in args
    parsed = parse_claude_args(args)
    assert "system_prompt" not in parsed.settings and not parsed.ignored  # the empty prompt keeps kimicode's own
    assert parse_claude_args(sdk_command(permission_mode="bypassPermissions")).settings["permission_mode"] == "yolo"
    assert parse_claude_args(sdk_command(model="kimi-k3")).settings["model"] == "kimi-k3"
    for bad, said in (
        (["--no-such-flag"], "--no-such-flag"),
        (["--permission-mode", "sometimes"], "sometimes"),
        (["--allowedTools", "Bash("], "bad permission rule"),
        (["--max-turns", "x"], "not a number"),
        (["--mcp-config", "{not json"], "invalid JSON"),
        (["--output-format", "text"], "stream-json"),
    ):
        with pytest.raises(UsageExit, match=said.replace("(", r"\(")):
            parse_claude_args(bad)


def test_the_mode_is_chosen_by_the_sdk_or_the_flag() -> None:
    stream = ["--output-format", "stream-json", "--input-format", "stream-json"]
    assert is_claude_mode(stream, {"CLAUDE_CODE_ENTRYPOINT": "sdk-py"})
    assert is_claude_mode(stream, {"CLAUDE_CODE_ENTRYPOINT": "sdk-ts"})
    assert not is_claude_mode(stream, {})  # kimicode's own stream-json stays the default
    assert not is_claude_mode(stream, {"CLAUDE_CODE_ENTRYPOINT": "cli"})  # run inside Claude Code's shell
    assert not is_claude_mode(["-p", "hi"], {"CLAUDE_CODE_ENTRYPOINT": "sdk-py"})
    assert is_claude_mode(["--claude-protocol", *stream], {})


def converse(
    lines: list[dict[str, Any] | str], server: FakeServer, workspace: Path, monkeypatch: pytest.MonkeyPatch, *args: str
) -> list[dict[str, Any]]:
    """Run a Claude protocol session in-process on these stdin lines; the stdout lines."""
    monkeypatch.setenv("KIMI_API_KEY", "sk-test-secret-key")
    monkeypatch.setenv("KIMI_BASE_URL", server.base_url)
    monkeypatch.chdir(workspace)
    text = "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    out = io.StringIO()
    session = ClaudeSession(parse_claude_args(["--input-format", "stream-json", *args]), None, out=out)
    assert asyncio.run(session.run(io.StringIO(text))) == 0
    return [json.loads(line) for line in out.getvalue().splitlines()]


@pytest.mark.slow
def test_control_requests_and_lines_that_cannot_be_used(
    server: FakeServer, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.add(Reply(content="the answer"))
    request = {
        "type": "control_request",
        "request_id": "r1",  # as the TypeScript SDK sends its system prompt
        "request": {
            "subtype": "initialize",
            "hooks": None,
            "systemPrompt": ["You answer like a pirate."],
            "appendSystemPrompt": "Keep it short.",
        },
    }
    lines = [
        request,
        "not json",
        {"type": "user", "message": {"role": "user", "content": []}},
        {"type": "control_request", "request_id": "r2", "request": {"subtype": "rewind_files"}},
        {
            "type": "control_request",
            "request_id": "r3",
            "request": {"subtype": "set_permission_mode", "mode": "acceptEdits"},
        },
        {
            "type": "control_request",
            "request_id": "r4",
            "request": {"subtype": "set_permission_mode", "mode": "sometimes"},
        },
        {"type": "control_request", "request_id": "r5", "request": {"subtype": "interrupt"}},
        {"type": "user", "message": {"role": "user", "content": "hi"}},
    ]
    seen = converse(lines, server, workspace, monkeypatch)
    responses = {m["response"]["request_id"]: m["response"] for m in seen if m["type"] == "control_response"}
    assert responses["r1"]["subtype"] == "success" and responses["r5"]["subtype"] == "success"
    assert responses["r2"]["subtype"] == "error" and "'rewind_files'" in responses["r2"]["error"]
    assert responses["r3"]["response"] == {"mode": "acceptEdits"}
    assert responses["r4"]["subtype"] == "error" and "sometimes" in responses["r4"]["error"]
    notices = [m["text"] for m in seen if m.get("subtype") == "notice"]
    assert any("line 2: not JSON" in t for t in notices) and any("line 3:" in t for t in notices)
    init = next(m for m in seen if m.get("subtype") == "init")
    assert init["permissionMode"] == "acceptEdits"  # set before the first turn, kept for it
    result = seen[-1]
    assert result["type"] == "result" and result["subtype"] == "success" and result["result"] == "the answer"
    assert len(server.requests) == 1
    system = server.requests[0].body["messages"][0]
    assert system["role"] == "system" and system["content"].startswith("You answer like a pirate.")
    assert "Keep it short." in system["content"]
