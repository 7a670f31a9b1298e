"""Issue 35 on a real llama-server (SmolLM2-135M): a long paste at a 4k window, the default 4-slot layout under a
batch, the user's words last in every permission mode, and a response_format the grammar converter refuses.
Kept short: every request is evaluated for real on 2 cores."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from .llama import LlamaServer, Relay, unavailable
from .sessions import kimicode

Llama = Callable[..., LlamaServer]

pytestmark = [pytest.mark.real_server, pytest.mark.slow, pytest.mark.skipif(bool(unavailable()), reason=unavailable())]

NOTES = "\n".join(f"note {i}: the value of item {i} is {i * 37 % 101}" for i in range(150))
"""About 2,300 tokens for SmolLM2's tokenizer: a paste that fits a 4,096 window alone, not with much else."""


def _users(body: dict[str, object]) -> list[str]:
    return [str(m["content"]) for m in body["messages"] if isinstance(m, dict) and m["role"] == "user"]  # type: ignore[index]


@pytest.mark.timeout(900)
def test_a_long_paste_does_not_end_the_session_at_a_4k_window(llama: Llama, tmp_path: Path) -> None:
    server = llama(4096)
    ws = tmp_path / "ws"
    ws.mkdir()
    home = tmp_path / "home"
    with Relay(server.root) as relay:
        first = kimicode(
            ["-p", "Keep these notes:\n" + NOTES, "--max-tokens", "16"], base_url=relay.base_url, home=home, cwd=ws
        )
        later = [
            kimicode(
                ["-p", f"Question {i}: which item has the value {i}? " * 50, "-c", "--max-tokens", "16"],
                base_url=relay.base_url,
                home=home,
                cwd=ws,
            )
            for i in range(2)
        ]
        last = relay.exchanges[-1]
    assert first[0] == 0 and first[1]["status"] == "success", (first[1].get("error"), first[2][-500:])
    for code, result, stderr in later:
        assert code == 0 and result["status"] == "success", (result.get("error"), stderr[-500:])
    assert last.status == 200 and _users(last.body)[-1] == "Question 1: which item has the value 1? " * 50


@pytest.mark.timeout(1200)
def test_a_batch_on_the_default_four_slot_layout_succeeds(tmp_path: Path) -> None:
    """`llama-server -c 4096` with no --parallel: 4 slots share one 4,096-token KV cache; 4 tasks of ~1.6k tokens
    each fit the window alone, not together. They used to end `error` together; now the batch backs off."""
    from kimicode.batch import run

    server = LlamaServer(4096, parallel=None, log_dir=tmp_path / "logs").start()
    try:
        (tmp_path / "ws").mkdir()
        part = NOTES[: len(NOTES) // 3]
        tasks = [
            {
                "id": f"t{i}",
                "prompt": f"Task {i}. Notes:\n{part}\nWhich item has the value {i}?",
                "workspace": str(tmp_path / "ws"),
            }
            for i in range(4)
        ]

        async def go() -> list[object]:
            return [
                r
                async for r in run(
                    tasks,
                    base_url=server.base_url,
                    api_key="none",
                    model="smollm2-135m",
                    root=tmp_path / "batch",
                    concurrency=4,
                    retry_base_delay=0.5,
                    agent_options={"max_completion_tokens": 16},
                )
            ]

        results = asyncio.run(go())
        log = server.tail(4000)
    finally:
        server.stop()
    assert sorted(r.status for r in results) == ["success"] * 4, [r.error for r in results]  # type: ignore[attr-defined]
    assert "n_slots = 4" in log and "kv_unified = 'true'" in log


@pytest.mark.timeout(900)
@pytest.mark.parametrize("mode", ["accept-edits", "yolo"])
def test_the_users_words_come_last_in_every_mode(llama: Llama, tmp_path: Path, mode: str) -> None:
    server = llama(4096)
    with Relay(server.root) as relay:
        code, result, stderr = kimicode(
            ["-p", "Reply with exactly one word: apple", "--permission-mode", mode, "--max-tokens", "16"],
            base_url=relay.base_url,
            home=tmp_path / "home",
            cwd=tmp_path,
        )
        sent = relay.exchanges[-1].body["messages"]
    assert code == 0 and result["status"] == "success", stderr
    assert sent[-1] == {"role": "user", "content": "Reply with exactly one word: apple"}  # nothing after, nor in it
    assert f"[permission mode: {mode}] " in sent[0]["content"] and sent[-2]["role"] != "user"  # told once, up front


@pytest.mark.timeout(900)
def test_a_response_format_llama_refuses_falls_back_to_validation(llama: Llama, tmp_path: Path) -> None:
    """llama.cpp's grammar converter refuses an unanchored `pattern` (HTTP 400); the run used to end `error`."""
    server = llama(4096)
    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": "[A-Z]{3}"}}, "required": ["code"]}
    with Relay(server.root) as relay:
        _, result, stderr = kimicode(
            [
                "-p",
                "Give me a code of three capital letters.",
                "--json-schema",
                json.dumps(schema),
                "--max-tokens",
                "24",
            ],
            base_url=relay.base_url,
            home=tmp_path / "home",
            cwd=tmp_path,
        )
        refused = [i for i, e in enumerate(relay.exchanges) if e.body.get("response_format")]
        statuses = [e.status for e in relay.exchanges]
    assert result.get("status") in ("success", "invalid_output"), (result, stderr[-800:])
    if refused:  # the first answer was invalid: the correction carried response_format, and was refused
        assert statuses[refused[0]] == 400 and len(refused) == 1
        assert statuses[refused[0] + 1] == 200 and "refused response_format" in stderr + json.dumps(result)
