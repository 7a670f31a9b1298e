"""Text that UTF-8 cannot encode (a lone surrogate in a model's tool arguments) reaching a hook is
escaped in the hook's JSON, never a crash of the run (issue 34, finding 6)."""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from helpers import FIXTURES, sent_tool_results

from kimicode.testing import FakeServer, Reply, ToolCall

HOOK = FIXTURES / "hooks" / "hook.py"


def test_a_lone_surrogate_reaching_a_hook_is_escaped_not_a_crash(
    make_agent: Callable[..., Any], server: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir(parents=True, exist_ok=True)
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(HOOK))} ok"
    (home / "config.toml").write_text(
        '[[hooks.PreToolUse]]\nmatcher = "*"\n'
        f'hooks = [{{ type = "command", command = {json.dumps(command)} }}]\n'
        "[[hooks.UserPromptSubmit]]\n"
        f'hooks = [{{ type = "command", command = {json.dumps(command)} }}]\n'
    )
    server.add(
        Reply(
            tool_calls=[
                ToolCall("bash", {"command": "echo \ud800"}),
                ToolCall("write_file", {"path": "n\udcff.txt", "content": "x\ud83d"}),
            ]
        ),
        Reply(content="done"),
    )
    result = make_agent(permission_mode="yolo").run_sync("look at \udc80 this")
    assert result.ok, result
    logged = [json.loads(line) for line in (workspace / "hooks.jsonl").read_text().splitlines()]
    payloads = [r["payload"] for r in logged]
    assert any(p.get("prompt") == "look at \udc80 this" for p in payloads)  # escaped, read back exactly
    assert any(p.get("tool_input", {}).get("command") == "echo \ud800" for p in payloads)
    assert any(p.get("tool_input", {}).get("content") == "x\ud83d" for p in payloads)
    bash_result = sent_tool_results(server)[0]
    assert "cannot be encoded" in bash_result, bash_result  # the tool's own clean error, after the hook
