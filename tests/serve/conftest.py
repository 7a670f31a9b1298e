"""Fixtures for the serve tests: the server on a thread of the test process (real HTTP on 127.0.0.1, cheap),
pointed at the fake model server, and a model script that follows the prompt's instructions."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kimicode.prompts import user_words
from kimicode.serve.client import ServeClient
from kimicode.serve.manager import ServeConfig
from kimicode.serve.server import ThreadedServer
from kimicode.testing import FakeServer, RecordedRequest, Reply, ToolCall


def last_user_text(messages: list[dict[str, Any]]) -> str:
    """The last prompt (kimicode's own notes to the model, such as `[permission mode: ...]`, opening it or on
    their own, skipped)."""
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            text = user_words(content if isinstance(content, str) else json.dumps(content))
            if not text.startswith("["):
                return text
    return ""


def follow_prompt(request: RecordedRequest) -> Reply:
    """A model that does what the prompt says: `write PATH TEXT` (write_file), `run CMD` (bash), then
    answers `done: RESULT`; any other prompt is answered `echo: PROMPT` (after reasoning about it). Works for
    any number of sessions at once: each request is answered from its own history."""
    messages = request.body["messages"]
    last = messages[-1]
    if last["role"] == "tool" and messages[-2].get("role") == "assistant":
        return Reply(content=f"done: {str(last.get('content'))[:80]}")
    text = last_user_text(messages)
    verb, _, rest = text.partition(" ")
    if verb == "write":
        path, _, content = rest.partition(" ")
        return Reply(tool_calls=[ToolCall("write_file", {"path": path, "content": content})])
    if verb == "run":
        return Reply(tool_calls=[ToolCall("bash", {"command": rest})])
    return Reply(content=f"echo: {text}", reasoning=f"thinking about {text}")


@pytest.fixture
def model(server: FakeServer) -> FakeServer:
    """The fake model server answering with `follow_prompt` (enough for 400 requests)."""
    server.add(*([follow_prompt] * 400))
    return server


@pytest.fixture
def config(model: FakeServer, tmp_path: Path) -> ServeConfig:
    return ServeConfig(
        settings={
            "base_url": model.base_url,
            "api_key": "sk-test-secret-key",
            "model": "kimi-k3",
            "retry_base_delay": 0.01,
            "sandbox": "off",
            "prices": {"input": 3.0, "cached_input": 0.3, "output": 15.0},
        },
        home=tmp_path / "home",
    )


@pytest.fixture
def live(config: ServeConfig) -> Iterator[ThreadedServer]:
    with ThreadedServer(config) as running:
        yield running


@pytest.fixture
def client(live: ThreadedServer) -> Iterator[ServeClient]:
    with ServeClient(live.url, live.token, timeout=20) as c:
        yield c


@pytest.fixture
def make_workspace(tmp_path: Path) -> Callable[[str], Path]:
    def make(name: str) -> Path:
        ws = tmp_path / name
        ws.mkdir()
        return ws

    return make
