"""Window-discovery endpoints of each dialect: ``GET /v1/models`` (and llama.cpp's ``/props``, Ollama's
``/api/show``) answering with the context window where the real server says it.

Sources: vLLM ``ModelCard.max_model_len`` (entrypoints/openai/protocol.py); SGLang ``ModelCard``
(``max_model_len``); llama.cpp, the recorded ``models.json`` (``meta.n_ctx``) and ``/props``
(``default_generation_settings.n_ctx``); OpenRouter ``context_length`` and ``top_provider``
(openrouter.ai/docs/api-reference/list-available-models); Ollama ``/api/show`` ``model_info``
``<arch>.context_length`` (ollama docs/api.md).  OpenAI, Moonshot, DeepSeek and LiteLLM list models
without a window.
"""

from __future__ import annotations

import json
import time
from typing import Any

from kimicode.testing.dialects import Dialect

__all__ = ["discovery_body"]


def _card(model: str, owner: str, **extra: Any) -> dict[str, Any]:
    return {"id": model, "object": "model", "created": int(time.time()), "owned_by": owner, **extra}


def _models(dialect: Dialect, model: str, window: int) -> dict[str, Any] | None:
    name = dialect.discovery
    if name == "vllm":
        return {"object": "list", "data": [_card(model, "vllm", root=model, parent=None, max_model_len=window)]}
    if name == "sglang":
        return {"object": "list", "data": [_card(model, "sglang", root=model, max_model_len=window)]}
    if name == "llamacpp":
        meta = {"vocab_type": 2, "n_vocab": 49152, "n_ctx": window, "n_ctx_train": window}
        entry = {"name": model, "model": model, "type": "model", "capabilities": ["completion"]}
        return {"models": [entry], "object": "list", "data": [_card(model, "llamacpp", aliases=[model], meta=meta)]}
    if name == "openrouter":
        provider = {"context_length": window, "max_completion_tokens": None, "is_moderated": False}
        return {"data": [{"id": model, "name": model, "context_length": window, "top_provider": provider}]}
    owners = {
        "openai": "system",
        "moonshot": "moonshot",
        "deepseek": "deepseek",
        "ollama": "library",
        "litellm": "openai",
    }
    if name in owners:
        return {"object": "list", "data": [_card(model, owners[name])]}
    return None


def discovery_body(
    dialect: Dialect,
    command: str,
    route: str,
    model: str,
    window: int | None,
    slots: int = 1,
    tools_rendered: bool = True,
    build: str = "b0-unknown",
) -> bytes | None:
    """The JSON body for a discovery request, or None when this dialect has no such route.

    `window` is the server's whole context: llama.cpp serves each of its `slots` a share of it and says so."""
    size = window if window is not None else dialect.context_window
    if dialect.discovery == "llamacpp":
        size //= max(1, slots)
    found: dict[str, Any] | None = None
    if command == "GET" and route == "/v1/models":
        found = _models(dialect, model, size)
    elif dialect.discovery == "llamacpp" and command == "GET" and route == "/props":
        found = {
            "default_generation_settings": {"n_ctx": size, "params": {"n_predict": -1}},
            "total_slots": slots,
            "model_alias": model,
            "model_path": f"/models/{model}.gguf",
            "build_info": build,
            "chat_template_caps": {"supports_tools": tools_rendered, "supports_tool_calls": tools_rendered},
        }
    elif dialect.discovery == "ollama" and command == "POST" and route == "/api/show":
        found = {
            "parameters": f"num_ctx                        {size}",
            "model_info": {"general.architecture": "llama", "llama.context_length": size},
            "capabilities": ["completion", "tools"],
        }
    return None if found is None else json.dumps(found).encode()
