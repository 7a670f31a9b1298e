"""FakeServer's errors and faults, what it records, and its lifecycle under concurrency, seen through the
real openai SDK, urllib and raw sockets (streams and usage: test_fake_server.py)."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import openai
import pytest
from wire_helpers import MESSAGES, async_client, post_json, raw_stream_events, sync_client

from kimicode.testing import ErrorReply, FakeServer, RecordedRequest, Reply, ToolCall

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
