"""The interactive terminal, driven like a user would: the installed `kimicode` in a pseudo-terminal
(pexpect), its output interpreted by a terminal emulator (pyte), against the fake server."""

from __future__ import annotations

import json
import re
import sys
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pexpect
import pytest
from helpers import MCP_DEMO, assert_valid_history, terminal_env
from terminals import Terminal

from kimicode.prompts import user_words
from kimicode.testing import FakeServer, Reply, ToolCall

pytestmark = pytest.mark.slow

ROWS, COLS = 30, 110
INTERRUPTED = "interrupted by user"
DEMO_MCP = str(MCP_DEMO)


@pytest.fixture
def term_env(server: FakeServer, tmp_path: Path) -> dict[str, str]:
    return terminal_env(tmp_path / "home", server)


@pytest.fixture
def start(term_env: dict[str, str], workspace: Path) -> Iterator[Callable[..., Terminal]]:
    terms: list[Terminal] = []

    def run(*args: str, **env: str) -> Terminal:
        term = Terminal(list(args), {**term_env, **env}, workspace, COLS, ROWS)
        terms.append(term)
        term.wait_prompt()
        return term

    yield run
    for term in terms:
        term.close()


def roles(body: dict[str, Any]) -> list[str]:
    return [m["role"] for m in body["messages"]]


def test_streamed_answer_renders_markdown_and_toolbar_context_changes(
    start: Callable[..., Terminal], server: FakeServer
) -> None:
    server.add(
        Reply(
            reasoning="The user greets me.",
            content="Hello! Here is **bold** text.\n\n```python\nprint('hi')\n```\n\n- first item\n- second item\n",
            chunk_size=5,
            chunk_delay=0.01,
            usage={
                "prompt_tokens": 123_456,
                "completion_tokens": 100,
                "total_tokens": 123_556,
                "cached_tokens": 61_728,
            },
        )
    )
    term = start()
    before = term.toolbar()
    assert "kimi-k3" in before and "ctx ~" in before and "default" in before
    term.send_message("hello")
    term.wait_for("second item")
    screen = term.wait_prompt()
    assert "Hello! Here is bold text." in screen  # Markdown rendered, not shown as source
    assert "**" not in screen and "```" not in screen
    assert "• first item" in screen and "print('hi')" in screen
    assert "The user greets me." in screen  # reasoning shown (the default)
    after = term.toolbar()
    assert after != before
    assert re.search(r"ctx 12\dk/1\.0M \(12%\)", after), after
    assert "cached 50%" in after
    assert server.requests[0].body["messages"][-1] == {"role": "user", "content": "hello"}


def test_approving_bash_runs_it_and_shows_output(
    start: Callable[..., Terminal], server: FakeServer, workspace: Path
) -> None:
    server.add(
        Reply(tool_calls=[ToolCall("bash", {"command": "echo hello-from-bash > out.txt; cat out.txt"})]),
        Reply(content="The command ran."),
    )
    term = start()
    term.send_message("run something")
    screen = term.wait_for("Run this command?")
    assert "echo hello-from-bash > out.txt; cat out.txt" in screen
    # a command with `;` can't get a prefix rule: only exact-command approval is offered
    assert "starting with" not in screen
    term.type("y")
    term.wait_for("The command ran.")
    screen = term.wait_prompt()
    assert "● bash: echo hello-from-bash" in screen
    assert "hello-from-bash" in screen.split("● bash:")[1]
    assert (workspace / "out.txt").read_text() == "hello-from-bash\n"
    tool_msg = server.requests[1].body["messages"][-1]
    assert tool_msg["role"] == "tool" and "hello-from-bash" in tool_msg["content"]


def test_denying_tells_the_model_the_reason(
    start: Callable[..., Terminal], server: FakeServer, workspace: Path
) -> None:
    server.add(
        Reply(tool_calls=[ToolCall("bash", {"command": "touch pwned"})]),
        Reply(content="Understood, I will not."),
    )
    term = start()
    term.send_message("do it")
    term.wait_for("Run this command?")
    term.type("n")
    term.wait_for("Tell the model why")
    term.type("use make instead\r")
    term.wait_for("Understood, I will not.")
    term.wait_prompt()
    assert not (workspace / "pwned").exists()
    tool_msg = server.requests[1].body["messages"][-1]
    assert tool_msg["role"] == "tool"
    assert "Permission denied by the user" in tool_msg["content"]
    assert "use make instead" in tool_msg["content"]


def test_session_approval_covers_only_that_command(
    start: Callable[..., Terminal], server: FakeServer, workspace: Path
) -> None:
    server.add(
        Reply(tool_calls=[ToolCall("bash", {"command": "echo one >> log.txt"})]),
        Reply(tool_calls=[ToolCall("bash", {"command": "echo one >> log.txt"})]),
        Reply(tool_calls=[ToolCall("bash", {"command": "echo two >> log.txt"})]),
        Reply(content="all done"),
    )
    term = start()
    term.send_message("go")
    term.wait_for("Run this command?")
    term.type("a")  # don't ask again for this exact command
    # the same command runs again without a question; a different one asks
    term.wait_for(lambda: "echo two >> log.txt" in term.text and "Run this command?" in term.text)
    assert (workspace / "log.txt").read_text() == "one\none\n"
    term.type("\x1b")  # Esc: no, without a reason
    term.wait_for("all done")
    term.wait_prompt()
    assert (workspace / "log.txt").read_text() == "one\none\n"
    assert "Permission denied" in server.requests[3].body["messages"][-1]["content"]


def test_ctrl_c_interrupts_a_stream_and_history_stays_valid(start: Callable[..., Terminal], server: FakeServer) -> None:
    words = " ".join(f"word{i}" for i in range(400))
    server.add(Reply(content=words, chunk_size=4, chunk_delay=0.02), Reply(content="second answer"))
    term = start()
    term.send_message("write a lot")
    term.wait_for("word5")
    term.type("nex")  # typed while the agent works: kept for the next prompt
    term.type("\x03")
    term.wait_for("Interrupted")
    term.wait_for(lambda: term.screen.display[term.screen.cursor.y].rstrip() == "› nex", 10)
    assert term.child.isalive()
    term.send_message("t")
    term.wait_for("second answer")
    messages = server.requests[1].body["messages"]
    # the partial answer is kept, marked (tests/ui/test_ui_term.py, tests/agent/test_interrupted.py)
    assert roles(server.requests[1].body) == ["system", "user", "assistant", "user"]
    assert messages[2]["content"].startswith("word0 word1")
    assert messages[2]["content"].endswith("[interrupted by the user]")
    assert messages[-1]["content"] == "next"
    assert_valid_history(messages)


def test_esc_interrupts_a_long_command(start: Callable[..., Terminal], server: FakeServer) -> None:
    server.add(
        Reply(tool_calls=[ToolCall("bash", {"command": "sleep 30"})]),
        Reply(content="ok, stopped"),
    )
    term = start("--yolo")
    term.send_message("wait a while")
    term.wait_for("running bash: sleep 30")
    term.type("\x1b[Z")  # Shift-Tab works while the agent runs too: yolo → default
    term.wait_for("permission mode: default")
    started = time.monotonic()
    term.type("\x1b")
    term.wait_for("Interrupted", 10)
    term.wait_prompt(10)
    assert time.monotonic() - started < 10
    term.send_message("and now?")
    term.wait_for("ok, stopped")
    term.wait_prompt()
    assert "⏵ default" in term.toolbar()
    messages = server.requests[1].body["messages"]
    assert_valid_history(messages)
    # the mode changed to default during the turn: the note opens the next prompt's message (test_modes.py)
    assert messages[-1]["content"].startswith("[permission mode: default]")
    assert user_words(messages[-1]["content"]) == "and now?"
    assert messages[-2] == {"role": "tool", "tool_call_id": messages[-3]["tool_calls"][0]["id"], "content": INTERRUPTED}


def test_at_file_completion_attaches_the_file(
    start: Callable[..., Terminal], server: FakeServer, workspace: Path
) -> None:
    (workspace / "src").mkdir()
    (workspace / "src" / "hello_world.py").write_text("print('attached content')\n")
    (workspace / ".gitignore").write_text("ignored_*.py\n")
    (workspace / "src" / "ignored_hello.py").write_text("secret\n")
    server.add(Reply(content="I see the file."))
    term = start()
    term.type("explain @hello")
    screen = term.wait_for("src/hello_world.py")
    assert "ignored_hello.py" not in screen  # .gitignore is respected
    term.type("\t")
    term.wait_for("explain @src/hello_world.py")
    term.type("\r")  # Enter on a selected completion accepts it
    term.wait_for(lambda: "hello_world.py" not in term.text.split("explain @src/hello_world.py", 1)[1])
    term.type("\r")
    term.wait_for("I see the file.")
    content = server.requests[0].body["messages"][-1]["content"]
    assert content.startswith("explain @src/hello_world.py")
    assert "print('attached content')" in content
    assert "attached src/hello_world.py" in term.text


def test_slash_commands_and_mode_cycling(start: Callable[..., Terminal], server: FakeServer, tmp_path: Path) -> None:
    term = start()
    term.send_message("/halp")
    term.wait_for("Did you mean /help?")
    term.send_message("/help")
    # /help is taller than the screen: read in one piece, its start has scrolled off before the screen is looked at
    term.wait_for(lambda: b"/permissions" in term.raw)
    term.wait_prompt()
    term.send_message("/reasoning hide")
    term.wait_for("Reasoning will be hidden")
    settings = tomllib.loads((tmp_path / "home" / "config.toml").read_text())
    assert settings["ui"]["reasoning"] == "hide"
    term.wait_prompt()
    assert "⏵ default" in term.toolbar()
    term.type("\x1b[Z")  # Shift-Tab
    term.wait_for(lambda: "⏵ accept-edits" in term.toolbar())
    term.send_message("/permissions")
    term.wait_for("Permission mode: accept-edits")
    term.wait_prompt()
    term.type("\x1b[Z")  # default → accept-edits → plan → yolo
    term.wait_for(lambda: "⏵ plan" in term.toolbar())
    term.send_message("/cost")
    term.wait_for("no price is known for kimi-k3")
    term.wait_prompt()
    term.type("\x1b[A")  # Up: the previous input comes back
    term.wait_for(lambda: term.screen.display[term.screen.cursor.y].rstrip() == "› /cost")
    assert "/reasoning hide" in (tmp_path / "home" / "history").read_text()
    assert server.requests == []  # none of this talked to the model


def test_multiline_input_paste_and_ctrl_j(start: Callable[..., Terminal], server: FakeServer) -> None:
    server.add(Reply(content="got the paste"), Reply(content="got two lines"))
    term = start()
    term.type("\x1b[200~first line\nsecond line\x1b[201~")  # a bracketed paste keeps its newline
    term.wait_for("second line")
    term.type("\r")
    term.wait_for("got the paste")
    term.wait_prompt()
    term.type("alpha")
    term.type("\n")  # Ctrl-J: a new line, not a send
    term.type("beta")
    term.wait_for("beta")
    assert server.requests[1:] == []
    term.type("\r")
    term.wait_for("got two lines")
    assert server.requests[0].body["messages"][-1]["content"] == "first line\nsecond line"
    assert server.requests[1].body["messages"][-1]["content"] == "alpha\nbeta"


def test_hidden_reasoning_shows_a_one_line_indicator(
    start: Callable[..., Terminal], server: FakeServer, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text('[ui]\nreasoning = "hide"\n')
    server.add(
        Reply(reasoning="secret chain of thought " * 20, content="visible answer", chunk_size=20, chunk_delay=0.01)
    )
    term = start()
    term.send_message("think")
    term.wait_for("visible answer")
    screen = term.wait_prompt()
    assert "secret chain" not in screen
    assert re.search(r"✻ thought for \d+s", screen)


def test_ctrl_c_twice_or_ctrl_d_exits(start: Callable[..., Terminal]) -> None:
    term = start()
    term.type("\x03")
    term.wait_for("Press Ctrl-C again")
    term.type("\x03")
    term.child.expect(pexpect.EOF, timeout=10)
    term.child.close()
    assert term.child.exitstatus == 0
    term = start()
    term.type("\x04")
    term.child.expect(pexpect.EOF, timeout=10)
    term.child.close()
    assert term.child.exitstatus == 0


def test_plain_output_with_term_dumb(start: Callable[..., Terminal], server: FakeServer) -> None:
    server.add(Reply(content="Plain **markdown** stays as text."))
    term = start(TERM="dumb")
    term.send_message("hi")
    term.wait_for("Plain **markdown** stays as text.")
    answer = term.raw.split(b"Plain **markdown**", 1)[1].split(b"\n", 1)[0]
    assert b"\x1b[" not in answer


def test_missing_api_key_asks_for_one_and_skipping_exits_2(term_env: dict[str, str], workspace: Path) -> None:
    env = {k: v for k, v in term_env.items() if k != "KIMI_API_KEY"}
    term = Terminal([], env, workspace)
    term.child.expect("Enter to skip", timeout=15)  # the first run offers to store a key (tests/cli/test_firstrun.py)
    term.child.send("\r")
    term.child.expect(pexpect.EOF, timeout=15)
    term.child.close()
    out = term.child.before.decode()
    assert term.child.exitstatus == 2
    assert "No key stored. Set KIMI_API_KEY" in out and "Traceback" not in out


def test_resume_picker_shows_where_the_session_stands(
    term_env: dict[str, str], server: FakeServer, workspace: Path, make_agent: Callable[..., Any]
) -> None:
    server.add(Reply(content="I will remember 7."))
    first = make_agent().run_sync("Remember the number 7.")
    server.add(Reply(tool_calls=[ToolCall("bash", {"command": "echo allowed-by-rule"})]), Reply(content="It was 7."))
    # -r without an id: pick from a list; --allow reaches the interactive agent
    term = Terminal(["-r", "--allow", "bash(echo *)"], term_env, workspace)
    try:
        term.wait_for("Resume which session?")
        assert "Remember the number 7." in term.text
        term.type("1\r")
        screen = term.wait_prompt()
        assert f"Resumed session {first.session_id} (1 prompt so far)" in screen
        assert "› Remember the number 7." in screen and "● I will remember 7." in screen
        term.send_message("Which number was it?")
        screen = term.wait_for("It was 7.")
        assert "Run this command?" not in screen and "allowed-by-rule" in screen  # the rule let it run
        messages = server.requests[-2].body["messages"]
        assert roles(server.requests[-2].body) == ["system", "user", "assistant", "user"]
        assert messages[1]["content"] == "Remember the number 7."
    finally:
        term.close()


def test_mcp_status_line_cost_and_task_list(start: Callable[..., Terminal], server: FakeServer, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        "[models.kimi-k3]\nprices = { input = 1.0, output = 4.0 }\n"
        f'[mcp_servers.demo]\ncommand = {json.dumps(sys.executable)}\nargs = [{json.dumps(DEMO_MCP)}, "stdio"]\n'
        '[mcp_servers.broken]\ncommand = "/nonexistent/kimicode-test-mcp"\n'
    )
    todos = [
        {"id": "1", "content": "Write the parser", "status": "done"},
        {"id": "2", "content": "Add tests", "status": "in_progress"},
        {"id": "3", "content": "Update docs", "status": "pending"},
    ]
    usage = {"prompt_tokens": 20_000, "completion_tokens": 1_000, "total_tokens": 21_000}
    server.add(
        Reply(tool_calls=[ToolCall("todo_write", {"todos": todos})], usage=usage),
        Reply(content="Planned.", usage={**usage, "prompt_tokens": 10_000}),
    )
    term = start()
    # the servers start as soon as the session opens: the failure shows up without sending anything
    term.wait_for("MCP: broken failed")
    term.wait_for(lambda: "mcp 1/2" in term.toolbar())
    assert "$0.0000" in term.toolbar()
    term.send_message("plan the work")
    term.wait_for("Planned.")
    screen = term.wait_prompt()
    assert "● todo_write (3 tasks)" in screen
    assert "⎿ ☑ Write the parser" in screen and "◐ Add tests" in screen and "☐ Update docs" in screen
    assert "$0.038" in term.toolbar()  # 30k input at $1 + 2k output at $4 per million
    assert term.raw.count(b"broken failed") == 1  # not repeated when the turn starts
    tools = [t["function"]["name"] for t in server.requests[0].body["tools"]]
    assert "mcp__demo__echo" in tools and not any(t.startswith("mcp__broken") for t in tools)
