"""Small local windows end to end: the completion budget fits, pruning and compaction keep the session
inside 2k, 4k and 8k windows, and a server's context-length error teaches the window (kept on resume).

The fake server here behaves like llama.cpp: it counts a prompt as body bytes / 4, refuses a prompt over
its `context_limit` with llama.cpp's recorded `exceed_context_size_error` body, and answers `/v1/models`
and `/props` like llama-server for window discovery.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import produce

from kimicode import Agent, AgentOptions
from kimicode.cli.headless import result_object
from kimicode.context.budget import fit_reserve
from kimicode.events import Event, Notice, TurnFinished
from kimicode.session.log import iter_records
from kimicode.testing import FakeServer, RecordedRequest, Reply, ToolCall


class Script:
    """Main requests get tool calls then a final answer; summary requests (no tools) get a summary."""

    def __init__(self, server: FakeServer, calls: int, lines: int) -> None:
        self.left = calls
        self.lines = lines
        self.accepted: list[RecordedRequest] = []
        server.add(*[self] * 500)

    def __call__(self, req: RecordedRequest) -> Reply:
        self.accepted.append(req)
        if "tools" not in req.body:
            return Reply(content="## Goal\nRead the generated files.\n## Next step\nContinue reading.")
        if self.left <= 0:
            return Reply(content="all read")
        self.left -= 1
        return Reply(tool_calls=[ToolCall("produce", {"n": self.lines, "seed": self.left})])


def small_agent(server: FakeServer, workspace: Path, home: Path, **kwargs: Any) -> Agent:
    opts: dict[str, Any] = {
        "base_url": server.base_url,
        "api_key": "sk-test",
        "model": "smollm2-135m",
        "workspace": workspace,
        "home": home,
        "tools": [produce],
        "system_prompt": "You are a test agent.",
        "project_instructions": False,
        "retry_base_delay": 0.01,
        "max_turns": 200,
    }
    opts.update(kwargs)
    options = AgentOptions.from_workspace(opts.pop("workspace"), home=opts.pop("home"))  # reads home's config.toml
    return Agent(options, **opts)


def prompt_tokens(req: RecordedRequest) -> int:
    return len(req.raw) // 4


@pytest.mark.prepush
@pytest.mark.parametrize(("window", "lines"), [(2048, 12), (4096, 25), (8192, 50)])
def test_small_windows_work_end_to_end(window: int, lines: int, workspace: Path, tmp_path: Path) -> None:
    with FakeServer() as server:
        server.context_limit = window
        script = Script(server, calls=24, lines=lines)
        events: list[Event] = []
        agent = small_agent(server, workspace, tmp_path / "home", context_window=window, on_event=events.append)
        result = agent.run_sync("read the generated files one by one")
        refused = len(server.requests) - len(script.accepted)
    assert result.status == "success", result.error
    assert result.result == "all read"
    for req in script.accepted:  # never asks for more than the window leaves
        max_tokens = req.body["max_completion_tokens"]
        assert max_tokens <= window // 4
        assert prompt_tokens(req) + max_tokens <= window, (prompt_tokens(req), max_tokens)
    texts = [e.text for e in events if isinstance(e, Notice)]
    assert any("pruned" in t or "compacted" in t for t in texts), texts
    assert refused <= 1  # at most one refusal, after which the window is known
    assert agent.context.budget.window <= window


def test_the_default_reservation_adapts_to_the_window() -> None:
    assert fit_reserve(4096, 32_768) == 1024
    assert fit_reserve(2048, 32_768) == 512
    assert fit_reserve(1_048_576, 32_768) == 32_768
    assert fit_reserve(1000, 32_768) == 256  # never below a useful answer
    assert fit_reserve(4096, 32_768, explicit=True) == 32_768  # an explicit setting is the user's


def test_an_explicit_max_tokens_is_sent_and_too_large_is_a_clear_error(
    server: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    server.add(Reply(content="ok"))
    agent = small_agent(server, workspace, tmp_path / "home", context_window=8192, max_completion_tokens=700)
    assert agent.run_sync("hi").status == "success"
    assert server.requests[-1].body["max_completion_tokens"] == 700
    with pytest.raises(ValueError, match="max_completion_tokens"):
        small_agent(server, workspace, tmp_path / "home", context_window=4096, max_completion_tokens=4000)


def test_config_max_tokens_sets_the_reservation(server: FakeServer, workspace: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text("[context]\nmax_tokens = 600\n")
    server.add(Reply(content="ok"))
    agent = small_agent(server, workspace, home, context_window=8192)
    assert agent.run_sync("hi").status == "success"
    assert server.requests[-1].body["max_completion_tokens"] == 600


def test_the_llamacpp_error_teaches_the_window_which_is_logged_and_restored_on_resume(
    workspace: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    with FakeServer() as server:
        server.context_limit = 4096  # the agent believes 32k: the first long request is refused
        script = Script(server, calls=14, lines=40)
        events: list[Event] = []
        agent = small_agent(server, workspace, home, context_window=32_768, on_event=events.append)
        result = agent.run_sync("read them")
        assert result.status == "success", result.error
        assert agent.context.budget.window == 4096 and agent.window_source == "learnt"
        refused = len(server.requests) - len(script.accepted)
        assert refused == 1
        texts = [e.text for e in events if isinstance(e, Notice)]
        assert any("window is 4,096 tokens" in t for t in texts), texts
        log = [r for r in iter_records(agent.log.path) if r.get("type") == "context_window"]  # type: ignore[union-attr]
        assert log and log[-1]["window"] == 4096
        finished = TurnFinished("success", "x", 1)
        obj = result_object(agent, finished, 1)
        assert obj["context"]["window"] == 4096 and obj["context"]["window_source"] == "learnt"
        sid = agent.session_id
        server.add(Reply(content="again"))
        resumed = Agent.resume(
            sid,
            base_url=server.base_url,
            api_key="sk-test",
            model="smollm2-135m",
            home=home,
            tools=[produce],
            context_window=32_768,
            retry_base_delay=0.01,
        )
        assert resumed.context.budget.window == 4096 and resumed.window_source == "learnt"
        assert resumed.run_sync("once more").status == "success"
        last = server.requests[-1]
        assert prompt_tokens(last) + last.body["max_completion_tokens"] <= 4096


def test_vllm_max_tokens_too_large_is_retried_with_a_smaller_reservation(
    server: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    from kimicode.testing import ErrorReply

    body = {
        "object": "error",
        "message": "'max_tokens' or 'max_completion_tokens' is too large: 8192. This "
        "model's maximum context length is 8192 tokens and your request has 300 input tokens "
        "(8192 > 8192 - 300). None",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
    server.add(ErrorReply(400, body=json.dumps(body)), Reply(content="fine"))
    agent = small_agent(server, workspace, tmp_path / "home", context_window=65_536)
    result = agent.run_sync("hi")
    assert result.status == "success" and result.result == "fine"
    assert len(server.requests) == 2
    second = server.requests[1].body["max_completion_tokens"]
    assert second <= 8192 // 4
    assert "tools" in server.requests[1].body  # no compaction request was needed in between


def _llama_error(prompt: int, n_ctx: int) -> str:
    return json.dumps(
        {
            "error": {
                "code": 400,
                "message": f"request ({prompt} tokens) exceeds the available context "
                f"size ({n_ctx} tokens), try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": prompt,
                "n_ctx": n_ctx,
            }
        }
    )


def test_an_absurdly_small_window_is_not_believed_and_ends_the_turn_cleanly(
    server: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    from kimicode.testing import ErrorReply

    server.add(ErrorReply(400, body=_llama_error(900, 100)), ErrorReply(400, body=_llama_error(900, 100)))
    agent = small_agent(server, workspace, tmp_path / "home", context_window=8192)
    result = agent.run_sync("hi")
    assert result.status == "error" and result.error_kind == "context_length"
    assert "exceeds the available context size" in (result.error or "")
    assert agent.context.budget.window == 8192  # a 100-token window cannot hold any request: not learnt
    assert len(server.requests) <= 2  # no loop


def test_a_larger_window_in_the_error_never_grows_the_budget(
    server: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    from kimicode.testing import ErrorReply

    server.add(ErrorReply(400, body=_llama_error(7000, 65_536)), Reply(content="ok"))
    agent = small_agent(server, workspace, tmp_path / "home", context_window=8192)
    agent.run_sync("hi")
    assert agent.context.budget.window == 8192 and agent.window_source == "flag"


def test_an_overflow_repeated_after_compaction_ends_with_the_servers_error(workspace: Path, tmp_path: Path) -> None:
    with FakeServer() as server:
        script = Script(server, calls=6, lines=40)
        events: list[Event] = []
        agent = small_agent(server, workspace, tmp_path / "home", context_window=32_768, on_event=events.append)
        assert agent.run_sync("read").status == "success"
        server.context_limit = 50  # now nothing fits, whatever is done
        result = agent.run_sync("more")
        assert result.status == "error" and result.error_kind == "context_length"
        assert result.error and "exceeds the available context size" in result.error
        # the request, the summary request and its one retry (both refused: a transcript summary is used),
        # the retried request: then the turn ends, it never loops
        assert len(server.requests) - len(script.accepted) <= 4


def test_a_fork_keeps_the_learnt_window(workspace: Path, tmp_path: Path) -> None:
    with FakeServer() as server:
        server.context_limit = 4096
        Script(server, calls=10, lines=40)
        agent = small_agent(server, workspace, tmp_path / "home", context_window=32_768)
        assert agent.run_sync("read").status == "success"
        assert agent.window_source == "learnt"
        child = agent.fork()
        assert child.context.budget.window == 4096 and child.window_source == "learnt"
        log = [r for r in iter_records(child.log.path) if r.get("type") == "context_window"]  # type: ignore[union-attr]
        assert log and log[-1]["window"] == 4096
