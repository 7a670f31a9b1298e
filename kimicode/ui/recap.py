"""What a resumed (or continued, or forked) session shows first: the last prompt the user typed and the
start of the answer to it (`recap`), read from the history as the log replays it."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from rich.text import Text

from kimicode.agent.modes import noted_mode
from kimicode.context.compact import is_summary


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping) and p.get("type") == "text")
    return ""


_ATTACHED = re.compile(r"\n\n<(?:file|directory) path=\"", re.S)


def _is_prompt(msg: Mapping[str, Any]) -> bool:
    """A user message the user typed (not a compaction summary or the images of a tool step)."""
    if msg.get("role") != "user":
        return False
    text = _content_text(msg.get("content"))
    return not is_summary(msg) and not text.startswith("[Images returned by") and noted_mode(msg) is None


def last_exchange(messages: Sequence[Mapping[str, Any]]) -> tuple[str | None, str | None, int]:
    """The last prompt the user typed (without attached files), the assistant's last answer after it,
    and the number of prompts in the history."""
    prompts = [i for i, m in enumerate(messages) if _is_prompt(m)]
    if not prompts:
        return None, None, 0
    last = prompts[-1]
    prompt = _ATTACHED.split(_content_text(messages[last].get("content")), 1)[0]
    answer = None
    for msg in messages[last + 1 :]:
        if msg.get("role") == "assistant":
            text = _content_text(msg.get("content")).strip()
            if text:
                answer = text
    return prompt, answer, len(prompts)


def recap(messages: Sequence[Mapping[str, Any]], head: str, width: int = 100, lines: int = 4) -> list[Text]:
    """What a resumed session shows: `head` with the number of prompts, the last prompt and the start of
    the last answer (`lines` lines each at most)."""
    prompt, answer, turns = last_exchange(messages)
    out = [Text(f"{head} ({turns} prompt{'s' if turns != 1 else ''} so far)", style="green")]
    if prompt is None:
        out.append(Text("  (no messages yet)", style="dim"))
        return out
    cut = max(20, width - 6)

    def block(text: str, first: str, style: str) -> Text:
        rows = [r for r in text.strip().splitlines() if r.strip()] or [""]
        shown = [r if len(r) <= cut else r[: cut - 1] + "…" for r in rows[:lines]]
        body = Text()
        for n, row in enumerate(shown):
            body.append(("\n    " if n else first) + row, style=style)
        if len(rows) > lines:
            body.append(f"\n    … {len(rows) - lines} more lines", style="dim")
        return body

    out.append(block(prompt, "  › ", "bold"))
    if answer is None:
        out.append(Text("  (no answer to it yet)", style="dim"))
    else:
        out.append(block(answer, "  ● ", ""))
    return out
