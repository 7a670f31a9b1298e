"""Terminal safety: model-controlled text shown in the terminal carries no control sequences."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from kimicode.agent.core import ApprovalRequest
from kimicode.cli.headless import Printer, denial_line, one_line
from kimicode.events import Notice, PermissionDenied, ToolCallStarted
from kimicode.termsafe import sanitize
from kimicode.ui.approvals import preview
from kimicode.ui.format import describe_call, diff_text, tail

HOSTILE = [
    "rm -rf ~ \x1b[2K\r ls",  # erase the line, go back: "ls" would be all that shows
    "\x1b]8;;http://evil/\x1b\\click\x1b]8;;\x1b\\",  # OSC 8 hidden link
    "\x1b]52;c;cm0gLXJmIH4=\x07",  # OSC 52: write the clipboard
    "\x9b2K\x9d0;title\x9c",  # one-byte C1 CSI and OSC
    "safe\x08\x08\x08\x08evil",  # backspaces overwrite
    "echo \u202egnp.exe",  # RTL override
    "a\x1b[31mred\x1b[0m\x07\x7f\x00z",
    "\x1bc reset\x1b7\x1b(B",
    "unterminated \x1b]0;title",
    "tail\x1b[",
]
_RAW_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def assert_safe(text: str) -> None:
    assert not _RAW_CONTROL.search(text), repr(text)


def test_every_hostile_string_comes_out_without_control_characters() -> None:
    for hostile in HOSTILE:
        for mode in ("strip", "escape"):
            assert_safe(sanitize(hostile, sequences=mode))  # type: ignore[arg-type]


def test_escape_mode_shows_what_is_really_there() -> None:
    shown = sanitize("rm -rf ~ \x1b[2K\r ls", sequences="escape")
    assert shown == "rm -rf ~ \\x1b[2K\\x0d ls"
    assert sanitize("echo \u202egnp.exe", sequences="escape") == "echo \\u202egnp.exe"
    assert sanitize("a\x08b") == "a\\x08b"


def test_strip_mode_drops_colours_and_keeps_text() -> None:
    assert sanitize("a\x1b[31mred\x1b[0m b") == "ared b"
    assert sanitize("line1\r\nline2\n\tx") == "line1\nline2\n\tx"
    assert sanitize("\x1b]8;;http://evil/\x1b\\click\x1b]8;;\x1b\\") == "click"
    assert sanitize("unterminated \x1b]0;title\nnext") == "unterminated \nnext"
    assert sanitize("plain text ünïcode 中文") == "plain text ünïcode 中文"
    assert sanitize("👩‍💻") == "👩\\u200d💻"  # a zero-width joiner is invisible: shown, emoji or not


INVISIBLE_SAMPLES = [
    "\u200b",
    "\u200c",
    "\u200d",
    "\u2060",
    "\u00ad",
    "\u180e",
    "\ufeff",
    "\u2028",
    "\u2029",
    "\U000e0041",
    "\U000e007f",  # tag characters (hidden ASCII)
    "\u115f",
    "\u1160",
    "\u3164",
    "\uffa0",
    "\u2800",  # fillers
    "\ue000",
    "\U000f0000",
    "\U0010fffd",  # private use
    "\u0378",
    "\U0003fffe",
    "\U0010ffff",  # unassigned
]


def test_invisible_characters_are_escaped_by_category() -> None:
    for ch in INVISIBLE_SAMPLES:
        for mode in ("strip", "escape"):
            shown = sanitize(f"a{ch}b", sequences=mode)  # type: ignore[arg-type]
            assert ch not in shown and shown.startswith("a\\") and shown.endswith("b"), (hex(ord(ch)), shown)


@pytest.mark.prepush
@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(codec=None, categories=["Cf", "Co", "Cn", "Cc", "Zl", "Zp", "Lo"]), max_size=40))
def test_no_format_private_or_unassigned_character_survives(text: str) -> None:
    import unicodedata

    out = sanitize(text, newlines=False)
    left = [c for c in out if c != "\t" and unicodedata.category(c) in ("Cc", "Cf", "Co", "Cn", "Cs", "Zl", "Zp")]
    assert not left and not any(c in out for c in "\u115f\u1160\u3164\uffa0\u2800")


def test_newlines_false_escapes_them() -> None:
    assert sanitize("a\nb", newlines=False) == "a\\x0ab"


@settings(max_examples=200, deadline=None)
@given(
    st.text(
        alphabet=st.sampled_from(
            [
                "\x1b",
                "[",
                "]",
                "\x9b",
                "\x07",
                "\\",
                "\r",
                "\x08",
                "a",
                "2",
                "K",
                ";",
                "\u202e",
                "\x9c",
                "\n",
                "\x00",
                "P",
            ]
        ),
        max_size=40,
    )
)
def test_no_input_leaves_a_control_character(text: str) -> None:
    assert_safe(sanitize(text))
    assert_safe(sanitize(text, sequences="escape"))


# -- where it is used --------------------------------------------------------------------------------------


def _render(renderable: object) -> str:
    buf = io.StringIO()
    Console(file=buf, width=120, color_system=None, force_terminal=False).print(renderable)
    return buf.getvalue()


def test_the_approval_panel_shows_hostile_commands_escaped(tmp_path: Path) -> None:
    for hostile in HOSTILE:
        req = ApprovalRequest("c1", "bash", "execute", {"command": hostile}, "asks", None)
        out = _render(preview(req, tmp_path, 120))
        assert_safe(out)
    req = ApprovalRequest("c1", "bash", "execute", {"command": "rm -rf ~ \x1b[2K\r ls"}, "asks", None)
    assert "rm -rf ~" in _render(preview(req, tmp_path, 120))


def test_the_approval_panel_escapes_paths_and_diffs(tmp_path: Path) -> None:
    args = {"path": "a\x1b[2K\u202eb.txt", "content": "x\x1b]52;c;Zm9v\x07\n"}
    req = ApprovalRequest("c1", "write_file", "edit", args, "asks", tmp_path / "ab.txt")
    out = _render(preview(req, tmp_path, 120))
    assert_safe(out)
    assert "\\u202e" in out


def test_format_helpers_are_terminal_safe() -> None:
    for hostile in HOSTILE:
        assert_safe(describe_call("bash", {"command": hostile}))
        assert_safe(describe_call("read_file", {"path": hostile}))
        assert_safe(describe_call("grep", {"pattern": hostile}))
        assert_safe(one_line(hostile))
        assert_safe("\n".join(tail(hostile + "\nmore " + hostile, 5)))
        assert_safe(_render(diff_text(f"--- a\n+++ b\n+{hostile}\n-{hostile}\n")))


def test_headless_text_lines_are_terminal_safe() -> None:
    err, out = io.StringIO(), io.StringIO()
    printer = Printer("text", verbose=True, out=out, err=err)
    for hostile in HOSTILE:
        printer.event(ToolCallStarted("c", "bash", {"command": hostile}))
        printer.event(Notice(hostile, "warning"))
        printer.event(PermissionDenied("c", "bash", {"command": hostile}, hostile, None, False, "execute"))
        assert_safe(
            denial_line(PermissionDenied("c", "bash", {"command": hostile}, hostile, hostile, False, "execute"))
        )
    assert_safe(err.getvalue().replace("\n", ""))
    quiet = io.StringIO()
    Printer("text", err=quiet).event(Notice("\x1b]52;c;Zm9v\x07 warn", "warning"))
    assert_safe(quiet.getvalue().replace("\n", ""))


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_headless_answer_is_sanitised_on_a_terminal_and_exact_in_a_pipe() -> None:
    answer = "done \x1b]52;c;cm0gLXJm\x07\x1b[2K\rall good"
    result = {"result": answer, "status": "success", "error": None}
    tty, pipe = _Tty(), io.StringIO()
    Printer("text", out=tty, err=io.StringIO()).result(dict(result))
    Printer("text", out=pipe, err=io.StringIO()).result(dict(result))
    assert_safe(tty.getvalue().replace("\n", ""))
    assert "done" in tty.getvalue() and "all good" in tty.getvalue()
    assert pipe.getvalue() == answer + "\n"  # piped into a file: exactly what the model wrote
