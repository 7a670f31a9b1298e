"""Errors from the model endpoint, classified once so every caller agrees on what to do."""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from kimicode.errors import ModelError
from kimicode.llm.overflow import ContextOverflow, context_overflow

ErrorKind = Literal["transient", "auth", "quota", "context_length", "bad_request", "protocol"]


@dataclass
class LLMError(ModelError):
    """A failed model request. `kind` decides retries and the exit code; `message` is for humans."""

    message: str
    kind: ErrorKind
    status: int | None = None
    retry_after: float | None = None
    error_type: str | None = None
    overflow: ContextOverflow | None = None
    """For `context_length` errors: the numbers the server gave (its window, the prompt it counted)."""
    connect: bool = False
    """The server could not be reached at all (refused, DNS): retried once while it has never answered."""

    def __str__(self) -> str:
        return self.message

    @property
    def transient(self) -> bool:
        """True when retrying the same request may succeed."""
        return self.kind == "transient"


def classify_status(
    status: int,
    message: str,
    error_type: str | None,
    headers: dict[str, str] | None = None,
    *,
    key_source: str | None = None,
    code: str | int | None = None,
    body: Any = None,
) -> LLMError:
    """Turn an HTTP error response into an LLMError with a kind and a message that says what to do.

    `key_source` (the environment variable the key came from, or `argument`) is named in a 401's hint.
    `code` and `body` (the error's code and the whole parsed body) let context-length errors be
    recognised in every server's dialect (see `kimicode.llm.overflow`), whatever their status.
    """
    lowered = f"{message} {error_type or ''}".lower()
    retry_after = parse_retry_after(headers or {}, body)
    prefix = f"HTTP {status}" + (f" {error_type}" if error_type else "")
    not_api = _not_an_api(status, headers or {}, body)
    if not_api:
        return LLMError(f"{prefix}: {message} ({not_api})", "bad_request", status, error_type=error_type)
    if status == 429:
        if any(k in lowered for k in ("quota", "balance", "insufficient", "billing")):
            return LLMError(
                f"{prefix}: {message} (your account's quota or balance is exhausted; top it up, this is not retried)",
                "quota",
                status,
                error_type=error_type,
            )
        return LLMError(f"{prefix}: {message}", "transient", status, retry_after, error_type)
    if status in (401, 403):
        if status == 403:
            hint = "the key is not allowed to use this model or the account is suspended / out of balance"
        elif key_source == "argument":
            hint = "check the API key passed to kimicode and the base URL"
        elif key_source:
            hint = f"check the API key in {key_source} and the base URL"
        else:
            hint = "check the API key (KIMI_API_KEY, MOONSHOT_API_KEY or OPENAI_API_KEY) and the base URL"
        return LLMError(f"{prefix}: {message} ({hint})", "auth", status, error_type=error_type)
    overflow = context_overflow(status, message, error_type, code=code, body=body)
    if overflow is not None:
        return LLMError(f"{prefix}: {message}", "context_length", status, error_type=error_type, overflow=overflow)
    if status in (408, 409, 425, 500, 502, 503, 504, 520, 522, 524, 529) or status >= 500:
        return LLMError(f"{prefix}: {message}", "transient", status, retry_after, error_type)
    return LLMError(f"{prefix}: {message}", "bad_request", status, error_type=error_type)


RETRY_AFTER_HEADERS = (
    ("retry-after-ms", 0.001),
    ("retry-after", 1.0),
    ("llm_provider-retry-after-ms", 0.001),  # LiteLLM forwards the upstream's headers under this prefix
    ("llm_provider-retry-after", 1.0),  # ... and its own rate limiter sends only this one
    ("x-ratelimit-reset-after", 1.0),
)
"""Headers that say how long to wait, in the order they are trusted, with their unit in seconds."""


def parse_retry_after(headers: Mapping[str, str], body: Any = None) -> float | None:
    """Seconds to wait before retrying, from any form servers and proxies send; None when none is given.

    `retry-after-ms`, `retry-after` (seconds or an HTTP date), LiteLLM's `llm_provider-retry-after[-ms]`,
    and a `retry_after` number in the JSON error body (top level or inside `error`)."""
    lower = {k.lower(): v for k, v in headers.items()}
    for name, unit in RETRY_AFTER_HEADERS:
        value = lower.get(name)
        if value:
            seconds = _seconds(value.strip(), unit)
            if seconds is not None:
                return seconds
    for holder in (body, body.get("error") if isinstance(body, Mapping) else None):
        if isinstance(holder, Mapping):
            value = holder.get("retry_after")
            if isinstance(value, int | float | str) and not isinstance(value, bool):
                seconds = _seconds(str(value), 1.0)
                if seconds is not None:
                    return seconds
    return None


def _seconds(value: str, unit: float) -> float | None:
    try:
        number = float(value)
    except ValueError:
        if unit != 1.0:
            return None
        parsed = email.utils.parsedate_tz(value)
        if parsed is None:
            return None
        return max(0.0, email.utils.mktime_tz(parsed) - time.time())
    if number != number or number in (float("inf"), float("-inf")):
        return None
    return max(0.0, number * unit)


def _not_an_api(status: int, headers: Mapping[str, str], body: Any) -> str:
    """Why an error response cannot come from an OpenAI-compatible API ("" when it may): retrying is pointless.

    501 (the server does not implement the route) and an HTML page for anything but a gateway's 5xx or a
    rate limit (a web server, a login page, a wrong path) fail at once instead of being retried for half a
    minute."""
    kind = next((v for k, v in headers.items() if k.lower() == "content-type"), "").lower()
    page = body.lstrip()[:15].lower() if isinstance(body, str) else ""
    html = "text/html" in kind or page.startswith(("<!doctype", "<html"))
    if status == 501:
        return "the server does not implement this route: the base URL is probably not an OpenAI-compatible API"
    if html and status not in (408, 429) and status < 500:
        return "the server answered with an HTML page, not an API error: check the base URL (it usually ends in /v1)"
    return ""
