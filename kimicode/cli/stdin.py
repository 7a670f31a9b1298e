"""Reading piped input without ever hanging on a terminal or an open, silent pipe."""

from __future__ import annotations

import os
import select
import sys

MAX_PIPED_BYTES = 20 * 1024 * 1024
IDLE_SECONDS = 0.15


def read_all_stdin() -> str:
    """`-p -`: the user asked for stdin as the prompt, so wait for EOF."""
    try:
        return sys.stdin.read()
    except (OSError, ValueError):
        return ""


def read_piped_stdin() -> str:
    """Data already waiting on a piped stdin, read until EOF or until the pipe goes quiet.

    Returns "" at once for a terminal, a closed stdin, `/dev/null`, or a pipe that stays silent.
    """
    try:
        fd = sys.stdin.fileno()
    except (OSError, ValueError, AttributeError):
        return ""
    try:
        if os.isatty(fd):
            return ""
    except OSError:
        return ""
    chunks: list[bytes] = []
    total = 0
    try:
        was_blocking = os.get_blocking(fd)
        os.set_blocking(fd, False)
    except OSError:
        return ""
    try:
        while total < MAX_PIPED_BYTES:
            try:
                ready, _, _ = select.select([fd], [], [], IDLE_SECONDS)
            except (OSError, ValueError):
                break
            if not ready:
                break
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                continue
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
            total += len(data)
    finally:
        try:
            os.set_blocking(fd, was_blocking)
        except OSError:
            pass
    return b"".join(chunks).decode("utf-8", errors="replace")
