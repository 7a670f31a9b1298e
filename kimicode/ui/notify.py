"""Telling the user, who switched to another window, that a turn ended or an approval waits.

The terminal is told by default: a desktop notification through OSC 9 where the terminal shows one
(iTerm2, WezTerm, Ghostty, Windows Terminal), else the bell (which most terminals and tmux turn into an
alert). `[notify]` in the user's own `KIMICODE_HOME/config.toml` changes that, as Codex's `notify` does (a
project's `.kimicode/config.toml` only once the workspace is trusted, as its hooks; the trust question names its
command):

    [notify]
    terminal = "auto"          # auto, bell, osc9 or off
    command = ["notify-send", "kimicode"]   # also run this, with a JSON description as the last argument
    after_seconds = 10         # a turn shorter than this ends without a notification (you were watching)
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from typing import IO

from kimicode.config.sections import Notify
from kimicode.termsafe import sanitize

OSC9_TERMINALS = ("iTerm.app", "WezTerm", "ghostty")
"""`TERM_PROGRAM` values of terminals that show OSC 9 as a desktop notification."""


@dataclass
class Notifier:
    """How to notify (see the module doc), from the typed `[notify]` section (kimicode/config/sections.py)."""

    terminal: str = "auto"
    command: tuple[str, ...] = ()
    after_seconds: float = 10.0

    @classmethod
    def from_config(cls, notify: Notify) -> Notifier:
        """The resolved `[notify]` section; the configuration loader has checked its values already."""
        return cls(notify.terminal, tuple(notify.command or ()), notify.after_seconds)

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
                subprocess.Popen(
                    [*self.command, payload],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            except OSError:
                pass
