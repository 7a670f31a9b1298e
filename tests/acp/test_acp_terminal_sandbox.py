"""ACP yolo with the editor's terminal keeps kimicode's sandbox: the command the editor runs is the
bwrap-wrapped one, so it cannot write outside the workspace or read the home directory's tokens
(issue 34, finding 7)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
from acp import PROTOCOL_VERSION, text_block
from acp_editor import Editor, capabilities, kimicode_acp
from helpers import kimicode_command

from kimicode.testing import FakeServer, Reply, ToolCall
from kimicode.tools.sandbox import probe

STATUS = probe()


@pytest.mark.slow
@pytest.mark.skipif(not STATUS.available, reason=f"bubblewrap cannot run here: {STATUS.reason}")
def test_yolo_commands_in_the_editors_terminal_run_in_the_sandbox(
    server: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    user = tmp_path / "user"
    (user / ".codex").mkdir(parents=True)
    (user / ".codex" / "auth.json").write_text('{"token": "CODEX-TOKEN"}')
    outside = Path("/var/tmp") / f"kimicode-acp-yolo-{os.getpid()}"
    outside.unlink(missing_ok=True)
    server.add(
        Reply(
            tool_calls=[
                ToolCall("bash", {"command": f"echo pwned > {outside}; cat ~/.codex/auth.json; echo inside > in.txt"})
            ]
        ),
        Reply(content="done"),
    )
    editor = Editor()
    env = {
        "KIMI_API_KEY": "sk-acp-test-key",
        "KIMI_BASE_URL": server.base_url,
        "KIMI_MODEL": "kimi-k3",
        "KIMICODE_HOME": str(tmp_path / "home"),
        "KIMICODE_RETRY_BASE_DELAY": "0.01",
        "HOME": str(user),
        "PATH": "/usr/local/bin:/usr/bin:/bin",
    }

    async def go() -> None:
        async with kimicode_acp(editor, [*kimicode_command(), "acp"], env, workspace, tmp_path / "acp.log", []) as (
            conn,
            _,
        ):
            await conn.initialize(
                protocol_version=PROTOCOL_VERSION, client_capabilities=capabilities(fs=False, terminal=True)
            )
            sid = (await conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id
            await conn.set_session_mode(session_id=sid, mode_id="yolo")
            assert (await conn.prompt(session_id=sid, prompt=[text_block("go")])).stop_reason == "end_turn"

    asyncio.run(asyncio.wait_for(go(), 60))
    [argv] = editor.commands
    assert argv[:2] == ["/bin/bash", "-c"] and "bwrap" in argv[2] and "--unshare-pid" in argv[2]
    assert not outside.exists()
    result: Any = server.requests[1].body["messages"][-1]["content"]
    assert "CODEX-TOKEN" not in result
    assert (workspace / "in.txt").read_text() == "inside\n"  # the workspace stays writable
