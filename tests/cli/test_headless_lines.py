"""Quiet text-mode runs (`kimicode -p`) still say on stderr what was refused, what is being retried and why
a run did nothing: one line each, never an answer on stderr, never stderr mixed into stdout."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kimicode.cli.headless import Printer, denial_line, one_line, retry_line, run_headless
from kimicode.events import PermissionDenied, Retrying
from kimicode.testing import ErrorReply, FakeServer, Reply, ToolCall


def run(agent: Any, prompt: str, fmt: str = "text", verbose: bool = False) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = asyncio.run(run_headless(agent, prompt, Printer(fmt, verbose=verbose, out=out, err=err)))
    return code, out.getvalue(), err.getvalue()


def test_each_denial_is_one_line_naming_the_rule_that_allows_it(
    server: FakeServer, make_agent: Callable[..., Any], workspace: Path
) -> None:
    server.add(
        Reply(
            tool_calls=[
                ToolCall("bash", {"command": "npm test"}),
                ToolCall("write_file", {"path": "a.txt", "content": "x"}),
            ]
        ),
        Reply(content="I could not run anything."),
    )
    code, out, err = run(make_agent(headless=True), "fix it")
    assert code == 0
    assert out == "I could not run anything.\n"  # stdout is only the answer
    lines = err.splitlines()
    assert len(lines) == 3, err
    assert lines[0].startswith("kimicode: refused bash: npm test") and "--allow 'bash(npm test)'" in lines[0]
    assert lines[1].startswith("kimicode: refused write_file a.txt") and "--permission-mode accept-edits" in lines[1]
    # the run did nothing: the last line says why and what a CI job usually passes
    assert "2 actions were refused" in lines[2] and "--permission-mode default" in lines[2]
    assert "--permission-mode accept-edits --allow 'bash(pytest*)'" in lines[2]
    assert not (workspace / "a.txt").exists()


def test_a_deny_rule_is_named_not_offered_as_allowable(server: FakeServer, make_agent: Callable[..., Any]) -> None:
    server.add(Reply(tool_calls=[ToolCall("bash", {"command": "rm -rf build"})]), Reply(content="ok"))
    _, _, err = run(make_agent(headless=True, permission_mode="yolo", deny=["bash(rm*)"]), "clean")
    first = err.splitlines()[0]
    assert "refused bash: rm -rf build" in first and "a deny rule forbids it" in first
    assert "--allow" not in first
    assert "1 action was refused" in err and "--permission-mode yolo" in err


def test_no_denial_no_summary(server: FakeServer, make_agent: Callable[..., Any], workspace: Path) -> None:
    (workspace / "f.txt").write_text("x\n")
    server.add(Reply(tool_calls=[ToolCall("read_file", {"path": "f.txt"})]), Reply(content="read it"))
    code, out, err = run(make_agent(headless=True), "read")
    assert (code, out, err) == (0, "read it\n", "")


def test_retries_are_one_line_each_even_when_the_message_has_newlines(
    server: FakeServer, make_agent: Callable[..., Any]
) -> None:
    server.add(
        ErrorReply(429, "The engine is currently overloaded,\nplease try again.", "engine_overloaded_error"),
        ErrorReply(503, "down\r\n\x1b[31mred\x1b[0m try again."),
        Reply(content="finally"),
    )
    code, out, err = run(make_agent(headless=True, max_retries=3), "q")
    assert code == 0 and out == "finally\n"
    lines = err.splitlines()
    assert len(lines) == 2, err
    assert lines[0].startswith("kimicode: retry 1/3 in ") and lines[0].endswith("please try again.")
    assert lines[1].startswith("kimicode: retry 2/3 in ") and "\x1b" not in lines[1]
    assert err.endswith("try again.\n")  # the next line starts on its own line


def test_json_says_retries_and_refusals_on_stderr_and_stream_json_keeps_it_quiet(
    server: FakeServer, make_agent: Callable[..., Any]
) -> None:
    """A CI log of a `--output-format json` run shows why it waited and what it refused (issue 23: the README's
    Actions example uses json); stdout stays the one result object. stream-json carries them in its lines."""
    for fmt in ("json", "stream-json"):
        server.add(
            ErrorReply(503, "down"),
            Reply(tool_calls=[ToolCall("bash", {"command": "touch x && make"})]),
            Reply(content="x"),
        )
        _, out, err = run(make_agent(headless=True), "q", fmt=fmt)
        assert '"permission_denials": [{"tool_name": "bash"' in out
        if fmt == "stream-json":
            assert err == ""
            continue
        assert out.count("\n") == 1 and "kimicode: retry 1/" in err and "kimicode: refused bash: touch x" in err
        assert "--allow 'bash(touch x)' --allow 'bash(make)'" in err  # every part of the line, not the first
        assert err.rstrip().endswith("--allow 'bash(pytest*)')")


def test_verbose_uses_the_same_lines(server: FakeServer, make_agent: Callable[..., Any]) -> None:
    server.add(Reply(reasoning="think", tool_calls=[ToolCall("bash", {"command": "make"})]), Reply(content="done"))
    _, out, err = run(make_agent(headless=True), "q", verbose=True)
    assert out == "done\n"
    assert "kimicode: refused bash: make" in err and "--allow 'bash(make)'" in err
    assert err.count("kimicode: refused") == 1 and err.rstrip().endswith(
        "for a CI fix use e.g. --permission-mode accept-edits --allow 'bash(pytest*)')"
    )


def test_hostile_text_cannot_break_the_line() -> None:
    ev = PermissionDenied(
        "c1",
        "bash",
        {"command": "echo hi\n\x1b]0;pwned\x07rm -rf / #" + "x" * 500},
        "bash\nruns\rcommands",
        "bash(echo hi)",
        False,
        "execute",
    )
    line = denial_line(ev)
    assert "\n" not in line and "\r" not in line and "\x1b" not in line and "\x07" not in line
    assert len(line) < 500
    no_suggestion = denial_line(PermissionDenied("c2", "web_fetch", {"url": "http://x"}, "asks", "", False, "web"))
    assert "--allow web_fetch" in no_suggestion
    assert retry_line(Retrying(1, 5, 0.5, "a\n\nb")) == "kimicode: retry 1/5 in 0.5s after: a b"
    assert one_line("\t\x00  ") == "\\x00"  # issue 10: what cannot be shown is shown escaped, not hidden


def test_a_name_that_is_not_utf8_is_escaped_never_a_crash() -> None:
    """`os.fsdecode(b"caf\\xe9")` holds a lone surrogate, which a strict UTF-8 stdout refuses: a JSON line
    carries it as its `\\udce9` escape (read back as the same name), a text line shows the escape."""
    import json
    import os

    out, err = (io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict") for _ in range(2))
    name = os.fsdecode(b"caf\xe9.txt")
    printer = Printer("stream-json", out=out, err=err)
    printer.line({"type": "x", "added": [name], "plain": "é"})
    printer.err.write(f"kimicode: warning: could not read {name}\n")
    printer.err.flush()
    out.seek(0)
    err.seek(0)
    back = json.loads(out.buffer.read().decode("utf-8"))
    assert back["added"] == [name] and os.fsencode(back["added"][0]) == b"caf\xe9.txt" and back["plain"] == "é"
    assert err.buffer.read().decode("utf-8") == "kimicode: warning: could not read caf\\udce9.txt\n"
