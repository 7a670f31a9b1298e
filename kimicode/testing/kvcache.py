"""llama.cpp's unified KV cache as the fake serves it: the slots share one context, so a request that fits the
window alone can still find no room while others are in flight.

Observed on a real `llama-server -c 8192` (its default layout: `n_slots = 4, n_ctx_slot = 8192, kv_unified =
'true'`): four concurrent requests of ~4,600 tokens each; the decode of the second one found no free space in
the KV cache ("failed to find a memory slot for batch of size N", retried down to 1), and both were answered
with `send_error: Context size has been exceeded.`: HTTP 500 `{"error": {"code": 500, "message": "Context size
has been exceeded.", "type": "server_error"}}`, with no number of the request, although `/props` reports
`n_ctx` 8,192 per slot and each request alone is answered.
"""

from __future__ import annotations

import threading

from kimicode.testing.dialect import body
from kimicode.testing.replies import ErrorReply

__all__ = ["SharedKV"]

FULL = body({"error": {"code": 500, "message": "Context size has been exceeded.", "type": "server_error"}})


class SharedKV:
    """The tokens of the requests in flight, against `size` (None: not shared, nothing is ever refused here)."""

    def __init__(self) -> None:
        self.size: int | None = None
        self.used = 0
        self.refused = 0
        """Requests refused for lack of room."""
        self.peak = 0
        """The most requests in flight at once."""
        self._in_flight = 0
        self._lock = threading.Lock()

    def claim(self, tokens: int) -> int | None:
        """Take `tokens` of the cache for a request (0 when not shared); None when they are not free now."""
        with self._lock:
            if self.size is None:
                return 0
            if self.used + tokens > self.size:
                self.refused += 1
                return None
            self.used += tokens
            self._in_flight += 1
            self.peak = max(self.peak, self._in_flight)
            return tokens

    def release(self, tokens: int) -> None:
        with self._lock:
            if tokens:
                self.used -= tokens
                self._in_flight -= 1

    def refusal(self) -> ErrorReply:
        """llama.cpp's answer when the shared cache is full (recorded from a real server, see the module doc)."""
        return ErrorReply(500, body=FULL, headers={"Server": "llama.cpp", "Content-Type": "application/json"})
