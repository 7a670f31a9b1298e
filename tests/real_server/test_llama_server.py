"""kimicode against a real llama.cpp `llama-server` (SmolLM2-135M): windows of 2k to 32k, one and two slots.

What the dialect fakes cannot show, because they reproduce formats and not behaviour: the window per slot, a
chat template that leaves the tools out of the count, the server's own count of a request before it is sent,
prefix reuse per turn (`timings.cache_n`), a restart with another `-c`, and overflows.
Every kimicode run is its own process (`-p`, then `-c`, `--resume`, `--fork`).
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import statistics
from collections.abc import Callable
from pathlib import Path

import pytest

from kimicode.llm.discovery import count_request, discover_server

from .llama import LlamaServer, Relay, get_json, unavailable
from .sessions import NOTES, kimicode, run_session, session_records

Llama = Callable[..., LlamaServer]

pytestmark = [
    pytest.mark.real_server,
    pytest.mark.slow,
    pytest.mark.skipif(bool(unavailable()), reason=unavailable()),
    pytest.mark.xdist_group("real_server"),  # under xdist, one worker: each server configuration starts once
]


def _report(name: str, data: object) -> None:
    """Write figures for the closing note when REAL_SERVER_FIGURES names a directory."""
    folder = os.environ.get("REAL_SERVER_FIGURES")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / f"{name}.json").write_text(json.dumps(data, indent=1, default=str))


@pytest.mark.parametrize(("ctx", "parallel"), [(2048, 1), (4096, 1), (8192, 1), (32768, 1), (8192, 2)])
def test_discovery_and_the_servers_own_count(llama: Llama, ctx: int, parallel: int, tmp_path: Path) -> None:
    server = llama(ctx, parallel)
    info = asyncio.run(discover_server(server.base_url, "none", "smollm2-135m", tmp_path))
    # per slot (-c divided by --parallel), and never over what the model was trained with: asked for 32k, this
    # server serves SmolLM2 with 8,192 (its n_ctx_train), and only /props says so
    assert info is not None and info.window == min(ctx // parallel, 8192)
    assert (info.source, info.tools_rendered, info.counts, info.slots) == ("props", False, True, parallel)
    server.served = info.window
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name one colour."}]
    tools = [
        {
            "type": "function",
            "function": {
                "name": "read_file",
                "description": "Read a file",
                "parameters": {"type": "object", "properties": {}},
            },
        }
    ]
    counted = asyncio.run(count_request(server.base_url, "none", messages, tools))
    # the probe's count is the count the server gives the request itself
    conn = http.client.HTTPConnection(server.root.removeprefix("http://"), timeout=60)
    conn.request(
        "POST",
        "/v1/chat/completions",
        json.dumps({"messages": messages, "tools": tools, "max_tokens": 1}),
        {"Content-Type": "application/json"},
    )
    usage = json.loads(conn.getresponse().read())["usage"]
    assert counted == usage["prompt_tokens"]


@pytest.mark.timeout(900)  # ten processes, each asking the server twice; ~40 s on 2 idle cores
@pytest.mark.parametrize("ctx", [2048, 4096, 8192])
def test_ten_turns_with_a_tool_call_each_across_processes(llama: Llama, ctx: int, tmp_path: Path) -> None:
    server = llama(ctx)
    ws = tmp_path / "ws"
    ws.mkdir()
    figures = run_session(server, ws, tmp_path / "home", turns=10)
    _report(f"session-{ctx}", figures.__dict__)
    assert figures.completed == 10, figures.stderr
    assert figures.tool_calls == 10 and figures.refused == 0
    for result in figures.results:
        assert result["context"]["window"] == server.window and result["context"]["window_source"] == "server"
    # every later process reuses the server's cache: it evaluates the new messages, not the whole prompt
    later = [e for e, p in zip(figures.evaluated[1:], figures.prompts[1:], strict=True)]
    assert statistics.median(later) < 0.3 * statistics.median(figures.prompts[1:]), figures.evaluated
    # the estimate is right from the first request (the server counted it) and stays right across processes
    worst = max(e for _, e in figures.errors)
    assert worst < 0.15, figures.errors
    if ctx >= 8192:
        assert figures.compactions == 0  # real prompts stay far below 8k: nothing to compact
    assert NOTES.split()[4].strip(".") in json.dumps(session_records(tmp_path / "home"))


@pytest.mark.timeout(600)
def test_without_the_servers_count_calibration_is_learnt_once_and_kept(llama: Llama, tmp_path: Path) -> None:
    """A server that cannot count beforehand (vLLM-like: no /props, /apply-template): the first request of the
    first process is estimated blind (the tools' 3.5k tokens, which this template never renders); every later
    process starts from what the first learnt, per endpoint and model and in the session."""
    server = llama(4096)
    ws = tmp_path / "ws"
    ws.mkdir()
    figures = run_session(
        server, ws, tmp_path / "home", turns=3, hide_counting=True, extra=("--context-window", "4096")
    )
    _report("uncounted-4096", figures.__dict__)
    assert figures.completed == 3 and figures.refused == 0, figures.stderr
    blind = figures.error_rate(("none",))
    learnt = figures.error_rate(("restored", "server"))
    assert blind is not None and blind > 1.0  # more than twice the real prompt: the schemas are not rendered
    assert learnt is not None and learnt < 0.15, figures.errors
    assert figures.compactions == 0
    stored = json.loads((tmp_path / "home" / "cache" / "calibration.json").read_text())
    assert [v["tools_in_prompt"] for v in stored.values()] == [False]


@pytest.mark.timeout(600)
def test_overflow_is_recovered_with_the_prompt_whole(llama: Llama, tmp_path: Path) -> None:
    """kimicode is told a wrong, larger window; a tool result overflows the real 2k window. The server's error
    teaches the window and the count, the tool output is shortened, the user's prompt is sent whole again and
    the answer gets the completion budget asked for."""
    server = llama(2048)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("\n".join(f"line {i}: the value of item {i} is {i * 37 % 101}" for i in range(160)))
    prompt = "START " + "Please look at notes.txt and tell me the value of item 7. " * 30 + " END"
    with Relay(server.root, tool_file="notes.txt") as relay:
        code, result, stderr = kimicode(
            ["-p", prompt, "--context-window", "8192", "--max-tokens", "24"],
            base_url=relay.base_url,
            home=tmp_path / "home",
            cwd=ws,
        )
        refused = [e for e in relay.exchanges if e.status == 400]
        last = relay.exchanges[-1]
    assert refused, "the wrong window should have made the server refuse once"
    assert code == 0 and result["status"] == "success", stderr
    assert last.status == 200 and last.body["max_completion_tokens"] == 24
    users = [m for m in last.body["messages"] if m["role"] == "user"]
    assert prompt in [u["content"] for u in users]  # whole, not cut, not folded into a summary
    assert all(e.body.get("max_completion_tokens", 24) >= 24 for e in relay.exchanges if not e.tool_call)
    assert result["context"]["window"] == 2048  # what requests are fitted to now: learnt from the error
    learnt = [r for recs in session_records(tmp_path / "home").values() for r in recs if r["type"] == "context_window"]
    assert [r["window"] for r in learnt] == [2048]


def test_a_prompt_that_cannot_fit_is_refused_with_a_clear_error(llama: Llama, tmp_path: Path) -> None:
    server = llama(2048)
    with Relay(server.root) as relay:
        code, result, stderr = kimicode(
            ["-p", "word " * 2600, "--max-tokens", "24"], base_url=relay.base_url, home=tmp_path / "home", cwd=tmp_path
        )
        asked = [e.body.get("max_completion_tokens") for e in relay.exchanges]
    assert code != 0 and result["status"] == "error"
    assert "context window" in result["error"] and "Traceback" not in stderr
    assert all(a is None or a >= 24 for a in asked)  # never a 1-token answer passed off as one


@pytest.mark.timeout(600)
def test_a_restart_with_another_window_is_seen_at_the_next_start(tmp_path: Path) -> None:
    server = LlamaServer(4096, log_dir=tmp_path / "logs").start()
    try:
        home, ws = tmp_path / "home", tmp_path / "ws"
        ws.mkdir()
        code, first, stderr = kimicode(
            ["-p", "Say hi.", "--max-tokens", "8"], base_url=server.base_url, home=home, cwd=ws
        )
        assert code == 0 and first["context"]["window"] == 4096, stderr
        server.restart(2048)
        code, second, stderr = kimicode(
            ["-p", "Say bye.", "-c", "--max-tokens", "8"], base_url=server.base_url, home=home, cwd=ws
        )
        assert code == 0 and second["status"] == "success", stderr
        assert second["context"]["window"] == 2048 and second["session_id"] == first["session_id"]
        prints = [
            r["fingerprint"] for recs in session_records(home).values() for r in recs if r["type"] == "calibration"
        ]
        assert len(set(prints)) == 2 and all("|4096|" in p or "|2048|" in p for p in prints)
        assert get_json(f"{server.root}/props")[1]["default_generation_settings"]["n_ctx"] == 2048
    finally:
        server.stop()


def test_tool_choice_reaches_the_server(llama: Llama, tmp_path: Path) -> None:
    """llama-server accepts `tool_choice: required` (it does not enforce it with this template)."""
    server = llama(4096)
    with Relay(server.root) as relay:
        code, result, stderr = kimicode(
            ["-p", "List the files.", "--tool-choice", "required", "--max-tokens", "8"],
            base_url=relay.base_url,
            home=tmp_path / "home",
            cwd=tmp_path,
        )
        sent = [e.body.get("tool_choice") for e in relay.exchanges]
    assert code == 0 and result["status"] == "success", stderr
    assert sent and set(sent) == {"required"}
