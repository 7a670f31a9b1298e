"""Resizing the terminal while an answer streams (issue 13): the real `kimicode` in tmux, a terminal
emulator that re-wraps its lines when the window narrows, against the fake server. The whole history is
captured afterwards: every list item of the answer appears exactly once, the status line left nothing
behind, and no cursor-position report ever shows up as text."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kimicode.testing import FakeServer, Reply, ToolCall

try:
    from .conftest import kimicode_command
except ImportError:  # tests/ is not a package
    from conftest import kimicode_command  # type: ignore[no-redef]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (.ci/run installs it)"),
]

ITEMS = 130
CPR = re.compile(r"\[\d+;\d+R")
"""A cursor-position report (`ESC [ row ; col R`) printed as text instead of being read."""


def long_list(n: int = ITEMS) -> str:
    """A Markdown answer: a paragraph, a list of `n` items of varied length (many wrap at 40 columns), a
    closing line."""
    items = "\n".join(f"- item-{i:03d} " + " ".join(f"w{i}x{k}" for k in range(3 + i % 17)) for i in range(1, n + 1))
    return f"Here is the list you asked for, one item per line:\n\n{items}\n\nDone-END."


class Tmux:
    """A tmux server of its own (its own socket and configuration) running one command in one pane."""

    def __init__(self, command: list[str], env: dict[str, str], cwd: Path, cols: int = 120, rows: int = 40) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="kc-tmux-"))  # short: a socket path has a length limit
        self.socket = str(self.dir / "sock")
        conf = self.dir / "tmux.conf"
        conf.write_text("set -g history-limit 100000\nset -g status off\nset -g remain-on-exit on\n")
        script = self.dir / "run.sh"
        exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
        script.write_text(f"#!/bin/sh\n{exports}cd {shlex.quote(str(cwd))}\nexec {shlex.join(command)}\n")
        script.chmod(0o755)
        self.run("-f", str(conf), "new-session", "-d", "-s", "k", "-x", str(cols), "-y", str(rows), str(script))
        self.rows = rows

    def run(self, *args: str) -> str:
        done = subprocess.run(["tmux", "-S", self.socket, *args], capture_output=True, text=True, timeout=10)
        return done.stdout

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", "k")

    def history(self) -> str:
        """Everything: the scrollback and the screen, wrapped lines joined."""
        return self.run("capture-pane", "-p", "-J", "-S", "-", "-t", "k")

    def resize(self, cols: int) -> None:
        self.run("resize-window", "-t", "k", "-x", str(cols), "-y", str(self.rows))

    def keys(self, *keys: str) -> None:
        self.run("send-keys", "-t", "k", *keys)

    def wait(self, check: str | Callable[[str], bool], timeout: float = 20) -> str:
        test = (lambda screen: check in screen) if isinstance(check, str) else check
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            screen = self.screen()
            if test(screen):
                return screen
            time.sleep(0.02)
        raise AssertionError(f"timed out waiting for {check!r}; the screen shows:\n{self.screen()}")

    def at_prompt(self, screen: str) -> bool:
        return "esc to interrupt" not in screen and "⏵" in screen and "\n›" in "\n" + screen

    def close(self) -> None:
        self.run("kill-server")
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def tmux(server: FakeServer, tmp_path: Path, workspace: Path) -> Iterator[Callable[..., Tmux]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI_", "MOONSHOT_", "OPENAI_", "KIMICODE_"))}
    env.update(
        KIMI_API_KEY="sk-ui-test",
        KIMI_BASE_URL=server.base_url,
        KIMICODE_HOME=str(tmp_path / "home"),
        TERM="xterm-256color",
    )
    env.pop("NO_COLOR", None)
    env.pop("TMUX", None)
    opened: list[Tmux] = []

    def start(*args: str) -> Tmux:
        term = Tmux([*kimicode_command(), *args], env, workspace)
        opened.append(term)
        term.wait(term.at_prompt)
        return term

    yield start
    for term in opened:
        term.close()


def counts(history: str, n: int = ITEMS) -> dict[int, int]:
    """How many times each item's line starts in the history (a partial copy counts as well)."""
    return {i: len(re.findall(rf"item-{i:03d}\b", history)) for i in range(1, n + 1)}


def finish(term: Tmux, last: str = "Done-END.") -> str:
    term.wait(lambda screen: last in screen and term.at_prompt(screen), 40)
    history = term.history()
    assert not CPR.search(history), "a cursor-position report was printed as text"
    return history


def assert_each_item_once(history: str) -> None:
    seen = counts(history)
    wrong = {i: c for i, c in seen.items() if c != 1}
    assert not wrong, f"items not shown exactly once (item: times): {wrong}\n{history}"
    assert history.count("Done-END.") == 1 and history.count("Here is the list") == 1
    assert "esc to interrupt" not in history  # the status line was erased every time
    answer = history[history.index("Here is the list") : history.index("Done-END.")]
    assert "…" not in answer  # no live row (the end of the line being written) was left behind
    lines = history.splitlines()
    starts = [next(n for n, line in enumerate(lines) if f"item-{i:03d}" in line) for i in range(1, ITEMS + 1)]
    assert starts == sorted(starts)  # in order


def stream_answer(server: FakeServer) -> None:
    server.add(Reply(content=long_list(), chunk_size=12, chunk_delay=0.008))


def test_no_resize_baseline(tmux: Callable[..., Tmux], server: FakeServer) -> None:
    stream_answer(server)
    term = tmux()
    term.keys("list them", "Enter")
    assert_each_item_once(finish(term))


def test_resizing_while_a_list_streams(tmux: Callable[..., Tmux], server: FakeServer) -> None:
    stream_answer(server)
    term = tmux()
    term.keys("list them", "Enter")
    for cols, item in [(70, 10), (40, 40), (100, 70)]:
        term.wait(f"item-{item:03d}")
        term.resize(cols)
    assert_each_item_once(finish(term))
    assert term.run("display-message", "-p", "-t", "k", "#{window_width}").strip() == "100"  # it was resized


def test_a_rapid_series_of_resizes_while_a_list_streams(tmux: Callable[..., Tmux], server: FakeServer) -> None:
    stream_answer(server)
    term = tmux()
    term.keys("list them", "Enter")
    term.wait("item-010")
    for cols in (110, 95, 80, 64, 50, 40, 58, 90, 120, 75, 44):  # faster than tmux tells the program
        term.resize(cols)
        time.sleep(0.03)
    term.wait("item-060")
    for cols in (100, 60, 40, 120):
        term.resize(cols)
        time.sleep(0.06)
    assert_each_item_once(finish(term))


def test_resizing_while_a_command_prints_live_output(tmux: Callable[..., Tmux], server: FakeServer) -> None:
    script = "for i in $(seq 1 40); do echo out-$i-" + "z" * 50 + "; sleep 0.05; done"
    server.add(Reply(tool_calls=[ToolCall("bash", {"command": script})]), Reply(content=long_list(30)))
    term = tmux("--yolo")
    term.keys("run it", "Enter")
    term.wait("out-5-")
    term.resize(70)
    term.wait("out-15-")
    term.resize(40)
    term.wait("out-25-")
    term.resize(110)
    history = finish(term)
    # the live tail was erased each time: only the result's last 5 lines stay, once each
    for i in range(1, 41):
        assert history.count(f"out-{i}-") == (1 if i > 35 else 0), (i, history)
    assert history.count("35 more lines") == 1
    seen = counts(history, 30)
    assert all(c == 1 for c in seen.values()), seen
    assert "esc to interrupt" not in history
