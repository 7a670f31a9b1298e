"""What leaves the agent: events with known secrets masked, and messages made safe to log and send."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Collection
from typing import Any, cast

from kimicode import errors
from kimicode.config.redact import Masker
from kimicode.events import Event, Notice, Retrying, TurnFinished

_FLAG = re.compile(r"--([a-z][a-z0-9-]*[a-z0-9])( (?=[^\s(]*[0-9./-]))?")  # a space before a value


def library_words(text: str, options: Collection[str]) -> str:
    """`text` with the command line's flags named as the library's options (`--max-turns 5` is `max_turns=5`,
    `--base-url` is `base_url`): what a library caller reads must name what they can change. Only flags that
    are `options` (AgentOptions' field names, `option_names()`; passed in so that this module stays below
    agent/options.py) are renamed."""

    def rename(match: re.Match[str]) -> str:
        name = match.group(1).replace("-", "_")
        if name not in options:
            return match.group(0)
        return f"{name}=" if match.group(2) else name

    return _FLAG.sub(rename, text)


def library_event(event: Event, options: Collection[str]) -> Event:
    """An event's texts with `library_words` (a library agent's notices and errors)."""
    if isinstance(event, Notice):
        return dataclasses.replace(event, text=library_words(event.text, options))
    if isinstance(event, TurnFinished) and event.error and (said := library_words(event.error, options)) != event.error:
        error = event.error
        kept = (
            errors.ErrorInfo(said, error.kind, error.status, error.retry_after, error.error_type)
            if isinstance(error, errors.ErrorInfo)
            else said
        )
        return dataclasses.replace(event, error=kept)
    return event


def masked_event(event: Event, masker: Masker) -> Event:
    """Notices, retries and the final error/result with every known secret masked (a server's error
    may quote the key; tool results are masked where they are made)."""
    if not masker:
        return event
    if isinstance(event, Notice):
        return dataclasses.replace(event, text=masker.mask(event.text))
    if isinstance(event, Retrying):
        return dataclasses.replace(event, error=masker.mask(event.error))
    if isinstance(event, TurnFinished):
        error = event.error
        if error and masker.mask(error) != error:  # keep the ErrorInfo's kind, status and retry-after
            masked = masker.mask(error)
            error = (
                errors.ErrorInfo(masked, error.kind, error.status, error.retry_after, error.error_type)
                if isinstance(error, errors.ErrorInfo)
                else masked
            )
        return dataclasses.replace(event, result=masker.mask(event.result), error=error)
    return event


def utf8_safe(message: dict[str, Any]) -> dict[str, Any]:
    """`message` itself when all its text can be encoded as UTF-8; otherwise a copy with the lone
    surrogates (e.g. a file name with invalid bytes echoed in an error) replaced by U+FFFD, since such
    text can be neither written to the session log nor sent to the model."""
    try:
        json.dumps(message, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return cast(dict[str, Any], _fix_text(message))
    return message


def _fix_text(value: Any) -> Any:
    if isinstance(value, str):
        try:  # bytes smuggled in by surrogateescape (os.fsdecode) come back as the bytes they were
            return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        except UnicodeEncodeError:
            return value.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    if isinstance(value, dict):
        return {_fix_text(k): _fix_text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_fix_text(v) for v in value]
    return value
