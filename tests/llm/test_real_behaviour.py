"""Behaviour the real llama.cpp and LiteLLM servers showed (issue 21), reproduced with the fake server so it is
checked in the quick loop too: a template that leaves tools out of the count, per-slot windows, a restart with
another window, overflow retries that keep the prompt whole, calibration across processes, Retry-After forms,
non-API answers, an explicit --max-retries, tool_choice, and the compact tool set of small windows."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from kimicode import Agent, AgentOptions
from kimicode.context.toolfit import fit_tools, shorten
from kimicode.events import Event, Notice
from kimicode.llm.client import ChatClient, ClientConfig
from kimicode.llm.discovery import discover_server
from kimicode.llm.errors import LLMError, classify_status, parse_retry_after
from kimicode.session.log import iter_records
from kimicode.testing import ErrorReply, FakeServer, RawReply, RecordedRequest, Reply, ToolCall
from kimicode.tools.registry import ToolRegistry, builtin_tools


def agent_for(server: FakeServer, ws: Path, home: Path, **kwargs: Any) -> Agent:
    opts: dict[str, Any] = {
        "base_url": server.base_url,
        "api_key": "sk-test",
        "model": "smollm2-135m",
        "retry_base_delay": 0.01,
    }
    opts.update(kwargs)
    return Agent(AgentOptions.from_workspace(ws, home=home), **opts)


@pytest.fixture
def llamacpp() -> Any:
    with FakeServer(dialect="llamacpp", context_window=4096) as fake:
        fake.tools_counted = False  # SmolLM2's template on llama.cpp
        yield fake


# -- the fake server reproduces behaviour ----------------------------------------------------------


def test_fake_llamacpp_leaves_tools_out_of_its_count_and_says_so(llamacpp: FakeServer, tmp_path: Path) -> None:
    info = asyncio.run(discover_server(llamacpp.base_url, "k", "smollm2-135m", tmp_path))
    assert info is not None and info.tools_rendered is False and info.window == 4096
    llamacpp.add(Reply(content="a"))
    tools = ToolRegistry(builtin_tools()).schemas()
    client = ChatClient(ClientConfig(base_url=llamacpp.base_url, api_key="k", model="m"))

    async def ask() -> Any:
        done = None
        async for ev in client.stream([{"role": "user", "content": "hi"}], tools):
            done = ev
        await client.aclose()
        return done

    done = asyncio.run(ask())
    body_bytes = len(llamacpp.requests[0].raw)
    assert done.usage["prompt_tokens"] < body_bytes // 4 // 5  # the 14 KB of schemas are not counted


def test_fake_slots_split_the_window_and_restart_changes_it(tmp_path: Path) -> None:
    with FakeServer(dialect="llamacpp", context_window=8192) as fake:
        fake.slots = 2
        info = asyncio.run(discover_server(fake.base_url, "k", "m", tmp_path))
        assert info is not None and (info.window, info.slots) == (4096, 2)
        fake.restart(2048, slots=1)
        again = asyncio.run(discover_server(fake.base_url, "k", "m", tmp_path))
        assert again is not None and again.window == 2048 and again.fingerprint != info.fingerprint
        assert fake.context_error(3000).status == 400


# -- never answer with less than was asked --------------------------------------------------------


def test_an_overflow_retry_keeps_the_prompt_whole_and_the_completion_budget(tmp_path: Path) -> None:
    """The server's window is smaller than kimicode was told; its error teaches the window, and the retry sends
    the user's prompt whole with the completion budget that was asked for."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "big.txt").write_text("\n".join(f"row {i} " + "data " * 12 for i in range(300)))
    prompt = "BEGIN " + "please summarise big.txt carefully. " * 40 + "END"
    with FakeServer(dialect="llamacpp") as fake:
        fake.context_limit = 2048
        fake.tools_counted = False

        def answer(req: RecordedRequest) -> Reply:
            if "tools" not in req.body:
                return Reply(content="## Goal\nsummarise big.txt")
            if req.body["messages"][-1]["role"] == "user":
                return Reply(tool_calls=[ToolCall("read_file", {"path": "big.txt"})])
            return Reply(content="done", finish_reason="length")

        fake.add(*[answer] * 20)
        agent = agent_for(fake, ws, tmp_path / "home", context_window=8192, max_completion_tokens=64)
        result = agent.run_sync(prompt)
        chats = [r.body for r in fake.requests if "tools" in r.body]
    assert result.status == "success", result.error
    last = chats[-1]
    assert prompt in [m.get("content") for m in last["messages"] if m["role"] == "user"]
    assert all(b["max_completion_tokens"] == 64 for b in chats)
    assert agent.effective_window == 2048


def test_a_window_that_cannot_hold_the_prompt_is_refused_not_answered_with_one_token(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    with FakeServer(dialect="llamacpp", context_window=2048) as fake:
        fake.add(*[Reply(content="How")] * 5)
        agent = agent_for(fake, ws, tmp_path / "home", tools=[], system_prompt="s")
        result = agent.run_sync("word " * 3000)
        asked = [r.body.get("max_completion_tokens") for r in fake.requests]
    assert result.status == "error" and "context window" in str(result.error)
    assert all(a is None or a >= 256 for a in asked)


@pytest.mark.parametrize(("explicit", "status"), [(None, "error"), (512, "success")])
def test_an_answer_cut_by_a_limit_the_user_did_not_set_is_not_success(
    explicit: int | None, status: str, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    with FakeServer(dialect="llamacpp", context_window=4096) as fake:
        fake.add(Reply(content="How", finish_reason="length"))
        agent = agent_for(fake, ws, tmp_path / "home", tools=[], max_completion_tokens=explicit)
        result = agent.run_sync("explain")
    assert result.status == status
    if status == "error":
        assert result.error is not None and result.error.kind == "truncated" and "cut off" in str(result.error)
        assert result.result == "How"  # the partial answer is still given, but not as done


def test_the_servers_count_below_the_estimate_is_learnt_too(tmp_path: Path) -> None:
    from kimicode.context.manager import ContextManager

    ctx = ContextManager(window=4096, reserve=256)
    msgs = [{"role": "system", "content": "x " * 2000}, {"role": "user", "content": "hi"}]
    ctx.last_estimate = ctx.estimate(msgs)
    ctx.accountant.overflowed(ctx.last_estimate, ctx.last_estimate // 3)
    assert ctx.accountant.correction < 0.5


# -- small windows --------------------------------------------------------------------------------


def test_the_compact_tool_set_shortens_then_drops_but_keeps_the_core() -> None:
    tools = ToolRegistry(builtin_tools()).schemas()
    size = len(json.dumps(tools))
    short = shorten(tools)
    assert len(json.dumps(short)) < size / 2
    assert [t["function"]["name"] for t in short] == [t["function"]["name"] for t in tools]

    def cost(ts: Any) -> int:
        return len(json.dumps(list(ts))) // 4

    fitted, note = fit_tools(tools, cost, cost(short) // 2)
    names = [t["function"]["name"] for t in fitted]
    assert "read_file" in names and len(names) < len(tools) and "left out" in note
    assert fit_tools(tools, cost, 10**6) == (tools, "")


def test_a_4k_window_without_server_counts_uses_a_compact_tool_set_instead_of_refusing(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    events: list[Event] = []
    with FakeServer(dialect="vllm") as fake:  # no /props: nothing says the template leaves the tools out
        fake.add(Reply(content="hello"))
        agent = agent_for(fake, ws, tmp_path / "home", context_window=4096, on_event=events.append)
        result = agent.run_sync("hi")
        sent = fake.requests[0].body
    assert result.status == "success", result.error
    assert len(json.dumps(sent["tools"])) < len(json.dumps(ToolRegistry(builtin_tools()).schemas()))
    assert any(isinstance(e, Notice) and "tool" in e.text and "fit the context window" in e.text for e in events)


# -- calibration persists, and is dropped when the server changes ---------------------------------


def test_calibration_is_kept_across_processes_and_dropped_when_the_server_changes(tmp_path: Path) -> None:
    ws, home = tmp_path / "ws", tmp_path / "home"
    ws.mkdir()
    with FakeServer(dialect="vllm", context_window=8192) as fake:
        fake.tools_counted = False  # a template without tools, on a server that cannot say so
        fake.add(*[Reply(content="ok")] * 6)
        first = agent_for(fake, ws, home)
        assert first.run_sync("one").status == "success"
        assert first.context.accountant.tools_in_prompt is False
        # a new process on the same server starts calibrated: its first estimate is close to the count
        second = agent_for(fake, ws, home)
        assert second.run_sync("two").status == "success"
        assert second.context.calibration_source == "restored"
        records = [r for r in iter_records(second.log.path) if r["type"] == "usage"]  # type: ignore[union-attr]
        count = records[0]["usage"]["prompt_tokens"]
        assert abs(records[0]["estimate"] - count) / count < 0.25
        # the session carries it too (resume), and a restarted server with another window drops it
        fake.restart(4096)
        resumed = Agent.resume(
            second.session_id,
            options=AgentOptions.from_workspace(ws, home=home),
            base_url=fake.base_url,
            api_key="sk-test",
            model="smollm2-135m",
        )
        events: list[Event] = []
        resumed.on_event = events.append
        assert resumed.run_sync("three").status == "success"
        assert resumed.context.calibration_source != "restored"
        assert resumed.context_window == 4096


# -- retries ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "body", "seconds"),
    [
        ({"retry-after": "7"}, None, 7.0),
        ({"Retry-After-Ms": "1500"}, None, 1.5),
        ({"llm_provider-retry-after": "60"}, None, 60.0),
        ({"llm_provider-retry-after-ms": "250"}, None, 0.25),
        ({}, {"error": {"message": "slow down", "retry_after": 3}}, 3.0),
        ({}, {"retry_after": "2.5"}, 2.5),
        ({"retry-after": "soon"}, None, None),
        ({"retry-after": "nan"}, None, None),
    ],
)
def test_every_retry_after_form(headers: dict[str, str], body: Any, seconds: float | None) -> None:
    assert parse_retry_after(headers, body) == seconds


@pytest.mark.prepush
def test_litellm_retry_after_is_honoured(tmp_path: Path) -> None:
    with FakeServer(dialect="litellm") as fake:
        fake.add(fake.error("rate_limit"), Reply(content="ok"))
        client = ChatClient(ClientConfig(base_url=fake.base_url, api_key="k", model="m", retry_base_delay=0.01))

        async def run() -> list[Any]:
            out = [ev async for ev in client.stream([{"role": "user", "content": "hi"}])]
            await client.aclose()
            return out

        events = asyncio.run(run())
    assert events[0].delay == 1.0  # the proxy's llm_provider-retry-after, not a 10 ms backoff


@pytest.mark.parametrize(
    ("status", "headers", "body"),
    [
        (501, {"content-type": "application/json"}, {"error": "not implemented"}),
        (404, {"content-type": "text/html"}, "<!DOCTYPE html><html>nope</html>"),
        (405, {}, "<html><body>Method Not Allowed</body></html>"),
    ],
)
def test_non_api_answers_fail_fast(status: int, headers: dict[str, str], body: Any) -> None:
    err = classify_status(status, "x", None, headers, body=body)
    assert err.kind == "bad_request" and not err.transient and "base URL" in err.message


def test_an_html_gateway_error_is_still_retried() -> None:
    assert classify_status(502, "Bad Gateway", None, {"content-type": "text/html"}, body="<html>").transient


def test_an_html_page_answering_the_chat_request_fails_at_once() -> None:
    with FakeServer() as fake:
        fake.add(RawReply(b"<!DOCTYPE html><html>welcome</html>", 200, {"Content-Type": "text/html"}))
        client = ChatClient(ClientConfig(base_url=fake.base_url, api_key="k", model="m", retry_base_delay=0.01))

        async def run() -> None:
            try:
                async for _ in client.stream([{"role": "user", "content": "hi"}]):
                    pass
            finally:
                await client.aclose()

        start = time.monotonic()
        with pytest.raises(LLMError, match="HTML page"):
            asyncio.run(run())
        assert len(fake.requests) == 1 and time.monotonic() - start < 5


def test_an_explicit_max_retries_wins_over_fail_fast_for_a_server_not_up_yet() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = ClientConfig(
        base_url=f"http://127.0.0.1:{port}/v1", api_key="k", model="m", max_retries=3, retry_base_delay=0.01
    )

    async def count(cfg: ClientConfig) -> int:
        client = ChatClient(cfg)
        retries = 0
        try:
            async for ev in client.stream([{"role": "user", "content": "hi"}]):
                retries += hasattr(ev, "attempt")
        except LLMError:
            pass
        finally:
            await client.aclose()
        return retries

    assert asyncio.run(count(config)) == 1  # default: a URL that never answered fails fast
    config.retries_explicit = True
    assert asyncio.run(count(config)) == 3


# -- tool_choice ------------------------------------------------------------------------------------


def test_tool_choice_is_sent_only_with_tools(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    with FakeServer() as fake:
        fake.add(Reply(content="a"), Reply(content="b"))
        agent_for(fake, ws, tmp_path / "home", tool_choice="required").run_sync("hi")
        agent_for(fake, ws, tmp_path / "home", tool_choice="read_file", tools=[]).run_sync("hi")
        first, second = (r.body for r in fake.requests)
    assert first["tool_choice"] == "required"
    assert "tool_choice" not in second
    with pytest.raises(ValueError, match="tool_choice"):
        AgentOptions(tool_choice="call everything!")


def test_tool_choice_from_the_model_config(tmp_path: Path) -> None:
    ws, home = tmp_path / "ws", tmp_path / "home"
    ws.mkdir()
    home.mkdir()
    (home / "config.toml").write_text('[models.local]\nmodel = "smollm2-135m"\ntool_choice = "read_file"\n')
    with FakeServer() as fake:
        fake.add(Reply(content="a"))
        agent = Agent(AgentOptions.from_workspace(ws, home=home), base_url=fake.base_url, api_key="k", model="local")
        agent.run_sync("hi")
    assert fake.requests[0].body["tool_choice"] == {"type": "function", "function": {"name": "read_file"}}


def test_an_error_reply_with_retry_after_in_the_body(tmp_path: Path) -> None:
    with FakeServer() as fake:
        body = json.dumps({"error": {"message": "busy", "type": "rate_limit", "retry_after": 0.05}})
        fake.add(ErrorReply(429, body=body), Reply(content="ok"))
        client = ChatClient(ClientConfig(base_url=fake.base_url, api_key="k", model="m", retry_base_delay=5))

        async def run() -> list[Any]:
            out = [ev async for ev in client.stream([{"role": "user", "content": "hi"}])]
            await client.aclose()
            return out

        events = asyncio.run(run())
    assert events[0].delay == 0.05


def test_a_second_cut_points_at_the_complete_output_not_a_partial_copy(tmp_path: Path) -> None:
    from kimicode.context.output import cap_output
    from kimicode.context.prune import placeholder

    spill_dir = tmp_path / "spill"
    full = "\n".join(f"line {i} " + "x" * 60 for i in range(5_000))
    first = cap_output(full, 20_000, spill_dir, "bash")
    [saved] = list(spill_dir.iterdir())
    assert saved.read_text() == full
    second = cap_output(first, 4_000, spill_dir, "tool")  # capped again (a smaller window's cap)
    third = placeholder({"role": "tool", "tool_call_id": "c1", "content": second}, ("bash", "{}"), 900, spill_dir)
    assert str(saved) in second and str(saved) in third
    assert list(spill_dir.iterdir()) == [saved]  # no 3.5 KB / 40 KB partial copies


@pytest.mark.parametrize(
    "entry",
    [
        "not a dict",
        {"fingerprint": "", "at": "yesterday", "correction": 1.0, "weight": 5},
        {"fingerprint": "", "at": 0, "correction": 1.0, "weight": 5},  # too old
        {"fingerprint": "", "at": 4e9, "correction": 1.0, "weight": 5},  # from the future
        {"fingerprint": "", "at": None, "correction": float("nan"), "weight": 5},
    ],
)
def test_a_hostile_or_stale_calibration_file_is_ignored(entry: Any, tmp_path: Path) -> None:
    from kimicode.context import calibration

    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "calibration.json").write_text(json.dumps({"http://x/v1|m": entry}))
    assert calibration.load(tmp_path, "http://x/v1", "m", "") is None


@pytest.mark.parametrize(
    "state",
    [
        {"correction": float("nan"), "weight": 5},
        {"correction": 50.0, "weight": 5},
        {"correction": 1.0, "weight": -1},
        {"correction": "1.0", "weight": 5},
        {"correction": True, "weight": True},
        {},
    ],
)
def test_a_restored_state_outside_the_bounds_is_refused(state: dict[str, Any]) -> None:
    from kimicode.context.manager import ContextManager

    ctx = ContextManager(window=8192, reserve=1024)
    assert ctx.restore_calibration(state) is False and ctx.accountant.correction == 1.0
    assert ctx.calibration_source == "none"


def test_props_saying_the_template_renders_no_tools_wins_over_the_heuristic_in_every_process(
    tmp_path: Path,
) -> None:
    """SmolLM2's template on llama.cpp: `/props` says tools are not rendered. A later process whose first count
    is of a long history used to conclude from the ratio that they are, then estimated new messages low."""
    ws, home = tmp_path / "ws", tmp_path / "home"
    ws.mkdir()
    notes = "\n".join(f"note {i}: the value of item {i} is {i * 37 % 101}" for i in range(600))
    with FakeServer(dialect="llamacpp", context_window=16384) as fake:
        fake.tools_counted = False
        fake.add(*[Reply(content="noted")] * 6)
        first = agent_for(fake, ws, home)
        assert first.run_sync("Hello.").status == "success"
        assert first.run_sync("Keep these notes:\n" + notes).status == "success"
        assert first.context.accountant.tools_in_prompt is False
        asyncio.run(first.aclose())
        second = Agent.resume(
            first.session_id,
            options=AgentOptions.from_workspace(ws, home=home),
            base_url=fake.base_url,
            api_key="sk-test",
            model="smollm2-135m",
        )
        assert second.run_sync("What is the value of item 7?").status == "success"
        assert second.run_sync("And item 8?").status == "success"
        assert second.context.accountant.tools_in_prompt is False
        records = [r for r in iter_records(second.log.path) if r["type"] == "usage"]  # type: ignore[union-attr]
    last = records[-1]
    count = last["usage"]["prompt_tokens"]
    assert abs(last["estimate"] - count) / count < 0.1, (last["estimate"], count)
