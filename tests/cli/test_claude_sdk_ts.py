"""The real Claude Agent SDK for TypeScript (`@anthropic-ai/claude-agent-sdk`, pinned in
tests/fixtures/claude_sdk_ts, installed by .ci/run) runs a `query()` program on kimicode and the fake server,
with `pathToClaudeCodeExecutable` as the one change."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import command_env, kimicode_command

from kimicode.testing import FakeServer, Reply, ToolCall

pytestmark = pytest.mark.slow

PROGRAM = Path(__file__).parent.parent / "fixtures" / "claude_sdk_ts"


def test_typescript_query_runs_a_tool_turn(server: FakeServer, tmp_path: Path, workspace: Path) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the TypeScript SDK cannot run here")
    assert (PROGRAM / "node_modules" / "@anthropic-ai" / "claude-agent-sdk").is_dir(), (
        f"the TypeScript SDK is not installed: run `npm ci --prefix {PROGRAM}` (.ci/run does)"
    )
    server.add(
        Reply(reasoning="Checking.", tool_calls=[ToolCall("bash", {"command": "echo from-ts"})]),
        Reply(content="It printed from-ts."),
    )
    env = command_env(tmp_path / "home", server)
    env.pop("CLAUDE_CODE_ENTRYPOINT", None)  # the SDK sets its own
    done = subprocess.run(
        [node, str(PROGRAM / "query.mjs"), kimicode_command()[0], "what does echo print?"],
        cwd=workspace,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    messages = json.loads(done.stdout)
    kinds = [(m["type"], m.get("subtype")) for m in messages]
    assert kinds[0] == ("system", "init") and kinds[-1] == ("result", "success")
    assistants = [m["message"]["content"] for m in messages if m["type"] == "assistant"]
    assert assistants[0][0] == {"type": "thinking", "thinking": "Checking.", "signature": ""}
    assert assistants[0][1]["type"] == "tool_use" and assistants[0][1]["input"] == {"command": "echo from-ts"}
    results = [b for m in messages if m["type"] == "user" for b in m["message"]["content"]]
    assert results[0]["type"] == "tool_result" and "from-ts" in results[0]["content"]
    assert any(m["type"] == "stream_event" for m in messages)
    assert messages[-1]["result"] == "It printed from-ts." and messages[-1]["num_turns"] == 2
