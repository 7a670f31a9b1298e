"""Where the context window comes from, and asking the server for it when it says.

Precedence: `--context-window` (flag) > `context_window` in a model's config > what the server says
(`discover_window`) > the known window of a known model id > kimicode's default. A window learnt from a
server's context-length error during a session overrides all of them for that session (`learnt`).

Discovery is one short, bounded exchange (a few seconds at most, never retried) made at every session
start, so a server restarted with another window or model is seen at once. Only real answers are cached
(per endpoint and model, `KIMICODE_HOME/cache/windows.json`): the cache stands in when the server does not
answer now, and tells which one GET revalidates (llama.cpp: `/props` alone). Where the window is said:
- vLLM: `max_model_len` in the `/v1/models` entry;
- OpenRouter, Moonshot and others: `context_length` (or `top_provider.context_length`);
- llama.cpp: `/props` (`default_generation_settings.n_ctx`, else `n_ctx`), else `meta.n_ctx` of its
  `/v1/models` entry; `n_ctx_train` is what the model was trained with, not what the server serves,
  so it is never taken as the window; `/props` also says whether the chat template renders tool
  definitions (`chat_template_caps.supports_tools`) and identifies the model file and build;
- LiteLLM proxy: `model_info.max_input_tokens` in `/model/info` (its `/models` has no window).

`count_request` asks llama.cpp to count a request before it is sent (`/apply-template`, `/tokenize`).
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import os
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kimicode.llm.ratelimit import share_slots, slots_for
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
CACHE_TTL = 30 * 24 * 3600.0
"""A server's last real answer is used (when it does not answer now) for this long."""
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


@dataclass(frozen=True)
class ServerInfo:
    """What a server said about the model it serves (from `/props`, `/models` or LiteLLM's `/model/info`)."""

    window: int | None
    """The context window a request gets (llama.cpp: per slot, `-c` divided by `--parallel`)."""
    source: str = "models"
    """Where the window came from: `props`, `models` or `model_info`."""
    fingerprint: str = ""
    """What is served (model file, window, build): calibration learnt against another fingerprint is dropped."""
    tools_rendered: bool | None = None
    """False when the server says its chat template leaves tool definitions out (`chat_template_caps`)."""
    slots: int | None = None
    counts: bool = False
    """The server can render and count a request before it is sent (llama.cpp's `/apply-template`, `/tokenize`)."""
    cached: bool = False
    """The server did not answer now: this is its last real answer, from the cache."""

    def as_json(self) -> dict[str, Any]:
        return {
            "window": self.window,
            "source": self.source,
            "fingerprint": self.fingerprint,
            "tools_rendered": self.tools_rendered,
            "slots": self.slots,
            "counts": self.counts,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ServerInfo | None:
        window = _positive(data.get("window"))
        if window is None:
            return None
        rendered = data.get("tools_rendered")
        return cls(
            window,
            str(data.get("source") or "models"),
            str(data.get("fingerprint") or ""),
            rendered if isinstance(rendered, bool) else None,
            _positive(data.get("slots")),
            data.get("counts") is True,
            cached=True,
        )


def info_from_props(body: Any) -> ServerInfo | None:
    """llama.cpp's `/props`: the window per slot, the template's tool support and what identifies the server."""
    window = window_from_props(body)
    if window is None or not isinstance(body, Mapping):
        return None
    caps = body.get("chat_template_caps")
    rendered = caps.get("supports_tools") if isinstance(caps, Mapping) else None
    slots = _positive(body.get("total_slots"))
    print_parts = (body.get("model_path"), body.get("model_alias"), body.get("build_info"), window, slots)
    return ServerInfo(
        window,
        "props",
        "llama.cpp|" + "|".join(str(p) for p in print_parts if p is not None),
        rendered if isinstance(rendered, bool) else None,
        slots,
        counts=True,
    )


def info_from_model_info(body: Any, model: str) -> ServerInfo | None:
    """LiteLLM's `/model/info`: `model_info.max_input_tokens` (else `max_tokens`) of the model group."""
    entries = body.get("data") if isinstance(body, Mapping) else None
    if not isinstance(entries, list):
        return None
    for entry in entries:
        if not isinstance(entry, Mapping) or entry.get("model_name") != model:
            continue
        info = entry.get("model_info")
        if not isinstance(info, Mapping):
            continue
        window = _positive(info.get("max_input_tokens")) or _positive(info.get("max_tokens"))
        if window:
            params = entry.get("litellm_params")
            upstream = params.get("model") if isinstance(params, Mapping) else None
            return ServerInfo(window, "model_info", f"litellm|{upstream}|{window}")
    return None


def _cache_path(home: Path) -> Path:
    return home / "cache" / "windows.json"


def _read_cache(home: Path) -> dict[str, Any]:
    try:
        data = json.loads(_cache_path(home).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_cache(home: Path, key: str, info: ServerInfo) -> None:
    """Remember a real answer (no key or header is ever written: the URL, the model, numbers and a model path).

    Only answers are cached: a failed discovery (401, a server still loading) is asked again next time."""
    path = _cache_path(home)
    data = _read_cache(home)
    data[key] = {**info.as_json(), "at": time.time()}
    try:
        private_dirs(path.parent)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}")
        private_write(tmp, json.dumps(data, indent=1, sort_keys=True))
        tmp.replace(path)
    except OSError:
        pass  # a read-only home: discovery just runs again next time


def cached_info(home: Path, base_url: str, model: str) -> ServerInfo | None:
    """The server's last real answer for this endpoint and model, if any and not older than CACHE_TTL."""
    entry = _read_cache(home).get(f"{base_url.rstrip('/')}|{model}")
    if not isinstance(entry, dict) or not isinstance(entry.get("at"), int | float):
        return None
    if not 0 <= time.time() - float(entry["at"]) < CACHE_TTL:
        return None
    return ServerInfo.from_json(entry)


async def _get_json(client: Any, url: str) -> Any:
    response = await client.get(url)
    if response.status_code != 200:
        return None
    try:
        return response.json()
    except ValueError:
        return None


def _root(base_url: str) -> str:
    return base_url[: -len("/v1")] if base_url.endswith("/v1") else base_url


def _warm() -> None:
    """Import the HTTP stack and load the TLS context outside the timed exchange (seconds on a busy machine:
    the answer must not be lost to the clock of an import)."""
    from kimicode.llm.client import shared_ssl_context

    shared_ssl_context()


def _http(api_key: str, headers: Mapping[str, str], timeout: float) -> Any:
    import httpx2

    from kimicode.llm.client import shared_ssl_context

    auth = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return httpx2.AsyncClient(
        # the process's one TLS context: loading the CA store per client cost ~40 ms of CPU per batch task
        verify=shared_ssl_context(),
        timeout=httpx2.Timeout(timeout, connect=min(2.0, timeout)),
        headers={**auth, **headers, "Accept": "application/json"},
        follow_redirects=False,
    )


async def _ask(
    base_url: str, api_key: str, model: str, headers: Mapping[str, str], timeout: float, hint: ServerInfo | None
) -> ServerInfo | None:
    async with _http(api_key, headers, timeout) as client:
        if hint is not None and hint.source == "props":  # known to be llama.cpp: one GET revalidates
            found = info_from_props(await _get_json(client, f"{_root(base_url)}/props"))
            if found is not None:
                return found
        body = await _get_json(client, f"{base_url}/models")
        window, llamacpp = window_from_models(body, model)
        if llamacpp:
            found = info_from_props(await _get_json(client, f"{_root(base_url)}/props"))
            if found is not None:
                return found
        if window:
            entry_id = next((e.get("id") for e in (body or {}).get("data", []) if isinstance(e, Mapping)), model)
            return ServerInfo(window, "models", f"models|{entry_id}|{window}")
        if body is not None and not llamacpp:  # LiteLLM lists models without windows; its /model/info has them
            return info_from_model_info(await _get_json(client, f"{base_url}/model/info"), model)
        return None


async def discover_server(
    base_url: str,
    api_key: str,
    model: str,
    home: Path,
    *,
    headers: Mapping[str, str] | None = None,
    timeout: float = TIMEOUT,
) -> ServerInfo | None:
    """What the server says about `model` now (one or two short GETs), else its last real answer (cached,
    `cached=True`), else None.

    Asked at every session start, so a server restarted with another `-c` or model is seen at once; bounded
    by `timeout` in all; any failure falls back to the cache (the request that follows reports real errors).
    """
    base_url = base_url.rstrip("/")
    hint = cached_info(home, base_url, model)
    shared = _SHARED_WINDOWS.get()
    if shared is None:  # the agents of one loop (a service) share one question per endpoint, key and model
        info = await _asked_lately(base_url, api_key, model, headers or {}, timeout, hint)
    else:  # one question per endpoint and model for a whole batch (concurrent askers wait for the first)
        key = (base_url, model)
        if key not in shared:
            shared[key] = asyncio.ensure_future(_ask_bounded(base_url, api_key, model, headers or {}, timeout, hint))
        info = await asyncio.shield(shared[key])
    if info is None:
        return hint
    if hint is None or hint.as_json() != info.as_json():
        _write_cache(home, f"{base_url}|{model}", info)
    if info.slots and (limiter := slots_for(base_url)) is not None:
        limiter.bound(info.slots)  # a batch or an exploration sends at most that many requests at once
    return info


async def discover_window(
    base_url: str,
    api_key: str,
    model: str,
    home: Path,
    *,
    headers: Mapping[str, str] | None = None,
    timeout: float = TIMEOUT,
) -> int | None:
    """The window the server says it serves `model` with (see `discover_server`), or None."""
    info = await discover_server(base_url, api_key, model, home, headers=headers, timeout=timeout)
    return info.window if info else None


async def _ask_bounded(
    base_url: str, api_key: str, model: str, headers: Mapping[str, str], timeout: float, hint: ServerInfo | None
) -> ServerInfo | None:
    await asyncio.to_thread(_warm)  # an import and a CA store load: not on the event loop
    try:
        return await asyncio.wait_for(_ask(base_url, api_key, model, headers, timeout, hint), timeout)
    except Exception:  # discovery is a hint: any failure (network, protocol, timeout) means "not said"
        return None


async def count_request(
    base_url: str,
    api_key: str,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]],
    *,
    headers: Mapping[str, str] | None = None,
    timeout: float = TIMEOUT,
) -> int | None:
    """The prompt tokens a llama.cpp server will count for this request, asked before sending it: the
    request rendered by its own chat template (`/apply-template`), then tokenized (`/tokenize`). None when
    the server cannot say (not llama.cpp, an old build, any failure)."""
    root = _root(base_url.rstrip("/"))

    async def ask() -> int | None:
        async with _http(api_key, headers or {}, timeout) as client:
            body: dict[str, Any] = {"messages": list(messages)}
            if tools:
                body["tools"] = list(tools)
            rendered = await client.post(f"{root}/apply-template", json=body)
            prompt = rendered.json().get("prompt") if rendered.status_code == 200 else None
            if not isinstance(prompt, str):
                return None
            counted = await client.post(
                f"{root}/tokenize", json={"content": prompt, "add_special": True, "parse_special": True}
            )
            tokens = counted.json().get("tokens") if counted.status_code == 200 else None
            return len(tokens) if isinstance(tokens, list) and tokens else None

    await asyncio.to_thread(_warm)  # an import and a CA store load: not on the event loop
    try:
        return await asyncio.wait_for(ask(), timeout)
    except Exception:  # a hint like discovery: the request itself reports real errors
        return None


_SHARED_WINDOWS: contextvars.ContextVar[dict[tuple[str, str], asyncio.Future[ServerInfo | None]] | None] = (
    contextvars.ContextVar("kimicode_shared_windows", default=None)
)


SHARED_FOR = 30.0
"""Seconds an answer is shared by the agents of one event loop starting sessions with the same endpoint."""
_LATELY: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[tuple[str, ...], tuple[float, asyncio.Future[ServerInfo | None]]]
] = weakref.WeakKeyDictionary()


async def _asked_lately(
    base_url: str, api_key: str, model: str, headers: Mapping[str, str], timeout: float, hint: ServerInfo | None
) -> ServerInfo | None:
    """The answer of the question this loop asked (or is asking) the same endpoint, with the same key and
    headers, for the same model in the last `SHARED_FOR` seconds, else a new question: 200 agents of a service
    starting together ask once, and a restarted server is still seen by a session started a minute later."""
    loop = asyncio.get_running_loop()
    asked = _LATELY.setdefault(loop, {})
    key = (base_url, model, api_key, *sorted(f"{k}={v}" for k, v in headers.items()))
    now = time.monotonic()
    for old in [k for k, (at, _) in asked.items() if now - at > SHARED_FOR]:
        del asked[old]
    if key not in asked:
        asked[key] = (now, asyncio.ensure_future(_ask_bounded(base_url, api_key, model, headers, timeout, hint)))
    return await asyncio.shield(asked[key][1])


def share_windows() -> None:
    """From here on in the current context, each endpoint and model is asked for its window once.

    kimicode batch calls it in the context its tasks run in: every task has its own KIMICODE_HOME (so its own
    discovery cache), and 200 tasks would otherwise ask the server 200 times. Their requests to one server also
    share one `SlotLimiter` (at most its slots in flight). Use on one event loop only."""
    _SHARED_WINDOWS.set({})
    share_slots()


__all__ = [
    "ServerInfo",
    "cached_info",
    "count_request",
    "discover_server",
    "discover_window",
    "fetch_models",
    "info_from_model_info",
    "info_from_props",
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
