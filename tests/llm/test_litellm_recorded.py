"""A real LiteLLM 1.108.7 proxy's answers, recorded in front of a real llama-server (see
tests/fixtures/streams/litellm/README.md), replayed: window discovery, its two context errors and its 429."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from helpers import FIXTURES

from kimicode import Agent, AgentOptions
from kimicode.llm.client import ChatClient, ClientConfig, StreamRetry
from kimicode.llm.discovery import discover_server, info_from_model_info
from kimicode.llm.errors import LLMError
from kimicode.testing import FakeServer, RawReply, Reply

HERE = FIXTURES / "streams" / "litellm"


def load(name: str) -> Any:
    return json.loads((HERE / name).read_text())


def test_the_window_when_the_proxy_config_says_it(tmp_path: Path) -> None:
    with FakeServer(dialect="litellm") as fake:
        fake.get_routes = {"/v1/models": load("models.json"), "/v1/model/info": load("model-info.json")}
        info = asyncio.run(discover_server(fake.base_url, "k", "smollm2-135m", tmp_path))
    assert info is not None and info.window == 2048
    found = info_from_model_info(load("model-info.json"), "smollm2-135m")
    assert found is not None and (found.window, found.source) == (2048, "model_info")


def test_no_window_when_the_proxy_config_does_not_say_it(tmp_path: Path) -> None:
    with FakeServer(dialect="litellm") as fake:
        fake.get_routes = {"/v1/models": load("models-unset.json"), "/v1/model/info": load("model-info-unset.json")}
        assert asyncio.run(discover_server(fake.base_url, "k", "smollm2-135m", tmp_path)) is None
        assert fake.other_requests == ["GET /v1/models", "GET /v1/model/info"]


def _error(name: str) -> LLMError:
    with FakeServer() as fake:
        fake.add(RawReply.from_recording(HERE / name))
        client = ChatClient(ClientConfig(base_url=fake.base_url, api_key="k", model="smollm2-135m"))

        async def run() -> None:
            try:
                async for _ in client.stream([{"role": "user", "content": "hi"}]):
                    pass
            finally:
                await client.aclose()

        try:
            asyncio.run(run())
        except LLMError as err:
            return err
    raise AssertionError("no error")


def test_both_context_errors_give_the_window_and_the_count() -> None:
    own = _error("precheck-context-error.response.txt")  # LiteLLM's own pre-call check
    assert own.kind == "context_length" and own.overflow is not None
    assert (own.overflow.window, own.overflow.prompt_tokens) == (2048, 3019)
    upstream = _error("upstream-context-error.response.txt")  # llama.cpp's error, wrapped
    assert upstream.kind == "context_length" and upstream.overflow is not None
    assert (upstream.overflow.window, upstream.overflow.prompt_tokens) == (2048, 3031)


def test_the_window_is_learnt_from_the_proxys_error(tmp_path: Path) -> None:
    """The recorded refusal says the request had 3,031 tokens in a 2,048 window: kimicode learns both (and, as the
    prompt alone is that long here, ends the turn saying it does not fit, without a retry that cannot fit)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    with FakeServer(dialect="litellm") as fake:
        fake.add(RawReply.from_recording(HERE / "upstream-context-error.response.txt"), Reply(content="ok"))
        agent = Agent(
            AgentOptions.from_workspace(ws, home=tmp_path / "home"),
            base_url=fake.base_url,
            api_key="k",
            model="smollm2-135m",
            retry_base_delay=0.01,
            tools=[],
            system_prompt="s",
        )
        result = agent.run_sync("hi")
    assert agent.effective_window == 2048 and agent.window_source == "learnt"
    assert result.status == "error" and result.error is not None and result.error.kind == "context_length"
    assert len(fake.requests) == 1


def test_its_429_without_retry_after_is_retried_with_backoff() -> None:
    with FakeServer() as fake:
        fake.add(RawReply.from_recording(HERE / "rate-limit.response.txt"), Reply(content="ok"))
        client = ChatClient(ClientConfig(base_url=fake.base_url, api_key="k", model="m", retry_base_delay=0.01))

        async def run() -> list[Any]:
            out = [ev async for ev in client.stream([{"role": "user", "content": "hi"}])]
            await client.aclose()
            return out

        events = asyncio.run(run())
    assert isinstance(events[0], StreamRetry) and events[0].delay < 1 and "No deployments" in events[0].error
