"""Clients for talking to kimicode.testing.FakeServer over the wire: the real openai SDK, urllib, and a
raw HTTP/1.1 socket that times each chunk (tests/testing/test_fake_server*.py)."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import openai

from kimicode.testing import FakeServer

MESSAGES: list[Any] = [{"role": "user", "content": "hi"}]


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
