"""Where the context window comes from, and asking the server for it when it says.

Precedence: `--context-window` (flag) > `context_window` in a model's config > what the server says
(`discover_window`) > the known window of a known model id > kimicode's default. A window learnt from a
server's context-length error during a session overrides all of them for that session (`learnt`).

Discovery is one short, bounded exchange (a few seconds at most, never retried) and its answer,
found or not, is cached per endpoint and model under `KIMICODE_HOME/cache/windows.json`:
- vLLM: `max_model_len` in the `/v1/models` entry;
- OpenRouter, Moonshot and others: `context_length` (or `top_provider.context_length`);
- llama.cpp: `/props` (`default_generation_settings.n_ctx`, else `n_ctx`), else `meta.n_ctx` of its
  `/v1/models` entry; `n_ctx_train` is what the model was trained with, not what the server serves,
  so it is never taken as the window.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kimicode.safeio import private_dirs, private_write

KNOWN_WINDOWS: tuple[tuple[str, int], ...] = (
    ("kimi-k3", 1_048_576),
    ("kimi-k2", 262_144),
    ("deepseek", 131_072),
    ("gpt-4.1", 1_047_576),
    ("gpt-4o", 128_000),
    ("gpt-5", 400_000),
    ("o3", 200_000),
    ("o4-mini", 200_000),
    ("qwen3-coder", 262_144),
)
"""Windows of model ids by prefix (after any `provider/`), for servers that do not say theirs."""

WINDOW_FIELDS = ("max_model_len", "context_length", "context_window", "max_context_length", "max_input_tokens")
CACHE_TTL = 24 * 3600.0
MISS_TTL = 3600.0
TIMEOUT = 3.0
"""Seconds for the whole discovery (at most two short GETs)."""


def known_window(model: str) -> int | None:
    """The window of a known model id, or None."""
    name = model.lower().rsplit("/", 1)[-1]
    return next((window for prefix, window in KNOWN_WINDOWS if name.startswith(prefix)), None)


def resolve_window(flag: int | None, config: int | None, model: str, default: int) -> tuple[int, str]:
    """(window, source) before asking the server: flag, config, known or default."""
    if flag:
        return flag, "flag"
    if config:
        return config, "config"
    known = known_window(model)
    if known:
        return known, "known"
    return default, "default"


def _positive(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 100_000_000:
        return value
    return None


def window_from_models(body: Any, model: str) -> tuple[int | None, bool]:
    """(the window a `/models` body gives for `model`, whether the server looks like llama.cpp)."""
    entries = body.get("data") if isinstance(body, Mapping) else None
    if not isinstance(entries, list):
        return None, False
    dicts = [e for e in entries if isinstance(e, Mapping)]
    entry = next((e for e in dicts if e.get("id") == model), None)
    if entry is None and len(dicts) == 1:
        entry = dicts[0]  # a local server that serves one model under whatever name
    if entry is None:
        return None, False
    for name in WINDOW_FIELDS:
        window = _positive(entry.get(name))
        if window:
            return window, False
    top = entry.get("top_provider")
    if isinstance(top, Mapping) and _positive(top.get("context_length")):
        return _positive(top.get("context_length")), False
    meta = entry.get("meta")
    llamacpp = entry.get("owned_by") == "llamacpp" or isinstance(meta, Mapping)
    if isinstance(meta, Mapping):
        return _positive(meta.get("n_ctx")), True  # never n_ctx_train
    return None, llamacpp


def window_from_props(body: Any) -> int | None:
    """llama.cpp's serving window from `/props`."""
    if not isinstance(body, Mapping):
        return None
    settings = body.get("default_generation_settings")
    if isinstance(settings, Mapping) and _positive(settings.get("n_ctx")):
        return _positive(settings.get("n_ctx"))
    return _positive(body.get("n_ctx"))


def _cache_path(home: Path) -> Path:
    return home / "cache" / "windows.json"


def _read_cache(home: Path) -> dict[str, Any]:
    try:
        data = json.loads(_cache_path(home).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_cache(home: Path, key: str, window: int | None) -> None:
    """Remember the answer (no key or header is ever written: only the URL, the model and a number)."""
    path = _cache_path(home)
    data = _read_cache(home)
    data[key] = {"window": window, "at": time.time()}
    try:
        private_dirs(path.parent)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        private_write(tmp, json.dumps(data, indent=1, sort_keys=True))
        tmp.replace(path)
    except OSError:
        pass  # a read-only home: discovery just runs again next time


def cached_window(home: Path, base_url: str, model: str) -> tuple[bool, int | None]:
    """(whether a fresh cached answer exists, the window it holds)."""
    entry = _read_cache(home).get(f"{base_url}|{model}")
    if not isinstance(entry, dict) or not isinstance(entry.get("at"), int | float):
        return False, None
    window = _positive(entry.get("window"))
    age = time.time() - float(entry["at"])
    if 0 <= age < (CACHE_TTL if window else MISS_TTL):
        return True, window
    return False, None


async def _get_json(client: Any, url: str) -> Any:
    response = await client.get(url)
    if response.status_code != 200:
        return None
    try:
        return response.json()
    except ValueError:
        return None


async def _ask(base_url: str, api_key: str, model: str, headers: Mapping[str, str], timeout: float) -> int | None:
    import httpx2

    from kimicode.llm.client import shared_ssl_context

    auth = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    async with httpx2.AsyncClient(
        # the process's one TLS context: loading the CA store per client cost ~40 ms of CPU per batch task
        verify=shared_ssl_context(),
        timeout=httpx2.Timeout(timeout, connect=min(2.0, timeout)),
        headers={**auth, **headers, "Accept": "application/json"},
        follow_redirects=False,
    ) as client:
        window, llamacpp = window_from_models(await _get_json(client, f"{base_url}/models"), model)
        if llamacpp:
            root = base_url[: -len("/v1")] if base_url.endswith("/v1") else base_url
            served = window_from_props(await _get_json(client, f"{root}/props"))
            return served or window
        return window


async def discover_window(
    base_url: str,
    api_key: str,
    model: str,
    home: Path,
    *,
    headers: Mapping[str, str] | None = None,
    timeout: float = TIMEOUT,
) -> int | None:
    """The window the server says it serves `model` with, or None (unreachable, silent, odd answers).

    Bounded by `timeout` in all; any failure is None (the request that follows reports real errors).
    """
    base_url = base_url.rstrip("/")
    fresh, window = cached_window(home, base_url, model)
    if fresh:
        return window
    shared = _SHARED_WINDOWS.get()
    if shared is None:
        window = await _ask_bounded(base_url, api_key, model, headers or {}, timeout)
    else:  # one question per endpoint and model for a whole batch (concurrent askers wait for the first)
        key = (base_url, model)
        if key not in shared:
            shared[key] = asyncio.ensure_future(_ask_bounded(base_url, api_key, model, headers or {}, timeout))
        window = await asyncio.shield(shared[key])
    _write_cache(home, f"{base_url}|{model}", window)
    return window


async def _ask_bounded(base_url: str, api_key: str, model: str, headers: Mapping[str, str],
                       timeout: float) -> int | None:
    try:
        return await asyncio.wait_for(_ask(base_url, api_key, model, headers, timeout), timeout)
    except Exception:  # discovery is a hint: any failure (network, protocol, timeout) means "not said"
        return None


_SHARED_WINDOWS: contextvars.ContextVar[dict[tuple[str, str], asyncio.Future[int | None]] | None] = (
    contextvars.ContextVar("kimicode_shared_windows", default=None)
)


def share_windows() -> None:
    """From here on in the current context, each endpoint and model is asked for its window once.

    kimicode batch calls it in the context its tasks run in: every task has its own KIMICODE_HOME (so its own
    discovery cache), and 200 tasks would otherwise ask the server 200 times. Use on one event loop only."""
    _SHARED_WINDOWS.set({})


__all__ = [
    "discover_window",
    "fetch_models",
    "known_window",
    "resolve_window",
    "share_windows",
    "window_from_models",
    "window_from_props",
]


def fetch_models(base_url: str, key: str, timeout: float) -> tuple[int | None, Any, str]:
    """GET `/models` once, synchronously, never following a redirect (for `kimicode doctor`).

    Returns (HTTP status or None when unreachable, parsed body or None, error text)."""
    import urllib.error
    import urllib.request  # here, not at the top: startup never pays for it

    class _NoRedirect(urllib.request.HTTPRedirectHandler):
        """Never follow a redirect: it would carry the Authorization header to wherever it points."""

        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    request = urllib.request.Request(
        f"{base_url}/models", headers={"Authorization": f"Bearer {key}", "Accept": "application/json"}
    )
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(request, timeout=timeout) as response:
            status, raw = response.status, response.read(4 << 20)
    except urllib.error.HTTPError as exc:
        if 300 <= exc.code < 400:
            where = exc.headers.get("Location", "?")
            return None, None, f"it redirects to {where} (not followed: the key would go along); use that URL"
        status, raw = exc.code, exc.read(1 << 16)
    except TimeoutError:
        return None, None, f"no answer within {timeout:g}s"
    except urllib.error.URLError as exc:
        reason = exc.reason
        return None, None, str(reason.strerror if isinstance(reason, OSError) and reason.strerror else reason)
    except (OSError, ValueError) as exc:
        return None, None, str(exc) or type(exc).__name__
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    return status, body, ""
