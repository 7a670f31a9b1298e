"""How many tokens a request will take, known before it is sent, at a cost that grows with what is new.

The server's `usage.prompt_tokens` for the previous request is the truth for that request's prefix
(its messages and tools). The next request is estimated as that number plus the counts of the
messages added since, scaled by a running correction factor (server tokens / our raw count) learnt
from the same responses. Each message's raw count is computed once and cached by identity
(messages are never mutated after they are committed: pruning and compaction replace them).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import operator
import struct
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kimicode.context.tokens import TokenCounter

MESSAGE_OVERHEAD = 4
"""Role markers and separators the chat template adds around every message."""
TOOL_CALL_OVERHEAD = 8
"""Per tool call: the call markers, the `functions.NAME:N` id and the argument delimiters."""
DEFAULT_IMAGE_TOKENS = 1_024
"""An image whose size cannot be read from its data URL."""
IMAGE_PATCH = 28
"""Pixels per side of one vision token (14-pixel patches merged 2x2)."""
MAX_IMAGE_SIDE = 2_048
REASONING_FIELDS = ("reasoning_content", "reasoning")
CATEGORIES = ("system", "tools", "user", "assistant", "reasoning", "tool_calls", "tool_results")

CORRECTION_BOUNDS = (0.33, 3.0)
"""Server tokens per counted token stay within these: beyond them a sample says more about the server's template
than about our tokenizer (a template that leaves the tool schemas out once taught a factor of 0.108)."""

Counts = tuple[int, int, int, int, int, int, int]
"""Raw token counts in the order of CATEGORIES."""

_ZERO: Counts = (0, 0, 0, 0, 0, 0, 0)


@dataclass(frozen=True)
class Breakdown:
    """Where the tokens of a request go (corrected estimates; `total` is the sum)."""

    system: int = 0
    tools: int = 0
    user: int = 0
    assistant: int = 0
    reasoning: int = 0
    tool_calls: int = 0
    tool_results: int = 0

    @property
    def total(self) -> int:
        return (
            self.system + self.tools + self.user + self.assistant + self.reasoning + self.tool_calls + self.tool_results
        )

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in CATEGORIES} | {"total": self.total}


@dataclass
class _Anchor:
    """A request the server has counted: its messages (by identity), tools and prompt_tokens."""

    messages: list[dict[str, Any]]
    tools_key: str
    prompt_tokens: int


def image_tokens(url: str) -> int:
    """Estimate an image's tokens from the width and height in its data URL (PNG, GIF, JPEG, WebP)."""
    size = image_size(url)
    if size is None:
        return DEFAULT_IMAGE_TOKENS
    w, h = size
    if w <= 0 or h <= 0:
        return DEFAULT_IMAGE_TOKENS
    scale = min(1.0, MAX_IMAGE_SIDE / max(w, h))
    w, h = max(1, int(w * scale)), max(1, int(h * scale))
    return max(16, math.ceil(w / IMAGE_PATCH) * math.ceil(h / IMAGE_PATCH))


def image_size(url: str) -> tuple[int, int] | None:
    if not url.startswith("data:") or "," not in url[:200]:
        return None
    b64 = url.split(",", 1)[1][:65_536]
    b64 = b64[: len(b64) - len(b64) % 4]
    try:
        head = base64.b64decode(b64)
    except (binascii.Error, ValueError):
        return None
    if head[:8] == b"\x89PNG\r\n\x1a\n" and len(head) >= 24:
        w, h = struct.unpack(">II", head[16:24])
        return int(w), int(h)
    if head[:6] in (b"GIF87a", b"GIF89a") and len(head) >= 10:
        w, h = struct.unpack("<HH", head[6:10])
        return int(w), int(h)
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP" and len(head) >= 30:
        if head[12:16] == b"VP8X":
            return 1 + int.from_bytes(head[24:27], "little"), 1 + int.from_bytes(head[27:30], "little")
        return None
    if head[:2] == b"\xff\xd8":
        return _jpeg_size(head)
    return None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    i = 2
    while i + 9 < len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        length = int.from_bytes(data[i + 2 : i + 4], "big")
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            h, w = struct.unpack(">HH", data[i + 5 : i + 9])
            return int(w), int(h)
        i += 2 + length
    return None


_TOOLS_COUNTS: dict[tuple[str, str], int] = {}
"""Raw token counts of tools arrays, per counter and schemas' JSON, for the whole process: every agent of a
batch sends the same schemas, and counting them (~30 KB of regex passes) once per agent cost ~5 ms each."""


def _count_tools(counter: TokenCounter, key: str) -> int:
    cache_key = (f"{type(counter).__qualname__}:{counter.name}", key)
    count = _TOOLS_COUNTS.get(cache_key)
    if count is None:
        if len(_TOOLS_COUNTS) >= 64:  # a bound for programs that keep changing their tools
            _TOOLS_COUNTS.clear()
        count = _TOOLS_COUNTS[cache_key] = counter.count(key)
    return count


class TokenAccountant:
    """Counts messages once, anchors on server usage and keeps the correction factor.

    `estimate` is what the next request will cost; `observe` takes the server's count after a
    response. Cost per step: counting the new messages plus a pointer comparison of the prefix.
    """

    def __init__(self, counter: TokenCounter, decay: float = 0.9) -> None:
        self.counter = counter
        self.decay = decay
        self.correction = 1.0
        """Server tokens per raw counted token of messages, from the requests seen so far (1.0 before any)."""
        self.tools_in_prompt = True
        """False once the server's counts show its chat template leaves the tool schemas out of the prompt."""
        self.tools_said: bool | None = None
        """What the server itself said about that (llama.cpp's `/props`); when set it wins over any inference
        from counts, in this process and over a calibration restored from another."""
        self._num = 0.0
        self._den = 0.0
        self._cache: dict[int, tuple[dict[str, Any], Counts]] = {}
        self._tools_key = ""
        self._tools_raw = 0
        self._tools_seen: list[dict[str, Any]] | None = None
        """The schemas `_tools_key` was made from (compared by value: each step passes a fresh list)."""
        self._anchor: _Anchor | None = None
        self.samples: deque[tuple[int, int]] = deque(maxlen=1_000)
        """(our estimate before sending, the server's prompt_tokens) for recent requests."""

    # -- raw counts -------------------------------------------------------------------------------

    def message_counts(self, msg: Mapping[str, Any]) -> Counts:
        """Raw counts of one message by category, cached by identity."""
        key = id(msg)
        hit = self._cache.get(key)
        if hit is not None and hit[0] is msg:
            return hit[1]
        counts = self._count_message(msg)
        if isinstance(msg, dict):
            self._cache[key] = (msg, counts)
        return counts

    def message_tokens(self, msg: Mapping[str, Any]) -> int:
        """Corrected tokens of one message."""
        return round(sum(self.message_counts(msg)) * self.correction)

    def text_tokens(self, text: str) -> int:
        """Corrected tokens of a piece of text."""
        return round(self.counter.count(text) * self.correction)

    def _content(self, content: Any) -> int:
        if content is None:
            return 0
        if isinstance(content, str):
            return self.counter.count(content)
        if isinstance(content, list):
            total = 0
            for part in content:
                if not isinstance(part, dict):
                    total += self.counter.count(str(part))
                elif part.get("type") == "text":
                    total += self.counter.count(str(part.get("text") or ""))
                elif part.get("type") in ("image_url", "image"):
                    image = part.get("image_url")
                    url = image.get("url") if isinstance(image, dict) else image
                    total += image_tokens(url if isinstance(url, str) else "")
                else:
                    total += self.counter.count(json.dumps(part, ensure_ascii=False))
            return total
        return self.counter.count(json.dumps(content, ensure_ascii=False))

    def _count_message(self, msg: Mapping[str, Any]) -> Counts:
        role = msg.get("role")
        body = self._content(msg.get("content"))
        if role == "system":
            return (MESSAGE_OVERHEAD + body, 0, 0, 0, 0, 0, 0)
        if role == "user":
            return (0, 0, MESSAGE_OVERHEAD + body, 0, 0, 0, 0)
        if role == "tool":
            call_id = str(msg.get("tool_call_id") or "")
            return (0, 0, 0, 0, 0, 0, MESSAGE_OVERHEAD + body + self.counter.count(call_id))
        if role == "assistant":
            reasoning = 0
            for name in REASONING_FIELDS:
                text = msg.get(name)
                if isinstance(text, str):
                    reasoning += self.counter.count(text)
            calls = 0
            for call in msg.get("tool_calls") or ():
                if not isinstance(call, dict):
                    continue
                fn = call.get("function") or {}
                calls += TOOL_CALL_OVERHEAD + self.counter.count(str(call.get("id") or ""))
                if isinstance(fn, dict):
                    calls += self.counter.count(str(fn.get("name") or ""))
                    args = fn.get("arguments")
                    calls += self.counter.count(args if isinstance(args, str) else json.dumps(args))
            return (0, 0, 0, MESSAGE_OVERHEAD + body, reasoning, calls, 0)
        return (0, 0, MESSAGE_OVERHEAD + body, 0, 0, 0, 0)

    def _tools(self, tools: Sequence[Mapping[str, Any]]) -> tuple[str, int]:
        if not tools:
            return "", 0
        if self._tools_seen is not None and list(tools) == self._tools_seen:
            return self._tools_key, self._tools_raw  # the usual case: the same schemas as the last step
        key = json.dumps(list(tools), ensure_ascii=False, sort_keys=True)
        if key != self._tools_key:
            self._tools_key, self._tools_raw = key, _count_tools(self.counter, key)
        self._tools_seen = json.loads(key)  # a deep copy: a schema changed in place is noticed
        return self._tools_key, self._tools_raw

    def raw_total(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()) -> int:
        """Raw (uncorrected) count of a whole request, from the per-message cache."""
        return self._tools(tools)[1] + sum(sum(self.message_counts(m)) for m in messages)

    # -- estimates --------------------------------------------------------------------------------

    def _anchored_prefix(self, messages: Sequence[Mapping[str, Any]], tools_key: str) -> _Anchor | None:
        anchor = self._anchor
        if anchor is None or anchor.tools_key != tools_key:
            return None
        n = len(anchor.messages)
        if len(messages) < n:
            return None
        if not all(map(operator.is_, messages[:n], anchor.messages)):
            return None
        return anchor

    def estimate(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()) -> int:
        """Tokens the request (messages + tools) will take: anchored on the last server count if possible."""
        tools_key, tools_raw = self._tools(tools)
        anchor = self._anchored_prefix(messages, tools_key)
        if anchor is not None:
            new = sum(sum(self.message_counts(m)) for m in messages[len(anchor.messages) :])
            return anchor.prompt_tokens + round(new * self.correction)
        raw = sum(sum(self.message_counts(m)) for m in messages)
        return round(raw * self.correction + self._tools_tokens(tools_raw))

    def _tools_tokens(self, tools_raw: int) -> float:
        return tools_raw * self.correction if self.tools_in_prompt else 0.0

    def estimate_unanchored(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()
    ) -> int:
        """The whole request from cached counts and the correction factor only (no server anchor)."""
        tools_raw = self._tools(tools)[1]
        return round((self.raw_total(messages, tools) - tools_raw) * self.correction + self._tools_tokens(tools_raw))

    def observe(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        prompt_tokens: int,
        estimated: int | None = None,
    ) -> None:
        """Learn from the server's `prompt_tokens` for the request made of `messages` and `tools`."""
        if prompt_tokens <= 0:
            return
        if estimated is not None:
            self.samples.append((estimated, prompt_tokens))
        tools_key, tools_raw = self._tools(tools)
        anchor = self._anchored_prefix(messages, tools_key)
        if anchor is not None:
            server = prompt_tokens - anchor.prompt_tokens
            raw = sum(sum(self.message_counts(m)) for m in messages[len(anchor.messages) :])
        else:
            server = prompt_tokens
            raw = sum(sum(self.message_counts(m)) for m in messages)
            if tools_raw and self.tools_said is not None:
                self.tools_in_prompt = self.tools_said
                raw += tools_raw if self.tools_said else 0
            elif tools_raw:
                low, high = CORRECTION_BOUNDS
                with_tools = server / (raw + tools_raw)
                without = server / raw if raw else 0.0
                # Far too few tokens for messages + schemas, about right for messages alone: the template omits
                # the schemas. Learn the messages' factor from the messages only, and count no schema tokens.
                self.tools_in_prompt = not (with_tools < low * 1.5 and low <= without <= high)
                if self.tools_in_prompt:
                    raw += tools_raw
        self._learn(server, raw)
        self._anchor = _Anchor(list(messages), tools_key, prompt_tokens)

    def _learn(self, server: int, raw: int) -> None:
        """Fold one (server tokens, raw count) sample into the factor, kept within CORRECTION_BOUNDS."""
        if raw <= 0 or server <= 0:
            return
        self._num = self._num * self.decay + server
        self._den = self._den * self.decay + raw
        low, high = CORRECTION_BOUNDS
        self.correction = min(high, max(low, self._num / self._den))
        self._num = self.correction * self._den

    @property
    def calibrated(self) -> bool:
        """True once a server count has been seen (before that the correction factor is a guess)."""
        return self._den > 0

    def observe_raw(self, raw: int, server: int) -> None:
        """Learn from a request counted outside the history (a summary request): raw count vs server count."""
        self._learn(server, raw)

    def overflowed(self, estimated: int, requested: int) -> None:
        """The server said a request we estimated at `estimated` tokens needs `requested` (a total it gave, not
        the request itself): rescale, in both directions. A request's own count goes to `observe` instead."""
        if estimated > 0 and requested > 0 and requested != estimated:
            factor = requested / estimated
            if not self.tools_in_prompt and factor > 1.5 and self.tools_said is None:
                self.tools_in_prompt = True  # the schemas are counted after all
                factor = max(1.0, factor / 1.5)
            low, high = CORRECTION_BOUNDS
            self.correction = min(high, max(low, self.correction * factor))
            self._num = self.correction * self._den
        self._anchor = None

    def state(self) -> dict[str, Any]:
        """What calibration has learnt, to keep across processes (`restore`)."""
        return {
            "correction": round(self.correction, 4),
            "tools_in_prompt": self.tools_in_prompt,
            "weight": round(self._den, 1),
        }

    def restore(self, state: Mapping[str, Any]) -> bool:
        """Start from what an earlier process learnt (`state`); False when it is not a usable state."""
        numbers = [state.get("correction"), state.get("weight")]
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in numbers):
            return False
        correction, weight = float(numbers[0]), float(numbers[1])  # type: ignore[arg-type]
        low, high = CORRECTION_BOUNDS
        if not low <= correction <= high or not weight > 0:
            return False
        self.correction = correction
        self._den = min(weight, 50_000.0)  # a restored factor weighs like a few requests' worth
        self._num = self.correction * self._den
        said = self.tools_said
        self.tools_in_prompt = state.get("tools_in_prompt") is not False if said is None else said
        return True

    def forget_missing(self, messages: Sequence[Mapping[str, Any]]) -> None:
        """Drop cached counts of messages no longer in the history (after pruning or compaction)."""
        keep = {id(m) for m in messages}
        self._cache = {k: v for k, v in self._cache.items() if k in keep}

    def breakdown(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()) -> Breakdown:
        """Corrected tokens per category for a request."""
        totals = [0] * len(CATEGORIES)
        tools_raw = self._tools(tools)[1]
        for msg in messages:
            for i, value in enumerate(self.message_counts(msg)):
                totals[i] += value
        corrected = [round(v * self.correction) for v in totals]
        corrected[1] = round(self._tools_tokens(tools_raw))
        return Breakdown(*corrected)
