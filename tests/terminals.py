"""Terminals for the terminal tests (importable as `terminals` from every directory of tests/): a screen that
a rich console draws on (`Term`, for the renderer without a process), the installed `kimicode` in a
pseudo-terminal read through a terminal emulator (`Terminal`), and in a tmux of its own (`Tmux`, a terminal
that re-wraps its lines when the window is resized)."""

from __future__ import annotations

import io
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pexpect
import pyte
from helpers import kimicode_command
from rich.console import Console

from kimicode.ui.render import LiveRegion, MarkdownStream


class Term:
    """A pyte screen fed by a rich console that behaves like a colour terminal."""

    def __init__(self, rows: int = 200, cols: int = 80) -> None:
        self.screen = pyte.Screen(cols, rows)
        self.stream = pyte.Stream(self.screen)
        outer = self

        class File(io.StringIO):
            def write(self, s: str) -> int:
                outer.stream.feed(s.replace("\n", "\r\n"))  # the terminal driver's ONLCR
                outer.written += s
                return len(s)

        self.written = ""
        self.file = File()
        self.console = Console(
            file=self.file, width=cols, height=rows, force_terminal=True, color_system="truecolor", legacy_windows=False
        )

    @property
    def text(self) -> str:
        return "\n".join(line.rstrip() for line in self.screen.display).rstrip()


def stream_into(term: Term, text: str, sizes: list[int], interval: float = 0.0) -> MarkdownStream:
    """Stream `text` into `term` in pieces of `sizes` (cycled), as the terminal renders an answer, with a
    live region and a status line below it; the finished stream."""
    md = MarkdownStream(term.console, None, min_interval=interval)
    md.live = LiveRegion(term.file, lambda: term.screen.lines, lambda: [md.live_text(), "status line\n"])
    i = 0
    k = 0
    while i < len(text):
        n = sizes[k % len(sizes)]
        md.feed(text[i : i + n])
        i += n
        k += 1
    md.finish()
    md.live.clear()
    return md


class Terminal:
    """A pseudo-terminal running kimicode, with a pyte screen that answers cursor-position queries."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: Path, cols: int = 110, rows: int = 30) -> None:
        owner = self
        self.plain = env.get("TERM") == "dumb"

        class Screen(pyte.Screen):  # type: ignore[misc]
            def write_process_input(self, data: str) -> None:
                owner.child.send(data)  # prompt_toolkit asks where the cursor is; answer like a terminal

        self.screen = Screen(cols, rows)
        self.stream = pyte.ByteStream(self.screen)
        self.raw = b""
        cmd = kimicode_command()
        self.child = pexpect.spawn(cmd[0], [*cmd[1:], *args], env=env, cwd=str(cwd), dimensions=(rows, cols))

    def pump(self, timeout: float = 0.05) -> bool:
        """Read what is available; False at end of output."""
        try:
            data = self.child.read_nonblocking(65536, timeout=timeout)
        except pexpect.TIMEOUT:
            return True
        except pexpect.EOF:
            return False
        self.raw += data
        self.stream.feed(data)
        return True

    @property
    def text(self) -> str:
        return "\n".join(line.rstrip() for line in self.screen.display)

    def wait_for(self, what: str | Callable[[], bool], timeout: float = 15) -> str:
        check = (lambda: what in self.text) if isinstance(what, str) else what
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            alive = self.pump()
            if check():
                return self.text
            if not alive:
                break
        raise AssertionError(f"timed out waiting for {what!r}; the screen shows:\n{self.text}")

    def at_prompt(self) -> bool:
        """The cursor sits on an empty input line and no turn is running."""
        row = self.screen.display[self.screen.cursor.y].rstrip()
        if self.plain:
            return row == ">"
        return row == "›" and "esc to interrupt" not in self.text and "⏵" in self.toolbar()

    def wait_prompt(self, timeout: float = 15) -> str:
        return self.wait_for(self.at_prompt, timeout)

    def type(self, text: str) -> None:
        self.child.send(text)

    def send_message(self, text: str) -> None:
        self.type(text)
        self.wait_for(lambda: text.splitlines()[-1] in self.text, 5)
        self.type("\r")

    def toolbar(self) -> str:
        return self.screen.display[-1]

    def close(self) -> None:
        if self.child.isalive():
            self.child.terminate(force=True)


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
