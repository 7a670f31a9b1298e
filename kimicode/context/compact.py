"""Stage two of making room: summarise the older history and keep what must not be lost.

The new history is: the system prompt, every user message of the session verbatim (long ones cut in
the middle with a marker), one summary message, and the most recent turns verbatim with their
reasoning (an assistant message always keeps its tool results right after it). The summariser sees
the transcript including tool-call arguments; a transcript too big for one request is summarised in
parts, each request carrying the summary so far. If the model fails, a deterministic summary is built
from the transcript instead, so compaction never ends a session.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kimicode.context.accounting import REASONING_FIELDS, TokenAccountant
from kimicode.context.budget import Budget, parse_overflow
from kimicode.context.output import spill
from kimicode.llm.errors import LLMError
from kimicode.prompts import load_prompt

SUMMARY_MARKER = "<conversation-summary>"
SUMMARY_END = "</conversation-summary>"
SUMMARY_HEADER = (
    "This is a summary of the earlier part of this session, written when the context was compacted. "
    "The user's own messages are kept verbatim above it; the most recent turns follow it. "
    "Continue the work from where it stands."
)
CUT_NOTE = "[… {chars:,} characters cut from the middle of this message when the context was compacted …]"

Summarize = Callable[[list[dict[str, Any]]], Awaitable[tuple[str, int]]]
"""Send one summary request (a system and a user message, no tools); return the reply text and the
server's prompt_tokens for it (0 when not reported)."""


@dataclass
class CompactionSettings:
    """Sizes for compaction, as shares of the input budget or in tokens."""

    user_message_tokens: int = 8_000
    """A user message longer than this is kept with its middle cut out."""
    summary_tokens: int = 16_000
    """Cap on the summary's length."""
    recent_share: float = 0.25
    """At most this share of the input budget is kept verbatim as recent turns."""
    users_share: float = 0.15
    """At most this share of the input budget goes to the kept user messages."""
    target_share: float = 0.6
    """Compaction aims to leave the history under this share of the input budget."""
    item_tokens: int = 2_000
    """In the transcript, each tool result, argument and reasoning block is cut to this."""


@dataclass
class CompactionResult:
    """What compaction did: `history[start:end]` was replaced by `messages`."""

    start: int
    end: int
    messages: list[dict[str, Any]]
    summary: str
    fallback: bool
    """True when the deterministic summary was used because the model call failed."""
    error: str | None
    tokens_before: int
    tokens_after: int
    summarized: int
    """How many messages were folded into the summary."""
    requests: list[int] = field(default_factory=list)
    """Estimated input tokens of each summary request sent."""
    shrunk: bool = False
    """True when the latest turn's tool results were shortened to fit (the turn itself is kept)."""
    users_cut: int = 0
    """Older user messages (pastes, logs) cut in the middle to fit; their whole text is saved to a file."""

    def describe(self) -> str:
        """One true sentence about what happened, for the notice the user sees."""
        sizes = f"{self.tokens_before:,} → {self.tokens_after:,} tokens"
        shrunk = "shortened the latest turn's tool output to fit" if self.shrunk else ""
        if self.users_cut:
            plural = "s" if self.users_cut != 1 else ""
            cut = f"cut {self.users_cut} long earlier message{plural} of yours in the middle"
            shrunk = f"{shrunk} and {cut}" if shrunk else cut
        if not self.summarized:
            return f"context: {shrunk or 'nothing was summarised'} ({sizes}; no summary request was sent)"
        plural = "s" if self.summarized != 1 else ""
        asked = len(self.requests)
        how = f"in {asked} summary request{'s' if asked != 1 else ''}" if asked else "without a summary request"
        if self.fallback:
            why = f"the summary request failed ({self.error})" if self.error else "the model returned an empty summary"
            text = f"context: compacted {self.summarized} message{plural}, but {why}; "
            text += f"kept a summary built from the transcript instead ({sizes})"
        else:
            text = f"context: compacted {self.summarized} message{plural} into a summary {how} ({sizes})"
        return text + (f"; also {shrunk}" if shrunk else "")


def is_summary(msg: Mapping[str, Any]) -> bool:
    content = msg.get("content")
    return msg.get("role") == "user" and isinstance(content, str) and content.startswith(SUMMARY_MARKER)


def summary_text(msg: Mapping[str, Any]) -> str:
    """The summary inside a summary message (without the marker and header)."""
    content = str(msg.get("content") or "")
    body = content[len(SUMMARY_MARKER) :]
    if body.lstrip().startswith(SUMMARY_HEADER):
        body = body.lstrip()[len(SUMMARY_HEADER) :]
    return body.replace(SUMMARY_END, "").strip()


def summary_message(summary: str) -> dict[str, Any]:
    return {"role": "user", "content": f"{SUMMARY_MARKER}\n{SUMMARY_HEADER}\n\n{summary.strip()}\n{SUMMARY_END}"}


def truncate_middle(text: str, max_tokens: int, count: Callable[[str], int], note: str = CUT_NOTE) -> str:
    """`text` if it fits in `max_tokens`, else its head and tail with a note saying how much was cut."""
    tokens = count(text)
    if tokens <= max_tokens:
        return text
    keep = max(16, int(len(text) * max_tokens / tokens * 0.95))
    for _ in range(8):
        head = keep * 2 // 3
        tail = keep - head
        out = text[:head] + "\n\n" + note.format(chars=len(text) - keep) + "\n\n" + text[len(text) - tail :]
        if count(out) <= max_tokens or keep <= 16:
            return out
        keep = max(16, keep * 3 // 4)
    return out


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                parts.append(str(part.get("text") or ""))
            elif isinstance(part, dict) and part.get("type") in ("image_url", "image"):
                parts.append("[image]")
            else:
                parts.append(json.dumps(part, ensure_ascii=False))
        return "\n".join(parts)
    return json.dumps(content, ensure_ascii=False)


def _groups(body: Sequence[dict[str, Any]]) -> list[tuple[int, int]]:
    """(start, end) of each turn unit: a user message, or an assistant message with its tool results."""
    groups: list[tuple[int, int]] = []
    for i, msg in enumerate(body):
        if msg.get("role") == "tool" and groups:
            groups[-1] = (groups[-1][0], i + 1)
        else:
            groups.append((i, i + 1))
    return groups


# -- the transcript the summariser reads ------------------------------------------------------------


def render_transcript(
    messages: Sequence[dict[str, Any]], accountant: TokenAccountant, settings: CompactionSettings
) -> list[tuple[str, int]]:
    """Each message as a transcript block with its raw (uncorrected) token count; long parts are cut."""
    count = accountant.counter.count
    item = settings.item_tokens
    names: dict[str, str] = {}
    blocks: list[str] = []
    for msg in messages:
        role = msg.get("role")
        if is_summary(msg):
            blocks.append(f"### earlier summary\n{summary_text(msg)}")
        elif role == "user":
            text = truncate_middle(_text(msg.get("content")), settings.user_message_tokens, count)
            blocks.append(f"### user\n{text}")
        elif role == "system":
            continue
        elif role == "assistant":
            parts = []
            for name in REASONING_FIELDS:
                reasoning = msg.get(name)
                if isinstance(reasoning, str) and reasoning.strip():
                    parts.append(f"### assistant reasoning\n{truncate_middle(reasoning, item, count)}")
            content = _text(msg.get("content"))
            if content.strip():
                parts.append(f"### assistant\n{truncate_middle(content, max(item, 4_000), count)}")
            for call in msg.get("tool_calls") or ():
                if not isinstance(call, dict):
                    continue
                fn = call.get("function") or {}
                name = str(fn.get("name") or "") if isinstance(fn, dict) else ""
                args = fn.get("arguments") if isinstance(fn, dict) else ""
                args_text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
                call_id = str(call.get("id") or "")
                names[call_id] = name
                parts.append(f"### tool call {name} [{call_id}]\n{truncate_middle(args_text, item, count)}")
            if parts:
                blocks.append("\n\n".join(parts))
        elif role == "tool":
            call_id = str(msg.get("tool_call_id") or "")
            result = truncate_middle(_text(msg.get("content")), item, count)
            blocks.append(f"### tool result of {names.get(call_id, 'a tool')} [{call_id}]\n{result}")
        else:
            blocks.append(f"### {role}\n{_text(msg.get('content'))}")
    return [(b, count(b) + 2) for b in blocks]


def _request(prompt: str, summary: str, chunk: list[str], extra: str) -> list[dict[str, Any]]:
    parts = []
    if summary:
        parts.append(f"<summary-so-far>\n{summary}\n</summary-so-far>\n\nThe transcript continues:")
    parts.append("<transcript>\n" + "\n\n".join(chunk) + "\n</transcript>")
    parts.append(
        "Write the summary now, following the instructions exactly"
        + (" (update the summary so far to cover this part too)." if summary else ".")
        + extra
    )
    return [{"role": "system", "content": prompt}, {"role": "user", "content": "\n\n".join(parts)}]


MIN_SUMMARY_CHARS = 20
"""A model's summary shorter than this (or than a quarter of what it summarises) is refused."""


async def _summarize_parts(
    blocks: list[tuple[str, int]],
    prompt: str,
    extra: str,
    summary_cap: int,
    *,
    accountant: TokenAccountant,
    budget: Budget,
    summarize: Summarize,
) -> tuple[str, str | None, list[int]]:
    """Summarise the transcript blocks in as few requests as fit; return (summary, error, request sizes).

    Each request is sized with the current correction factor, which every summary response refines
    (its prompt_tokens); before the first server count, parts are kept to half the budget.
    """
    count = accountant.counter.count
    fixed_raw = count(prompt + extra) + 200
    summary = ""
    sizes: list[int] = []
    retried = False
    i = 0
    while i < len(blocks):
        corr = accountant.correction
        safety = 1.0 if accountant.calibrated else 0.5
        room = budget.input_budget * safety - (fixed_raw + summary_cap) * corr - 256
        if room < 256:
            return summary, "the input budget is too small for a summary request", sizes
        chunk: list[str] = []
        used = 0.0
        j = i
        while j < len(blocks):
            text, raw = blocks[j]
            tokens = raw * corr
            if tokens > room:  # one block bigger than a whole request: cut it down
                text = truncate_middle(text, max(64, int(room / 2 / corr)), count)
                tokens = room / 2
            if chunk and used + tokens > room:
                break
            chunk.append(text)
            used += tokens
            j += 1
        request = _request(prompt, summary, chunk, extra)
        raw_size = accountant.raw_total(request)
        sizes.append(round(raw_size * corr))
        try:
            reply, prompt_tokens = await summarize(request)
        except LLMError as err:
            if err.kind != "context_length" or retried:
                return summary, err.message, sizes
            retried = True  # our estimate was too low for this server: learn from it, retry once
            requested = (err.overflow.prompt_estimate(budget.reserve) if err.overflow else None) or parse_overflow(
                err.message, budget.reserve
            )[0]
            accountant.observe_raw(raw_size, requested if requested else round(raw_size * corr * 2))
            continue
        if prompt_tokens > 0:
            accountant.observe_raw(raw_size, prompt_tokens)
        reply = reply.strip()
        if not reply:
            return summary, "the model returned an empty summary", sizes
        shortest = min(MIN_SUMMARY_CHARS, sum(len(text) for text in chunk) // 4)
        if len(reply) < shortest:  # "Done." cannot stand for a conversation: refused, the fallback is kept
            return summary, f"the model's summary was only {len(reply)} characters, too short to keep", sizes
        summary = truncate_middle(reply, summary_cap, count)
        i = j
    return summary, None, sizes


# -- the deterministic fallback ---------------------------------------------------------------------


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw) if isinstance(raw, str) and raw.strip() else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def fallback_summary(
    messages: Sequence[dict[str, Any]],
    tool_kinds: Mapping[str, str],
    reason: str | None,
) -> str:
    """A summary built without the model: earlier summaries, user requests, files, commands, last reply."""
    seen = _Transcript(tool_kinds)
    for msg in messages:
        seen.add(msg)
    return seen.render(reason)


@dataclass
class _Transcript:
    """What `fallback_summary` gathers, message by message."""

    tool_kinds: Mapping[str, str]
    earlier: list[str] = field(default_factory=list)
    users: list[str] = field(default_factory=list)
    read: dict[str, None] = field(default_factory=dict)
    changed: dict[str, None] = field(default_factory=dict)
    commands: list[tuple[str, str]] = field(default_factory=list)
    pending_cmd: dict[str, int] = field(default_factory=dict)
    last_text: str = ""

    def add(self, msg: dict[str, Any]) -> None:
        role = msg.get("role")
        if is_summary(msg):
            self.earlier.append(summary_text(msg))
        elif role == "user":
            text = _text(msg.get("content")).strip()
            self.users.append(text if len(text) <= 400 else text[:400] + " …")
        elif role == "assistant":
            content = _text(msg.get("content")).strip()
            if content:
                self.last_text = content
            for call in msg.get("tool_calls") or ():
                if isinstance(call, dict):
                    self.call(call)
        elif role == "tool":
            self.result(msg)

    def call(self, call: dict[str, Any]) -> None:
        """A tool call: its command, and the files it read or changed."""
        fn = call.get("function") or {}
        name = str(fn.get("name") or "") if isinstance(fn, dict) else ""
        args = _arguments(fn.get("arguments") if isinstance(fn, dict) else None)
        command = args.get("command") or args.get("cmd")
        if isinstance(command, str):
            self.pending_cmd[str(call.get("id") or "")] = len(self.commands)
            self.commands.append((command if len(command) <= 300 else command[:300] + " …", ""))
        self.files(name, args)

    def files(self, name: str, args: dict[str, Any]) -> None:
        paths = [args[k] for k in ("path", "file_path", "filename") if isinstance(args.get(k), str)]
        paths += [p for p in args.get("paths") or () if isinstance(p, str)]
        kind = self.tool_kinds.get(name, "")
        changing = kind == "edit" or any(w in name for w in ("write", "edit", "create", "delete", "move"))
        for p in paths:
            (self.changed if changing else self.read)[f"{p} ({name})"] = None

    def result(self, msg: dict[str, Any]) -> None:
        """A tool result: the first and last line of a command's output."""
        index = self.pending_cmd.pop(str(msg.get("tool_call_id") or ""), None)
        if index is not None:
            lines = [ln.strip() for ln in _text(msg.get("content")).splitlines() if ln.strip()]
            outcome = " / ".join(lines[:1] + lines[-1:]) if len(lines) > 1 else (lines[0] if lines else "")
            self.commands[index] = (self.commands[index][0], outcome[:240])

    def render(self, reason: str | None) -> str:
        out = [
            "(The model could not write this summary"
            + (f": {reason}" if reason else "")
            + "; it was assembled from the transcript.)"
        ]
        sections: list[tuple[object, str]] = [  # (shown when non-empty, the section)
            (
                self.earlier,
                "## Earlier summary (still valid: finished work stays finished)\n" + "\n\n".join(self.earlier),
            ),
            (self.users, "## The user's messages in this part\n" + "\n".join(f"- {u}" for u in self.users)),
            (self.changed, "## Files changed\n" + "\n".join(f"- {p}" for p in self.changed)),
            (self.read, "## Files read\n" + "\n".join(f"- {p}" for p in list(self.read)[-100:])),
            (
                self.commands,
                "## Commands run\n" + "\n".join(f"- `{c}` → {o or 'no output'}" for c, o in self.commands[-60:]),
            ),
            (self.last_text, "## The last reply before this point\n" + self.last_text),
        ]
        out += [section for present, section in sections if present]
        return "\n\n".join(out)


# -- compaction -------------------------------------------------------------------------------------


USER_CUT_NOTE = "[… {chars:,} characters cut from the middle of this message when the context was compacted"


def _cut_user(msg: dict[str, Any], cap: int, accountant: TokenAccountant, spill_dir: Path | None) -> dict[str, Any]:
    """A long old user message (a paste, a log) cut in the middle to about `cap` tokens; the whole text is
    saved under `spill_dir` and the note says where, so the model can read it back."""
    text = _text(msg.get("content"))
    where = spill(text, spill_dir, "compacted-user-message") if spill_dir is not None else None
    note = USER_CUT_NOTE + (f"; the full message is saved at {where} …]" if isinstance(where, Path) else " …]")
    cut = truncate_middle(text, max(32, int(cap / accountant.correction)), accountant.counter.count, note)
    return {"role": "user", "content": cut}


def _fit_users(
    users: list[dict[str, Any]],
    budget: int,
    settings: CompactionSettings,
    accountant: TokenAccountant,
    spill_dir: Path | None = None,
) -> list[dict[str, Any]]:
    """The user messages to keep: verbatim when possible, long ones cut, and within `budget` tokens."""
    cap = settings.user_message_tokens
    sizes = [accountant.message_tokens(m) for m in users]
    if sum(min(s, cap) for s in sizes) > budget:
        low, high = 64, cap  # the largest per-message cap that fits ("water filling")
        while low < high:
            mid = (low + high + 1) // 2
            if sum(min(s, mid) for s in sizes) <= budget:
                low = mid
            else:
                high = mid - 1
        cap = low
    kept: list[dict[str, Any]] = []
    used = 0
    for msg, size in zip(users, sizes, strict=True):
        if size > cap:
            msg = _cut_user(msg, cap, accountant, spill_dir)
            size = accountant.message_tokens(msg)
        kept.append(msg)
        used += size
    if used > budget and len(kept) > 2:  # too many messages even at the smallest cap: keep the ends
        first, rest = kept[0], kept[1:]
        tail: list[dict[str, Any]] = []
        room = budget - accountant.message_tokens(first) - 40
        for msg in reversed(rest):
            size = accountant.message_tokens(msg)
            if size > room:
                break
            tail.insert(0, msg)
            room -= size
        dropped = len(rest) - len(tail)
        note = {"role": "user", "content": f"[{dropped} earlier user messages are left out here; see the summary]"}
        kept = [first, note, *tail] if dropped else [first, *tail]
    return kept


def _shrink_group(
    group: list[dict[str, Any]],
    budget: int,
    accountant: TokenAccountant,
    spill_dir: Path | None,
) -> list[dict[str, Any]] | None:
    """A huge last turn cut to `budget`: tool results shortened; None if the assistant message alone is too big."""
    count = accountant.counter.count
    head = group[0]
    if head.get("role") == "user":
        text = truncate_middle(_text(head.get("content")), max(32, int(budget * 0.9 / accountant.correction)), count)
        return [{"role": "user", "content": text}]
    room = budget - accountant.message_tokens(head)
    results = group[1:]
    if room < 200 * max(1, len(results)):
        return None
    share = int(room * 0.9 / max(1, len(results)) / accountant.correction)
    out = [head]
    for msg in results:
        if accountant.message_tokens(msg) * 0.9 <= share:
            out.append(msg)
            continue
        text = _text(msg.get("content"))
        where = spill(text, spill_dir, f"compacted-{msg.get('tool_call_id') or 'result'}")
        note = "[… {chars:,} characters cut when the context was compacted"
        note += f"; the full output is saved at {where} …]" if isinstance(where, Path) else " …]"
        out.append(
            {
                "role": "tool",
                "tool_call_id": msg.get("tool_call_id", ""),
                "content": truncate_middle(text, share, count, note),
            }
        )
    return out


async def _summary_of(
    old: Sequence[dict[str, Any]],
    summary_cap: int,
    instructions: str | None,
    kinds: Mapping[str, str],
    *,
    accountant: TokenAccountant,
    budget: Budget,
    summarize: Summarize,
    settings: CompactionSettings,
) -> tuple[str, str | None, list[int], bool]:
    """The summary of the old messages (with the user's instructions for it), in as many requests as the
    transcript needs: (summary, error, the requests' sizes, whether it is the fallback summary kimicode wrote
    itself because the model's failed or was empty)."""
    prompt = load_prompt("compaction.md").replace("{max_words}", f"{max(150, int(summary_cap * 0.6)):,}")
    extra = ""
    if instructions:
        extra = f"\n\nThe user asked for this compaction with these instructions: {instructions}"
    blocks = render_transcript(old, accountant, settings)
    summary, error, requests = await _summarize_parts(
        blocks, prompt, extra, summary_cap, accountant=accountant, budget=budget, summarize=summarize
    )
    fallback = bool(error) or not summary
    if fallback:
        summary = truncate_middle(fallback_summary(old, kinds, error), summary_cap, accountant.counter.count)
    return summary, error, requests, fallback


def _common_tail(body: Sequence[dict[str, Any]], new_body: Sequence[dict[str, Any]]) -> int:
    """How many messages at the end of the new body are the old body's own (the same objects): the caller
    leaves them in place."""
    keep_tail = 0
    while (
        keep_tail < min(len(body), len(new_body))
        and body[len(body) - 1 - keep_tail] is new_body[len(new_body) - 1 - keep_tail]
    ):
        keep_tail += 1
    return keep_tail


async def compact_history(
    messages: Sequence[dict[str, Any]],
    tools: Sequence[Mapping[str, Any]],
    *,
    accountant: TokenAccountant,
    budget: Budget,
    summarize: Summarize,
    settings: CompactionSettings | None = None,
    instructions: str | None = None,
    tool_kinds: Mapping[str, str] | None = None,
    spill_dir: Path | None = None,
    manual: bool = False,
) -> CompactionResult | None:
    """Plan and build the compacted history (the caller swaps it in); None when there is nothing to do."""
    settings = settings or CompactionSettings()
    kinds = tool_kinds or {}
    big = budget.input_budget
    before = accountant.estimate_unanchored(messages, tools)
    k = 0
    while k < len(messages) and messages[k].get("role") == "system":
        k += 1
    head, body = list(messages[:k]), list(messages[k:])
    fixed = accountant.estimate_unanchored(head, tools)
    avail = max(1_024, int(big * settings.target_share) - fixed)
    recent_budget = min(int(big * settings.recent_share), int(avail * 0.45))
    if manual:
        recent_budget = min(recent_budget, max(256, int(before * 0.3)))
    users_budget = min(int(big * settings.users_share), int(avail * 0.3))
    summary_cap = max(256, min(settings.summary_tokens, int(avail * 0.2)))

    # 1. the recent turns kept verbatim: whole turn units from the end, never past a summary
    groups = _groups(body)
    split = len(body)
    used = 0
    for start, end in reversed(groups):
        unit = body[start:end]
        if any(is_summary(m) for m in unit):
            break
        size = sum(accountant.message_tokens(m) for m in unit)
        if used + size > recent_budget:
            break
        used += size
        split = start
    recent = body[split:]
    shrunk = False
    # The current prompt (the last user message) is never cut nor left to the summary: a retry after an overflow
    # must still answer what was asked. At a turn's first step it stays last; later it is kept verbatim (below).
    pinned = next(
        (i for i in range(len(body) - 1, -1, -1) if body[i].get("role") == "user" and not is_summary(body[i])), None
    )
    if pinned is not None and pinned == len(body) - 1 and split > pinned:
        split = pinned
        recent = body[split:]
    elif split == len(body) and groups and not is_summary(body[groups[-1][0]]):
        start, end = groups[-1]
        kept_prompt = accountant.message_tokens(body[pinned]) if pinned is not None and pinned < start else 0
        room = min(recent_budget, int((big - fixed - kept_prompt) * 0.8))  # the prompt stays: the rest must fit
        cut = _shrink_group(body[start:end], room, accountant, spill_dir)
        if cut is not None:
            recent, split, shrunk = cut, start, True
    old = body[:split]
    foldable = any(m.get("role") in ("assistant", "tool") or is_summary(m) for m in old)

    # 2. the user messages, kept (verbatim when they fit) ahead of the summary; long old ones (a paste, a log)
    # are cut, so an old part made only of user messages can still shrink
    keep = body[pinned] if pinned is not None else None
    users = [m for m in old if m.get("role") == "user" and not is_summary(m) and m is not keep]
    pinned_old = [keep] if keep is not None and any(m is keep for m in old) else []
    room = users_budget - sum(accountant.message_tokens(m) for m in pinned_old)
    fitted = _fit_users(users, max(64, room), settings, accountant, spill_dir) if users else []
    cut_users = sum(1 for m in fitted if not any(m is u for u in users))
    if not shrunk and not foldable and not cut_users:
        return None  # nothing to fold into a summary, and every old user message is short already
    users = [*fitted, *pinned_old]

    # 3. the summary, in as many requests as the transcript needs (none when only the last turn was shrunk)
    summary: str = ""
    error: str | None = None
    requests: list[int] = []
    fallback = False
    if foldable:
        summary, error, requests, fallback = await _summary_of(
            old,
            summary_cap,
            instructions,
            kinds,
            accountant=accountant,
            budget=budget,
            summarize=summarize,
            settings=settings,
        )
    middle = [summary_message(summary)] if foldable else []

    # 4. assemble, and make sure the result fits
    new_body = [*users, *middle, *recent]
    new = [*head, *new_body]
    after = accountant.estimate_unanchored(new, tools)
    while after > big and recent and recent[0] is not keep:
        recent = recent[1:]
        while recent and recent[0].get("role") == "tool":
            recent = recent[1:]
        new = [*head, *users, *middle, *recent]
        after = accountant.estimate_unanchored(new, tools)
    new_body = new[k:]
    keep_tail = _common_tail(body, new_body)
    return CompactionResult(
        start=k,
        end=len(messages) - keep_tail,
        messages=new_body[: len(new_body) - keep_tail],
        summary=summary,
        fallback=fallback,
        error=error,
        tokens_before=before,
        tokens_after=after,
        summarized=len(old) if foldable else 0,
        requests=requests,
        shrunk=shrunk,
        users_cut=cut_users,
    )
