"""Telling the user, who switched to another window, that a turn ended or an approval waits.

The terminal is told by default: a desktop notification through OSC 9 where the terminal shows one
(iTerm2, WezTerm, Ghostty, Windows Terminal), else the bell (which most terminals and tmux turn into an
alert). `[notify]` in the user's own `KIMICODE_HOME/config.toml` (a project's configuration cannot run
programs) changes that, as Codex's `notify` does:

    [notify]
    terminal = "auto"          # auto, bell, osc9 or off
    command = ["notify-send", "kimicode"]   # also run this, with a JSON description as the last argument
    after_seconds = 10         # a turn shorter than this ends without a notification (you were watching)
"""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from kimicode.termsafe import sanitize

TERMINALS = ("auto", "bell", "osc9", "off")
OSC9_TERMINALS = ("iTerm.app", "WezTerm", "ghostty")
"""`TERM_PROGRAM` values of terminals that show OSC 9 as a desktop notification."""


@dataclass
class Notifier:
    """How to notify (see the module doc); `problem` says what in `[notify]` was ignored and why."""

    terminal: str = "auto"
    command: tuple[str, ...] = ()
    after_seconds: float = 10.0
    problem: str | None = None

    @classmethod
    def load(cls, home: Path) -> Notifier:
        """`[notify]` of `home/config.toml` (defaults when there is none; a bad value is reported and ignored)."""
        try:
            table = tomllib.loads((home / "config.toml").read_text(encoding="utf-8")).get("notify")
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            return cls()
        return cls.from_table(table if isinstance(table, Mapping) else {})

    @classmethod
    def from_table(cls, table: Mapping[str, Any]) -> Notifier:
        out = cls()
        problems: list[str] = []
        terminal = table.get("terminal", "auto")
        if terminal in TERMINALS:
            out.terminal = terminal
        else:
            problems.append(f"terminal must be one of {', '.join(TERMINALS)} (got {terminal!r})")
        command = table.get("command")
        if isinstance(command, str) and command.strip():
            out.command = (command,)
        elif isinstance(command, list) and command and all(isinstance(c, str) and c for c in command):
            out.command = tuple(command)
        elif command is not None:
            problems.append("command must be a program and its arguments, e.g. [\"notify-send\", \"kimicode\"]")
        after = table.get("after_seconds", 10)
        if isinstance(after, int | float) and not isinstance(after, bool) and after >= 0:
            out.after_seconds = float(after)
        else:
            problems.append(f"after_seconds must be a number of seconds (got {after!r})")
        if problems:
            out.problem = "[notify] in config.toml: " + "; ".join(problems) + " (ignored)"
        return out

    def channel(self, env: Mapping[str, str] | None = None) -> str:
        """The terminal channel in use: `bell`, `osc9` or `off`."""
        if self.terminal != "auto":
            return self.terminal
        env = os.environ if env is None else env
        if env.get("TERM_PROGRAM") in OSC9_TERMINALS or env.get("WT_SESSION"):
            return "osc9"
        return "bell"

    def notify(self, kind: str, message: str, out: IO[str] | None, **details: str) -> None:
        """Notify: `kind` is `turn-finished` or `approval-requested`; `out` is the terminal (None: plain
        output, not a terminal: only the command runs). Never raises."""
        channel = self.channel() if out is not None else "off"
        text = " ".join(sanitize(message, sequences="escape").split())[:200].replace("\x07", "")
        try:
            if out is None or channel == "off":
                pass
            elif channel == "bell":
                out.write("\a")
            elif channel == "osc9":
                seq = f"\x1b]9;{text}\x07"
                if os.environ.get("TMUX"):  # tmux passes it on only wrapped (and with allow-passthrough on)
                    seq = "\x1bPtmux;" + seq.replace("\x1b", "\x1b\x1b") + "\x1b\\"
                out.write(seq)
            if out is not None:
                out.flush()
        except (OSError, ValueError):
            pass
        if self.command:
            payload = json.dumps({"type": kind, "message": message, **details}, ensure_ascii=False)
            try:
                subprocess.Popen([*self.command, payload], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, start_new_session=True)
            except OSError:
                pass
