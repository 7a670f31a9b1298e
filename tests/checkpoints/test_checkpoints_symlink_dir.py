"""Undo survives a directory replaced by a symbolic link in a turn (issue 22): later turns still
snapshot, and undo puts the directory back (no raw git error, the link's target untouched)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kimicode.testing import FakeServer, Reply, ToolCall


@pytest.mark.prepush
def test_undo_after_a_directory_became_a_link(
    server: FakeServer, make_agent: Callable[..., Any], workspace: Path, tmp_path: Path
) -> None:
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "f.txt").write_text("other\n")
    (workspace / "d").mkdir()
    (workspace / "d" / "f.txt").write_text("orig\n")
    server.add(
        Reply(tool_calls=[ToolCall("bash", {"command": f"rm -rf d && ln -s {other} d"})]),
        Reply(content="one"),
        Reply(tool_calls=[ToolCall("bash", {"command": "echo later > later.txt"})]),
        Reply(content="two"),
    )
    agent = make_agent(permission_mode="yolo", sandbox="off")
    assert agent.run_sync("replace").ok
    second = agent.run_sync("more")  # its snapshot used to fail: "pathspec 'd/f.txt' is beyond a symbolic link"
    assert second.ok and (workspace / "d").is_symlink()
    result = asyncio.run(agent.rewind(1))
    assert not (workspace / "d").is_symlink() and (workspace / "d" / "f.txt").read_text() == "orig\n"
    assert not (workspace / "later.txt").exists() and "later.txt" in result.files
    assert (other / "f.txt").read_text() == "other\n"  # nothing written through the link
