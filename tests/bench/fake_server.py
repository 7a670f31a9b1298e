"""FakeServer start + stop, side by side with the polling shutdown it replaced, in one run.

    python tests/bench/fake_server.py [N]

Every in-process test that uses the `server` fixture starts and stops one FakeServer. socketserver's
`serve_forever(poll_interval=0.05)` noticed `shutdown()` only at its next poll, so each stop waited up to
50 ms (739 cases of the quick loop paid it); `FakeServer` now waits in select on a wake-up socket, so stop()
returns as soon as its thread has seen it. Each figure is the median and the minimum of N start/stop pairs,
with one request answered in between (a test always talks to its server).
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from kimicode.testing import FakeServer, Reply


class _Ok(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


def polling_server() -> None:
    """The baseline: socketserver's own loop and shutdown, as FakeServer ran before."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/") as answer:
        assert answer.read() == b"ok"
    server.shutdown()
    server.server_close()
    thread.join()


def fake_server() -> None:
    """FakeServer as a test uses it: start, one chat request, stop."""
    with FakeServer() as server:
        server.add(Reply(content="hi"))
        request = urllib.request.Request(
            server.base_url + "/chat/completions",
            data=b'{"model": "m", "messages": [{"role": "user", "content": "x"}]}',
            headers={"Content-Type": "application/json", "Authorization": "Bearer k"},
        )
        with urllib.request.urlopen(request) as answer:
            assert b'"hi"' in answer.read()


def measure(run: Callable[[], None], n: int) -> list[float]:
    run()  # warm-up, discarded
    times = []
    for _ in range(n):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1000)
    return times


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    print(f"start + one request + stop, {n} runs         median      min")
    for name, run in (("socketserver, polling shutdown", polling_server), ("FakeServer", fake_server)):
        times = measure(run, n)
        print(f"  {name:<40} {statistics.median(times):6.1f} ms {min(times):6.1f} ms")


if __name__ == "__main__":
    main()
