"""Issue 34: the editor's `fs/write_text_file` is one more write route to the places that run later. In
accept-edits an ordinary file is written through the editor unasked, but `.mcp.json` and a git hook are
asked about first (the editor's user declines here), and nothing reaches the editor's buffers."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from acp import PROTOCOL_VERSION, text_block
from acp_editor import Editor, capabilities, kimicode_acp
from helpers import kimicode_command

from kimicode.testing import FakeServer, Reply, ToolCall


def _env(server: FakeServer, home: Path) -> dict[str, str]:
    import os

    env = {
        "KIMI_API_KEY": "sk-acp-test-key",
        "KIMI_BASE_URL": server.base_url,
        "KIMI_MODEL": "kimi-k3",
        "KIMICODE_HOME": str(home),
        "KIMICODE_RETRY_BASE_DELAY": "0.01",
        "PATH": os.environ.get("PATH", ""),
    }
    if os.environ.get("PYTHONPATH"):  # a checkout run against the installed command's interpreter
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


@pytest.mark.slow
def test_editor_fs_writes_to_what_runs_later_ask_first(server: FakeServer, workspace: Path, tmp_path: Path) -> None:
    (workspace / ".git" / "hooks").mkdir(parents=True)
    server.add(
        Reply(
            tool_calls=[
                ToolCall("write_file", {"path": "ok.txt", "content": "fine\n"}),
                ToolCall("write_file", {"path": ".mcp.json", "content": "{}"}),
                ToolCall("write_file", {"path": ".git/hooks/pre-commit", "content": "touch pwned\n"}),
            ]
        ),
        Reply(content="done"),
    )
    editor = Editor(answers=["reject_once", "reject_once"])

    async def go() -> None:
        async with kimicode_acp(
            editor, [*kimicode_command(), "acp"], _env(server, tmp_path / "home"), workspace, tmp_path / "acp.log"
        ) as (conn, _):
            await conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=capabilities(fs=True))
            sid = (await conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id
            await conn.set_session_mode(session_id=sid, mode_id="accept-edits")
            assert (await conn.prompt(session_id=sid, prompt=[text_block("go")])).stop_reason == "end_turn"

    asyncio.run(asyncio.wait_for(go(), 60))
    written = [Path(p).name for p, _ in editor.writes]
    assert written == ["ok.txt"], written
    asked: list[Any] = [q[0] for q in editor.questions]
    assert len(asked) == 2, asked
