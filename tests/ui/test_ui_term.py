"""The interactive terminal's everyday behaviour (issue 13): live command output, interrupted answers
kept, and the smaller items; unit checks first, then the real `kimicode` in a pseudo-terminal (pyte)
at more than one width."""

from __future__ import annotations

import io
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pexpect
import pytest
from helpers import terminal_env
from rich.console import Console
from terminals import Terminal

from kimicode.agent.core import ApprovalRequest
from kimicode.agent.modes import noted_mode
from kimicode.commands import CustomCommand
from kimicode.events import ToolCallFinished, ToolCallStarted
from kimicode.prompts import user_words
from kimicode.testing import FakeServer, Reply, ToolCall
from kimicode.tools.base import ToolContext
from kimicode.tools.files import preview_edit
from kimicode.ui.approvals import options_for, preview
from kimicode.ui.commands import custom_echo
from kimicode.ui.console import endpoint_host
from kimicode.ui.view import TurnView

BOX = re.compile("[\u2500-\u257f]")
"""Box-drawing characters (─│┌┐└┘╭╮╰╯...)."""


# -- unit checks -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://api.moonshot.ai/v1", "api.moonshot.ai"),
        ("http://127.0.0.1:8080/v1", "127.0.0.1:8080"),
        ("https://user:s3cret@proxy.example.com:8443/v1", "proxy.example.com:8443"),
        ("http://[::1]:9000/v1", "[::1]:9000"),
        ("http://host:notaport/v1", ""),
        ("not a url", ""),
        ("", ""),
    ],
)
def test_the_banner_names_the_host_never_the_credentials(url: str, shown: str) -> None:
    assert endpoint_host(url) == shown
    assert "s3cret" not in endpoint_host(url) and "user" not in endpoint_host(url)


def command(description: str, template: str) -> CustomCommand:
    return CustomCommand("review", description, template, Path("/x/review.md"), "project")


def test_a_custom_command_echo_never_shows_placeholders() -> None:
    first_line = command("Review $ARGUMENTS carefully", "Review $ARGUMENTS carefully\nmore")
    assert custom_echo(first_line, "src/app.py") == "Review src/app.py carefully"
    assert "$" not in custom_echo(first_line, "")
    positional = command("Compare $1 with $2", "Compare $1 with $2")
    assert custom_echo(positional, "a.py b.py") == "Compare a.py with b.py"
    assert "$" not in custom_echo(positional, "")
    assert custom_echo(command("Plain words", "x $ARGUMENTS"), "y") == "Plain words"
    hostile = command("Costs $5 and $ARGUMENTS", "t")
    # $5 is a placeholder too (empty: one word given), filled as in the text sent; a shlex error does not crash
    assert custom_echo(hostile, "'unclosed") == "Costs and 'unclosed"


def edit_request(workspace: Path) -> ApprovalRequest:
    (workspace / "f.txt").write_text("one\n\nthree\n")
    args = {"path": "f.txt", "old_string": "three", "new_string": "THREE"}
    diff = preview_edit(args, ToolContext(workspace=workspace))  # the tool's own preview, as the agent sends it
    return ApprovalRequest("c1", "edit_file", "edit", args, "edits need approval", str(workspace / "f.txt"), diff)


def render(renderable: Any, width: int = 80) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    with console.capture() as cap:
        console.print(renderable)
    return cap.get()


def test_plain_approval_questions_have_no_frame(workspace: Path) -> None:
    request = edit_request(workspace)
    assert BOX.search(render(preview(request, workspace, 80)))  # the framed panel in a real terminal
    plain = render(preview(request, workspace, 80, plain=True))
    assert not BOX.search(plain)
    assert "[edit_file]" in plain and "+THREE" in plain
    bash = ApprovalRequest("c2", "bash", "execute", {"command": "ls"}, "r")
    assert not BOX.search(render(preview(bash, workspace, 40, plain=True)))


def test_the_rejection_label_says_what_esc_does(workspace: Path) -> None:
    label = options_for(edit_request(workspace))[-1].label
    assert "esc: no, without a reason" in label


def test_a_diff_shown_in_the_question_is_not_printed_again() -> None:
    diff = "--- a/f.txt\n+++ b/f.txt\n@@ -1,3 +1,3 @@\n one\n \n-three\n+THREE\n"

    def shown(previewed: set[str]) -> str:
        out = io.StringIO()
        console = Console(file=out, width=80, color_system=None)
        view = TurnView(console, plain=True, show_reasoning=False, previewed=previewed.__contains__)
        view.handle(ToolCallStarted("c1", "edit_file", {"path": "f.txt"}))
        view.handle(ToolCallFinished("c1", "edit_file", "ok", False, "edit f.txt (+1 -1)", {"diff": diff}))
        view.close()
        return out.getvalue()

    assert shown({"c1"}).count("THREE") == 0 and "edit f.txt (+1 -1)" in shown({"c1"})
    once = shown(set())
    assert once.count("+THREE") == 1
    lines = once.splitlines()
    blank_context = lines.index(next(line for line in lines if line.strip() == "one")) + 1
    assert lines[blank_context].strip() == ""  # the blank context line is kept


# -- in a pseudo-terminal ----------------------------------------------------------------------


class SizedTerminal(Terminal):
    """A `Terminal` whose prompt is recognised without the toolbar (it is cut when narrow)."""

    def at_prompt(self) -> bool:
        row = self.screen.display[self.screen.cursor.y].rstrip()
        return row == (">" if self.plain else "›") and "esc to interrupt" not in self.text

    def history(self) -> str:
        """Everything shown so far, as plain text (the screen plus what scrolled off)."""
        text = re.sub(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[()][0-9A-B]|\x1b[=>78]", b"", self.raw)
        return text.replace(b"\r", b"").decode("utf-8", "replace")


@pytest.fixture
def env(server: FakeServer, tmp_path: Path) -> dict[str, str]:
    return terminal_env(tmp_path / "home", server)


@pytest.fixture
def open_term(env: dict[str, str], workspace: Path) -> Iterator[Callable[..., SizedTerminal]]:
    terms: list[SizedTerminal] = []

    def run(*args: str, cols: int = 100, **extra: str) -> SizedTerminal:
        term = SizedTerminal(list(args), {**env, **extra}, workspace, cols)
        terms.append(term)
        term.wait_prompt()
        return term

    yield run
    for term in terms:
        term.close()


@pytest.mark.slow
@pytest.mark.parametrize("cols", [100, 40])
def test_banner_compact_thinking_context_and_the_exit_hint(
    open_term: Callable[..., SizedTerminal], server: FakeServer, cols: int
) -> None:
    server.add(Reply(content="hello back"))
    term = open_term(cols=cols)
    assert f"127.0.0.1:{server.port}" in term.history().replace("\n", "")
    term.send_message("hi")
    term.wait_for("hello back")
    term.wait_prompt()
    term.send_message("/compact")
    term.wait_for("Nothing to compact yet")
    term.wait_prompt()
    said = term.history().split("/compact", 1)[1]
    assert "context:" not in said  # no notices contradicting the outcome
    assert "Compacting" in said and "Compacting" not in term.text  # progress shown, then erased: one line stays
    term.send_message("/thinking")
    term.wait_for("Reasoning effort:")
    term.wait_prompt()
    assert "high (the model's default)" in term.history().replace("\n", "")  # as the toolbar says
    term.send_message("/context")
    term.wait_for("Counted as")
    assert "Context of the next request" in term.text  # the title on one line, even at 40 columns
    term.wait_prompt()
    term.type("\x04")
    term.wait_for("kimicode -r", 10)
    logs = list((Path(term_home(term)) / "sessions").glob("*.jsonl"))
    assert len(logs) == 1 and f"kimicode -r {logs[0].stem}" in term.history().replace("\n", "")


def term_home(term: SizedTerminal) -> str:
    env = term.child.env
    assert env is not None
    return str(env["KIMICODE_HOME"])


@pytest.mark.slow
def test_no_resume_hint_for_a_session_without_a_prompt(open_term: Callable[..., SizedTerminal]) -> None:
    term = open_term()
    term.type("\x04")
    while term.pump(0.2):
        pass
    assert "kimicode -r" not in term.history()


@pytest.mark.slow
def test_plain_terminal_asks_without_box_characters(
    open_term: Callable[..., SizedTerminal], server: FakeServer, workspace: Path
) -> None:
    (workspace / "f.txt").write_text("one\n\nthree\n")
    server.add(
        Reply(tool_calls=[ToolCall("edit_file", {"path": "f.txt", "old_string": "three", "new_string": "THREE"})]),
        Reply(content="edited"),
    )
    term = open_term(TERM="dumb")
    term.send_message("edit it")
    term.wait_for("Make this change?")
    term.type("y")
    term.wait_for("edited")
    term.wait_prompt()
    shown = term.history()
    assert not BOX.search(shown), shown
    assert shown.count("+THREE") == 1  # the diff once: in the question, not again under the result
    assert (workspace / "f.txt").read_text() == "one\n\nTHREE\n"


@pytest.mark.slow
@pytest.mark.parametrize("cols", [100, 50])
def test_a_running_command_streams_its_tail_and_ctrl_o_expands_it(
    open_term: Callable[..., SizedTerminal], server: FakeServer, cols: int
) -> None:
    script = "for i in $(seq 1 12); do echo out-$i.; done; sleep 1.5; echo $((6*7))-last."
    server.add(Reply(tool_calls=[ToolCall("bash", {"command": script})]), Reply(content="all done"))
    term = open_term("--yolo", cols=cols)
    term.send_message("run it")
    term.wait_for("out-12.")  # shown while the command still runs (it sleeps before the end)
    assert "42-last." not in term.text and "running bash" in term.text
    assert "out-9." in term.text and "out-8." not in term.text  # only the last lines
    term.wait_for("all done")
    term.wait_prompt()
    assert "… 8 more lines (ctrl+o to expand)" in term.text
    assert "out-3." not in term.text
    term.type("\x0f")  # Ctrl-O at the prompt: the whole result
    term.wait_for("(full result)")
    term.wait_for("out-1.")
    assert all(f"out-{i}." in term.history() for i in range(1, 13))


@pytest.mark.slow
def test_an_interrupted_answer_stays_and_a_resumed_session_shows_it(
    open_term: Callable[..., SizedTerminal], server: FakeServer
) -> None:
    words = " ".join(f"w{i}" for i in range(600))
    server.add(Reply(content=words, chunk_size=4, chunk_delay=0.02), Reply(content="continued"))
    term = open_term()
    term.send_message("write")
    term.wait_for("w20")
    term.type("\x1b")
    term.wait_for("Interrupted")
    term.wait_prompt()
    term.send_message("continue")
    term.wait_for("continued")
    term.wait_prompt()
    kept = server.requests[1].body["messages"][2]
    assert kept["role"] == "assistant" and kept["content"].startswith("w0 w1 w2")
    assert kept["content"].endswith("\n\n[interrupted by the user]")
    term.type("\x04")
    term.wait_for("kimicode -r")
    session_id = re.search(r"kimicode -r (\S+)", term.history())
    assert session_id is not None
    again = open_term("-r", session_id.group(1))
    screen = again.text
    assert "Resumed session" in screen and "› continue" in screen and "● continued" in screen
    # the interrupted answer is in the resumed history, byte for byte
    server.add(Reply(content="ok"))
    again.send_message("more")
    again.wait_for("ok")
    assert server.requests[-1].body["messages"][2] == kept
    time.sleep(0)


@pytest.mark.slow
@pytest.mark.parametrize("cols", [100, 45])
def test_typing_while_the_agent_works_echoes_and_enter_queues(
    open_term: Callable[..., SizedTerminal], server: FakeServer, cols: int
) -> None:
    slow = Reply(content=" ".join(f"v{i}" for i in range(150)), chunk_size=4, chunk_delay=0.02)
    server.add(slow, Reply(content="first queued answered"), Reply(content="/help was not sent"))
    term = open_term(cols=cols)
    term.send_message("start")
    term.wait_for("v5")
    term.type("fix the tests too")
    term.wait_for("› fix the tests too")  # echoed while the answer streams
    term.type("\r")
    term.wait_for("queued: fix the tests too")
    term.type("/cost\r")  # a queued command runs as a command, after the message before it
    term.wait_for("queued: /cost")
    term.wait_for("first queued answered", 20)
    term.wait_for("This session:", 10)  # /cost's output
    term.wait_prompt()
    assert len(server.requests) == 2
    assert server.requests[1].body["messages"][-1] == {"role": "user", "content": "fix the tests too"}
    history = term.history()
    assert history.index("first queued answered") < history.index("This session:")


@pytest.mark.slow
def test_esc_then_enter_interrupts_and_sends_the_queued_message_now(
    open_term: Callable[..., SizedTerminal], server: FakeServer
) -> None:
    server.add(
        # long enough (~50 s) that a loaded machine reads the typed line while it streams: it is interrupted
        Reply(content=" ".join(f"u{i}" for i in range(2000)), chunk_size=4, chunk_delay=0.02),
        Reply(content="changed course"),
    )
    term = open_term()
    term.send_message("go")
    term.wait_for("u5")
    term.type("stop, do this instead\r")
    term.wait_for("queued: stop, do this")  # the line may be cut to the terminal width with …
    term.type("\x1b")  # Esc: the turn stops; the queued message waits in the prompt
    term.wait_for(lambda: term.screen.display[term.screen.cursor.y].rstrip() == "› stop, do this instead", 10)
    assert len(server.requests) == 1  # not sent by itself after an interrupt
    term.type("\r")
    term.wait_for("changed course")
    sent = server.requests[1].body["messages"]
    assert sent[-1] == {"role": "user", "content": "stop, do this instead"}
    assert sent[-2]["role"] == "assistant" and sent[-2]["content"].endswith("[interrupted by the user]")


@pytest.mark.slow
@pytest.mark.parametrize("cols", [100, 50])
def test_plan_mode_is_told_and_an_approved_plan_is_carried_out(
    open_term: Callable[..., SizedTerminal], server: FakeServer, workspace: Path, cols: int
) -> None:
    (workspace / "f.txt").write_text("old\n")
    edit = ToolCall("edit_file", {"path": "f.txt", "old_string": "old", "new_string": "new"})
    server.add(
        Reply(content="Plan:\n\n1. change old to new in f.txt"),
        Reply(tool_calls=[edit]),
        Reply(content="Done."),
    )
    term = open_term("--permission-mode", "plan", cols=cols)
    term.send_message("rename it")
    term.wait_for("Approve this plan?")
    first = server.requests[0].body["messages"]
    assert first[-1] == {"role": "user", "content": "rename it"}  # the user's words alone, and last
    assert noted_mode(first[0]) == "plan"  # the starting mode is said in the system prompt
    term.type("y")
    term.wait_for("Done.", 20)
    term.wait_prompt()
    assert (workspace / "f.txt").read_text() == "new\n"  # accept-edits: the edit ran without a question
    assert "Make this change?" not in term.history()
    go = server.requests[1].body["messages"]
    assert go[-1]["role"] == "user" and go[-1]["content"].startswith("[permission mode: accept-edits]")
    assert user_words(go[-1]["content"]) == "The plan is approved: carry it out."  # the change opens the message
    assert "accept-edits" in term.text  # the toolbar (or the confirmation line) shows the new mode
    assert [noted_mode(m) for m in server.requests[2].body["messages"] if noted_mode(m)] == [
        "plan",
        "accept-edits",
    ]  # told once per change


@pytest.mark.slow
def test_keeping_on_planning_changes_nothing(open_term: Callable[..., SizedTerminal], server: FakeServer) -> None:
    server.add(Reply(content="1. a plan"), Reply(content="1. a better plan"))
    term = open_term("--permission-mode", "plan")
    term.send_message("plan it")
    term.wait_for("Approve this plan?")
    term.type("\x1b")  # Esc: keep planning, as the label says
    term.wait_for("Still in plan mode")
    term.wait_prompt()
    assert len(server.requests) == 1
    term.send_message("use fewer steps")
    term.wait_for("Approve this plan?")
    sent = server.requests[1].body["messages"]
    assert [m["content"] for m in sent if m["role"] == "user"][-1] == "use fewer steps"  # no second mode note


def test_picker_filter_needs_every_word() -> None:
    from kimicode.cli.picker import matches

    row = "  1  2026-12-01 10:00      2   1.2K  interactive  Fix the Flaky parser test"
    assert matches(row, "flaky PARSER") and matches(row, "") and matches(row, "  ")
    assert not matches(row, "flaky headless")


@pytest.mark.slow
@pytest.mark.parametrize("cols", [120, 60])
def test_resume_picker_arrows_filter_and_interactive_first(
    env: dict[str, str], server: FakeServer, workspace: Path, make_agent: Callable[..., Any], cols: int
) -> None:
    server.add(*(Reply(content=f"answer {i}") for i in range(4)))
    make_agent(origin="interactive").run_sync("alpha interactive chat")
    make_agent(origin="headless").run_sync("headless one-shot run")
    make_agent(origin="interactive").run_sync("beta interactive chat")
    server.add(Reply(content="picked beta"))
    term = SizedTerminal(["-r"], env, workspace, cols)
    try:
        screen = term.wait_for("Resume which session?")
        flat = screen.replace("\n", " ")
        assert flat.index("beta") < flat.index("alpha") < flat.index("one-shot")  # terminal sessions first
        assert flat.index("❯") < flat.index("beta")
        term.type("\x1b[B")  # ↓ to alpha

        def on_alpha() -> bool:
            now = term.text.replace("\n", " ")
            return "❯" in now and now.index("beta") < now.index("❯") < now.index("alpha")

        term.wait_for(on_alpha)
        term.type("one-sh")  # typing filters: only the headless run is left
        term.wait_for(lambda: "alpha" not in term.text and "one-shot" in term.text)
        term.type("\x7f" * 6 + "beta")
        term.wait_for(lambda: "alpha" not in term.text and "beta interactive" in term.text.replace("\n", ""))
        term.type("\r")
        screen = term.wait_prompt()
        assert "Resumed session" in screen and "beta interactive chat" in screen.replace("\n", "")
    finally:
        term.close()


@pytest.mark.slow
def test_resume_picker_esc_cancels(env: dict[str, str], server: FakeServer, workspace: Path, make_agent: Any) -> None:
    server.add(Reply(content="x"))
    make_agent(origin="interactive").run_sync("only one")
    term = SizedTerminal(["-r"], env, workspace, 80)
    term.wait_for("Resume which session?")
    term.type("\x1b")
    term.child.expect(pexpect.EOF, timeout=10)
    term.child.close()
    assert term.child.exitstatus == 1
    assert "no session picked" in term.child.before.decode()
