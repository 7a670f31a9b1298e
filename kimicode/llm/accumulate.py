"""Assemble streamed chat-completion chunks (plain dicts) into one complete assistant message.

The message is built as the exact JSON object that will be stored and sent back: reasoning under the
field name the server used, `content`, and `tool_calls` with ids exactly as received. Pure and
synchronous, so any split of a valid stream gives the same message (property-tested).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

REASONING_FIELDS = ("reasoning_content", "reasoning")


@dataclass
class _ToolCallParts:
    id: str = ""
    type: str = "function"
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Delta:
    """A piece of streamed text: kind is `reasoning`, `content` or `tool_arguments`."""

    kind: str
    text: str
    index: int = 0


@dataclass
class StreamAccumulator:
    """Feed chunks in order with `add`; read the finished message with `message()`."""

    reasoning_field: str | None = None
    reasoning: list[str] = field(default_factory=list)
    content: list[str] = field(default_factory=list)
    tool_calls: dict[int, _ToolCallParts] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    model: str | None = None
    saw_role: bool = False

    def add(self, chunk: dict[str, Any]) -> list[Delta]:
        """Merge one chunk; return the text deltas it carried (for live display)."""
        out: list[Delta] = []
        if self.model is None and isinstance(chunk.get("model"), str):
            self.model = chunk["model"]
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
        choices = chunk.get("choices")
        if not isinstance(choices, list) or not choices:
            return out  # usage-only chunk (choices [] / null / missing)
        choice = choices[0]
        if not isinstance(choice, dict):
            return out
        if isinstance(choice.get("usage"), dict):  # legacy Moonshot: usage inside the finish choice
            self.usage = choice["usage"]
        delta = choice.get("delta") or {}
        if isinstance(delta, dict):
            if delta.get("role"):
                self.saw_role = True
            for name in REASONING_FIELDS:
                text = delta.get(name)
                if isinstance(text, str):
                    if self.reasoning_field is None:
                        self.reasoning_field = name
                    if text and name == self.reasoning_field:
                        self.reasoning.append(text)
                        out.append(Delta("reasoning", text))
            text = delta.get("content")
            if isinstance(text, str) and text:
                self.content.append(text)
                out.append(Delta("content", text))
            for tc in delta.get("tool_calls") or ():
                if isinstance(tc, dict):
                    out.extend(self._add_tool_call(tc))
        reason = choice.get("finish_reason")
        if isinstance(reason, str) and reason:
            self.finish_reason = reason
        return out

    def _add_tool_call(self, tc: dict[str, Any]) -> list[Delta]:
        index = tc.get("index")
        if not isinstance(index, int):
            index = len(self.tool_calls)  # servers that omit index send whole calls
        parts = self.tool_calls.setdefault(index, _ToolCallParts())
        if isinstance(tc.get("id"), str) and tc["id"] and not parts.id:
            parts.id = tc["id"]
        if isinstance(tc.get("type"), str) and tc["type"]:
            parts.type = tc["type"]
        fn = tc.get("function") or {}
        out: list[Delta] = []
        if isinstance(fn, dict):
            if isinstance(fn.get("name"), str) and fn["name"] and not parts.name:
                parts.name = fn["name"]
            args = fn.get("arguments")
            if isinstance(args, str) and args:
                parts.arguments.append(args)
                out.append(Delta("tool_arguments", args, index))
            elif isinstance(args, dict):  # a few servers send parsed objects
                import json

                text = json.dumps(args, ensure_ascii=False)
                parts.arguments.append(text)
                out.append(Delta("tool_arguments", text, index))
        return out

    def message(self, default_reasoning_field: str = "reasoning_content") -> dict[str, Any]:
        """The complete assistant message, in wire shape, ready to store and send back."""
        msg: dict[str, Any] = {"role": "assistant"}
        field_name = self.reasoning_field or default_reasoning_field
        msg[field_name] = "".join(self.reasoning)
        msg["content"] = "".join(self.content)
        if self.tool_calls:
            calls = []
            for i in sorted(self.tool_calls):
                p = self.tool_calls[i]
                calls.append(
                    {
                        "id": p.id or f"call_{i}",
                        "type": p.type or "function",
                        "function": {"name": p.name, "arguments": "".join(p.arguments)},
                    }
                )
            msg["tool_calls"] = calls
        return msg


def usage_numbers(usage: dict[str, Any] | None) -> tuple[int, int, int]:
    """(prompt_tokens, completion_tokens, cached_tokens) from any server's usage object."""
    if not usage:
        return 0, 0, 0
    prompt = _int(usage.get("prompt_tokens"))
    completion = _int(usage.get("completion_tokens"))
    cached = usage.get("cached_tokens")
    if cached is None:
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict):
            cached = details.get("cached_tokens")
    return prompt, completion, _int(cached)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
