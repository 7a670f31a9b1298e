"""Issue 11's edges: calibration that cannot collapse, honest results, clear endpoint errors, fast failure,
and compaction notices that say exactly what happened."""

from __future__ import annotations

import asyncio
import json
import random
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import free_port, kimicode_command

from kimicode import Agent, tool
from kimicode.config.endpoint import ConfigError, check_base_url, check_model, resolve_endpoint
from kimicode.context.accounting import CORRECTION_BOUNDS, TokenAccountant
from kimicode.context.budget import Budget
from kimicode.context.compact import CompactionResult, compact_history
from kimicode.context.tokens import EstimateCounter
from kimicode.events import Event, Notice, Retrying
from kimicode.testing import ErrorReply, FakeServer, Reply, ToolCall

WORDS = ["value", "return", "self", "config", "path", "the", "request", "token", "items", "count", "def", "x"]


def code_text(lines: int, seed: int) -> str:
    rng = random.Random(seed)
    return "\n".join(
        f"    {rng.choice(WORDS)}_{rng.choice(WORDS)} = {rng.randint(0, 9999)}  # "
        + " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9)))
        for _ in range(lines)
    )


def tools_schema(n: int) -> list[dict[str, Any]]:
    """A large tools array (as MCP servers bring): many schemas with long descriptions."""
    return [
        {
            "type": "function",
            "function": {
                "name": f"tool_{i}",
                "description": code_text(12, i),
                "parameters": {"type": "object", "properties": {"path": {"type": "string", "description": "x " * 40}}},
            },
        }
        for i in range(n)
    ]


_PIECE = re.compile(r"[A-Za-z]{1,8}|\d{1,3}|[^\sA-Za-z\d]{1,2}|\s+")


def server_tokens(text: str) -> int:
    """The server's own tokenizer (not kimicode's): letter runs of up to 8, digit runs of 3, punctuation pairs."""
    return len(_PIECE.findall(text))


def server_count(messages: list[dict[str, Any]], tools: list[dict[str, Any]], with_tools: bool) -> int:
    """What the server reports as prompt_tokens; its chat template may leave the tool schemas out."""
    n = sum(
        3 + server_tokens(str(m.get("content") or "")) + server_tokens(json.dumps(m.get("tool_calls") or ""))
        for m in messages
    )
    return n + (server_tokens(json.dumps(tools)) if with_tools else 0)


@pytest.mark.parametrize("with_tools", [True, False], ids=["template-with-tools", "template-without-tools"])
def test_calibration_keeps_new_messages_within_ten_percent(with_tools: bool) -> None:
    acc = TokenAccountant(EstimateCounter())
    tools = tools_schema(40)
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent. Use the tools to read and change files.\n" * 20},
        {"role": "user", "content": "fix the failing test in tests/test_parser.py"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "functions.read_file:0",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "src/parser.py"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "functions.read_file:0", "content": code_text(60, 1)},
    ]
    acc.observe(history, tools, server_count(history, tools, with_tools))
    low, high = CORRECTION_BOUNDS
    assert low <= acc.correction <= high
    assert acc.tools_in_prompt is with_tools
    # The case: one calibrating request, then a new tool result of thousands of tokens.
    big = {"role": "tool", "tool_call_id": "functions.bash:1", "content": code_text(700, 3)}
    call = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "functions.bash:1",
                "type": "function",
                "function": {"name": "bash", "arguments": '{"command": "x"}'},
            }
        ],
    }
    new = [*history, call, big]
    anchor = server_count(history, tools, with_tools)
    truth = server_count(new, tools, with_tools) - anchor
    estimated = acc.estimate(new, tools) - anchor
    assert abs(estimated - truth) <= 0.10 * truth, (estimated, truth)
    # ... and the whole request estimated without the anchor (as after a compaction) is within 10% too.
    whole, real = acc.estimate_unanchored(new, tools), server_count(new, tools, with_tools)
    assert abs(whole - real) <= 0.10 * real, (whole, real)


def test_absurd_server_counts_cannot_drag_the_correction_out_of_bounds() -> None:
    counter = EstimateCounter()
    acc = TokenAccountant(counter)
    msgs = [{"role": "user", "content": code_text(50, 1)}]
    for server in (1, 10**9, 3, 10**8):
        acc.observe(list(msgs), [], server)
        msgs = [*msgs, {"role": "assistant", "content": code_text(5, server % 97)}]
        assert CORRECTION_BOUNDS[0] <= acc.correction <= CORRECTION_BOUNDS[1]
    acc.overflowed(10, 10**9)
    assert acc.correction <= CORRECTION_BOUNDS[1]


def test_pruning_starts_on_time_when_the_template_omits_the_tools(tmp_path: Path) -> None:
    """The issue's collapse end to end: schemas of ~5k tokens the server never counts, then a big result."""
    bulky = tools_schema(40)
    sizes: list[int] = []

    def answer(req: Any) -> Reply | ErrorReply:
        body = req.body
        n = server_count(body["messages"], body.get("tools") or [], False)
        sizes.append(n + body.get("max_completion_tokens", 0))
        if n + body.get("max_completion_tokens", 0) > 12_000:
            return ErrorReply(
                400,
                f"This model's maximum context length is 12000 tokens. However, your messages resulted in {n} tokens.",
                "invalid_request_error",
            )
        last = body["messages"][-1]
        if last["role"] == "user" and len(body["messages"]) < 4:
            return Reply(
                tool_calls=[ToolCall("produce", {"n": 380, "seed": 1})],
                usage={"prompt_tokens": n, "completion_tokens": 5, "total_tokens": n + 5},
            )
        if last["role"] == "tool" and sum(m["role"] == "tool" for m in body["messages"]) < 3:
            k = sum(m["role"] == "tool" for m in body["messages"])
            return Reply(
                tool_calls=[ToolCall("produce", {"n": 380, "seed": k + 1})],
                usage={"prompt_tokens": n, "completion_tokens": 5, "total_tokens": n + 5},
            )
        return Reply(content="done", usage={"prompt_tokens": n, "completion_tokens": 2, "total_tokens": n + 2})

    @tool(kind="read")
    def produce(n: int, seed: int) -> str:
        """Produce n lines of code-like text."""
        return code_text(n, seed)

    extra = [
        tool(kind="read", name=t["function"]["name"], description=t["function"]["description"])(lambda path="": "")
        for t in bulky
    ]
    with FakeServer([answer] * 20) as server:
        agent = Agent(
            base_url=server.base_url,
            api_key="sk-test",
            model="local-model",
            workspace=tmp_path,
            home=tmp_path / "home",
            tools=[produce, *extra],
            context_window=12_000,
            max_completion_tokens=1_000,
            retry_base_delay=0.01,
            persist=False,
        )
        result = agent.run_sync("go")
    assert result.ok, result.error
    assert max(sizes) <= 12_000  # the window was never overflowed: pruning/compaction started in time
    assert agent.context.accountant.tools_in_prompt is False


# -- honest results -------------------------------------------------------------------------------


def test_a_failed_turn_never_reports_an_earlier_answer(make_agent: Callable[..., Agent], server: FakeServer) -> None:
    server.add(Reply(content="the OLD answer"), ErrorReply(400, "bad request: nope", "invalid_request_error"))
    agent = make_agent()
    assert agent.run_sync("first").result == "the OLD answer"
    failed = agent.run_sync("second")
    assert failed.status == "error" and failed.result == "" and "nope" in (failed.error or "")


@pytest.mark.slow
def test_text_mode_prints_nothing_on_stdout_after_an_error(server: FakeServer, tmp_path: Path) -> None:
    nope = ErrorReply(400, "bad request: nope", "invalid_request_error")
    server.add(Reply(content="the OLD answer"), nope, nope)
    env = {
        "KIMI_API_KEY": "sk-test",
        "KIMI_BASE_URL": server.base_url,
        "KIMICODE_HOME": str(tmp_path / "h"),
        "PATH": "/usr/bin:/bin",
        "KIMICODE_RETRY_BASE_DELAY": "0.01",
    }
    first = subprocess.run(
        [*kimicode_command(), "-p", "one"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert first.stdout.strip() == "the OLD answer"
    second = subprocess.run(
        [*kimicode_command(), "-c", "-p", "two"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert second.returncode == 1 and second.stdout == "" and "nope" in second.stderr
    as_json = subprocess.run(
        [*kimicode_command(), "-c", "-p", "three", "--output-format", "json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    obj = json.loads(as_json.stdout)
    assert obj["result"] == "" and obj["status"] == "error" and obj["error"]


# -- clear endpoint errors ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://localhost:99999/v1", "Port out of range"),
        ("http://127.0.0.1:abc/v1", "Port could not be cast"),
        ("localhost:8000/v1", "http:// or https://"),
        ("ftp://example.com/v1", "http:// or https://"),
        ("http://local host/v1", "spaces"),
        ("http://:80/v1", "no host"),
        ("http://[::1/v1", "Invalid IPv6"),
        ("http://example.com/v1?key=x", "query"),
        ("http://example.com:0/v1", "port 0"),
        ("http://exa\x1bmple.com", "control"),
    ],
)
def test_malformed_base_urls_are_refused_naming_their_source(url: str, why: str) -> None:
    with pytest.raises(ConfigError, match=why) as info:
        check_base_url(url, "KIMI_BASE_URL")
    assert "KIMI_BASE_URL" in str(info.value)


def test_the_source_of_a_bad_url_is_named() -> None:
    with pytest.raises(ConfigError, match="OPENAI_BASE_URL"):
        resolve_endpoint(env={"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": "http://x:70000"})
    with pytest.raises(ConfigError, match="--base-url"):
        resolve_endpoint(base_url="nope", env={"KIMI_API_KEY": "k"})
    ok = resolve_endpoint(env={"KIMI_API_KEY": "k", "KIMI_BASE_URL": "  http://127.0.0.1:8000/v1/ "})
    assert ok.base_url == "http://127.0.0.1:8000/v1" and ok.url_source == "KIMI_BASE_URL"
    for bad in ("", " ", "kimi k3", "a\tb", "x\n"):
        with pytest.raises(ConfigError, match="--model"):
            check_model(bad, "--model")


@pytest.mark.slow
def test_cli_bad_url_and_model_exit_2_with_one_clear_line(tmp_path: Path) -> None:
    base = {"KIMI_API_KEY": "sk-test", "KIMICODE_HOME": str(tmp_path / "h"), "PATH": "/usr/bin:/bin"}
    for extra_env, args, names in (
        ({}, ["--base-url", "http://localhost:99999/v1"], "--base-url"),
        ({"KIMI_BASE_URL": "http://h:abc/v1"}, [], "KIMI_BASE_URL"),
        ({"KIMI_MODEL": "two words"}, [], "KIMI_MODEL"),
    ):
        proc = subprocess.run(
            [*kimicode_command(), *args, "-p", "hi"],
            cwd=tmp_path,
            env={**base, **extra_env},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 2, proc.stderr
        assert names in proc.stderr and "Traceback" not in proc.stderr and "ExceptionGroup" not in proc.stderr


# -- unreachable endpoints fail fast; a restart is retried ---------------------------------------


def test_a_server_that_never_answered_is_retried_once(tmp_path: Path) -> None:
    events: list[Event] = []
    agent = Agent(
        base_url=f"http://127.0.0.1:{free_port()}/v1",
        api_key="sk-test",
        model="kimi-k3",
        workspace=tmp_path,
        home=tmp_path / "home",
        retry_base_delay=0.01,
        max_retries=5,
        on_event=events.append,
        persist=False,
    )
    result = agent.run_sync("hi")
    retries = [e for e in events if isinstance(e, Retrying)]
    assert result.status == "error" and result.error_kind == "transient"
    assert len(retries) == 1 and retries[0].max_retries == 1
    assert "cannot reach" in (result.error or "") and "127.0.0.1" in (result.error or "")


def test_a_server_that_answered_before_is_retried_fully_when_it_goes_away(tmp_path: Path) -> None:
    events: list[Event] = []
    server = FakeServer([Reply(content="up")]).start()
    agent = Agent(
        base_url=server.base_url,
        api_key="sk-test",
        model="kimi-k3",
        workspace=tmp_path,
        home=tmp_path / "home",
        retry_base_delay=0.01,
        max_retries=3,
        on_event=events.append,
        persist=False,
    )

    async def scenario() -> Any:
        first = await agent.run("one")
        server.stop()  # the server restarts (here: it does not come back)
        return first, await agent.run("two")

    first, second = asyncio.run(scenario())
    assert first.ok
    retries = [e for e in events if isinstance(e, Retrying)]
    assert second.status == "error" and len(retries) == 3


# -- compaction notices ---------------------------------------------------------------------------


def test_compaction_notices_say_exactly_what_happened() -> None:
    def res(**kw: Any) -> CompactionResult:
        base: dict[str, Any] = {
            "start": 1,
            "end": 5,
            "messages": [],
            "summary": "",
            "fallback": False,
            "error": None,
            "tokens_before": 9_000,
            "tokens_after": 3_000,
            "summarized": 4,
            "requests": [800],
        }
        return CompactionResult(**{**base, **kw})

    assert res().describe() == (
        "context: compacted 4 messages into a summary in 1 summary request (9,000 → 3,000 tokens)"
    )
    failed = res(fallback=True, error="HTTP 500: boom").describe()
    assert "summary request failed (HTTP 500: boom)" in failed and "built from the transcript" in failed
    shrink = res(summarized=0, requests=[], shrunk=True).describe()
    assert "0 messages" not in shrink and "no summary request was sent" in shrink and "shortened" in shrink


def test_shrinking_only_the_last_turn_sends_no_summary_request(tmp_path: Path) -> None:
    acc = TokenAccountant(EstimateCounter())
    history = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "read it"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": code_text(3_000, 9)},
    ]
    asked: list[Any] = []

    async def summarize(request: list[dict[str, Any]]) -> tuple[str, int]:
        asked.append(request)
        return "summary", 10

    result = asyncio.run(
        compact_history(
            history,
            [],
            accountant=acc,
            budget=Budget.make(20_000, 2_000),
            summarize=summarize,
            spill_dir=tmp_path,
            manual=True,
        )
    )
    assert result is not None and result.shrunk and result.summarized == 0
    assert asked == [] and not result.fallback
    assert "no summary request was sent" in result.describe()
    notices = [result.describe()]
    assert all(isinstance(Notice(n), Notice) for n in notices)
