"""Errors from the model endpoint, classified once so every caller agrees on what to do."""

from __future__ import annotations

import email.utils
import time
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
    retry_after = parse_retry_after(headers or {})
    prefix = f"HTTP {status}" + (f" {error_type}" if error_type else "")
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


def parse_retry_after(headers: dict[str, str]) -> float | None:
    """Seconds from `retry-after-ms` or `retry-after` (seconds or an HTTP date); None when absent."""
    lower = {k.lower(): v for k, v in headers.items()}
    ms = lower.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = lower.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_tz(value)
        if parsed is None:
            return None
        return max(0.0, email.utils.mktime_tz(parsed) - time.time())
