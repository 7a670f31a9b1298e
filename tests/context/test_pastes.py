"""Long user messages at a small window: an old paste is cut like the rest of the history, the newest words
are never lost, a message that cannot fit even alone is said to be so and is not kept to grow the next turn,
and a context error that survives the smaller-max_tokens retry goes on to compaction.

The server is llama.cpp-like (`FakeServer(dialect="llamacpp")`: it counts body bytes / 4, its template leaves
the tool definitions out, `/props` says the window) unless said otherwise.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from helpers import history_problems, produce

from kimicode import Agent, AgentOptions
from kimicode.agent.interrupted import NO_ANSWER
from kimicode.events import Event, Notice
from kimicode.testing import ErrorReply, FakeServer, RecordedRequest, Reply, ToolCall
from kimicode.testing.stream import prompt_tokens

NOTES = "\n".join(f"note {i}: the value of item {i} is {i * 37 % 101}, checked on day {i % 28}" for i in range(320))
"""About 5,300 tokens by the fake's count (bytes / 4): a paste of meeting notes or a log."""


def agent_for(server: FakeServer, workspace: Path, home: Path, **kwargs: Any) -> Agent:
    opts: dict[str, Any] = {
        "base_url": server.base_url,
        "api_key": "sk-test",
        "model": "smollm2-135m",
        "system_prompt": "You are a test agent.",
        "project_instructions": False,
        "retry_base_delay": 0.01,
        **kwargs,
    }
    return Agent(AgentOptions.from_workspace(workspace, home=home), **opts)


def answer(text: str = "ok") -> Callable[[RecordedRequest], Reply]:
    """A reply, or a summary for a summary request (sent without tools)."""

    def reply(req: RecordedRequest) -> Reply:
        if "tools" not in req.body:
            return Reply(content="## Goal\nAnswer questions about the pasted notes.\n## Next step\nAnswer.")
        return Reply(content=text)

    return reply


def sent_users(req: RecordedRequest) -> list[str]:
    return [str(m["content"]) for m in req.body["messages"] if m["role"] == "user"]


def test_an_old_paste_is_cut_and_every_later_short_turn_is_answered(workspace: Path, tmp_path: Path) -> None:
    paste = NOTES[: len(NOTES) // 2]  # ~2,300 tokens: it fits alone in a 4,096 window, not with much else
    with FakeServer(dialect="llamacpp", context_window=4096) as server:
        server.tools_counted = False
        server.add(*[answer(f"answer {i}") for i in range(40)])
        events: list[Event] = []
        agent = agent_for(server, workspace, tmp_path / "home", on_event=events.append)
        first = agent.run_sync("Here are my notes:\n" + paste + "\nRemember them.")
        assert first.status == "success", first.error
        results = [
            agent.run_sync(f"Question {i}: " + "what does the value of item seven tell us? " * 12) for i in range(1, 5)
        ]
        chats = [r for r in server.requests if "tools" in r.body]
    assert [r.status for r in results] == ["success"] * 4, [r.error for r in results]
    assert all(r.result.startswith("answer") for r in results)
    last = chats[-1]
    assert sent_users(last)[-1].startswith("Question 4: ")  # the newest words, whole and last
    assert len(sent_users(last)[-1]) == len("Question 4: " + "what does the value of item seven tell us? " * 12)
    cut = [u for u in sent_users(last) if u.startswith("Here are my notes:")]
    assert cut and len(cut[0]) < len(paste) // 2 and "cut from the middle" in cut[0]  # the paste shrank
    saved = re.search(r"the full message is saved at (\S+) …", cut[0])
    assert saved and paste in Path(saved.group(1)).read_text()  # all of it kept, for the model to read back
    assert all(prompt_tokens(r) + r.body["max_completion_tokens"] <= 4096 for r in chats)  # none refused
    texts = [e.text for e in events if isinstance(e, Notice)]
    assert not any("nothing to compact" in t for t in texts)
    assert any(re.search(r"cut \d+ long earlier messages? of yours in the middle", t) for t in texts), texts
    assert not history_problems(agent.messages)  # (the kept user messages precede the summary: by design)


def test_a_message_that_cannot_fit_alone_is_said_so_and_does_not_grow_the_next_turn(
    workspace: Path, tmp_path: Path
) -> None:
    with FakeServer(dialect="llamacpp", context_window=4096) as server:
        server.tools_counted = False
        server.add(*[answer(f"answer {i}") for i in range(20)])
        events: list[Event] = []
        agent = agent_for(server, workspace, tmp_path / "home", on_event=events.append)
        assert agent.run_sync("Hello.").status == "success"
        before = len(server.requests)
        failed = [agent.run_sync("Summarise these notes:\n" + NOTES) for _ in range(2)]
        sizes = []
        for i in range(3):
            result = agent.run_sync(f"Short question {i}?")
            assert result.status == "success", result.error
            sizes.append(len(server.requests[-1].raw))
    for result in failed:
        assert result.status == "error" and result.error_kind == "context_length"
        assert "your message alone takes about" in str(result.error) and "Shorten it" in str(result.error)
    said = [e.text for e in events if isinstance(e, Notice) and "not kept in the conversation" in e.text]
    assert len(said) == 2  # once per failed turn
    assert len(server.requests) == before + 3  # the message that cannot fit was never sent
    assert sizes[1] - sizes[0] == sizes[2] - sizes[1]  # each turn adds only itself: no growing placeholders
    assert not any(NO_ANSWER in str(m.get("content")) for m in agent.messages)
    assert not any("Summarise these notes" in str(m.get("content")) for m in agent.messages)
    assert not history_problems(agent.messages, alternating=True)


def test_after_a_restart_with_a_smaller_window_an_old_paste_is_cut(workspace: Path, tmp_path: Path) -> None:
    paste = NOTES[: len(NOTES) // 2]  # ~2,300 tokens: fine at 4,096, too much at 2,048
    with FakeServer(dialect="llamacpp", context_window=4096) as server:
        server.tools_counted = False
        server.add(*[answer(f"answer {i}") for i in range(20)])
        agent = agent_for(server, workspace, tmp_path / "home")
        assert agent.run_sync("Notes:\n" + paste).status == "success"
        server.restart(2048)  # `llama-server -c 2048`: the next request is refused with n_ctx 2048
        result = agent.run_sync("Which item has the value 3?")
        refused = [r for r in server.requests if prompt_tokens(r) > 2048]
    assert refused, "the restarted server should have refused the first request"
    assert result.status == "success", result.error
    assert sent_users(server.requests[-1])[-1] == "Which item has the value 3?"
    assert agent.context.budget.window == 2048


def test_a_context_error_that_survives_the_smaller_max_tokens_retry_is_compacted(
    server: FakeServer, make_agent: Callable[..., Agent]
) -> None:
    """Moonshot counts prompt + max_tokens and says only the total: the first refusal teaches the window and is
    retried with a smaller max_tokens. This server refuses that retry too (its tokenizer is its own: what
    kimicode's arithmetic says fits may not): the history is then compacted and the run goes on (it used to end
    with exit 1 at that step)."""
    window = 60_000
    refusals: list[int] = []

    def moonshot(req: RecordedRequest) -> Reply | ErrorReply:
        if "tools" not in req.body:
            return Reply(content="## Goal\nRead the generated files.\n## Next step\nContinue reading.")
        prompt, asked = len(req.raw) // 4, req.body["max_completion_tokens"]
        if prompt > 30_000 and len(refusals) < 2:
            refusals.append(len(server.requests))
            return ErrorReply(
                400,
                "Invalid request: Your request exceeded model token limit: "
                f"{window} (requested: {prompt + asked + 2_000})",
                "invalid_request_error",
            )
        reads = sum(m["role"] == "tool" for m in req.body["messages"])
        usage = {"prompt_tokens": prompt, "completion_tokens": 5, "total_tokens": prompt + 5}
        if reads >= 12:
            return dataclasses.replace(Reply(content="all read"), usage=usage)
        return dataclasses.replace(Reply(tool_calls=[ToolCall("produce", {"n": 300, "seed": reads})]), usage=usage)

    server.add(*[moonshot] * 60)
    events: list[Event] = []
    agent = make_agent(tools=[produce], model="kimi-k3", context_window=200_000, max_turns=60, on_event=events.append)
    result = agent.run_sync("Read the generated files one by one.")
    texts = [e.text for e in events if isinstance(e, Notice)]
    assert result.status == "success", result.error
    assert result.result == "all read"
    assert len(refusals) == 2 and refusals[1] == refusals[0] + 1, refusals  # the smaller max_tokens was refused too
    assert any("retrying with max_tokens" in t for t in texts) and agent.context.compactions >= 1, texts
