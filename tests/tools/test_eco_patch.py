"""apply_patch: the envelope format, atomicity, byte preservation, permissions, and the per-model choice."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kimicode.permissions.engine import decide
from kimicode.testing import FakeServer, Reply, ToolCall
from kimicode.tools.base import ToolContext, ToolError
from kimicode.tools.patch import APPLY_PATCH, PatchError, apply_patch_text, parse_patch, patch_paths


def patch(*body: str) -> str:
    return "\n".join(["*** Begin Patch", *body, "*** End Patch"]) + "\n"


@pytest.fixture
def ctx(workspace: Path) -> ToolContext:
    return ToolContext(workspace=workspace)


def test_update_keeps_crlf_foreign_bytes_and_missing_final_newline(ctx: ToolContext, workspace: Path) -> None:
    f = workspace / "a.txt"
    f.write_bytes(b"one\r\ntwo \xff\xfe\r\nthree\r\nfour")
    result = apply_patch_text(ctx, patch("*** Update File: a.txt", "@@", "-three", "+THREE", "+3b", " four"))
    assert f.read_bytes() == b"one\r\ntwo \xff\xfe\r\nTHREE\r\n3b\r\nfour"
    assert "M a.txt (+2 -1)" in result.content
    assert result.display is not None and "+THREE" in result.display["diff"]
    apply_patch_text(ctx, patch("*** Update File: a.txt", "@@", " 3b", "-four", "+FOUR"))
    assert f.read_bytes().endswith(b"3b\r\nFOUR")  # still no final newline


def test_add_delete_and_move_in_one_patch(ctx: ToolContext, workspace: Path) -> None:
    (workspace / "old.py").write_text("def f():\n    return 1\n")
    (workspace / "gone.txt").write_text("bye\n")
    (workspace / "old.py").chmod(0o755)
    text = patch(
        "*** Add File: new/dir/hello.md",
        "+# Hello",
        "+",
        "+world",
        "*** Delete File: gone.txt",
        "*** Update File: old.py",
        "*** Move to: pkg/moved.py",
        "@@ def f():",
        "-    return 1",
        "+    return 2",
    )
    assert patch_paths(text) == ["new/dir/hello.md", "gone.txt", "old.py", "pkg/moved.py"]
    result = apply_patch_text(ctx, text)
    assert (workspace / "new/dir/hello.md").read_text() == "# Hello\n\nworld\n"
    assert not (workspace / "gone.txt").exists() and not (workspace / "old.py").exists()
    moved = workspace / "pkg/moved.py"
    assert moved.read_text() == "def f():\n    return 2\n"
    assert moved.stat().st_mode & 0o777 == 0o755
    assert "R old.py -> pkg/moved.py" in result.content and "D gone.txt" in result.content


def test_nothing_changes_when_one_hunk_fails(ctx: ToolContext, workspace: Path) -> None:
    (workspace / "a.txt").write_text("alpha\nbeta\n")
    (workspace / "b.txt").write_text("gamma\n")
    text = patch("*** Update File: a.txt", "-alpha", "+ALPHA", "*** Update File: b.txt", "-delta", "+DELTA",
                 "*** Add File: c.txt", "+c")  # fmt: skip
    with pytest.raises(PatchError) as info:
        apply_patch_text(ctx, text)
    assert "b.txt" in str(info.value) and "delta" in str(info.value)
    assert (workspace / "a.txt").read_text() == "alpha\nbeta\n"
    assert not (workspace / "c.txt").exists()


def test_a_failed_write_rolls_back_the_files_already_written(ctx: ToolContext, workspace: Path) -> None:
    (workspace / "a.txt").write_text("alpha\n")
    (workspace / "blocker").write_text("a file where a directory is needed\n")
    text = patch("*** Update File: a.txt", "-alpha", "+ALPHA", "*** Delete File: blocker",
                 "*** Add File: blocker/inside.txt", "+x")  # fmt: skip
    # the delete runs before the add, so this works: the directory can be created
    apply_patch_text(ctx, text)
    assert (workspace / "blocker/inside.txt").read_text() == "x\n"
    (workspace / "c.txt").write_text("keep\n")
    text = patch("*** Update File: a.txt", "-ALPHA", "+again", "*** Delete File: c.txt",
                 "*** Add File: a.txt/sub.txt", "+no")  # fmt: skip
    with pytest.raises(PatchError, match="no file was changed"):
        apply_patch_text(ctx, text)  # a.txt and c.txt are changed, then creating the directory a.txt/ fails
    assert (workspace / "a.txt").read_text() == "ALPHA\n"
    assert (workspace / "c.txt").read_text() == "keep\n"


def test_context_header_selects_among_identical_blocks(ctx: ToolContext, workspace: Path) -> None:
    block = "    def run(self):\n        pass\n"
    (workspace / "m.py").write_text(f"class A:\n{block}\nclass B:\n{block}")
    apply_patch_text(ctx, patch("*** Update File: m.py", "@@ class B:", "     def run(self):", "-        pass",
                                "+        return 42"))  # fmt: skip
    assert (workspace / "m.py").read_text().endswith("class B:\n    def run(self):\n        return 42\n")
    assert "class A:\n    def run(self):\n        pass\n" in (workspace / "m.py").read_text()


def test_whitespace_tolerant_match_keeps_the_files_context_bytes(ctx: ToolContext, workspace: Path) -> None:
    (workspace / "t.txt").write_text("keep   \nold\n")
    apply_patch_text(ctx, patch("*** Update File: t.txt", " keep", "-old", "+new"))
    assert (workspace / "t.txt").read_text() == "keep   \nnew\n"


def test_end_of_file_anchor_and_pure_insertions(ctx: ToolContext, workspace: Path) -> None:
    (workspace / "e.txt").write_text("x\nend\nx\nend\n")
    apply_patch_text(ctx, patch("*** Update File: e.txt", " x", "-end", "+END", "*** End of File"))
    assert (workspace / "e.txt").read_text() == "x\nend\nx\nEND\n"
    apply_patch_text(ctx, patch("*** Update File: e.txt", "@@", "+appended"))
    assert (workspace / "e.txt").read_text().endswith("END\nappended\n")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("no envelope", "must start with a line `*** Begin Patch`"),
        ("*** Begin Patch\n*** Add File: a\n+x\n", "must end with a line `*** End Patch`"),
        (patch("*** Add File: a", "no plus"), "patch line 3: every line of an added file must start with '+'"),
        (patch("*** Update File: a", "@@", "*oops"), "patch line 4: a hunk line must start with"),
        (patch("*** Frobnicate: a"), "patch line 2: expected"),
        (patch("*** Update File: a", " only context"), "only context lines"),
        (patch(), "no file operations"),
        (patch("*** Add File: "), "patch line 2: the file path is missing"),
        (patch("*** Update File: a", "*** Move to: "), "patch line 3: the destination path is missing"),
        (patch("*** Add File: a", "*** Move to: b"), "patch line 3: `*** Move to:` must directly follow"),
        (patch("*** Update File: a", "-x", "+y", "*** Move to: b"), "patch line 5: `*** Move to:` must directly"),
        (patch("*** Update File: a", "*** Move to: b", "*** Move to: c"), "patch line 4: `*** Move to:` must"),
        (patch("*** Delete File: a", "-x"), "patch line 3: `*** Delete File:` takes no content"),
        (patch("*** Update File: a", "*** End of File"), "patch line 3: `*** End of File` must end a hunk"),
        (patch("*** Update File: a", "@@ x", "*** End of File"), "patch line 4: `*** End of File` must end a hunk"),
        (patch("*** Update File: a", "@@ x"), "patch line 2: `*** Update File: a` has no changes"),
        (patch("*** Update File: a", "@@", "-x", "@@", " y"), "patch line 5: the hunk has only context lines"),
    ],
)
def test_parse_errors_name_the_line(text: str, needle: str) -> None:
    with pytest.raises(PatchError) as info:
        parse_patch(text)
    assert needle in str(info.value)
    assert patch_paths(text) == []


def test_the_parsed_operations_follow_the_grammar() -> None:
    """Blank lines before the first file, `@@` contexts narrowing one hunk, a lost leading space, the end-of-file
    mark closing a hunk, a move, and a delete with blank lines."""
    ops = parse_patch(
        patch(
            "",
            "*** Update File: a.py",
            "*** Move to: b.py",
            "@@ class A",
            "@@ def f",
            " x",
            "",
            "-y",
            "+z",
            "*** End of File",
            " p",
            "+q",
            "@@",
            "-r",
            "*** Add File: new.txt",
            "+1",
            "+",
            "*** Delete File: old.txt",
            "",
        )
    )
    assert [(op.kind, op.path, op.move_to, op.line) for op in ops] == [
        ("update", "a.py", "b.py", 3),
        ("add", "new.txt", None, 16),
        ("delete", "old.txt", None, 19),
    ]
    first, second, third = ops[0].hunks
    assert (first.contexts, first.lines, first.at_eof, first.line) == (
        ["class A", "def f"],
        [(" ", "x"), (" ", ""), ("-", "y"), ("+", "z")],
        True,
        5,
    )
    assert (second.contexts, second.lines, second.at_eof, second.line) == ([], [(" ", "p"), ("+", "q")], False, 12)
    assert (third.contexts, third.lines, third.line) == ([], [("-", "r")], 14)
    assert ops[1].add_lines == ["1", ""] and ops[2].hunks == []
    assert patch_paths(patch("*** Update File: a.py", "*** Move to: b.py")) == ["a.py", "b.py"]  # a pure move


def test_refuses_stale_files_existing_targets_and_out_of_order_hunks(ctx: ToolContext, workspace: Path) -> None:
    f = workspace / "s.txt"
    f.write_text("a\nb\nc\n")
    ctx.remember(f)
    f.write_text("a\nb\nc\nchanged behind our back\n")
    with pytest.raises(ToolError, match="changed on disk"):
        apply_patch_text(ctx, patch("*** Update File: s.txt", "-a", "+A"))
    with pytest.raises(PatchError, match="already exists"):
        apply_patch_text(ctx, patch("*** Add File: s.txt", "+x"))
    ctx.remember(f)
    with pytest.raises(PatchError, match="hunks must be in file order"):
        apply_patch_text(ctx, patch("*** Update File: s.txt", "-c", "+C", "@@", "-a", "+A"))
    with pytest.raises(PatchError, match="file not found"):
        apply_patch_text(ctx, patch("*** Delete File: nope.txt"))


def test_permissions_check_every_path(ctx: ToolContext, workspace: Path, tmp_path: Path) -> None:
    inside = {"input": patch("*** Add File: a.txt", "+x", "*** Update File: b.txt", "*** Move to: c.txt", "-y")}
    outside = {"input": patch("*** Add File: a.txt", "+x", f"*** Add File: {tmp_path / 'evil.txt'}", "+x")}
    assert decide(APPLY_PATCH, inside, "accept-edits", ctx).verdict == "allow"
    decision = decide(APPLY_PATCH, outside, "accept-edits", ctx)
    assert decision.verdict == "ask" and "evil.txt" in decision.reason
    assert decide(APPLY_PATCH, inside, "default", ctx).verdict == "ask"
    assert decide(APPLY_PATCH, {"input": "garbage"}, "accept-edits", ctx).verdict == "ask"


def test_the_tool_reports_errors_to_the_model(ctx: ToolContext) -> None:
    with pytest.raises(PatchError, match="input is empty"):
        asyncio.run(APPLY_PATCH.fn({"input": "  "}, ctx))


def test_gpt_models_get_apply_patch(make_agent: Callable[..., Any], server: FakeServer, workspace: Path) -> None:
    (workspace / "code.py").write_text("x = 1\n")
    server.add(
        Reply(tool_calls=[ToolCall("apply_patch", {"input": patch("*** Update File: code.py", "-x = 1", "+x = 2")})]),
        Reply(content="patched"),
    )
    agent = make_agent(model="gpt-5.1", permission_mode="accept-edits")
    assert "apply_patch" in agent.tools.names and "edit_file" not in agent.tools.names
    result = agent.run_sync("bump x")
    assert result.ok and (workspace / "code.py").read_text() == "x = 2\n"
    names = [t["function"]["name"] for t in server.requests[0].body["tools"]]
    assert names.index("apply_patch") == 2  # where edit_file would be
    kimi = make_agent(model="kimi-k3")
    assert "edit_file" in kimi.tools.names and "apply_patch" not in kimi.tools.names
    kimi.set_model("o4-mini")
    assert "apply_patch" in kimi.tools.names and "edit_file" not in kimi.tools.names


def test_config_chooses_the_edit_tool(make_agent: Callable[..., Any], tmp_path: Path) -> None:
    cfg = tmp_path / "home" / "config.toml"
    cfg.parent.mkdir(parents=True, exist_ok=True)
    cfg.write_text('[models.kimi-k3]\nedit_tool = "apply_patch"\n[models.gpt-5]\nedit_tool = "edit_file"\n')
    assert "apply_patch" in make_agent(model="kimi-k3").tools.names
    assert "edit_file" in make_agent(model="gpt-5").tools.names
