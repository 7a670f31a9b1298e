"""Tests for the file tools (read_file, write_file, edit_file) on real temporary directories."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from helpers import ROOT

from kimicode.tools.base import Tool, ToolContext, ToolError, ToolResult
from kimicode.tools.files import EDIT_FILE, READ_FILE, WRITE_FILE


async def _call(tool: Tool, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | str:
    return await tool.fn(args, ctx)


def run(tool: Tool, ctx: ToolContext, **args: Any) -> ToolResult:
    """Call a tool the way the agent does and normalise a plain-string result."""
    result = asyncio.run(_call(tool, ctx, args))
    return result if isinstance(result, ToolResult) else ToolResult(content=result)


def fails(tool: Tool, ctx: ToolContext, **args: Any) -> str:
    """Call a tool that must raise ToolError; return the message."""
    with pytest.raises(ToolError) as info:
        asyncio.run(_call(tool, ctx, args))
    return str(info.value)


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ToolContext(workspace=ws)


def write_lines(path: Path, n: int, eol: bytes = b"\n") -> None:
    path.write_bytes(b"".join(b"line %d" % i + eol for i in range(1, n + 1)))


# ---------------------------------------------------------------------------------------------- schemas


def test_tool_definitions() -> None:
    assert (READ_FILE.name, READ_FILE.kind) == ("read_file", "read")
    assert (WRITE_FILE.name, WRITE_FILE.kind) == ("write_file", "edit")
    assert (EDIT_FILE.name, EDIT_FILE.kind) == ("edit_file", "edit")
    for tool, required in [
        (READ_FILE, ["path"]),
        (WRITE_FILE, ["path", "content"]),
        (EDIT_FILE, ["path", "old_string", "new_string"]),
    ]:
        params = tool.parameters
        assert params["type"] == "object"
        assert params["required"] == required
        assert params["additionalProperties"] is False
        assert set(required) <= set(params["properties"])
        assert len(tool.description) > 200
        assert tool.schema()["function"]["name"] == tool.name
    assert "offset" in READ_FILE.description
    assert "replace_all" in EDIT_FILE.description


# ---------------------------------------------------------------------------------------------- read_file


def test_read_numbers_lines(ctx: ToolContext) -> None:
    (ctx.workspace / "a.txt").write_text("alpha\nbeta\n\ngamma")
    res = run(READ_FILE, ctx, path="a.txt")
    assert res.content == "     1\talpha\n     2\tbeta\n     3\t\n     4\tgamma"
    assert not res.is_error
    assert res.summary == "read a.txt:1-4 (4 lines)"


def test_read_offset_limit_and_continuation(ctx: ToolContext) -> None:
    write_lines(ctx.workspace / "f.txt", 50)
    res = run(READ_FILE, ctx, path="f.txt", offset=10, limit=5)
    lines = res.content.splitlines()
    assert lines[:5] == [f"{i:>6}\tline {i}" for i in range(10, 15)]
    assert lines[5] == "[showing lines 10-14 of 50; continue with offset=15]"
    assert res.summary == "read f.txt:10-14 (5 lines)"
    tail = run(READ_FILE, ctx, path="f.txt", offset=48)
    assert tail.content.splitlines()[:3] == ["    48\tline 48", "    49\tline 49", "    50\tline 50"]
    assert "end of file" in tail.content
    assert "continue" not in tail.content


def test_read_default_limit_is_2000(ctx: ToolContext) -> None:
    write_lines(ctx.workspace / "f.txt", 2500)
    res = run(READ_FILE, ctx, path="f.txt")
    lines = res.content.splitlines()
    assert lines[1999] == "  2000\tline 2000"
    assert lines[2000] == "[showing lines 1-2000 of 2500; continue with offset=2001]"
    assert len(lines) == 2001


def test_read_offset_errors(ctx: ToolContext) -> None:
    write_lines(ctx.workspace / "f.txt", 3)
    assert "past the end" in fails(READ_FILE, ctx, path="f.txt", offset=4)
    assert "3 lines" in fails(READ_FILE, ctx, path="f.txt", offset=4)
    assert "offset must be 1 or more" in fails(READ_FILE, ctx, path="f.txt", offset=0)
    assert "limit must be 1 or more" in fails(READ_FILE, ctx, path="f.txt", limit=0)
    (ctx.workspace / "g.txt").write_bytes(b"a\nb")  # last line without newline still counts
    assert run(READ_FILE, ctx, path="g.txt", offset=2).content.startswith("     2\tb")
    assert "2 lines" in fails(READ_FILE, ctx, path="g.txt", offset=3)


def test_read_long_line_is_capped(ctx: ToolContext) -> None:
    (ctx.workspace / "long.txt").write_text("short\n" + "é" * 5000 + "\nend\n")
    res = run(READ_FILE, ctx, path="long.txt")
    lines = res.content.splitlines()
    assert lines[1] == "     2\t" + "é" * 2000 + "… [line truncated, 5000 chars]"
    assert lines[2] == "     3\tend"


def test_read_output_capped_at_100k_chars(ctx: ToolContext) -> None:
    (ctx.workspace / "wide.txt").write_text(("x" * 1000 + "\n") * 500)
    res = run(READ_FILE, ctx, path="wide.txt")
    assert len(res.content) <= 101_000
    last = res.content.splitlines()[-1]
    assert "output capped" in last
    shown = len(res.content.splitlines()) - 1
    assert f"showing lines 1-{shown} of 500; continue with offset={shown + 1}" in last


def test_read_binary_refused(ctx: ToolContext) -> None:
    (ctx.workspace / "blob.bin").write_bytes(b"ELF\x00\x01\x02" * 100)
    msg = fails(READ_FILE, ctx, path="blob.bin")
    assert msg.startswith("blob.bin is a binary file (600 bytes);")
    (ctx.workspace / "noise.dat").write_bytes(bytes(range(128, 256)) * 20)  # no NUL, but not UTF-8
    assert "is a binary file (2560 bytes)" in fails(READ_FILE, ctx, path="noise.dat")


def test_read_mostly_text_with_a_bad_byte_is_shown(ctx: ToolContext) -> None:
    (ctx.workspace / "latin.txt").write_bytes(b"caf\xe9 au lait\nplain line\n")
    res = run(READ_FILE, ctx, path="latin.txt")
    assert "     1\tcaf\ufffd au lait" in res.content
    assert "not valid UTF-8" in res.content


def test_read_image_refused(ctx: ToolContext) -> None:
    (ctx.workspace / "pic.PNG").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 40)
    msg = fails(READ_FILE, ctx, path="pic.PNG")
    assert "image" in msg
    assert "48 bytes" in msg


def test_read_directory_refused(ctx: ToolContext) -> None:
    (ctx.workspace / "src").mkdir()
    msg = fails(READ_FILE, ctx, path="src")
    assert "directory" in msg
    assert "glob" in msg


def test_read_missing_file_suggests_similar(ctx: ToolContext) -> None:
    (ctx.workspace / "config.yaml").write_text("a: 1\n")
    (ctx.workspace / "unrelated.md").write_text("x\n")
    msg = fails(READ_FILE, ctx, path="config.yml")
    assert "file not found: config.yml" in msg
    assert "config.yaml" in msg
    assert "unrelated" not in msg
    assert "does not exist either" in fails(READ_FILE, ctx, path="nodir/x.py")


def test_read_empty_file(ctx: ToolContext) -> None:
    (ctx.workspace / "empty.txt").write_bytes(b"")
    res = run(READ_FILE, ctx, path="empty.txt")
    assert not res.is_error
    assert "empty" in res.content


def test_read_crlf(ctx: ToolContext) -> None:
    (ctx.workspace / "win.txt").write_bytes(b"one\r\ntwo\r\n")
    res = run(READ_FILE, ctx, path="win.txt")
    lines = res.content.splitlines()
    assert lines[:2] == ["     1\tone", "     2\ttwo"]
    assert "\r" not in res.content
    assert res.content.count("CRLF") == 1


def test_read_remembers_stamp_and_absolute_path(ctx: ToolContext, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("hi\n")
    res = run(READ_FILE, ctx, path=str(outside))
    assert res.content == "     1\thi"
    assert str(outside.resolve()) in res.summary
    stamp = ctx.file_stamps[outside.resolve()]
    assert stamp.size == 3
    assert stamp.mtime_ns == outside.stat().st_mtime_ns


def _reference(data: bytes, offset: int, limit: int) -> list[str]:
    """What read_file must show for a window of `data`, computed the simple (whole-file) way."""
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines.pop()
    out = []
    for no, raw in enumerate(lines[offset - 1 : offset - 1 + limit], start=offset):
        text = raw.removesuffix(b"\r").decode("utf-8", errors="replace")
        if len(text) > 2000:
            text = text[:2000] + f"… [line truncated, {len(text)} chars]"
        out.append(f"{no:>6}\t{text}")
    return out


def test_read_matches_reference_across_block_boundaries(ctx: ToolContext) -> None:
    """Lines that straddle the 64 KiB read blocks, CRs split from their LF, multibyte characters cut."""
    block = 64 * 1024
    parts = [
        b"first\n",
        b"a" * (block - 7) + b"\r",  # the CR is the last byte of the first block, its LF the first of the next
        b"\n",
        b"\n",
        "ü".encode() * 40_000 + b"\r\n",  # 80,000 bytes of two-byte characters, cut by a block edge
        b"x" * 1999 + b"\n",
        b"y" * 2001 + b"\n",
        "€".encode() * 3000 + b"\n",
        b"z" * (block * 2) + b"\n",
        b"last line without newline",
    ]
    data = b"".join(parts)
    (ctx.workspace / "edges.txt").write_bytes(data)
    for offset, limit in [(1, 100), (2, 3), (4, 4), (8, 2), (9, 1)]:
        res = run(READ_FILE, ctx, path="edges.txt", offset=offset, limit=limit)
        expected = _reference(data, offset, limit)
        assert res.content.splitlines()[: len(expected)] == expected, (offset, limit)
    assert "CRLF" in run(READ_FILE, ctx, path="edges.txt").content


_BIG_READER = textwrap.dedent(
    """
    import asyncio, resource, sys
    from pathlib import Path
    from kimicode.tools.base import ToolContext
    from kimicode.tools.files import READ_FILE

    def hwm():
        # this process's own peak RSS in KiB (ru_maxrss would start at the forking parent's peak)
        return int([l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1])

    ws = Path(sys.argv[1])
    ctx = ToolContext(workspace=ws)
    base = hwm()
    head = asyncio.run(READ_FILE.fn({"path": "big.txt", "limit": 3}, ctx))
    tail = asyncio.run(READ_FILE.fn({"path": "big.txt", "offset": int(sys.argv[2]), "limit": 2}, ctx))
    one = asyncio.run(READ_FILE.fn({"path": "oneline.txt"}, ctx))
    peak = hwm()
    print(head.content)
    print("=====")
    print(tail.content)
    print("=====")
    print(one.content[-60:])
    print("=====")
    print((peak - base) // 1024)
    """
)


@pytest.mark.prepush
def test_read_huge_files_with_bounded_memory(tmp_path: Path) -> None:
    """A 1 GiB text file and a 10 MB single-line file are read without loading them."""
    ws = tmp_path / "ws"
    ws.mkdir()
    line = b"0123456789abcdef" * 4 + b"\n"  # 65 bytes
    per_block = (1024 * 1024) // len(line)
    block = line * per_block
    blocks = 1024
    big = ws / "big.txt"
    with open(big, "wb") as f:
        for _ in range(blocks):
            f.write(block)
    total_lines = per_block * blocks
    (ws / "oneline.txt").write_bytes(b"y" * 10_000_000)
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _BIG_READER, str(ws), str(total_lines - 1)],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    finally:
        big.unlink()
    assert proc.returncode == 0, proc.stderr
    head, tail, one, grown = proc.stdout.split("=====\n")
    assert head.splitlines()[0] == "     1\t" + line.decode().rstrip("\n")
    assert head.splitlines()[3] == "[showing lines 1-3 of 3+ (more lines follow); continue with offset=4]"
    assert tail.splitlines()[0].startswith(f"{total_lines - 1:>6}\t0123")
    assert tail.splitlines()[1].startswith(f"{total_lines}\t0123")
    assert "end of file" in tail
    assert one.rstrip("\n").endswith("… [line truncated, 10000000 chars]")
    assert int(grown) < 40, f"peak RSS grew by {grown} MiB while reading"


# ---------------------------------------------------------------------------------------------- write_file


def test_write_creates_with_parents(ctx: ToolContext) -> None:
    res = run(WRITE_FILE, ctx, path="deep/er/new.py", content="print('hi')\nx = 1\n")
    target = ctx.workspace / "deep/er/new.py"
    assert target.read_bytes() == b"print('hi')\nx = 1\n"
    assert res.content.startswith("Created deep/er/new.py (")
    assert "18 bytes, 2 lines" in res.content
    assert res.display is not None
    assert res.display["path"] == "deep/er/new.py"
    assert "+print('hi')" in res.display["diff"]
    assert res.display["diff"].startswith("--- /dev/null\n+++ b/deep/er/new.py\n")
    assert target.resolve() in ctx.file_stamps
    mode = stat.S_IMODE(target.stat().st_mode)
    umask = os.umask(0)
    os.umask(umask)
    assert mode == 0o666 & ~umask


def test_write_overwrites_exactly_and_keeps_mode(ctx: ToolContext) -> None:
    target = ctx.workspace / "run.sh"
    target.write_text("#!/bin/sh\necho old\n")
    target.chmod(0o751)
    res = run(WRITE_FILE, ctx, path="run.sh", content="#!/bin/sh\r\necho new")
    assert target.read_bytes() == b"#!/bin/sh\r\necho new"  # no newline added or translated
    assert stat.S_IMODE(target.stat().st_mode) == 0o751
    assert res.content.startswith("Overwritten run.sh (")
    assert res.display is not None
    assert "-echo old" in res.display["diff"]
    assert "+echo new" in res.display["diff"]
    assert "\\ No newline at end of file" in res.display["diff"]
    assert [p.name for p in ctx.workspace.iterdir()] == ["run.sh"]  # no temp file left behind


def test_write_directory_refused(ctx: ToolContext) -> None:
    (ctx.workspace / "pkg").mkdir()
    assert "directory" in fails(WRITE_FILE, ctx, path="pkg", content="x")
    (ctx.workspace / "afile").write_text("x")
    assert "not a directory" in fails(WRITE_FILE, ctx, path="afile/child.txt", content="x")


def test_write_refuses_stale_file(ctx: ToolContext) -> None:
    target = ctx.workspace / "a.txt"
    target.write_text("one\n")
    run(READ_FILE, ctx, path="a.txt")
    target.write_text("changed by someone else\n")
    assert "changed on disk" in fails(WRITE_FILE, ctx, path="a.txt", content="mine\n")
    assert target.read_text() == "changed by someone else\n"


# ---------------------------------------------------------------------------------------------- edit_file


def test_edit_unique_match(ctx: ToolContext) -> None:
    target = ctx.workspace / "app.py"
    target.write_text("def f():\n    return 1\n\n\ndef g():\n    return 2\n")
    run(READ_FILE, ctx, path="app.py")
    res = run(EDIT_FILE, ctx, path="app.py", old_string="    return 2\n", new_string="    x = 2\n    return x\n")
    assert target.read_text() == "def f():\n    return 1\n\n\ndef g():\n    x = 2\n    return x\n"
    assert "replaced 1 occurrence at line 6" in res.content
    assert "     7\t    return x" in res.content  # the edited region is shown back
    assert res.summary == "edit app.py (+2 -1)"
    assert res.display is not None
    assert "@@ -3,4 +3,5 @@" in res.display["diff"]
    assert ctx.file_stamps[target.resolve()].size == target.stat().st_size


def test_edit_zero_matches(ctx: ToolContext) -> None:
    (ctx.workspace / "a.py").write_text("if x:\n\treturn 1\n")
    msg = fails(EDIT_FILE, ctx, path="a.py", old_string="nothing like this", new_string="y")
    assert "not found" in msg
    msg = fails(EDIT_FILE, ctx, path="a.py", old_string="if x:\n    return 1", new_string="y")
    assert "differs only in whitespace exists at line 1" in msg
    msg = fails(EDIT_FILE, ctx, path="a.py", old_string="     2\treturn 1", new_string="y")
    assert "line-number prefix" in msg


def test_edit_multiple_matches_lists_lines(ctx: ToolContext) -> None:
    target = ctx.workspace / "m.txt"
    target.write_text("x = 1\ny = 2\nx = 1\n\nx = 1\n")
    msg = fails(EDIT_FILE, ctx, path="m.txt", old_string="x = 1", new_string="x = 3")
    assert "matches 3 times" in msg
    assert "lines 1, 3, 5" in msg
    assert "replace_all" in msg
    assert target.read_text() == "x = 1\ny = 2\nx = 1\n\nx = 1\n"
    target.write_text("k\n" * 15)
    msg = fails(EDIT_FILE, ctx, path="m.txt", old_string="k", new_string="j")
    assert "matches 15 times" in msg
    assert "(first 10 at lines 1, 2, 3, 4, 5, 6, 7, 8, 9, 10)" in msg


def test_edit_replace_all(ctx: ToolContext) -> None:
    target = ctx.workspace / "m.txt"
    target.write_text("foo()\nbar()\nfoo()\n")
    res = run(EDIT_FILE, ctx, path="m.txt", old_string="foo", new_string="baz", replace_all=True)
    assert target.read_text() == "baz()\nbar()\nbaz()\n"
    assert "replaced 2 occurrences at lines 1, 3" in res.content


def test_edit_crlf_file_stays_crlf(ctx: ToolContext) -> None:
    target = ctx.workspace / "win.txt"
    target.write_bytes(b"alpha\r\nbeta\r\ngamma\r\n")
    run(EDIT_FILE, ctx, path="win.txt", old_string="alpha\nbeta\n", new_string="alpha\nBETA\nextra\n")
    assert target.read_bytes() == b"alpha\r\nBETA\r\nextra\r\ngamma\r\n"
    run(EDIT_FILE, ctx, path="win.txt", old_string="gamma", new_string="gamma\ndelta")
    assert target.read_bytes() == b"alpha\r\nBETA\r\nextra\r\ngamma\r\ndelta\r\n"


def test_edit_keeps_non_utf8_bytes(ctx: ToolContext) -> None:
    target = ctx.workspace / "mixed.txt"
    target.write_bytes(b"name = \xff\xfe caf\xe9\nvalue = 1\n")
    run(EDIT_FILE, ctx, path="mixed.txt", old_string="value = 1", new_string="value = 2")
    assert target.read_bytes() == b"name = \xff\xfe caf\xe9\nvalue = 2\n"


def test_edit_never_touches_trailing_newline(ctx: ToolContext) -> None:
    target = ctx.workspace / "nonl.txt"
    target.write_bytes(b"a\nb")
    run(EDIT_FILE, ctx, path="nonl.txt", old_string="b", new_string="c")
    assert target.read_bytes() == b"a\nc"
    other = ctx.workspace / "blank_tail.txt"
    other.write_bytes(b"a\nb\n\n")
    run(EDIT_FILE, ctx, path="blank_tail.txt", old_string="a", new_string="z")
    assert other.read_bytes() == b"z\nb\n\n"
    run(EDIT_FILE, ctx, path="blank_tail.txt", old_string="b\n", new_string="")
    assert other.read_bytes() == b"z\n\n"


def test_edit_keeps_mode(ctx: ToolContext) -> None:
    target = ctx.workspace / "tool.sh"
    target.write_text("echo a\n")
    target.chmod(0o700)
    run(EDIT_FILE, ctx, path="tool.sh", old_string="a", new_string="b")
    assert stat.S_IMODE(target.stat().st_mode) == 0o700
    assert target.read_text() == "echo b\n"


def test_edit_identical_strings_refused(ctx: ToolContext) -> None:
    (ctx.workspace / "a.txt").write_text("x\n")
    assert "identical" in fails(EDIT_FILE, ctx, path="a.txt", old_string="x", new_string="x")


def test_edit_stale_file_refused(ctx: ToolContext) -> None:
    target = ctx.workspace / "s.txt"
    target.write_text("value = 1\n")
    run(READ_FILE, ctx, path="s.txt")
    st = target.stat()
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    msg = fails(EDIT_FILE, ctx, path="s.txt", old_string="1", new_string="2")
    assert "changed on disk since you last read it" in msg
    assert "read it again" in msg
    assert target.read_text() == "value = 1\n"
    run(READ_FILE, ctx, path="s.txt")  # reading again makes the edit possible
    run(EDIT_FILE, ctx, path="s.txt", old_string="1", new_string="2")
    assert target.read_text() == "value = 2\n"
    run(EDIT_FILE, ctx, path="s.txt", old_string="2", new_string="3")  # own edits do not make it stale
    assert target.read_text() == "value = 3\n"


def test_edit_never_read_file_allowed(ctx: ToolContext) -> None:
    target = ctx.workspace / "fresh.txt"
    target.write_text("hello world\n")
    assert ctx.file_stamps == {}
    run(EDIT_FILE, ctx, path="fresh.txt", old_string="world", new_string="there")
    assert target.read_text() == "hello there\n"


def test_edit_deleted_file(ctx: ToolContext) -> None:
    target = ctx.workspace / "gone.txt"
    target.write_text("x\n")
    run(READ_FILE, ctx, path="gone.txt")
    target.unlink()
    assert "deleted since you last read it" in fails(EDIT_FILE, ctx, path="gone.txt", old_string="x", new_string="y")
    msg = fails(EDIT_FILE, ctx, path="never.txt", old_string="x", new_string="y")
    assert "file not found: never.txt" in msg
    assert "write_file" in msg


def test_edit_binary_refused(ctx: ToolContext) -> None:
    (ctx.workspace / "b.bin").write_bytes(b"abc\x00def")
    assert "binary" in fails(EDIT_FILE, ctx, path="b.bin", old_string="abc", new_string="x")


def test_edit_empty_old_string_creates_file(ctx: ToolContext) -> None:
    res = run(EDIT_FILE, ctx, path="new/mod.py", old_string="", new_string="x = 1\n")
    assert (ctx.workspace / "new/mod.py").read_text() == "x = 1\n"
    assert "Created new/mod.py" in res.content
    (ctx.workspace / "empty.py").write_text("")
    run(EDIT_FILE, ctx, path="empty.py", old_string="", new_string="y = 2\n")
    assert (ctx.workspace / "empty.py").read_text() == "y = 2\n"
    msg = fails(EDIT_FILE, ctx, path="empty.py", old_string="", new_string="z\n")
    assert "not empty" in msg
    assert (ctx.workspace / "empty.py").read_text() == "y = 2\n"


def test_edit_directory_refused(ctx: ToolContext) -> None:
    (ctx.workspace / "d").mkdir()
    assert "directory" in fails(EDIT_FILE, ctx, path="d", old_string="a", new_string="b")
