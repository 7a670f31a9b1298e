"""The context package on its own: tokenizers, accounting, budget, flood cap, pruning, compaction, replay."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import tiktoken
import tiktoken.load
from helpers import assert_valid_history, code_text

from kimicode.context import tokens as tokens_mod
from kimicode.context.accounting import TokenAccountant, image_tokens
from kimicode.context.budget import Budget, parse_overflow
from kimicode.context.compact import (
    SUMMARY_MARKER,
    CompactionSettings,
    compact_history,
    fallback_summary,
    is_summary,
    summary_message,
)
from kimicode.context.output import cap_output
from kimicode.context.prune import PRUNED_PREFIX, apply_prune, plan_prune
from kimicode.context.tokens import (
    KIMI_PAT_STR,
    EstimateCounter,
    TokenizerError,
    cached_encoding,
    default_counter,
    load_bpe_file,
)
from kimicode.llm.errors import LLMError
from kimicode.session.replay import apply_record, replay


class SpyCounter:
    """An estimate counter that records how many characters it was asked to count."""

    name = "spy"
    exact = False

    def __init__(self) -> None:
        self.inner = EstimateCounter()
        self.chars = 0

    def count(self, text: str) -> int:
        self.chars += len(text)
        return self.inner.count(text)


def write_bpe(path: Path, merges: list[bytes]) -> None:
    ranks = [bytes([b]) for b in range(256)] + merges
    path.write_text("".join(f"{base64.b64encode(tok).decode()} {rank}\n" for rank, tok in enumerate(ranks)))


def tool_turn(i: int, body: str, name: str = "read_file") -> list[dict[str, Any]]:
    call_id = f"functions.{name}:{i}"
    args = json.dumps({"path": f"src/mod{i}.py"})
    return [
        {
            "role": "assistant",
            "reasoning_content": f"I should read module {i}.",
            "content": "",
            "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}],
        },
        {"role": "tool", "tool_call_id": call_id, "content": body},
    ]


# -- tokenizers -------------------------------------------------------------------------------------


def test_estimate_tracks_text_kinds() -> None:
    est = EstimateCounter()
    prose = "The quick brown fox jumps over the lazy dog while the cat sleeps in the sun. " * 20
    assert 300 <= est.count(prose) <= 400  # 17 words a sentence → ~340 tokens with a BPE
    digits = " ".join(str(100000 + i) for i in range(100))  # 6 digits → 2 tokens, plus the space
    assert 200 <= est.count(digits) <= 320
    chinese = "上下文管理器负责在每个请求之前计算令牌数量" * 10
    assert 0.6 * len(chinese) <= est.count(chinese) <= 1.1 * len(chinese)
    assert est.count("") == 0 and est.count("a") == 1


def test_bpe_file_is_loaded_with_kimis_pattern(tmp_path: Path) -> None:
    path = tmp_path / "tiktoken.model"
    write_bpe(path, [b"th", b"the", b" t", b" th", b" the", b"12", b"123"])
    counter = load_bpe_file(path)
    assert counter.exact and counter.name == "bpe:tiktoken.model"
    assert counter.count(" the") == 1
    assert counter.count("the the") == 2
    assert counter.count("the cat") == 1 + 4  # " cat" has no merges: 4 byte tokens
    assert counter.count("中") == 3  # one Han character is 3 UTF-8 bytes
    # digits are split into runs of at most three before merging: "123" + "123"
    assert counter.count("123123") == 2
    assert counter.count("<|im_end|> plain") == 16  # special-token text is counted as plain bytes, no error


def test_bad_tokenizer_files_give_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match="cannot read the tokenizer file"):
        load_bpe_file(tmp_path / "missing.model")
    bad = tmp_path / "bad.model"
    bad.write_text("not-base64!! x\n")
    with pytest.raises(TokenizerError, match="line 1"):
        load_bpe_file(bad)
    partial = tmp_path / "partial.model"
    partial.write_text(f"{base64.b64encode(b'a').decode()} 0\n")
    with pytest.raises(TokenizerError, match="single-byte tokens are missing"):
        load_bpe_file(partial)


def test_a_cached_tiktoken_file_is_used_and_nothing_is_ever_downloaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_network(*_: Any, **__: Any) -> bytes:
        raise AssertionError("tiktoken tried to fetch a file")

    monkeypatch.setattr(tiktoken.load, "read_file", no_network)
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache))
    assert cached_encoding("o200k_base") is None  # nothing cached
    assert isinstance(default_counter(), EstimateCounter)

    url = tokens_mod._OPENAI_BPE["o200k_base"][0]
    cached = cache / hashlib.sha1(url.encode()).hexdigest()
    cached.write_bytes(b"corrupt")
    assert cached_encoding("o200k_base") is None  # wrong hash: tiktoken would re-download, so we skip it
    assert cached.read_bytes() == b"corrupt"

    small = tiktoken.Encoding(
        "o200k_base", pat_str=KIMI_PAT_STR, mergeable_ranks={bytes([b]): b for b in range(256)}, special_tokens={}
    )
    monkeypatch.setitem(tokens_mod._OPENAI_BPE, "o200k_base", (url, hashlib.sha256(b"corrupt").hexdigest()))
    monkeypatch.setattr(tiktoken, "get_encoding", lambda name: small)
    counter = default_counter()
    assert counter.exact and counter.name == "o200k_base" and counter.count("abc") == 3


def test_tokenizer_path_comes_from_the_environment_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "k.model"
    write_bpe(path, [b"ab"])
    monkeypatch.setenv("KIMICODE_TOKENIZER", str(path))
    counter = default_counter()
    assert counter.name == "bpe:k.model" and counter.count("abab") == 2


# -- accounting -------------------------------------------------------------------------------------


def test_each_message_is_counted_once_and_requests_anchor_on_the_server() -> None:
    spy = SpyCounter()
    acc = TokenAccountant(spy)
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are a test."}]
    tools = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]
    total_chars = len(json.dumps(tools, sort_keys=True)) + len("You are a test.")
    truth = 0
    for step in range(200):
        body = code_text(5, step)
        new = tool_turn(step, body)
        history.extend(new)
        total_chars += len(body) + 200
        before = spy.chars
        estimate = acc.estimate(history, tools)
        assert spy.chars - before < 2 * (len(body) + 200)  # only the new messages were counted
        truth = int(acc.raw_total(history, tools) * 1.3)  # a server that counts 30% more
        if step > 3:
            assert abs(estimate - truth) / truth < 0.02
        acc.observe(history, tools, truth, estimate)
    assert spy.chars < 2 * total_chars
    assert acc.correction == pytest.approx(1.3, rel=0.01)
    assert acc.estimate(history, tools) == truth  # nothing new since the last response: the server's number
    assert acc.estimate_unanchored(history, tools) == pytest.approx(truth, rel=0.01)


def test_breakdown_covers_every_category() -> None:
    acc = TokenAccountant(EstimateCounter())
    history = [
        {"role": "system", "content": "system prompt here"},
        {"role": "user", "content": "please fix the bug"},
        *tool_turn(0, "def f(): pass"),
        {"role": "assistant", "reasoning_content": "done now", "content": "Fixed."},
    ]
    tools = [{"type": "function", "function": {"name": "read_file"}}]
    b = acc.breakdown(history, tools)
    d = b.as_dict()
    assert all(d[k] > 0 for k in ("system", "tools", "user", "assistant", "reasoning", "tool_calls", "tool_results"))
    assert b.total == d["total"]
    assert abs(b.total - acc.estimate_unanchored(history, tools)) <= len(d)  # per-category rounding only


def test_images_are_estimated_from_their_size() -> None:
    import struct
    import zlib

    def png(w: int, h: int) -> str:
        ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
        chunk = struct.pack(">I", 13) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
        return "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n" + chunk).decode()

    assert image_tokens(png(280, 280)) == 100
    assert image_tokens(png(8000, 8000)) == image_tokens(png(2048, 2048))
    assert image_tokens("https://example.com/cat.png") == 1024
    acc = TokenAccountant(EstimateCounter())
    msg = {
        "role": "user",
        "content": [
            {"type": "text", "text": "what is this"},
            {"type": "image_url", "image_url": {"url": png(560, 280)}},
        ],
    }
    assert acc.breakdown([msg]).user >= 200


def test_budget_is_window_minus_reserve_minus_margin() -> None:
    b = Budget.make(1_048_576, 32_768)
    assert b.input_budget == 1_048_576 - 32_768 - 20_971
    assert b.prune_at == int(b.input_budget * 0.7) and b.compact_at == int(b.input_budget * 0.85)
    with pytest.raises(ValueError, match="leaves only"):
        Budget.make(8_000, 32_768)
    with pytest.raises(ValueError, match="compact_threshold"):
        Budget.make(100_000, 1_000, compact_threshold=1.5)


def test_context_length_messages_are_parsed() -> None:
    moonshot = "Invalid request: Your request exceeded model token limit: 262144 (requested: 269030)"
    assert parse_overflow(moonshot, 32_768) == (269_030 - 32_768, 262_144)
    openai = "This model's maximum context length is 128000 tokens. However, your messages resulted in 130512 tokens."
    assert parse_overflow(openai, 4_096) == (130_512, 128_000)
    assert parse_overflow("Input token length too long", 1_000) == (None, None)


# -- flood protection -------------------------------------------------------------------------------


def test_token_cap_applies_to_dense_text_under_the_character_cap(tmp_path: Path) -> None:
    est = EstimateCounter()
    text = "\n".join(f"{i:05d} 令牌数量上下文管理器" for i in range(3000))  # ~45k chars, dense in tokens
    assert len(text) < 100_000 and est.count(text) > 20_000
    out = cap_output(text, 100_000, tmp_path, "dense", max_tokens=5_000, count=est.count)
    kept = out.split("\n\n… [", 1)[0] + out.rsplit("] …\n\n", 1)[1]
    assert est.count(kept) <= 5_000
    assert out.startswith("00000 ") and out.rstrip().endswith("02999 令牌数量上下文管理器")
    path = Path(out.split("saved at ", 1)[1].split(": use read_file", 1)[0])
    assert path.parent == tmp_path and path.read_text() == text
    line = int(out.split("starts at line ", 1)[1].split(")", 1)[0].replace(",", ""))
    head = out.split("\n\n… [", 1)[0]
    assert head.splitlines()[-1] == text.splitlines()[line - 2]  # the head ends just before that line
    assert cap_output(text, 100_000, None, "x", max_tokens=5_000, count=est.count).count("not available") == 1
    small = "short output"
    assert cap_output(small, 100_000, tmp_path, "s", max_tokens=5_000, count=est.count) is small


# -- pruning ----------------------------------------------------------------------------------------


def test_prune_replaces_only_old_tool_results_and_saves_them(tmp_path: Path) -> None:
    acc = TokenAccountant(EstimateCounter())
    history: list[dict[str, Any]] = [{"role": "system", "content": "sys"}, {"role": "user", "content": "go"}]
    bodies = [code_text(60, i) for i in range(10)]
    for i, body in enumerate(bodies):
        history.extend(tool_turn(i, body))
    assistants = [m for m in history if m["role"] == "assistant"]
    per_result = acc.message_tokens(history[3])
    plan = plan_prune(history, acc, keep_tokens=per_result * 3 + 10)
    assert len(plan.indices) == 7 and plan.freed > per_result * 5
    result = apply_prune(history, plan, acc, tmp_path)
    assert [m for m in history if m["role"] == "assistant"] == assistants
    assert all(a is b for a, b in zip([m for m in history if m["role"] == "assistant"], assistants, strict=True))
    tools = [m for m in history if m["role"] == "tool"]
    assert all(t["content"].startswith(PRUNED_PREFIX) for t in tools[:7])
    assert [t["content"] for t in tools[7:]] == bodies[7:]
    first = tools[0]["content"]
    assert 'read_file({"path": "src/mod0.py"})' in first and "functions.read_file:0" not in first.split("saved at")[0]
    saved = Path(first.split("saved at ", 1)[1].split(": read it", 1)[0])
    assert saved.read_text() == bodies[0]
    assert len(result.replaced) == 7 and result.freed > 0
    assert_valid_history(history[1:])
    assert plan_prune(history, acc, keep_tokens=per_result * 3 + 10).indices == []  # nothing left to prune


# -- compaction -------------------------------------------------------------------------------------


class FakeSummarizer:
    def __init__(self, reply: str = "## Goal\nthe goal\n## Done\n- step one", fail: LLMError | None = None) -> None:
        self.reply = reply
        self.fail = fail
        self.requests: list[list[dict[str, Any]]] = []

    async def __call__(self, request: list[dict[str, Any]]) -> tuple[str, int]:
        self.requests.append(request)
        if self.fail is not None:
            raise self.fail
        return self.reply, 0


def session(turns: int, lines: int = 40) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "sys prompt"},
        {"role": "user", "content": "FIRST: fix the parser"},
    ]
    for i in range(turns):
        history.extend(tool_turn(i, code_text(lines, i)))
        if i % 5 == 4:
            history.append({"role": "assistant", "reasoning_content": "ok", "content": f"Finished part {i}."})
            history.append({"role": "user", "content": f"now do part {i + 1}"})
    return history


def test_compaction_keeps_system_users_summary_and_recent_turns() -> None:
    acc = TokenAccountant(EstimateCounter())
    budget = Budget.make(60_000, 4_000)
    history = session(30)
    summarizer = FakeSummarizer()
    result = asyncio.run(compact_history(history, [], accountant=acc, budget=budget, summarize=summarizer))
    assert result is not None and not result.fallback
    new = history[: result.start] + result.messages + history[result.end :]
    assert new[0] is history[0]
    users = [m["content"] for m in new if m["role"] == "user" and not is_summary(m)]
    assert users[0] == "FIRST: fix the parser" and users == [m["content"] for m in history if m["role"] == "user"]
    summaries = [m for m in new if is_summary(m)]
    assert len(summaries) == 1 and "## Done\n- step one" in summaries[0]["content"]
    tail = new[new.index(summaries[0]) + 1 :]
    assert tail and all(any(m is h for h in history) for m in tail)  # recent turns kept verbatim (same objects)
    assert_valid_history(new[1:])
    assert acc.estimate_unanchored(new) <= budget.input_budget * 0.6
    transcript = summarizer.requests[0][1]["content"]
    assert '{"path": "src/mod0.py"}' in transcript  # the summariser sees tool-call arguments
    assert "### assistant reasoning" in transcript


def test_a_big_transcript_is_summarised_in_parts_that_each_fit() -> None:
    acc = TokenAccountant(EstimateCounter())
    budget = Budget.make(12_000, 2_000)
    history = session(80, lines=30)
    assert acc.estimate_unanchored(history) > 3 * budget.input_budget
    summarizer = FakeSummarizer()
    result = asyncio.run(compact_history(history, [], accountant=acc, budget=budget, summarize=summarizer))
    assert result is not None and len(summarizer.requests) >= 3
    for request in summarizer.requests:
        assert acc.estimate_unanchored(request) <= budget.input_budget
    assert all("<summary-so-far>" in r[1]["content"] for r in summarizer.requests[1:])
    assert max(result.requests) <= budget.input_budget


def test_model_failure_falls_back_to_a_deterministic_summary() -> None:
    acc = TokenAccountant(EstimateCounter())
    budget = Budget.make(60_000, 4_000)
    history = session(30)
    history.insert(2, summary_message("## Done\n- Task A is finished"))
    bash_id = "functions.bash:99"
    history[3:3] = [
        {
            "role": "assistant",
            "reasoning_content": "",
            "content": "",
            "tool_calls": [
                {
                    "id": bash_id,
                    "type": "function",
                    "function": {"name": "bash", "arguments": json.dumps({"command": "pytest -q"})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": bash_id, "content": "collected 3 items\n3 passed in 0.1s"},
    ]
    summarizer = FakeSummarizer(fail=LLMError("HTTP 400: nope", "bad_request", 400))
    result = asyncio.run(
        compact_history(
            history, [], accountant=acc, budget=budget, summarize=summarizer, tool_kinds={"read_file": "read"}
        )
    )
    assert result is not None and result.fallback and result.error == "HTTP 400: nope"
    text = result.summary
    assert "Task A is finished" in text
    assert "FIRST: fix the parser" in text
    assert "src/mod0.py (read_file)" in text
    assert "`pytest -q` → collected 3 items / 3 passed in 0.1s" in text
    assert "Finished part" in text  # the last assistant text


def test_fallback_summary_lists_changed_files_by_tool_kind() -> None:
    msgs = tool_turn(1, "ok", name="write_file") + tool_turn(2, "ok", name="custom_save")
    out = fallback_summary(msgs, {"custom_save": "edit"}, None)
    assert "## Files changed\n- src/mod1.py (write_file)\n- src/mod2.py (custom_save)" in out


def test_compaction_fits_even_when_the_last_turn_is_huge(tmp_path: Path) -> None:
    acc = TokenAccountant(EstimateCounter())
    budget = Budget.make(30_000, 2_000)
    history = session(10)
    history.extend(tool_turn(100, code_text(4_000, 7)))  # one tool result of several times the budget
    assert acc.estimate_unanchored(history) > budget.input_budget
    result = asyncio.run(
        compact_history(history, [], accountant=acc, budget=budget, summarize=FakeSummarizer(), spill_dir=tmp_path)
    )
    assert result is not None
    new = history[: result.start] + result.messages + history[result.end :]
    assert acc.estimate_unanchored(new) <= budget.input_budget * 0.6
    assert_valid_history(new[1:])
    last = new[-1]
    assert last["role"] == "tool" and "cut when the context was compacted" in last["content"]
    saved = Path(last["content"].split("saved at ", 1)[1].split(" …]", 1)[0])
    assert saved.read_text() == history[-1]["content"]


def test_long_user_messages_are_cut_with_a_marker_and_short_ones_kept() -> None:
    acc = TokenAccountant(EstimateCounter())
    budget = Budget.make(60_000, 4_000)
    history = session(20)
    long_text = code_text(2_000, 3)
    history.insert(4, {"role": "user", "content": long_text})
    settings = CompactionSettings(user_message_tokens=1_000)
    result = asyncio.run(
        compact_history(history, [], accountant=acc, budget=budget, summarize=FakeSummarizer(), settings=settings)
    )
    assert result is not None
    users = [m["content"] for m in result.messages if m["role"] == "user" and not is_summary(m)]
    assert users[0] == "FIRST: fix the parser"
    cut = [u for u in users if "cut from the middle of this message" in u]
    assert len(cut) == 1 and cut[0].startswith(long_text[:200]) and cut[0].endswith(long_text[-100:])


def test_nothing_to_compact_returns_none() -> None:
    acc = TokenAccountant(EstimateCounter())
    history = [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}]
    result = asyncio.run(
        compact_history(history, [], accountant=acc, budget=Budget.make(60_000, 4_000), summarize=FakeSummarizer())
    )
    assert result is None


# -- replay -----------------------------------------------------------------------------------------


def test_replay_rebuilds_the_history_after_prune_and_compaction() -> None:
    base = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u"},
        *tool_turn(0, "big"),
        *tool_turn(1, "x"),
    ]
    records: list[dict[str, Any]] = [{"type": "meta"}] + [{"type": "message", "message": m} for m in base]
    placeholder = {"role": "tool", "tool_call_id": "functions.read_file:0", "content": PRUNED_PREFIX + ": ...]"}
    records.append({"type": "prune", "replace": [[3, placeholder]]})
    summary = summary_message("sum")
    records.append({"type": "compaction", "start": 1, "end": 4, "messages": [base[1], summary]})
    records.append({"type": "message", "message": {"role": "user", "content": "next"}})
    assert replay(records) == [base[0], base[1], summary, *base[4:], {"role": "user", "content": "next"}]
    assert not apply_record([], {"type": "prune", "replace": [[5, placeholder]]})  # out of range: ignored
    assert not apply_record([], {"type": "compaction", "start": 0, "end": 3, "messages": []})
    assert SUMMARY_MARKER in summary["content"]
