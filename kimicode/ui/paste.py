"""What a paste puts into the prompt: a long paste collapses to `[pasted 300 lines]` (the text is sent in
full; the prompt stays a line or two tall, so the terminal's scrollback never holds a half-redrawn copy),
a pasted or dropped image path becomes an `@path` mention (sent as an image part), and Ctrl-V with an
image on the clipboard saves it under `KIMICODE_HOME/pastes/` (mode 0600) and mentions that.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from kimicode.ui.completion import is_image_file
from kimicode.ui.format import human_bytes

if TYPE_CHECKING:
    from kimicode.ui.app import Session

PASTE_LINES = 10
"""A paste of more lines than this is shown collapsed."""
PASTE_CHARS = 2000
"""A paste longer than this many characters is shown collapsed however few lines it has."""
CLIPBOARD_TIMEOUT = 5.0
"""Seconds a clipboard program may take."""

_LABEL = re.compile(r"\[pasted \d+ (?:lines|characters)(?: #\d+)?\]")


class Pastes:
    """The long pastes of a session, by the label shown in their place (kept for the whole session, so a
    message recalled from the history still expands)."""

    def __init__(self) -> None:
        self.texts: dict[str, str] = {}

    def collapse(self, data: str, workspace: Path) -> str:
        """What to insert into the prompt for a paste of `data`."""
        data = data.replace("\r\n", "\n").replace("\r", "\n")
        image = image_path(data, workspace)
        if image is not None:
            return mention(image, workspace) + " "
        lines = data.rstrip("\n").count("\n") + 1
        if lines <= PASTE_LINES and len(data) <= PASTE_CHARS:
            return data
        label = f"[pasted {lines} lines]" if lines > PASTE_LINES else f"[pasted {len(data)} characters]"
        n = 1
        while self.texts.get(label, data) != data:
            n += 1
            label = f"{label.rstrip(']').split(' #')[0]} #{n}]"
        self.texts[label] = data
        return label

    def expand(self, text: str) -> str:
        """`text` with every paste label put back to the text pasted."""
        if not self.texts:
            return text
        return _LABEL.sub(lambda m: self.texts.get(m.group(0), m.group(0)), text)


def image_path(data: str, workspace: Path) -> Path | None:
    """The image file a paste names (a path dropped from a file manager: quoted, `file://`, or with
    backslash-escaped spaces), or None when the paste is anything else."""
    text = data.strip()
    if not text or "\n" in text or len(text) > 4096:
        return None
    if len(text) > 1 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1]
    if text.startswith("file://"):
        text = unquote(urlsplit(text).path)
    elif "\\" in text:
        text = re.sub(r"\\(.)", r"\1", text)
    path = Path(os.path.expanduser(text))
    if not path.is_absolute():
        path = workspace / path
    try:
        return path if path.is_file() and is_image_file(path) else None
    except OSError:
        return None


def mention(path: Path, workspace: Path) -> str:
    """`@path` for the prompt (relative inside the workspace, quoted when it has spaces)."""
    try:
        shown = str(path.relative_to(workspace))
    except ValueError:
        shown = str(path)
    return f'@"{shown}"' if any(c.isspace() or c == '"' for c in shown) else f"@{shown}"


def _clipboard_commands() -> list[tuple[list[str], list[str]]]:
    """(list the clipboard's types, read its PNG) for each clipboard program found: Wayland, X11, macOS."""
    found: list[tuple[list[str], list[str]]] = []
    if shutil.which("wl-paste"):
        found.append((["wl-paste", "--list-types"], ["wl-paste", "--no-newline", "--type", "image/png"]))
    if shutil.which("xclip"):
        found.append(
            (
                ["xclip", "-selection", "clipboard", "-t", "TARGETS", "-o"],
                ["xclip", "-selection", "clipboard", "-t", "image/png", "-o"],
            )
        )
    if shutil.which("pngpaste"):
        found.append(([], ["pngpaste", "-"]))
    return found


def clipboard_image(home: Path) -> Path | None:
    """Save the clipboard's image (PNG) under `home/pastes/` and return its path; None when the clipboard
    holds no image or no clipboard program is installed."""
    for list_types, read in _clipboard_commands():
        try:
            if list_types:
                types = subprocess.run(list_types, capture_output=True, timeout=CLIPBOARD_TIMEOUT, text=True)
                if "image/png" not in types.stdout.split():
                    continue
            got = subprocess.run(read, capture_output=True, timeout=CLIPBOARD_TIMEOUT)
        except (OSError, subprocess.SubprocessError):
            continue
        if got.returncode != 0 or not got.stdout.startswith(b"\x89PNG\r\n\x1a\n"):
            continue
        folder = home / "pastes"
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = folder / f"clipboard-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{time.monotonic_ns() % 10**6}.png"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(got.stdout)
        return path
    return None


def attach_image(session: Session, shown: str, path: Path | None) -> None:
    """`@shot.png` (typed, pasted or from the clipboard): send the image with the message (the mention
    stays in the text); a model that cannot see images, or a file that is not one, is said in one line."""
    from kimicode.agent.ecosystem import attach_image as attach

    try:
        attach(session.agent, path if path is not None else shown)
    except Exception as exc:  # ToolError: the model can't see images, not an image, too large
        session.say(f"! {shown} not attached: {exc}", "yellow")
        return
    try:
        size = f" ({human_bytes((path or Path(shown)).stat().st_size)})"
    except OSError:
        size = ""
    session.say(f"+ attached image {shown}{size}", "dim")
