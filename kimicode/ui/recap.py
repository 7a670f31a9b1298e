"""What a resumed (or continued, or forked) session shows first: the last prompt the user typed and the
start of the answer to it (`recap`), read from the history as the log replays it."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rich.text import Text

from kimicode.agent.modes import is_mode_note
from kimicode.context.compact import is_summary, summary_text
from kimicode.prompts import user_words
from kimicode.ui.toolbar import short_path

if TYPE_CHECKING:
    from kimicode.ui.app import Session


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping) and p.get("type") == "text")
    return ""


_ATTACHED = re.compile(r"\n\n<(?:(?:file|directory) path=\"|command-instructions>)", re.S)
"""Where what the user typed ends: attached files, or a command's instructions (`/init`)."""


def _is_prompt(msg: Mapping[str, Any]) -> bool:
    """A user message the user typed (not a compaction summary or the images of a tool step)."""
    if msg.get("role") != "user":
        return False
    text = _content_text(msg.get("content"))
    return not is_summary(msg) and not text.startswith("[Images returned by") and not is_mode_note(msg)


def last_exchange(messages: Sequence[Mapping[str, Any]]) -> tuple[str | None, str | None, int]:
    """The last prompt the user typed (without attached files), the assistant's last answer after it,
    and the number of prompts in the history."""
    prompts = [i for i, m in enumerate(messages) if _is_prompt(m)]
    if not prompts:
        return None, None, 0
    last = prompts[-1]
    prompt = _ATTACHED.split(user_words(_content_text(messages[last].get("content"))), 1)[0]
    answer = None
    for msg in messages[last + 1 :]:
        if msg.get("role") == "assistant":
            text = _content_text(msg.get("content")).strip()
            if text:
                answer = text
    if answer is None:  # compacted: the answers live in the summary that follows the kept prompts
        summary = next((summary_text(m) for m in messages[last + 1 :] if is_summary(m)), "")
        answer = f"(compacted; from the summary) {summary.strip()}" if summary.strip() else None
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


def opening_banner(session: Session, version: str, where: str) -> None:
    """The session's first lines: version, model, endpoint (`where`) and workspace, the keys to know, and
    for a resumed or forked session where it stands; then the warnings of opening it."""
    agent = session.agent
    line = Text()
    line.append("kimicode", style="bold")
    line.append(f" {version} · {agent.endpoint.model}", style="dim")
    if where:
        line.append(f" at {where}", style="dim")
    line.append(f" · {short_path(session.workspace, 60)}", style="dim")
    session.console.print(line)
    session.console.print(
        Text(
            "/help for commands · @path attaches a file · !cmd runs a shell command · Esc interrupts · Ctrl-D exits",
            style="dim",
        )
    )
    if session.opened != "new":
        show_recap(session)
    session.note_once(agent.sandbox_warning)
    session.note_once(agent.resume_warning)
    for text, _level in agent.extras.notices:  # what of a Claude Code setup is not used: said at once, once
        if text.startswith("Claude Code setup:"):
            session.note_once(text)


def show_recap(session: Session) -> None:
    """Where a resumed session stands: its id, and the last prompt and answer, briefly."""
    agent = session.agent
    if session.forked_from is not None:
        head = f"Forked session {session.forked_from} into {agent.session_id}"
        if session.options.fork and session.options.fork_workspace != "shared":  # `--fork --worktree`
            branch = session.branch.get()
            head += f", working in its own tree {session.workspace}" + (f" on branch {branch}" if branch else "")
    else:
        head = f"Resumed session {agent.session_id}"
    session.console.print()
    for item in recap(agent.messages, head, width=session.console.size.width):
        session.console.print(item, highlight=False)


def resume_hint(session: Session) -> None:
    """On exit: how to come back to this conversation (only when it was saved: it has a prompt)."""
    log = session.agent.log
    try:
        saved = log is not None and log.path.exists()
    except OSError:
        saved = False
    if saved:
        session.console.print(Text(f"Resume this session with: kimicode -r {session.agent.session_id}", style="dim"))
