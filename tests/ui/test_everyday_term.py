"""Issue 23 in a real terminal: the real `kimicode` in tmux against the fake server (see test_ui_resize.py
for the harness). Few and lean: each test covers several habits of one session.

- `kimicode "PROMPT"` opens the session with that first prompt; Ctrl-O while a command runs shows the
  running command's output so far; `!command` runs in the shell and its output goes with the next message.
- a 300-line paste shows as `[pasted 300 lines]`, no line of it lands in the scrollback, and it is sent in
  full; a pasted image path becomes an `@path` mention sent as an image part.
- a message typed while the agent works and sent with Ctrl-S reaches the model in the running turn.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import kimicode_command, terminal_env
from terminals import Tmux
from ui_helpers import PNG

from kimicode.testing import FakeServer, Reply, ToolCall

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (.ci/run installs it)"),
]


@pytest.fixture
def kc(server: FakeServer, tmp_path: Path, workspace: Path) -> Iterator[Callable[..., Tmux]]:
    env = terminal_env(tmp_path / "home", server)
    opened: list[Tmux] = []

    def start(*args: str, at_prompt: bool = True) -> Tmux:
        term = Tmux([*kimicode_command(), *args], env, workspace)
        opened.append(term)
        if at_prompt:
            term.wait(term.at_prompt)
        return term

    yield start
    for term in opened:
        term.close()


def user_texts(body: dict[str, Any]) -> list[str]:
    out = []
    for m in body["messages"]:
        if m["role"] == "user":
            c = m["content"]
            out.append(c if isinstance(c, str) else " ".join(p.get("text", "") for p in c))
    return out


def test_first_prompt_ctrl_o_while_running_and_bang_command(kc: Callable[..., Tmux], server: FakeServer) -> None:
    loop = "for i in $(seq 1 40); do echo out-$i; done; sleep 30"
    server.add(Reply(tool_calls=[ToolCall("bash", {"command": loop})]), Reply(content="it said 42"))
    term = kc("--yolo", "list the files", at_prompt=False)
    term.wait("out-40")  # the live tail shows the last lines only
    assert "out-1\n" not in term.screen()
    term.keys("C-o")
    term.wait(lambda _screen: "output so far (still running) of bash" in term.history())
    assert "    out-1\n" in term.history()
    term.keys("Escape")
    term.wait(term.at_prompt)
    assert "list the files" in user_texts(server.requests[0].body)
    term.keys("!echo shell-said-$((6*7))", "Enter")
    term.wait("goes to the model with your next message")
    assert "shell-said-42" in term.screen()
    term.keys("what did it say", "Enter")
    term.wait("it said 42")
    sent = next(t for t in user_texts(server.requests[-1].body) if t.startswith("what did it say"))
    assert sent.startswith("what did it say") and "shell-said-42" in sent and "echo shell-said" in sent


def test_a_long_paste_collapses_and_an_image_path_becomes_a_mention(
    kc: Callable[..., Tmux], server: FakeServer, workspace: Path
) -> None:
    (workspace / "shot.png").write_bytes(PNG)
    server.add(Reply(content="got all of it"))
    term = kc("-m", "kimi-k3")
    pasted = "".join(f"paste-line-{i:03d}\n" for i in range(1, 301))
    buf = term.dir / "paste.txt"
    buf.write_text(pasted)
    term.run("load-buffer", str(buf))
    term.run("paste-buffer", "-p", "-t", "k")  # bracketed, as a terminal pastes
    term.wait("[pasted 300 lines]")
    buf.write_text(str(workspace / "shot.png"))
    term.run("load-buffer", str(buf))
    term.run("paste-buffer", "-p", "-t", "k")
    term.wait("@shot.png")
    term.keys("Enter")
    term.wait("got all of it")
    history = term.history()
    assert "paste-line-" not in history  # nothing of it in the scrollback, let alone twice
    assert "attached image shot.png" in history
    content = next(m["content"] for m in server.requests[-1].body["messages"] if isinstance(m["content"], list))
    assert isinstance(content, list) and content[1]["type"] == "image_url"
    text = content[0]["text"]
    assert all(f"paste-line-{i:03d}" in text for i in range(1, 301)) and "[pasted" not in text


def test_ctrl_s_steers_the_running_turn(kc: Callable[..., Tmux], server: FakeServer, workspace: Path) -> None:
    wait = "while [ ! -f go ]; do sleep 0.05; done; echo went"
    server.add(Reply(tool_calls=[ToolCall("bash", {"command": wait})]), Reply(content="steered-ok"))
    term = kc("--yolo")
    term.keys("start", "Enter")
    term.wait("running bash")
    term.keys("also check the README")
    term.wait("also check the README")
    term.keys("C-s")
    term.wait("sent into the running turn")
    (workspace / "go").write_text("")
    term.wait("steered-ok")
    messages = server.requests[1].body["messages"]
    assert messages[-2]["role"] == "tool" and "went" in messages[-2]["content"]
    assert messages[-1] == {"role": "user", "content": "also check the README"}  # after the tool result
    term.wait(term.at_prompt)
    assert len(server.requests) == 2  # not sent a second time after the turn
