"""Stage one of making room: replace the bodies of old tool results with short placeholders.

Only `tool` messages are touched, and only by replacing the dict (the client caches each message's
JSON by identity). The newest tool output (about 100k tokens) is kept; everything older goes in one
batch, so the request prefix, and with it the server's prompt cache, changes rarely.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kimicode.context.accounting import TokenAccountant
from kimicode.context.output import spill

PRUNED_PREFIX = "[output pruned to save context"
MIN_PRUNE_TOKENS = 200
PLACEHOLDER_TOKENS = 100
"""About what a placeholder costs (tool name, arguments, the path of the saved output)."""
"""Results smaller than this stay: their placeholder would save almost nothing."""


@dataclass
class PrunePlan:
    """Which tool messages to replace, and how many tokens that frees (estimated)."""

    indices: list[int] = field(default_factory=list)
    freed: int = 0


@dataclass
class PruneResult:
    """What a prune did: `replaced` pairs each history index with the new message put there."""

    replaced: list[tuple[int, dict[str, Any]]]
    freed: int


def call_index(messages: Sequence[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    """tool_call_id -> (tool name, raw arguments) from the assistant messages."""
    calls: dict[str, tuple[str, str]] = {}
    for msg in messages:
        if msg.get("role") != "assistant":
            continue
        for call in msg.get("tool_calls") or ():
            if isinstance(call, dict):
                fn = call.get("function") or {}
                name = str(fn.get("name") or "") if isinstance(fn, dict) else ""
                args = fn.get("arguments") if isinstance(fn, dict) else ""
                calls[str(call.get("id") or "")] = (name, args if isinstance(args, str) else json.dumps(args))
    return calls


def is_pruned(msg: dict[str, Any]) -> bool:
    content = msg.get("content")
    return isinstance(content, str) and content.startswith(PRUNED_PREFIX)


def plan_prune(messages: Sequence[dict[str, Any]], accountant: TokenAccountant, keep_tokens: int) -> PrunePlan:
    """Every tool result older than the newest `keep_tokens` of tool output, unless tiny or pruned."""
    plan = PrunePlan()
    seen = 0
    for i in range(len(messages) - 1, -1, -1):
        msg = messages[i]
        if msg.get("role") != "tool" or is_pruned(msg):
            continue
        tokens = accountant.message_tokens(msg)
        if seen + tokens <= keep_tokens:
            seen += tokens
            continue
        seen = keep_tokens + 1  # everything older is past the kept window
        if tokens >= MIN_PRUNE_TOKENS:
            plan.indices.append(i)
            plan.freed += tokens - PLACEHOLDER_TOKENS
    plan.indices.reverse()
    return plan


def placeholder(msg: dict[str, Any], call: tuple[str, str] | None, tokens: int, spill_dir: Path | None) -> str:
    """The text that replaces a pruned result: which call it was and how to get the output again."""
    name, args = call or ("unknown tool", "")
    shown = args if len(args) <= 200 else args[:200] + "…"
    content = msg.get("content")
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    where = spill(text, spill_dir, f"pruned-{msg.get('tool_call_id') or name}")
    if isinstance(where, Path):
        how = f"The output is saved at {where}: read it with read_file (offset/limit) or grep, or run the call again."
    else:
        how = "Run the call again if you need it."
    return f"{PRUNED_PREFIX}: {name}({shown}) returned about {tokens:,} tokens. {how}]"


def apply_prune(
    messages: list[dict[str, Any]],
    plan: PrunePlan,
    accountant: TokenAccountant,
    spill_dir: Path | None,
) -> PruneResult:
    """Replace the planned tool messages in place (new dicts; nothing else in the history changes)."""
    calls = call_index(messages)
    replaced: list[tuple[int, dict[str, Any]]] = []
    freed = 0
    for i in plan.indices:
        old = messages[i]
        tokens = accountant.message_tokens(old)
        new = {"role": "tool", "tool_call_id": old.get("tool_call_id", ""), "content": ""}
        new["content"] = placeholder(old, calls.get(str(old.get("tool_call_id") or "")), tokens, spill_dir)
        messages[i] = new
        replaced.append((i, new))
        freed += tokens - accountant.message_tokens(new)
    return PruneResult(replaced, freed)
