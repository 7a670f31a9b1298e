"""Window discovery: what vLLM, llama.cpp and OpenRouter say, bounded, cached, and always beaten by a
flag or the config; `window_source` says where the window came from."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import FIXTURES, command_env, kimicode_command

from kimicode import Agent
from kimicode.llm.discovery import (
    discover_server,
    discover_window,
    known_window,
    resolve_window,
    window_from_models,
    window_from_props,
)
from kimicode.testing import FakeServer, Reply

LLAMACPP_MODELS = FIXTURES / "streams" / "llamacpp" / "models.json"
# llama-server's /v1/models (recorded, shared/reference/streams/llamacpp/models.json), served with -c 4096
# although the model was trained with 8192: meta.n_ctx_train must never be taken for the window.
LLAMACPP_BODY: dict[str, Any] = {
    "models": [{"name": "smollm2-135m", "model": "smollm2-135m"}],
    "object": "list",
    "data": [
        {
            "id": "smollm2-135m",
            "object": "model",
            "owned_by": "llamacpp",
            "meta": {"vocab_type": 2, "n_vocab": 49152, "n_ctx_train": 8192, "n_embd": 576},
        }
    ],
}
LLAMACPP_PROPS = {"default_generation_settings": {"n_ctx": 4096, "params": {}}, "total_slots": 1}
VLLM_BODY = {
    "object": "list",
    "data": [
        {
            "id": "Qwen/Qwen2.5-7B-Instruct",
            "object": "model",
            "owned_by": "vllm",
            "root": "Qwen/Qwen2.5-7B-Instruct",
            "max_model_len": 16384,
        }
    ],
}
OPENROUTER_BODY = {
    "data": [
        {"id": "moonshotai/kimi-k2", "context_length": 131072, "top_provider": {"context_length": 131072}},
        {"id": "meta-llama/llama-3-8b", "context_length": 8192},
    ]
}


def test_what_each_server_says_is_read() -> None:
    assert window_from_models(VLLM_BODY, "Qwen/Qwen2.5-7B-Instruct") == (16384, False)
    assert window_from_models(OPENROUTER_BODY, "meta-llama/llama-3-8b") == (8192, False)
    assert window_from_models(OPENROUTER_BODY, "not-listed") == (None, False)
    assert window_from_models(LLAMACPP_BODY, "smollm2-135m") == (None, True)  # n_ctx_train is not the window
    assert window_from_props(LLAMACPP_PROPS) == 4096
    assert window_from_props({"n_ctx": 2048}) == 2048


def test_the_recorded_llamacpp_models_body_is_read_as_llamacpp() -> None:
    window, llamacpp = window_from_models(json.loads(LLAMACPP_MODELS.read_text()), "smollm2-135m")
    assert llamacpp and window == 8192  # its meta.n_ctx (the serving size), /props is asked too


@pytest.mark.parametrize(
    "body",
    [
        None,
        [],
        {"data": None},
        {"data": [1, "x"]},
        {"data": [{"id": "m", "max_model_len": "big"}]},
        {"data": [{"id": "m", "max_model_len": -5}]},
        {"data": [{"id": "m", "context_length": True}]},
    ],
)
def test_odd_bodies_say_nothing(body: Any) -> None:
    assert window_from_models(body, "m")[0] is None
    assert window_from_props(body) is None


def test_precedence_and_known_ids() -> None:
    assert resolve_window(4096, 8192, "kimi-k3", 131072) == (4096, "flag")
    assert resolve_window(None, 8192, "kimi-k3", 131072) == (8192, "config")
    assert resolve_window(None, None, "moonshotai/kimi-k3", 131072) == (1_048_576, "known")
    assert resolve_window(None, None, "my-local-gguf", 131072) == (131072, "default")
    assert known_window("gpt-4o-mini") == 128_000


def test_discovery_asks_props_for_llamacpp_revalidates_and_caches_only_answers(tmp_path: Path) -> None:
    with FakeServer() as server:
        server.get_routes = {"/v1/models": LLAMACPP_BODY, "/props": LLAMACPP_PROPS}
        assert asyncio.run(discover_window(server.base_url, "sk-secret-key", "smollm2-135m", tmp_path)) == 4096
        server.other_requests.clear()
        # restarted with a smaller -c: the next session start sees it, with one GET of /props
        server.get_routes = {
            "/v1/models": LLAMACPP_BODY,
            "/props": {**LLAMACPP_PROPS, "default_generation_settings": {"n_ctx": 2048}},
        }
        assert asyncio.run(discover_window(server.base_url, "sk-secret-key", "smollm2-135m", tmp_path)) == 2048
        assert server.other_requests == ["GET /props"]
        url = server.base_url
    # the server is down: its last real answer stands in
    assert asyncio.run(discover_window(url, "sk-secret-key", "smollm2-135m", tmp_path, timeout=0.5)) == 2048
    cache = (tmp_path / "cache" / "windows.json").read_text()
    assert "sk-secret" not in cache and "2048" in cache


def test_discovery_is_bounded_when_the_server_hangs(tmp_path: Path) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(5)  # accepts and never answers
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        start = time.monotonic()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
        assert asyncio.run(discover_window(url, "k", "m", tmp_path, timeout=0.5)) is None
        assert time.monotonic() - start < 2
    finally:
        stop.set()
        thread.join()
        for conn in accepted:
            conn.close()
        listener.close()


def test_an_unreachable_endpoint_is_not_an_error(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert asyncio.run(discover_window(f"http://127.0.0.1:{port}/v1", "k", "m", tmp_path)) is None


def _agent(server: FakeServer, tmp_path: Path, **kwargs: Any) -> Agent:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    opts: dict[str, Any] = {
        "base_url": server.base_url,
        "api_key": "k",
        "model": "Qwen/Qwen2.5-7B-Instruct",
        "workspace": ws,
        "home": tmp_path / "home",
        "tools": [],
        "system_prompt": "test",
        "project_instructions": False,
    }
    opts.update(kwargs)
    return Agent(**opts)


def test_the_agent_uses_the_servers_window_unless_a_flag_or_config_says_otherwise(tmp_path: Path) -> None:
    with FakeServer() as server:
        server.get_routes = {"/v1/models": VLLM_BODY}
        server.add(Reply(content="a"), Reply(content="b"))
        agent = _agent(server, tmp_path)
        assert agent.window_source == "default"
        assert agent.run_sync("hi").status == "success"
        assert (agent.context_window, agent.window_source) == (16384, "server")
        assert server.requests[-1].body["max_completion_tokens"] <= 16384 // 4
        flagged = _agent(server, tmp_path, context_window=8192)
        assert flagged.run_sync("hi").status == "success"
        assert (flagged.context_window, flagged.window_source) == (8192, "flag")


@pytest.mark.slow
def test_cli_max_tokens_and_window_source_in_the_json_result(tmp_path: Path) -> None:
    with FakeServer() as server:
        env = command_env(tmp_path / "home", server)
        server.add(Reply(content="done"))
        run = subprocess.run(
            [
                *kimicode_command(),
                "-p",
                "hi",
                "--model",
                "local-gguf",
                "--context-window",
                "16384",
                "--max-tokens",
                "300",
                "--output-format",
                "json",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
        )
        assert run.returncode == 0, run.stderr
        result = json.loads(run.stdout)
        assert result["context"]["window"] == 16384 and result["context"]["window_source"] == "flag"
        assert server.requests[-1].body["max_completion_tokens"] == 300
        bad = subprocess.run(
            [
                *kimicode_command(),
                "-p",
                "hi",
                "--model",
                "local-gguf",
                "--context-window",
                "16384",
                "--max-tokens",
                "16000",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
        )
        assert bad.returncode == 2 and "--max-tokens" in bad.stderr and "Traceback" not in bad.stderr


def test_a_silent_or_refusing_server_is_not_cached(tmp_path: Path) -> None:
    with FakeServer() as server:  # /v1/models answers 404 (a 401, or a server still loading, alike)
        assert asyncio.run(discover_window(server.base_url, "k", "m", tmp_path)) is None
        assert not (tmp_path / "cache" / "windows.json").exists()
        server.get_routes = {"/v1/models": {"data": [{"id": "m", "max_model_len": 2048}]}}
        assert asyncio.run(discover_window(server.base_url, "k", "m", tmp_path)) == 2048  # asked again at once
        # another model is asked for; a server listing one model serves it under any name (llama.cpp)
        assert asyncio.run(discover_window(server.base_url, "k", "other", tmp_path)) == 2048


def test_litellm_window_comes_from_model_info(tmp_path: Path) -> None:
    info = {
        "data": [
            {
                "model_name": "smollm2-135m",
                "litellm_params": {"model": "openai/smollm2-135m"},
                "model_info": {"max_input_tokens": 4096, "max_tokens": 4096},
            }
        ]
    }
    with FakeServer(dialect="litellm") as server:  # its /v1/models lists the model without a window
        server.get_routes = {"/v1/model/info": info}
        found = asyncio.run(discover_server(server.base_url, "k", "smollm2-135m", tmp_path))
        assert found is not None and (found.window, found.source) == (4096, "model_info")
        assert "GET /v1/models" in server.other_requests


def test_a_corrupt_cache_is_ignored(tmp_path: Path) -> None:
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "windows.json").write_text("{not json")
    with FakeServer() as server:
        server.get_routes = {"/v1/models": VLLM_BODY}
        assert asyncio.run(discover_window(server.base_url, "k", "Qwen/Qwen2.5-7B-Instruct", tmp_path)) == 16384


def test_slash_context_says_where_the_window_came_from(
    server: FakeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    from rich.console import Console

    from kimicode.ui import commands
    from kimicode.ui.app import Session, SessionOptions

    monkeypatch.setenv("KIMI_API_KEY", "sk-test")
    monkeypatch.setenv("KIMI_BASE_URL", server.base_url)
    ws = tmp_path / "ws"
    ws.mkdir()
    console = Console(file=io.StringIO(), width=160, color_system=None, force_terminal=False)
    session = Session(
        SessionOptions(workspace=ws, context_window=50_000, max_completion_tokens=3000), console, plain=True
    )
    asyncio.run(commands.dispatch(session, "/context"))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "Window: 50.0k tokens" in text and "from --context-window" in text and "3.0k kept for the answer" in text


def test_a_server_window_too_small_for_anything_is_a_clear_error(tmp_path: Path) -> None:
    with FakeServer() as server:
        server.get_routes = {"/v1/models": {"data": [{"id": "Qwen/Qwen2.5-7B-Instruct", "max_model_len": 1024}]}}
        agent = _agent(server, tmp_path)
        result = agent.run_sync("hi")
        assert result.status == "error" and result.error_kind == "context_length"
        assert "1,024-token window" in (result.error or "") and "internal" not in (result.error or "")
        assert not server.requests  # nothing that cannot fit is sent
