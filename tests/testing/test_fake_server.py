"""Tests for kimicode.testing.FakeServer, talking to it with the real openai SDK, urllib and raw sockets."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from kimicode.testing import ErrorReply, FakeServer, RecordedRequest, Reply, ToolCall

MESSAGES: list[Any] = [{"role": "user", "content": "hi"}]


@pytest.fixture
def server() -> Iterator[FakeServer]:
    srv = FakeServer().start()
    try:
        yield srv
    finally:
        srv.stop()


def async_client(srv: FakeServer, **kwargs: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=srv.base_url, api_key="test-key", max_retries=0, **kwargs)


def sync_client(srv: FakeServer, **kwargs: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.base_url, api_key="test-key", max_retries=0, **kwargs)


async def collect_stream(srv: FakeServer, **kwargs: Any) -> list[Any]:
    """Stream one completion through the async SDK and return every chunk object."""
    async with async_client(srv) as client:
        stream = await client.chat.completions.create(model="kimi-test", messages=MESSAGES, stream=True, **kwargs)
        return [chunk async for chunk in stream]


def post_json(srv: FakeServer, payload: Any, path: str = "/v1/chat/completions") -> tuple[int, Any]:
    """POST with urllib; return (status, decoded JSON body) for success and HTTP errors alike."""
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{srv.port}{path}", data=data, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


class RawStream:
    """A hand-rolled HTTP/1.1 client that decodes chunked framing and timestamps each chunk."""

    def __init__(self, srv: FakeServer, payload: dict[str, Any]) -> None:
        body = json.dumps(payload).encode()
        self.sock = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        self.sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        self.file = self.sock.makefile("rb")
        self.status_line = self.file.readline().decode().strip()
        self.headers: dict[str, str] = {}
        while (line := self.file.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            self.headers[name.strip().lower()] = value.strip()

    def chunks(self) -> Iterator[bytes]:
        """Yield each HTTP chunk payload; set `self.complete` if the zero-size terminator came."""
        self.complete = False
        while True:
            size_line = self.file.readline()
            if not size_line:
                return
            size = int(size_line.strip(), 16)
            if size == 0:
                self.file.readline()
                self.complete = True
                return
            data = self.file.read(size)
            self.file.readline()
            yield data

    def events(self) -> list[str]:
        """All SSE data payloads until the body ends (cleanly or not)."""
        out: list[str] = []
        for chunk in self.chunks():
            for event in chunk.decode().split("\n\n"):
                if event:
                    assert event.startswith("data: ")
                    out.append(event[len("data: ") :])
        return out

    def close(self) -> None:
        self.file.close()
        self.sock.close()


def raw_stream_events(srv: FakeServer, payload: dict[str, Any]) -> tuple[RawStream, list[str]]:
    raw = RawStream(srv, payload)
    try:
        return raw, raw.events()
    finally:
        raw.close()


# ----- streaming shape --------------------------------------------------------------------------------


def test_stream_reassembles_reasoning_content_and_tool_calls(server: FakeServer) -> None:
    server.add(
        Reply(
            reasoning="I should read the file first.",
            content="Reading it now.",
            tool_calls=[ToolCall("read_file", {"path": "src/main.py"}), ToolCall("list_dir")],
            chunk_size=5,
        )
    )
    chunks = asyncio.run(collect_stream(server, stream_options={"include_usage": True}))

    first = chunks[0].choices[0].delta
    assert first.role == "assistant"
    assert first.content == ""
    kinds: list[str] = []
    reasoning = content = ""
    calls: dict[int, dict[str, str]] = {}
    finish: list[str] = []
    for chunk in chunks[1:]:
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        delta = choice.delta
        extra = delta.model_extra or {}
        if extra.get("reasoning_content"):
            kinds.append("reasoning")
            reasoning += extra["reasoning_content"]
            assert len(extra["reasoning_content"]) <= 5
        if delta.content:
            kinds.append("content")
            content += delta.content
        for frag in delta.tool_calls or []:
            kinds.append("tool")
            entry = calls.setdefault(frag.index, {"id": "", "name": "", "arguments": ""})
            if frag.id:
                entry["id"] = frag.id
            if frag.function and frag.function.name:
                entry["name"] = frag.function.name
            if frag.function and frag.function.arguments:
                entry["arguments"] += frag.function.arguments
        if choice.finish_reason:
            finish.append(choice.finish_reason)

    assert reasoning == "I should read the file first."
    assert content == "Reading it now."
    assert kinds == sorted(kinds, key=["reasoning", "content", "tool"].index)
    assert calls == {
        0: {"id": "functions.read_file:0", "name": "read_file", "arguments": '{"path": "src/main.py"}'},
        1: {"id": "functions.list_dir:1", "name": "list_dir", "arguments": ""},
    }
    assert finish == ["tool_calls"]
    usage_chunk = chunks[-1]
    assert usage_chunk.choices == []
    raw = server.requests[0].raw
    assert usage_chunk.usage is not None
    assert usage_chunk.usage.prompt_tokens == len(raw) // 4
    assert usage_chunk.usage.total_tokens == usage_chunk.usage.prompt_tokens + usage_chunk.usage.completion_tokens
    assert all(chunk.model == "kimi-test" for chunk in chunks)
    assert len({chunk.id for chunk in chunks}) == 1


@pytest.mark.parametrize(("field", "other"), [("reasoning_content", "reasoning"), ("reasoning", "reasoning_content")])
def test_reasoning_field_name_is_configurable(server: FakeServer, field: str, other: str) -> None:
    server.add(Reply(reasoning="think think", content="ok", reasoning_field=field, model="served-model"))
    chunks = asyncio.run(collect_stream(server))
    extras = [chunk.choices[0].delta.model_extra or {} for chunk in chunks if chunk.choices]
    assert "".join(e.get(field) or "" for e in extras) == "think think"
    assert all(other not in e for e in extras)
    assert {chunk.model for chunk in chunks} == {"served-model"}


def test_raw_sse_framing_and_empty_argument_tool_call(server: FakeServer) -> None:
    server.add(Reply(tool_calls=[ToolCall("now", "")], finish_reason="length"))
    raw, events = raw_stream_events(server, {"model": "m", "messages": MESSAGES, "stream": True})
    assert raw.status_line == "HTTP/1.1 200 OK"
    assert raw.headers["content-type"] == "text/event-stream"
    assert raw.headers["transfer-encoding"] == "chunked"
    assert raw.complete
    assert events[-1] == "[DONE]"
    parsed = [json.loads(e) for e in events[:-1]]
    assert [p["object"] for p in parsed] == ["chat.completion.chunk"] * 3
    assert parsed[0]["id"].startswith("chatcmpl-")
    assert parsed[1]["choices"][0]["delta"] == {
        "tool_calls": [
            {"index": 0, "id": "functions.now:0", "type": "function", "function": {"name": "now", "arguments": ""}}
        ]
    }
    assert parsed[2]["choices"][0] == {"index": 0, "delta": {}, "finish_reason": "length"}
    # no include_usage requested: no usage key at all
    assert all("usage" not in p for p in parsed)


def test_chunks_are_flushed_as_they_are_produced(server: FakeServer) -> None:
    delay = 0.4
    server.add(Reply(content="ab", chunk_size=1, chunk_delay=delay))

    async def timed() -> list[float]:
        start = time.monotonic()
        stamps: list[float] = []
        async with async_client(server) as client:
            stream = await client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
            async for _ in stream:
                stamps.append(time.monotonic() - start)
        return stamps

    stamps = asyncio.run(timed())
    # role chunk, "a", "b", finish: three delays between four chunks
    assert len(stamps) == 4
    assert stamps[0] < delay * 0.75, "first chunk must arrive before the next delay finishes"
    assert stamps[1] < 2 * delay * 0.9 + 0.2
    assert stamps[-1] >= 3 * delay * 0.9


# ----- tool call ids ----------------------------------------------------------------------------------


def test_kimi_ids_count_across_replies_openai_style_and_explicit_ids(server: FakeServer) -> None:
    server.add(
        Reply(tool_calls=[ToolCall("a"), ToolCall("b", {"x": 1})]),
        Reply(tool_calls=[ToolCall("c")], id_style="openai"),
        Reply(tool_calls=[ToolCall("d"), ToolCall("e", id="my-own-id")]),
    )
    ids: list[str] = []
    with sync_client(server) as client:
        for _ in range(3):
            resp = client.chat.completions.create(model="m", messages=MESSAGES)
            assert resp.choices[0].finish_reason == "tool_calls"
            ids += [call.id for call in resp.choices[0].message.tool_calls or []]
    assert ids[:2] == ["functions.a:0", "functions.b:1"]
    assert re.fullmatch(r"call_[A-Za-z0-9]{24}", ids[2])
    assert ids[3:] == ["functions.d:3", "my-own-id"]


# ----- errors and faults ------------------------------------------------------------------------------


def test_error_reply_429_with_retry_after_is_rate_limit_error(server: FakeServer) -> None:
    server.add(ErrorReply(429, "slow down", "rate_limit_reached_error", headers={"Retry-After": "1"}))

    async def call() -> None:
        async with async_client(server) as client:
            await client.chat.completions.create(model="m", messages=MESSAGES, stream=True)

    with pytest.raises(openai.RateLimitError) as info:
        asyncio.run(call())
    assert info.value.response.headers["retry-after"] == "1"
    assert info.value.type == "rate_limit_reached_error"
    assert info.value.body == {"message": "slow down", "type": "rate_limit_reached_error", "code": None}
    assert len(server.requests) == 1


def test_error_reply_raw_body_override(server: FakeServer) -> None:
    server.add(ErrorReply(503, body='{"detail": "upstream down"}'))
    assert post_json(server, {"model": "m"}) == (503, {"detail": "upstream down"})


def test_cut_after_gives_connection_error(server: FakeServer) -> None:
    server.add(Reply(content="abcdefghijklmnop", chunk_size=2, cut_after=3))
    received: list[Any] = []

    async def consume() -> None:
        async with async_client(server) as client:
            stream = await client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
            async for chunk in stream:
                received.append(chunk)

    with pytest.raises(openai.APIConnectionError):
        asyncio.run(consume())
    assert len(received) == 3


def test_cut_after_leaves_chunked_body_incomplete(server: FakeServer) -> None:
    server.add(Reply(content="abc", cut_after=2), Reply(content="x", cut_after=99))
    raw, events = raw_stream_events(server, {"model": "m", "stream": True})
    assert len(events) == 2
    assert not raw.complete
    # a counter beyond the stream length fires just before [DONE]
    raw, events = raw_stream_events(server, {"model": "m", "stream": True})
    assert not raw.complete
    assert "[DONE]" not in events
    assert json.loads(events[-1])["choices"][0]["finish_reason"] == "stop"


def test_malformed_line_raises_decode_error(server: FakeServer) -> None:
    server.add(Reply(content="hello there", malformed_after=2))
    received: list[Any] = []

    async def consume() -> None:
        async with async_client(server) as client:
            stream = await client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
            async for chunk in stream:
                received.append(chunk)

    with pytest.raises(json.JSONDecodeError):
        asyncio.run(consume())
    assert len(received) == 2
    # the stream itself continues after the bad line
    server.add(Reply(content="hello there", malformed_after=1))
    raw, events = raw_stream_events(server, {"model": "m", "stream": True})
    assert events[1] == "{not json"
    assert events[-1] == "[DONE]"
    assert raw.complete


def test_error_after_raises_api_error(server: FakeServer) -> None:
    server.add(Reply(content="partial answer", error_after=2, error_message="overloaded mid-stream"))

    async def consume() -> None:
        async with async_client(server) as client:
            stream = await client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
            async for _ in stream:
                pass

    with pytest.raises(openai.APIError, match="overloaded mid-stream"):
        asyncio.run(consume())


def test_omit_done_ends_stream_cleanly_without_done(server: FakeServer) -> None:
    server.add(Reply(content="hi", omit_done=True))
    raw, events = raw_stream_events(server, {"model": "m", "stream": True})
    assert raw.complete
    assert "[DONE]" not in events
    assert json.loads(events[-1])["choices"][0]["finish_reason"] == "stop"


def test_script_exhausted_gives_500(server: FakeServer) -> None:
    server.add(Reply(content="only one"))
    assert server.remaining == 1
    with sync_client(server) as client:
        assert client.chat.completions.create(model="m", messages=MESSAGES).choices[0].message.content == "only one"
        assert server.remaining == 0
        with pytest.raises(openai.InternalServerError, match="fake server: script exhausted"):
            client.chat.completions.create(model="m", messages=MESSAGES)
    assert len(server.requests) == 2


def test_unknown_paths_get_404(server: FakeServer) -> None:
    status, body = post_json(server, {"model": "m"}, path="/v1/completions")
    assert status == 404
    assert body["error"]["type"] == "not_found_error"
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(f"{server.base_url}/chat/completions", timeout=5)
    assert info.value.code == 404
    assert json.loads(info.value.read())["error"]["message"].startswith("fake server: no route")
    assert server.requests == []


def test_first_delay_times_out_client_and_stop_stays_quick() -> None:
    srv = FakeServer([Reply(content="late", first_delay=30)]).start()
    try:
        with (
            sync_client(srv, timeout=0.3) as client,
            pytest.raises(openai.APITimeoutError),
        ):
            client.chat.completions.create(model="m", messages=MESSAGES)
    finally:
        start = time.monotonic()
        srv.stop()
        assert time.monotonic() - start < 1.0


# ----- recording --------------------------------------------------------------------------------------


def test_requests_are_recorded_exactly_and_before_answering(server: FakeServer) -> None:
    seen: list[int] = []

    def answer(req: RecordedRequest) -> Reply:
        seen.append(len(server.requests))
        return Reply(content=f"you said {req.body['messages'][0]['content']}")

    server.add(answer, Reply(content="second"))
    raw_body = '{"model":  "m",\n "messages": [{"role": "user", "content": "héllo ✓"}]}'.encode()
    req = urllib.request.Request(
        f"{server.base_url}/chat/completions?trace=1",
        data=raw_body,
        headers={"Content-Type": "application/json", "X-Custom-Header": "Value"},
    )
    with urllib.request.urlopen(req, timeout=5) as resp:
        reply = json.loads(resp.read())
    assert reply["choices"][0]["message"]["content"] == "you said héllo ✓"
    assert seen == [1]
    rec = server.requests[0]
    assert rec.method == "POST"
    assert rec.path == "/v1/chat/completions?trace=1"
    assert rec.raw == raw_body
    assert rec.body == json.loads(raw_body)
    assert rec.headers["x-custom-header"] == "Value"
    assert rec.headers["content-type"] == "application/json"

    status, _ = post_json(server, b"{broken")
    assert status == 200
    assert server.requests[1].raw == b"{broken"
    assert server.requests[1].body is None


def test_wait_for_requests_sees_request_while_reply_sleeps() -> None:
    with FakeServer([Reply(content="x", first_delay=0.5)]) as srv:
        result: list[Any] = []
        thread = threading.Thread(target=lambda: result.append(post_json(srv, {"model": "m"})))
        thread.start()
        srv.wait_for_requests(1, timeout=2)
        assert result == []  # recorded while the reply is still sleeping
        thread.join(5)
        assert result[0][0] == 200
        with pytest.raises(TimeoutError, match=r"waited 0\.05s for 2 request"):
            srv.wait_for_requests(2, timeout=0.05)


def test_callable_errors_are_reported_as_500(server: FakeServer) -> None:
    def broken(req: RecordedRequest) -> Reply:
        raise KeyError("boom")

    server.add(broken, lambda req: "not a reply")  # type: ignore[arg-type, return-value]
    status, body = post_json(server, {"model": "m"})
    assert status == 500
    assert body["error"]["message"] == "fake server: script callable raised KeyError: 'boom'"
    status, body = post_json(server, {"model": "m"})
    assert status == 500
    assert "returned str, expected Reply or ErrorReply" in body["error"]["message"]


# ----- usage ------------------------------------------------------------------------------------------

USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15, "cached_tokens": 3}


@pytest.mark.parametrize(
    ("mode", "include_usage", "in_choice", "in_chunk"),
    [
        ("both", True, True, True),
        ("chunk", True, False, True),
        ("chunk", False, False, False),
        ("choice", True, True, False),
        ("choice", False, True, False),
        ("none", True, False, False),
    ],
)
def test_usage_modes(server: FakeServer, mode: Any, include_usage: bool, in_choice: bool, in_chunk: bool) -> None:
    server.add(Reply(content="hi", usage=USAGE, usage_mode=mode))
    payload: dict[str, Any] = {"model": "m", "stream": True}
    if include_usage:
        payload["stream_options"] = {"include_usage": True}
    _, events = raw_stream_events(server, payload)
    parsed = [json.loads(e) for e in events[:-1]]
    finish = [p for p in parsed if p["choices"] and p["choices"][0]["finish_reason"]]
    assert len(finish) == 1
    assert (finish[0]["choices"][0].get("usage") == USAGE) is in_choice
    usage_chunks = [p for p in parsed if p["choices"] == []]
    assert [c["usage"] for c in usage_chunks] == ([USAGE] if in_chunk else [])
    if in_chunk:
        assert parsed[-1] is usage_chunks[0]
    if include_usage:
        assert all(p["usage"] is None for p in parsed if p["choices"])


def test_sdk_reads_usage_from_both_places(server: FakeServer) -> None:
    server.add(Reply(content="hi", usage=USAGE, usage_mode="both"))
    chunks = asyncio.run(collect_stream(server, stream_options={"include_usage": True}))
    finish = next(c for c in chunks if c.choices and c.choices[0].finish_reason)
    assert (finish.choices[0].model_extra or {})["usage"] == USAGE
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.prompt_tokens == 10
    assert (chunks[-1].usage.model_extra or {})["cached_tokens"] == 3


# ----- non-streaming ----------------------------------------------------------------------------------


def test_non_streaming_completion(server: FakeServer) -> None:
    server.add(
        Reply(
            content="Let me look.",
            reasoning="need the file",
            reasoning_field="reasoning",
            tool_calls=[ToolCall("read_file", '{"path": "a.py"')],
            usage=USAGE,
        ),
        Reply(content="done"),
    )
    with sync_client(server) as client:
        resp = client.chat.completions.create(model="kimi-x", messages=MESSAGES)
        assert resp.object == "chat.completion"
        assert resp.model == "kimi-x"
        msg = resp.choices[0].message
        assert msg.role == "assistant"
        assert msg.content == "Let me look."
        assert (msg.model_extra or {})["reasoning"] == "need the file"
        assert msg.tool_calls is not None
        call = msg.tool_calls[0]
        assert call.type == "function"
        assert (call.id, call.function.name, call.function.arguments) == (
            "functions.read_file:0",
            "read_file",
            '{"path": "a.py"',
        )
        assert resp.choices[0].finish_reason == "tool_calls"
        assert resp.usage is not None
        assert resp.usage.total_tokens == 15

        resp = client.chat.completions.create(model="kimi-x", messages=MESSAGES)
        assert resp.choices[0].finish_reason == "stop"
        assert resp.choices[0].message.tool_calls is None
        assert resp.usage is not None
        assert resp.usage.prompt_tokens == len(server.requests[1].raw) // 4


# ----- lifecycle and concurrency ----------------------------------------------------------------------


def test_stop_is_quick_while_reply_sleeps_and_connections_idle() -> None:
    srv = FakeServer([Reply(content="a"), Reply(content="never", first_delay=30), Reply(content="c", chunk_delay=30)])
    srv.start()
    # an idle keep-alive connection left open by a client
    idle = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
    idle.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
    idle_file = idle.makefile("rb")
    assert idle_file.readline().startswith(b"HTTP/1.1 200")
    length = 0
    while (line := idle_file.readline()) != b"\r\n":
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    assert json.loads(idle_file.read(length))["choices"][0]["message"]["content"] == "a"
    errors: list[BaseException] = []

    def call(stream: bool) -> None:
        try:
            post_json(srv, {"model": "m", "stream": stream})
        except BaseException as exc:  # the connection is severed by stop()
            errors.append(exc)

    sleepers = [threading.Thread(target=call, args=(False,)), threading.Thread(target=call, args=(True,))]
    for n, thread in enumerate(sleepers, start=2):
        thread.start()
        srv.wait_for_requests(n)
    time.sleep(0.1)
    start = time.monotonic()
    srv.stop()
    assert time.monotonic() - start < 1.0
    for thread in sleepers:
        thread.join(2)
        assert not thread.is_alive()
    assert len(errors) == 2
    assert idle_file.read(1) == b""  # the server closed the idle keep-alive connection too
    idle_file.close()
    idle.close()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", srv.port), timeout=1).recv(1)


def test_add_is_thread_safe_while_serving(server: FakeServer) -> None:
    adders, per_adder, clients = 4, 25, 4
    served: list[str] = []
    served_lock = threading.Lock()
    target = adders * per_adder

    def add_items(k: int) -> None:
        for i in range(per_adder):
            server.add(Reply(content=f"{k}-{i}"))

    def request_loop() -> None:
        while True:
            with served_lock:
                if len(served) >= target:
                    return
            status, body = post_json(server, {"model": "m"})
            if status == 500:
                assert "script exhausted" in body["error"]["message"]
                time.sleep(0.002)
                continue
            with served_lock:
                served.append(body["choices"][0]["message"]["content"])

    threads = [threading.Thread(target=request_loop) for _ in range(clients)]
    threads += [threading.Thread(target=add_items, args=(k,)) for k in range(adders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(served) == sorted(f"{k}-{i}" for k in range(adders) for i in range(per_adder))
    assert server.remaining == 0
    assert len(server.requests) >= target


def test_lifecycle_and_input_errors() -> None:
    srv = FakeServer()
    with pytest.raises(RuntimeError, match="not started"):
        _ = srv.base_url
    with srv:
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/v1", srv.base_url)
        assert srv.port > 0
        with pytest.raises(RuntimeError, match="already started"):
            srv.start()
    srv.stop()  # idempotent
    with pytest.raises(RuntimeError, match="cannot be restarted"):
        srv.start()
    with pytest.raises(TypeError, match="must be Reply, ErrorReply or a callable"):
        FakeServer(["hello"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="must be Reply, ErrorReply or a callable"):
        FakeServer().add(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="chunk_size"):
        Reply(chunk_size=0)
    with pytest.raises(ValueError, match="usage_mode"):
        Reply(usage_mode="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cut_after"):
        Reply(cut_after=-1)
    with pytest.raises(TypeError, match="arguments"):
        ToolCall("x", arguments=[1, 2])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="status"):
        ErrorReply(42)
