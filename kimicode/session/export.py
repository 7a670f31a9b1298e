"""Render a saved session as Markdown, JSON, or a short text transcript (`kimicode sessions show/export`)."""

from __future__ import annotations

import json
import re
from typing import Any

from kimicode.session.log import LoadedSession
from kimicode.session.store import SessionInfo, human_size, one_line


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict):
                parts.append(str(part.get("text") or ("[image]" if part.get("type") == "image_url" else "")))
        return "\n".join(p for p in parts if p)
    return "" if content is None else str(content)


def _reasoning(msg: dict[str, Any]) -> str:
    for key in ("reasoning_content", "reasoning"):
        value = msg.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return ""


def fence(text: str, lang: str = "") -> str:
    """A Markdown code block that survives backticks inside `text`."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{lang}\n{text.rstrip()}\n{ticks}"


def _pretty_arguments(raw: Any) -> str:
    try:
        return json.dumps(json.loads(raw), indent=2, ensure_ascii=False) if isinstance(raw, str) and raw else "{}"
    except json.JSONDecodeError:
        return str(raw)


def usage_totals(session: LoadedSession) -> dict[str, int]:
    """Tokens over all requests of the session (summed from its `usage` records)."""
    from kimicode.llm.accumulate import usage_numbers

    totals = {"prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0}
    for rec in session.records:
        if rec.get("type") == "usage" and isinstance(rec.get("usage"), dict):
            prompt, completion, cached = usage_numbers(rec["usage"])
            totals["prompt_tokens"] += prompt
            totals["completion_tokens"] += completion
            totals["cached_tokens"] += cached
    return totals


def _names_by_call(messages: list[dict[str, Any]]) -> dict[str, str]:
    names: dict[str, str] = {}
    for msg in messages:
        for call in msg.get("tool_calls") or ():
            names[str(call.get("id"))] = str((call.get("function") or {}).get("name") or "tool")
    return names


def to_markdown(session: LoadedSession, info: SessionInfo | None = None, *, system: bool = False) -> str:
    """The whole conversation as Markdown: prompts, reasoning (folded), answers, tool calls and results."""
    settings = session.settings
    out = [f"# Session {session.session_id}", ""]
    for label, value in (
        ("Workspace", settings.get("workspace")),
        ("Model", settings.get("model")),
        ("Started", info.started.astimezone().strftime("%Y-%m-%d %H:%M:%S %Z") if info else None),
        ("Forked from", info.forked_from if info else None),
    ):
        if value:
            out.append(f"- {label}: {value}")
    out.append("")
    names = _names_by_call(session.messages)
    for msg in session.messages:
        role = msg.get("role")
        if role == "system":
            if system:
                out += ["## System", "", fence(_text(msg.get("content"))), ""]
        elif role == "user":
            out += ["## User", "", _text(msg.get("content")).strip(), ""]
        elif role == "assistant":
            out += ["## Assistant", ""]
            reasoning = _reasoning(msg)
            if reasoning:
                out += ["<details><summary>Reasoning</summary>", "", reasoning.strip(), "", "</details>", ""]
            text = _text(msg.get("content")).strip()
            if text:
                out += [text, ""]
            for call in msg.get("tool_calls") or ():
                fn = call.get("function") or {}
                out += [f"**Tool call** `{fn.get('name')}` ({call.get('id')})", ""]
                out += [fence(_pretty_arguments(fn.get("arguments")), "json"), ""]
        elif role == "tool":
            call_id = str(msg.get("tool_call_id"))
            out += [f"**Result of** `{names.get(call_id, 'tool')}` ({call_id})", ""]
            out += [fence(_text(msg.get("content"))), ""]
    return "\n".join(out).rstrip() + "\n"


def to_json(session: LoadedSession, info: SessionInfo | None = None) -> dict[str, Any]:
    """The session as one JSON object: its settings, token totals and the valid message history."""
    settings = session.settings
    return {
        "session_id": session.session_id,
        "workspace": settings.get("workspace"),
        "model": settings.get("model"),
        "thinking": settings.get("thinking"),
        "started": info.started.isoformat() if info else None,
        "updated": info.updated.isoformat() if info else None,
        "forked_from": info.forked_from if info else None,
        "turns": info.turns if info else None,
        "usage": usage_totals(session),
        "repaired": session.repaired,
        "messages": session.messages,
    }


def to_text(session: LoadedSession, width: int = 100) -> str:
    """A short transcript for the terminal: one line per prompt, answer, tool call and result."""
    lines: list[str] = []
    names = _names_by_call(session.messages)
    for msg in session.messages:
        role = msg.get("role")
        if role == "user":
            lines.append(f"› {one_line(_text(msg.get('content')), width)}")
        elif role == "assistant":
            text = _text(msg.get("content")).strip()
            if text:
                lines.append(f"  {one_line(text, width)}")
            for call in msg.get("tool_calls") or ():
                fn = call.get("function") or {}
                lines.append(f"  → {fn.get('name')} {one_line(str(fn.get('arguments') or ''), width - 10)}")
        elif role == "tool":
            content = _text(msg.get("content"))
            name = names.get(str(msg.get("tool_call_id")), "tool")
            lines.append(f"    ← {name}: {one_line(content, width - 10) or '(empty)'}")
    return "\n".join(lines)


def describe(info: SessionInfo, session: LoadedSession) -> str:
    """The header of `kimicode sessions show`."""
    usage = usage_totals(session)
    rows = [
        ("Session", info.id),
        ("Workspace", info.workspace or "?"),
        ("Model", session.model or info.model or "?"),
        ("Started", info.started.astimezone().strftime("%Y-%m-%d %H:%M:%S")),
        ("Updated", info.updated.astimezone().strftime("%Y-%m-%d %H:%M:%S")),
        ("Turns", str(info.turns)),
        ("Messages", f"{len(session.messages)} in the history ({info.messages} logged)"),
        ("Size", human_size(info.size)),
        (
            "Tokens",
            f"{usage['prompt_tokens']:,} in ({usage['cached_tokens']:,} cached), {usage['completion_tokens']:,} out",
        ),
    ]
    if info.forked_from:
        rows.append(("Forked from", info.forked_from))
    if session.repaired:
        rows.append(("Repaired", f"{session.repaired} tool call(s) without a result (the session was cut off)"))
    return "\n".join(f"{label + ':':<11} {value}" for label, value in rows)
