"""The tools' seams for an editor (ToolContext.files, ToolContext.commands): the same tools, the bytes and
commands elsewhere. Real tools in a temp dir; the "editor" is a dict of buffers."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from kimicode.tools.base import ShellOutcome, ToolContext, ToolError
from kimicode.tools.files import EDIT_FILE, READ_FILE, WRITE_FILE
from kimicode.tools.patch import APPLY_PATCH
from kimicode.tools.shell import BASH


class Buffers:
    """An editor's open buffers: reads see unsaved text, writes land there (the disk is not touched)."""

    def __init__(self, **texts: str) -> None:
        self.texts: dict[Path, str] = {}
        self.refuse = False
        self.log: list[tuple[str, Path]] = []
        self.pending = texts

    def read_text(self, path: Path) -> str:
        self.log.append(("read", path))
        if self.refuse:
            raise OSError(0, "the editor refused: no such buffer", str(path))
        return self.texts.get(path, path.read_text(encoding="utf-8"))

    def write_text(self, path: Path, text: str) -> None:
        self.log.append(("write", path))
        self.texts[path] = text


def call(tool: Any, ctx: ToolContext, **args: Any) -> Any:
    return asyncio.run(tool.fn(args, ctx))


def test_file_tools_go_through_the_editor(tmp_path: Path) -> None:
    app = tmp_path / "app.py"
    app.write_text("x = 1\n")
    editor = Buffers()
    editor.texts[app] = "x = 1  # unsaved\n"
    ctx = ToolContext(workspace=tmp_path, files=editor)
    assert "unsaved" in call(READ_FILE, ctx, path="app.py").content
    call(EDIT_FILE, ctx, path="app.py", old_string="x = 1", new_string="x = 2")
    assert editor.texts[app] == "x = 2  # unsaved\n" and app.read_text() == "x = 1\n"
    call(WRITE_FILE, ctx, path="new.txt", content="hello\n")
    assert editor.texts[tmp_path / "new.txt"] == "hello\n"
    patch = "*** Begin Patch\n*** Update File: app.py\n@@\n-x = 2  # unsaved\n+x = 3  # unsaved\n*** End Patch\n"
    call(APPLY_PATCH, ctx, input=patch)
    assert editor.texts[app] == "x = 3  # unsaved\n"


def test_editor_refusal_is_a_tool_error_and_bytes_that_are_not_text_stay_on_disk(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a\n")
    editor = Buffers()
    ctx = ToolContext(workspace=tmp_path, files=editor)
    editor.refuse = True
    with pytest.raises(ToolError, match="editor refused"):
        call(READ_FILE, ctx, path="a.txt")
    editor.refuse = False
    call(WRITE_FILE, ctx, path="latin.txt", content="caf\udce9\n")  # a lone byte 0xe9: not UTF-8 text
    assert (tmp_path / "latin.txt").read_bytes() == b"caf\xe9\n"
    assert ("write", tmp_path / "latin.txt") not in editor.log
    (tmp_path / "bin.dat").write_bytes(b"\x00\x01binary")
    with pytest.raises(ToolError, match="binary"):  # refused from the disk's bytes before asking the editor
        call(READ_FILE, ctx, path="bin.dat")


class Terminal:
    def __init__(self) -> None:
        self.ran: list[tuple[str, str, Mapping[str, str], float]] = []

    async def run(self, command: str, *, cwd: str, env: Mapping[str, str], timeout: float) -> ShellOutcome:
        self.ran.append((command, cwd, env, timeout))
        return ShellOutcome(output="in the editor\n", returncode=3, timed_out=False, lines=1, total_bytes=14)


def test_bash_runs_in_the_editors_terminal(tmp_path: Path) -> None:
    term = Terminal()
    result = call(BASH, ToolContext(workspace=tmp_path, commands=term), command="make", timeout=5)
    assert term.ran[0][:2] == ("make", str(tmp_path)) and term.ran[0][3] == 5
    assert result.is_error and result.content == "in the editor\n[exit code: 3]"
