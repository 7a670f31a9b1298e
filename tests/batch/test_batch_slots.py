"""Capacity is not context: against llama-server's default layout (4 slots sharing one 8,192-token KV cache) a
batch of 4 tasks of ~4,850 tokens each gets HTTP 500 "Context size has been exceeded." although each request is
well inside the window `/props` reports. That is a busy server: retried with backoff, the batch sends fewer at
once, and every task succeeds (they all ended `error` after 90 s before).

The fake reproduces the behaviour, not only the format: `server.kv.size` makes the requests in flight share the
cache (kimicode/testing/kvcache.py, recorded from a real llama-server)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from kimicode.batch import TaskResult, run
from kimicode.events import Event, Notice, Retrying
from kimicode.testing import FakeServer, RecordedRequest, Reply
from kimicode.testing.stream import prompt_tokens

NOTES = " ".join(f"record {i}: value {i * 37 % 101}." for i in range(700))  # ~4,850 tokens by bytes / 4


def llama_default_layout(server: FakeServer) -> None:
    server.context_window, server.slots = 8192, 4
    server.kv.size = 8192  # unified: every slot may use all 8,192, the four share them
    server.tools_counted = False


def slow_answer(req: RecordedRequest) -> Reply:
    """An answer that takes a while, as prompt processing does, so the tasks' requests overlap."""
    return Reply(content="done", first_delay=0.3)


def test_a_shared_kv_cache_that_is_full_is_retried_and_the_batch_sends_fewer_at_once(tmp_path: Path) -> None:
    with FakeServer(dialect="llamacpp") as server:
        llama_default_layout(server)
        server.add(*[slow_answer] * 40)
        (tmp_path / "ws").mkdir()
        tasks = [
            {
                "id": f"t{i}",
                "prompt": f"Task {i}: what is the value of record {i}? Notes: {NOTES}",
                "workspace": str(tmp_path / "ws"),
            }
            for i in range(4)
        ]

        async def go() -> list[TaskResult]:
            return [
                r
                async for r in run(
                    tasks,
                    base_url=server.base_url,
                    api_key="none",
                    model="smollm2-135m",
                    root=tmp_path / "batch",
                    retry_base_delay=0.05,
                    concurrency=4,
                )
            ]

        results = asyncio.run(go())
        answered = [r for r in server.requests if "tools" in r.body and r.body.get("stream")]
    assert sorted(r.status for r in results) == ["success"] * 4, [r.error for r in results]
    assert server.kv.refused >= 1  # the server did push back: the shared cache was full
    assert all(prompt_tokens(r) < 8192 // 2 * 3 // 2 for r in answered)  # none over the window: capacity only
    assert server.kv.peak <= 2  # afterwards the batch sent no more than fit at once


def test_a_single_agent_retries_a_full_shared_cache_with_backoff(
    make_agent: Any, tmp_path: Path, workspace: Path
) -> None:
    """Outside a batch the same error is a busy server too: the request is retried (a Retrying event says why),
    never compacted; with retries used up the error is transient and says what to do."""
    with FakeServer(dialect="llamacpp") as server:
        llama_default_layout(server)
        server.kv.used = 6000  # another client's requests fill most of the cache
        events: list[Event] = []
        server.add(slow_answer)
        from kimicode import Agent, AgentOptions

        agent = Agent(
            AgentOptions.from_workspace(workspace, home=tmp_path / "home"),
            base_url=server.base_url,
            api_key="none",
            model="smollm2-135m",
            retry_base_delay=0.05,
            max_retries=2,
            on_event=events.append,
        )
        failed = agent.run_sync("What is the value of record 3? Notes: " + NOTES[:9000])
        server.kv.used = 0  # the other client is done
        ok = agent.run_sync("And of record 4?")
    assert failed.status == "error" and failed.error_kind == "transient", failed.error
    assert "shared by its slots" in str(failed.error) and "--parallel" in str(failed.error)
    retries = [e for e in events if isinstance(e, Retrying)]
    assert len(retries) == 2 and all("not a context overflow" in e.error for e in retries)
    assert not any("compact" in e.text for e in events if isinstance(e, Notice))
    assert ok.status == "success", ok.error
