"""Live output of a running tool: tools report what they print, the agent turns it into events.

The agent sets a reporter (a context variable, so tool calls running together each have their own)
before it runs a tool; `report_output` is a no-op outside a tool call, so a tool function called
directly by a library user works unchanged.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_reporter: ContextVar[Callable[[str], None] | None] = ContextVar("kimicode_tool_output", default=None)


def report_output(text: str) -> None:
    """Report a piece of the running tool's output (never raises: progress must not break a tool)."""
    reporter = _reporter.get()
    if reporter is not None and text:
        try:
            reporter(text)
        except Exception:
            pass


class ByteReporter:
    """Decodes a byte stream for `report_output`: UTF-8 characters split across reads are kept whole,
    invalid bytes become U+FFFD."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, data: bytes) -> None:
        if _reporter.get() is not None:
            report_output(self._decoder.decode(data))


@contextmanager
def reporting(callback: Callable[[str], None]) -> Iterator[None]:
    """Route `report_output` calls made inside the block (in this task) to `callback`."""
    token = _reporter.set(callback)
    try:
        yield
    finally:
        _reporter.reset(token)
