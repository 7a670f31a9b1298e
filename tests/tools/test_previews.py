"""preview(): the exact diff write_file, edit_file and apply_patch would apply, computed by the code that
applies it (CRLF kept, staleness checked, nothing written), and handed to `approve` with the request."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from kimicode import Agent, Approval, ApprovalRequest, ToolContext, ToolError
from kimicode.testing import FakeServer, Reply, ToolCall
from kimicode.tools.files import EDIT_FILE, WRITE_FILE, preview_edit, preview_write
from kimicode.tools.patch import APPLY_PATCH, preview_patch

MakeAgent = Callable[..., Agent]


def snapshot(ws: Path) -> dict[str, bytes]:
    return {str(p.relative_to(ws)): p.read_bytes() for p in sorted(ws.rglob("*")) if p.is_file()}


def test_edit_preview_is_what_the_edit_writes_crlf_included(tmp_path: Path) -> None:
    (tmp_path / "w.txt").write_bytes(b"alpha\r\nbeta\r\ngamma\r\n")
    ctx = ToolContext(tmp_path)
    args = {"path": "w.txt", "old_string": "beta\ngamma", "new_string": "BETA\ngamma"}  # LF from the model
    before = snapshot(tmp_path)
    diff = preview_edit(args, ctx)
    assert snapshot(tmp_path) == before  # nothing written
    assert "-beta\r\n+BETA\r\n" in diff  # the CRLF the edit will keep, not an LF rewrite
    import asyncio

    asyncio.run(EDIT_FILE.fn(args, ctx))
    assert (tmp_path / "w.txt").read_bytes() == b"alpha\r\nBETA\r\ngamma\r\n"


def test_previews_refuse_what_the_call_would_refuse(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("x\nx\n")
    ctx = ToolContext(tmp_path)
    ctx.remember((tmp_path / "a.txt").resolve())
    with pytest.raises(ToolError, match="matches 2 times"):
        preview_edit({"path": "a.txt", "old_string": "x", "new_string": "y"}, ctx)
    os.utime(tmp_path / "a.txt", ns=(1, 1))  # changed behind the agent's back since it was read
    (tmp_path / "a.txt").write_text("x\nchanged\n")
    with pytest.raises(ToolError, match=r"(?i)changed|modified"):
        preview_write({"path": "a.txt", "content": "new"}, ctx)
    with pytest.raises(ToolError, match="identical"):
        preview_edit({"path": "a.txt", "old_string": "x", "new_string": "x"}, ctx)
    with pytest.raises(ToolError, match="path is empty"):
        preview_write({"path": " ", "content": "x"}, ctx)
    with pytest.raises(ToolError):
        preview_edit({"path": "missing.txt", "old_string": "a", "new_string": "b"}, ctx)


def test_write_preview_new_file_and_no_change(tmp_path: Path) -> None:
    ctx = ToolContext(tmp_path)
    assert preview_write({"path": "n.py", "content": "x = 1\n"}, ctx).startswith("--- /dev/null\n+++ b/n.py")
    assert not (tmp_path / "n.py").exists()
    (tmp_path / "same.txt").write_text("same\n")
    assert preview_write({"path": "same.txt", "content": "same\n"}, ctx) == ""


PATCH = """*** Begin Patch
*** Update File: a.py
@@
-old = 1
+new = 1
*** Add File: b.py
+print('b')
*** Delete File: c.py
*** End Patch"""


def test_patch_preview_is_a_diff_of_every_file_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("old = 1\nkeep = 2\n")
    (tmp_path / "c.py").write_text("gone\n")
    ctx = ToolContext(tmp_path)
    before = snapshot(tmp_path)
    diff = preview_patch({"input": PATCH}, ctx)
    assert snapshot(tmp_path) == before
    assert "-old = 1\n+new = 1\n" in diff and "+++ b/b.py\n" in diff and "+print('b')" in diff
    assert "+++ /dev/null\n" in diff and "-gone\n" in diff
    assert APPLY_PATCH.preview is preview_patch and WRITE_FILE.preview is not None
    (tmp_path / "b.py").write_text("here already\n")
    with pytest.raises(ToolError, match="already exists"):  # what apply_patch itself would say
        preview_patch({"input": PATCH}, ctx)


def test_the_approve_callback_gets_the_diff_and_the_ui_needs_no_recompute(
    server: FakeServer, make_agent: MakeAgent, workspace: Path
) -> None:
    (workspace / "x.txt").write_bytes(b"one\r\ntwo\r\n")
    seen: list[ApprovalRequest] = []

    def approve(request: ApprovalRequest) -> Approval:
        seen.append(request)
        return Approval(False, "just looking")

    server.add(
        Reply(tool_calls=[ToolCall("edit_file", {"path": "x.txt", "old_string": "two", "new_string": "2"}),
                          ToolCall("edit_file", {"path": "x.txt", "old_string": "nine", "new_string": "9"}),
                          ToolCall("apply_patch", {"input": PATCH})]),
        Reply(content="ok"),
    )  # fmt: skip
    agent = make_agent(approve=approve, persist=False)
    agent.tools.add(APPLY_PATCH)
    assert agent.run_sync("edit").ok
    assert seen[0].preview is not None and "-two\r\n+2\r\n" in seen[0].preview and seen[0].preview_error is None
    assert seen[1].preview is None and "not found" in (seen[1].preview_error or "")
    assert seen[2].preview_error is not None and "a.py" in seen[2].preview_error  # no a.py here: it would fail
    assert (workspace / "x.txt").read_bytes() == b"one\r\ntwo\r\n"


def test_a_tool_without_preview_gets_none(server: FakeServer, make_agent: MakeAgent) -> None:
    from kimicode import tool

    @tool(kind="edit")
    def touch(path: str) -> str:
        """Touch."""
        return "touched"

    requests: list[ApprovalRequest] = []

    def approve(request: ApprovalRequest) -> bool:
        requests.append(request)
        return True

    server.add(Reply(tool_calls=[ToolCall("touch", {"path": "t"})]), Reply(content="ok"))
    assert make_agent(tools=[touch], approve=approve, persist=False).run_sync("go").ok
    assert requests[0].preview is None and requests[0].preview_error is None
