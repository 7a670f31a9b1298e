"""Context costs, side by side, in one run:

    python tests/bench/context.py [--steps N] [--session-steps N]

1. Client overhead per step at 10k, 100k, 500k and 1M tokens of history: kimicode's ChatClient (cached
   per-message JSON, raw SSE through the openai SDK's transport) versus the same request built with
   `json.dumps` of the whole body and sent with a plain `httpx2` POST. Both talk to the same local
   server, which reads the body and answers a tiny stream at once; its own time per request is
   measured in the server and subtracted ("overhead" = step time - server time).
2. Token accounting per step (estimate before the request + learning from usage after it) versus
   re-tokenizing the whole history with the same counter.
3. Peak memory (tracemalloc) while building and sending steps at 1M tokens, versus the history's
   size in bytes (its JSON).
4. A session that grows past 1M tokens through the real agent (kimi-k3, 1,048,576-token window)
   against the fake server: how many requests changed their prefix, and the cached-token ratio the
   server reports (the common prefix with the previous request).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import json
import multiprocessing
import queue
import random
import socket
import statistics
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

import httpx2

from kimicode import Agent, tool
from kimicode.context.accounting import TokenAccountant
from kimicode.context.tokens import EstimateCounter, default_counter
from kimicode.llm.client import ChatClient, ClientConfig, Completion
from kimicode.testing import FakeServer, RecordedRequest, Reply, ToolCall

SIZES = (10_000, 100_000, 500_000, 1_000_000)
WORDS = ["value", "return", "self", "config", "path", "the", "request", "token", "of", "and", "items", "count"]
SSE = (
    b"".join(
        b"data: " + json.dumps(chunk).encode() + b"\n\n"
        for chunk in (
            {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]},
            {"choices": [{"index": 0, "delta": {"reasoning_content": "ok"}, "finish_reason": None}]},
            {"choices": [{"index": 0, "delta": {"content": "done"}, "finish_reason": "stop"}]},
            {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}},
        )
    )
    + b"data: [DONE]\n\n"
)


def text_of(n_lines: int, seed: int) -> str:
    rng = random.Random(seed)
    lines = []
    for _ in range(n_lines):
        words = [rng.choice(WORDS) for _ in range(rng.randint(4, 12))]
        lines.append(f"    {words[0]}_{words[1]} = {rng.randint(0, 9999)}  # " + " ".join(words[2:]))
    return "\n".join(lines)


def turn(i: int, lines: int) -> list[dict[str, Any]]:
    call_id = f"functions.read_file:{i}"
    return [
        {
            "role": "assistant",
            "reasoning_content": f"Next I read module {i} to see how it handles the request.",
            "content": "",
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "read_file", "arguments": json.dumps({"path": f"src/m{i}.py"})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": text_of(lines, i)},
    ]


def history_of(tokens: int, counter: EstimateCounter) -> list[dict[str, Any]]:
    """A system prompt, a user message and tool turns until about `tokens` (estimated) are reached."""
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent. " * 200},
        {"role": "user", "content": "Read every module and explain how requests are handled."},
    ]
    total = 0
    i = 0
    while total < tokens:
        for msg in turn(i, 120):
            history.append(msg)
            total += counter.count(json.dumps(msg))
        i += 1
    return history


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"The {name} tool. " * 20,
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    }
    for name in ("read_file", "write_file", "edit_file", "glob", "grep", "bash")
]


# -- a local server that reads the body and answers at once -----------------------------------------


def _quick_serve(sock: socket.socket, times: Any) -> None:
    """Serve keep-alive connections: read each request fully (discarding it), answer a fixed SSE stream."""

    def serve(conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(1 << 20)
                    if not data:
                        return
                    buf += data
                start = time.perf_counter()
                head, buf = buf.split(b"\r\n\r\n", 1)
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                have = len(buf)
                while have < length:
                    data = conn.recv(min(1 << 20, length - have))
                    if not data:
                        return
                    have += len(data)
                buf = buf[length:] if len(buf) > length else b""
                times.put(time.perf_counter() - start)
                head_out = f"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: {len(SSE)}\r\n\r\n"
                conn.sendall(head_out.encode() + SSE)

    while True:
        conn, _ = sock.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


class QuickServer:
    """The answering server, in its own process (its memory and CPU are not the client's)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        ctx = multiprocessing.get_context("fork")
        self.times: Any = ctx.Queue()
        self.process = ctx.Process(target=_quick_serve, args=(self.sock, self.times), daemon=True)
        self.process.start()
        self.sock.close()

    def drain(self) -> list[float]:
        """Server-side seconds per request since the last call."""
        out: list[float] = []
        while True:
            try:
                out.append(self.times.get(timeout=0.2 if not out else 0.01))
            except queue.Empty:
                return out

    def close(self) -> None:
        self.process.terminate()
        self.process.join(2)


async def plain_post(http: httpx2.AsyncClient, url: str, history: list[dict[str, Any]]) -> None:
    body = json.dumps(
        {
            "model": "kimi-k3",
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_completion_tokens": 32_768,
            "reasoning_effort": "high",
            "tools": TOOLS,
            "messages": history,
        },
        ensure_ascii=False,
        separators=(",", ":"),
    ).encode()
    async with http.stream(
        "POST", url, content=body, headers={"Content-Type": "application/json", "Authorization": "Bearer k"}
    ) as response:
        async for line in response.aiter_lines():
            if line.startswith("data:") and line[5:].strip() != "[DONE]":
                json.loads(line[5:])


async def client_step(client: ChatClient, history: list[dict[str, Any]]) -> None:
    done = False
    async for event in client.stream(history, TOOLS):
        if isinstance(event, Completion):
            done = True
    assert done


async def measure_overhead(size: int, steps: int, server: QuickServer) -> dict[str, float]:
    counter = EstimateCounter()
    base = history_of(size, counter)
    url = f"http://127.0.0.1:{server.port}/v1"
    client = ChatClient(ClientConfig(base_url=url, api_key="k", model="kimi-k3", session_id="bench", max_retries=0))
    http = httpx2.AsyncClient(timeout=60)
    results: dict[str, float] = {}
    try:
        for name in ("kimicode", "plain"):
            history = list(base)
            times: list[float] = []
            server_times: list[float] = []
            for step in range(steps + 1):
                history.extend(turn(10_000 + step, 8))  # what one step adds: a call and a small result
                gc.collect()
                t0 = time.perf_counter()
                if name == "kimicode":
                    await client_step(client, history)
                else:
                    await plain_post(http, url + "/chat/completions", history)
                elapsed = time.perf_counter() - t0
                spent = sum(server.drain())
                if step:  # the first request of a session encodes everything once
                    times.append(elapsed)
                    server_times.append(spent)
            results[name] = statistics.median(times) * 1000
            results[name + "_server"] = statistics.median(server_times) * 1000
        results["bytes"] = len(json.dumps(base, ensure_ascii=False).encode())
    finally:
        await client.aclose()
        await http.aclose()
    return results


def measure_accounting(size: int, steps: int) -> tuple[float, float]:
    """(ms per step with the accountant, ms to re-tokenize the whole history once)."""
    counter = default_counter()
    history = history_of(size, EstimateCounter())
    acc = TokenAccountant(counter)
    acc.observe(history, TOOLS, int(acc.raw_total(history, TOOLS) * 1.1))
    times = []
    for step in range(steps):
        new = turn(20_000 + step, 8)
        history.extend(new)
        t0 = time.perf_counter()
        est = acc.estimate(history, TOOLS)
        acc.observe(history, TOOLS, est + 5, est)
        times.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    fresh = TokenAccountant(counter)
    fresh.raw_total(history, TOOLS)
    full = time.perf_counter() - t0
    return statistics.median(times) * 1000, full * 1000


async def measure_memory(server: QuickServer, steps: int) -> tuple[int, int]:
    """(peak traced bytes while holding and sending a 1M-token history, the history's JSON bytes)."""
    gc.collect()
    tracemalloc.start()
    history = history_of(1_000_000, EstimateCounter())
    url = f"http://127.0.0.1:{server.port}/v1"
    client = ChatClient(ClientConfig(base_url=url, api_key="k", model="kimi-k3", session_id="bench", max_retries=0))
    acc = TokenAccountant(EstimateCounter())
    try:
        for step in range(steps):
            history.extend(turn(30_000 + step, 8))
            est = acc.estimate(history, TOOLS)
            await client_step(client, history)
            acc.observe(history, TOOLS, est, est)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        await client.aclose()
    return peak, len(json.dumps(history, ensure_ascii=False).encode())


# -- a session through the agent --------------------------------------------------------------------


@tool(kind="read")
def produce(n: int, seed: int) -> str:
    """Produce n lines of code-like text."""
    return text_of(n, seed)


def common_prefix(a: bytes, b: bytes) -> int:
    low, high = 0, min(len(a), len(b))
    while low < high:  # binary search on slice equality (memcmp): fast for megabytes
        mid = (low + high + 1) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid - 1
    return low


def messages_bytes(req: RecordedRequest) -> bytes:
    start = req.raw.index(b',"messages":') + len(b',"messages":')
    return req.raw[start:-1]


def run_session(steps: int) -> dict[str, Any]:
    rng = random.Random(3)
    script = []
    for i in range(steps):
        if i % 4 == 3:
            script.append(
                Reply(
                    reasoning="Let me think about this part. " + text_of(1_200, 900 + i),
                    tool_calls=[ToolCall("produce", {"n": 20, "seed": i})],
                )
            )
        else:
            script.append(
                Reply(
                    reasoning=f"Reading part {i}.",
                    tool_calls=[ToolCall("produce", {"n": rng.randint(300, 900), "seed": i})],
                )
            )
    script.append(Reply(content="done"))
    main: list[RecordedRequest] = []
    state: dict[str, bytes] = {"prev": b""}

    def answer(req: RecordedRequest) -> Reply:
        raw_msgs = messages_bytes(req)
        if "tools" not in req.body:
            reply = Reply(content="## Goal\nRead all parts.\n## Done\n- parts read so far\n## Next step\nContinue.")
            cached = 0
        else:
            main.append(req)
            reply = script.pop(0)
            cached = common_prefix(state["prev"], raw_msgs) // 4
            state["prev"] = raw_msgs
        prompt = len(req.raw) // 4
        usage = {"prompt_tokens": prompt, "completion_tokens": 50, "total_tokens": prompt + 50, "cached_tokens": cached}
        return dataclasses.replace(reply, usage=usage)

    with FakeServer() as fake, tempfile.TemporaryDirectory() as tmp:
        fake.add(*[answer] * (steps * 3))
        agent = Agent(
            base_url=fake.base_url,
            api_key="k",
            model="kimi-k3",
            workspace=tmp,
            home=Path(tmp) / "home",
            tools=[produce],
            max_turns=steps + 10,
        )
        t0 = time.perf_counter()
        result = agent.run_sync("read every part")
        elapsed = time.perf_counter() - t0
        produced = sum(
            agent.context.counter.count(m.get("content") or "") for m in result.messages if m["role"] == "tool"
        )
        produced += sum(
            agent.context.counter.count(m.get("reasoning_content") or "")
            for m in result.messages
            if m["role"] == "assistant"
        )
        changed = sum(
            1 for i in range(1, len(main)) if not messages_bytes(main[i]).startswith(messages_bytes(main[i - 1])[:-1])
        )
        return {
            "status": result.status,
            "requests": len(main),
            "summary_requests": len(fake.requests) - len(main),
            "changed": changed,
            "prunes": agent.context.prunes,
            "compactions": agent.context.compactions,
            "produced": produced,
            "peak_request_tokens": max(len(r.raw) // 4 for r in main),
            "cached_ratio": agent.usage["cached_tokens"] / max(1, agent.usage["prompt_tokens"]),
            "seconds": elapsed,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=7, help="steps measured per history size")
    parser.add_argument("--session-steps", type=int, default=200, help="steps of the growing agent session")
    args = parser.parse_args()
    server = QuickServer()
    print(f"counter for accounting: {default_counter().name}\n")
    print("1. per step: request building + sending + reading a tiny stream (median ms)")
    cols = f"{'kimicode':>9} {'server':>7} {'overhead':>9} | {'plain':>8} {'server':>7} {'overhead':>9}"
    print(f"{'history':>10} {'JSON MB':>8} | {cols} | ratio")
    overheads: dict[int, tuple[float, float]] = {}
    for size in SIZES:
        r = asyncio.run(measure_overhead(size, args.steps, server))
        ours, plain = r["kimicode"] - r["kimicode_server"], r["plain"] - r["plain_server"]
        overheads[size] = (ours, plain)
        print(
            f"{size:>10,} {r['bytes'] / 1e6:>8.1f} | {r['kimicode']:>9.2f} {r['kimicode_server']:>7.2f} {ours:>9.2f} | "
            f"{r['plain']:>8.2f} {r['plain_server']:>7.2f} {plain:>9.2f} | {ours / plain:.2f}x"
        )
    print("\n2. token accounting per step vs re-tokenizing the whole history (ms)")
    print(f"{'history':>10} | {'per step':>9} | {'full re-count':>13} | ratio")
    for size in SIZES:
        step_ms, full_ms = measure_accounting(size, args.steps * 3)
        print(f"{size:>10,} | {step_ms:>9.3f} | {full_ms:>13.1f} | {full_ms / step_ms:,.0f}x")
    peak, history_bytes = asyncio.run(measure_memory(server, 3))
    print("\n3. peak memory at 1M tokens (tracemalloc, everything: history, caches, request body)")
    print(f"history JSON {history_bytes / 1e6:.1f} MB, peak {peak / 1e6:.1f} MB = {peak / history_bytes:.2f}x")
    server.close()
    print(f"\n4. an agent session of {args.session_steps} steps growing past 1M tokens (kimi-k3 window, fake server)")
    s = run_session(args.session_steps)
    print(
        f"status {s['status']}; {s['produced']:,} tokens of tool output and reasoning produced; "
        f"largest request {s['peak_request_tokens']:,} tokens\n"
        f"{s['requests']} requests, {s['changed']} changed their prefix "
        f"({s['prunes']} prunes, {s['compactions']} compactions, {s['summary_requests']} summary requests); "
        f"cached-token ratio reported by the server {s['cached_ratio']:.1%}; {s['seconds']:.1f} s"
    )
    ours, plain = overheads[1_000_000]
    ok = ours <= 1.5 * plain and peak <= 4 * history_bytes
    print(
        f"\ntargets: overhead at 1M within 1.5x of the plain post: {ours / plain:.2f}x; "
        f"peak memory under 4x the history: {peak / history_bytes:.2f}x"
    )
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
