"""A compact tool set for small windows: shorter descriptions first, then fewer tools, never a refusal.

kimicode's tool definitions take about 3.5k tokens. A 4k window cannot hold them plus a conversation, unless the
server's chat template leaves them out (SmolLM2's does; the estimate learns it). When the system prompt and the
tools would take more than `TOOLS_SHARE` of the input budget, each description is cut to its first sentence
(parameters too); if that is still too much, the least needed tools are left out, in `DROP_ORDER`.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

TOOLS_SHARE = 0.5
"""The most of the input budget the system prompt and the tool definitions may take together."""
KEEP_FIRST = ("read_file", "edit_file", "bash", "write_file", "grep", "glob")
"""The tools kept longest when tools must be left out (others go first, in reverse order of the list given)."""
MAX_SHORT = 160


def first_sentence(text: str, limit: int = MAX_SHORT) -> str:
    """The first sentence (or line) of `text`, at most about `limit` characters."""
    text = " ".join(text.split())
    for end in (". ", "; ", " (", ": "):
        cut = text.find(end)
        if 0 < cut < limit:
            return text[: cut + (1 if end == ". " else 0)]
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _shorten_schema(node: Any) -> Any:
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "description" and isinstance(value, str):
                out[key] = first_sentence(value, 80)
            elif key in ("examples", "default") and isinstance(value, list | dict):
                continue
            else:
                out[key] = _shorten_schema(value)
        return out
    if isinstance(node, list):
        return [_shorten_schema(item) for item in node]
    return node


def shorten(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The same tools with each description cut to its first sentence (parameters' to a short one)."""
    out: list[dict[str, Any]] = []
    for tool in tools:
        short = copy.deepcopy(dict(tool))
        fn = short.get("function")
        if isinstance(fn, dict):
            if isinstance(fn.get("description"), str):
                fn["description"] = first_sentence(fn["description"])
            if isinstance(fn.get("parameters"), dict):
                fn["parameters"] = _shorten_schema(fn["parameters"])
        out.append(short)
    return out


def _name(tool: Mapping[str, Any]) -> str:
    fn = tool.get("function")
    return str(fn.get("name")) if isinstance(fn, Mapping) else ""


def fit_tools(
    tools: Sequence[Mapping[str, Any]], cost: Callable[[Sequence[Mapping[str, Any]]], int], limit: int
) -> tuple[list[dict[str, Any]], str]:
    """Tools whose `cost` (system prompt plus these tools, in tokens) is within `limit`, and a note saying
    what was changed ("" when nothing was)."""
    given = [dict(t) for t in tools]
    if not given or cost(given) <= limit:
        return given, ""
    short = shorten(given)
    if cost(short) <= limit:
        return short, f"tool descriptions shortened to fit the context window ({len(short)} tools)"
    order = sorted(
        range(len(short)),
        key=lambda i: (
            KEEP_FIRST.index(_name(short[i])) if _name(short[i]) in KEEP_FIRST else len(KEEP_FIRST) + len(short) - i
        ),
    )
    kept = list(order)
    while len(kept) > 1 and cost([short[i] for i in sorted(kept)]) > limit:  # read_file stays, whatever it costs
        kept.pop()
    chosen = [short[i] for i in sorted(kept)]
    left = [_name(short[i]) for i in order if i not in kept]
    return chosen, (
        f"tool descriptions shortened and {len(left)} tool{'s' if len(left) != 1 else ''} left out "
        f"to fit the context window: {', '.join(left)}"
    )


def tools_key(tools: Sequence[Mapping[str, Any]]) -> str:
    return json.dumps(list(tools), sort_keys=True, ensure_ascii=False)


__all__ = ["first_sentence", "fit_tools", "shorten"]
