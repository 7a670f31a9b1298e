"""The context manager inside the agent, against the fake server with scripted usage.

The fake server counts tokens with a fixed tokenizer-like rule (`rule_tokens`), reports them as
`usage.prompt_tokens` (and the common prefix with the previous request as `cached_tokens`), and
rejects a request over its window with Moonshot's context-length message.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import re
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import code_text

from kimicode import Agent, tool
from kimicode.cli.headless import result_object
from kimicode.context.compact import is_summary
from kimicode.events import ContextUpdated, Event, Notice, StepStarted, TurnFinished
from kimicode.session.log import iter_records
from kimicode.session.replay import replay
from kimicode.testing import ErrorReply, FakeServer, RecordedRequest, Reply, ToolCall
from kimicode.tools.files import READ_FILE

MakeAgent = Callable[..., Agent]
FIRST = "FIRST INSTRUCTION: refactor the parser, keep the public API, and never touch tests/legacy/."
_PIECE = re.compile(r"[A-Za-z]{1,8}|\d{1,3}|[^\sA-Za-z\d]{1,2}|\s+")


def rule_tokens(text: str) -> int:
    """The fake server's tokenizer: letter runs of up to 8, digit runs of up to 3, punctuation pairs."""
    return len(_PIECE.findall(text))


def message_tokens(msg: dict[str, Any]) -> int:
    n = 3
    for key in ("content", "reasoning_content"):
        if isinstance(msg.get(key), str):
            n += rule_tokens(msg[key])
    for call in msg.get("tool_calls") or ():
        n += (
            3
            + rule_tokens(call["id"])
            + rule_tokens(call["function"]["name"])
            + rule_tokens(call["function"]["arguments"])
        )
    if msg.get("tool_call_id"):
        n += rule_tokens(msg["tool_call_id"])
    return n


def request_tokens(body: dict[str, Any]) -> int:
    tools = body.get("tools")
    return (rule_tokens(json.dumps(tools, sort_keys=True)) if tools else 0) + sum(map(message_tokens, body["messages"]))


@tool(kind="read")
def produce(n: int, seed: int) -> str:
    """Produce n lines of code-like text."""
    return code_text(n, seed)


Item = Reply | ErrorReply | Callable[[RecordedRequest], Reply | ErrorReply]


class Model:
    """Routes chat requests to a main script and summary requests (no tools) to a summary script."""

    def __init__(self, server: FakeServer, limit: int | None = None) -> None:
        self.main: deque[Item] = deque()
        self.summaries: deque[Item] = deque()
        self.limit = limit
        self.requests: list[tuple[bool, int, RecordedRequest]] = []
        self.default_summary = "## Goal\nRefactor the parser.\n## Next step\nContinue."
        self._prev: list[Any] = []
        server.add(*[self] * 3_000)

    def __call__(self, req: RecordedRequest) -> Reply | ErrorReply:
        body = req.body
        is_summary_request = "tools" not in body
        tokens = request_tokens(body)
        self.requests.append((is_summary_request, tokens, req))
        reserve = body.get("max_completion_tokens", 0)
        if self.limit is not None and tokens + reserve > self.limit:
            return ErrorReply(
                400,
                "Invalid request: Your request exceeded model token limit: "
                f"{self.limit} (requested: {tokens + reserve})",
                "invalid_request_error",
            )
        queue = self.summaries if is_summary_request else self.main
        if queue:
            item: Item = queue.popleft()
        elif is_summary_request:  # like a model that follows the prompt: finished tasks stay listed
            done = sorted(set(re.findall(r"^- Task \w+ is finished$", body["messages"][1]["content"], re.M)))
            item = Reply(content=self.default_summary + "\n## Done\n" + "\n".join(done))
        else:
            item = Reply(content="done")
        reply = item(req) if callable(item) and not isinstance(item, Reply | ErrorReply) else item
        if isinstance(reply, ErrorReply):
            return reply
        cached = 0
        if not is_summary_request:
            same = 0
            for a, b in zip(self._prev, body["messages"], strict=False):
                if a != b:
                    break
                same += 1
            cached = request_tokens({"tools": body.get("tools"), "messages": body["messages"][:same]}) if same else 0
            self._prev = body["messages"]
        usage = {"prompt_tokens": tokens, "completion_tokens": 20, "total_tokens": tokens + 20, "cached_tokens": cached}
        return dataclasses.replace(reply, usage=usage)

    def main_requests(self) -> list[tuple[int, RecordedRequest]]:
        return [(t, r) for s, t, r in self.requests if not s]

    def summary_requests(self) -> list[tuple[int, RecordedRequest]]:
        return [(t, r) for s, t, r in self.requests if s]


def messages_bytes(req: RecordedRequest) -> bytes:
    """The raw `messages` array of a request as sent (the client writes it last)."""
    start = req.raw.index(b',"messages":') + len(b',"messages":')
    return req.raw[start:-1]


def prefix_changes(requests: list[RecordedRequest]) -> list[int]:
    """Indices of requests whose messages are not a byte-identical extension of the previous request's."""
    changed = []
    for i in range(1, len(requests)):
        prev, cur = messages_bytes(requests[i - 1]), messages_bytes(requests[i])
        if not cur.startswith(prev[:-1]):
            changed.append(i)
    return changed


def step_reply(i: int, lines: int, reasoning: str = "") -> Reply:
    return Reply(reasoning=reasoning or f"Reading part {i}.", tool_calls=[ToolCall("produce", {"n": lines, "seed": i})])


def records(agent: Agent) -> list[dict[str, Any]]:
    assert agent.log is not None
    return list(iter_records(agent.log.path))


# -- accounting -------------------------------------------------------------------------------------


@pytest.mark.prepush
def test_counting_error_after_calibration_is_under_two_percent(server: FakeServer, make_agent: MakeAgent) -> None:
    model = Model(server)
    rng = random.Random(5)
    for i in range(40):
        model.main.append(step_reply(i, rng.randint(5, 60), reasoning=code_text(rng.randint(1, 4), 1000 + i)))
    model.main.append(Reply(content="All parts read."))
    events: list[Event] = []
    agent = make_agent(tools=[produce], on_event=events.append, max_turns=100)
    result = agent.run_sync("read every part")
    assert result.status == "success"
    samples = list(agent.context.accountant.samples)
    assert len(samples) == 41
    errors = [abs(est - real) / real for est, real in samples]
    assert max(errors[3:]) < 0.02, errors
    # the whole request from cached counts and the correction factor alone, without the server's anchor
    last_tokens, _ = model.main_requests()[-1]
    whole = agent.context.accountant.estimate_unanchored(agent.messages[:-1], agent.tools.schemas())
    assert abs(whole - last_tokens) / last_tokens < 0.02
    updates = [e for e in events if isinstance(e, ContextUpdated)]
    assert len(updates) == 41 and updates[-1].window == 1_048_576
    assert updates[-1].used >= last_tokens and updates[-1].cached_tokens > 0
    breakdown = agent.context_breakdown()
    assert breakdown.tool_results > breakdown.tool_calls > 0 and breakdown.reasoning > 0
    assert result.context == {"used": agent.context.used, "window": 1_048_576}


def test_a_one_megabyte_tool_output_is_capped_spilled_and_read_back(server: FakeServer, make_agent: MakeAgent) -> None:
    big = "".join(f"line {i}: " + "x" * 40 + "\n" for i in range(20_000))
    assert len(big) > 1_000_000

    @tool(kind="read")
    def flood() -> str:
        """A huge output."""
        return big

    def read_back(req: RecordedRequest) -> Reply:
        capped = req.body["messages"][-1]["content"]
        path = capped.split("saved at ", 1)[1].split(": use read_file", 1)[0]
        line = int(capped.split("starts at line ", 1)[1].split(")", 1)[0].replace(",", ""))
        return Reply(tool_calls=[ToolCall("read_file", {"path": path, "offset": line, "limit": 2})])

    model = Model(server)
    model.main.extend([Reply(tool_calls=[ToolCall("flood", "")]), read_back, Reply(content="ok")])
    agent = make_agent(tools=[flood, READ_FILE])
    result = agent.run_sync("flood")
    assert result.status == "success"
    tool_msgs = [m for m in result.messages if m["role"] == "tool"]
    capped = tool_msgs[0]["content"]
    assert len(capped) <= 100_500 and agent.context.counter.count(capped) <= 25_000
    assert capped.startswith("line 0: ") and capped.rstrip().endswith("line 19999: " + "x" * 40)
    elided = int(capped.split("starts at line ", 1)[1].split(")", 1)[0].replace(",", ""))
    assert f"line {elided - 1}: " not in capped  # really cut out ...
    assert f"line {elided - 1}: " + "x" * 40 in tool_msgs[1]["content"]  # ... and read back from the spill file
    last = model.main_requests()[-1][1]
    assert model.main_requests()[-1][0] < 40_000
    # the body is streamed in pieces but with an exact Content-Length (no chunked encoding)
    assert last.headers["content-length"] == str(len(last.raw)) and "transfer-encoding" not in last.headers


# -- pruning ----------------------------------------------------------------------------------------


@pytest.mark.prepush
def test_pruning_fires_once_at_the_threshold_and_leaves_assistant_messages_alone(
    server: FakeServer, make_agent: MakeAgent
) -> None:
    model = Model(server)
    for i in range(36):  # crosses 70% once; a second prune would need ~14 more steps
        model.main.append(step_reply(i, 40))
    model.main.append(Reply(content="done"))
    events: list[Event] = []
    agent = make_agent(
        tools=[produce], context_window=40_000, max_completion_tokens=4_000, on_event=events.append, max_turns=100
    )
    assert agent.run_sync("read").status == "success"
    budget = agent.context.budget
    main = model.main_requests()
    reqs = [r for _, r in main]
    changes = prefix_changes(reqs)
    assert len(changes) == 1 and agent.context.prunes == 1 and agent.context.compactions == 0
    k = changes[0]
    growth = main[k - 1][0] - main[k - 2][0]
    assert main[k - 1][0] < budget.prune_at <= main[k - 1][0] + 2 * growth  # fired when crossing 70%
    assert main[k][0] < 0.6 * budget.prune_at  # one batch that freed a lot
    before = [m for m in reqs[k - 1].body["messages"] if m["role"] == "assistant"]
    after = [m for m in reqs[k].body["messages"] if m["role"] == "assistant"]
    assert after[: len(before)] == before  # byte-for-byte the same assistant messages
    raw_before = messages_bytes(reqs[k - 1])
    for msg in before:
        assert json.dumps(msg, ensure_ascii=False, separators=(",", ":")).encode() in raw_before
        assert json.dumps(msg, ensure_ascii=False, separators=(",", ":")).encode() in messages_bytes(reqs[k])
    notices = [e.text for e in events if isinstance(e, Notice)]
    assert sum("pruned" in n for n in notices) == 1
    prune_records = [r for r in records(agent) if r["type"] == "prune"]
    assert len(prune_records) == 1
    assert replay(records(agent)) == agent.messages  # a resume sees exactly the pruned history


# -- compaction -------------------------------------------------------------------------------------


def reasoning_heavy(i: int) -> Reply:
    """A step whose weight is in the assistant message (not prunable), so compaction has to act."""
    return step_reply(i, 3, reasoning=f"Thinking about part {i}. " + code_text(25, 500 + i))


@pytest.mark.prepush
def test_compaction_triggers_at_the_threshold_and_keeps_intent(server: FakeServer, make_agent: MakeAgent) -> None:
    model = Model(server)
    for i in range(60):
        model.main.append(reasoning_heavy(i))
    model.main.append(Reply(content="done"))
    model.summaries.append(
        Reply(content="## Goal\nRefactor the parser.\n## Done\n- Task A is finished\n## Next step\nTask B")
    )
    events: list[Event] = []
    agent = make_agent(
        tools=[produce], context_window=40_000, max_completion_tokens=4_000, on_event=events.append, max_turns=100
    )
    assert agent.run_sync(FIRST).status == "success"
    budget = agent.context.budget
    assert agent.context.compactions >= 1
    sequence = model.requests
    first_summary = next(i for i, (s, _, _) in enumerate(sequence) if s)
    before_tokens = sequence[first_summary - 1][1]
    assert before_tokens < budget.compact_at  # the last request before compaction was under 85% ...
    assert sequence[first_summary][1] <= budget.input_budget  # ... the summary request fits ...
    after = sequence[first_summary + 1]
    assert not after[0] and after[1] <= 0.6 * budget.input_budget  # ... and the next request is small
    sent = after[2].body["messages"]
    assert sent[1] == {"role": "user", "content": FIRST}
    summary = next(m for m in sent if is_summary(m))
    assert "- Task A is finished" in summary["content"]
    assert all(tokens <= budget.input_budget for _, tokens, _ in sequence)
    assert any("compacted" in e.text for e in events if isinstance(e, Notice))
    log = records(agent)
    compactions = [r for r in log if r["type"] == "compaction"]
    assert compactions and compactions[0]["reason"] == "threshold" and compactions[0]["start"] == 1
    assert replay(log) == agent.messages


@pytest.mark.prepush
def test_first_instruction_survives_three_compactions_and_finished_stays_finished(
    server: FakeServer, make_agent: MakeAgent
) -> None:
    model = Model(server)
    for i in range(115):  # compacts at about steps 44, 75 and 105
        model.main.append(reasoning_heavy(i))
    model.main.append(Reply(content="done"))
    model.summaries.append(Reply(content="## Goal\nRefactor.\n## Done\n- Task A is finished\n## In progress\n- Task B"))
    model.summaries.append(ErrorReply(400, "Invalid request: the summariser is broken", "invalid_request_error"))
    agent = make_agent(tools=[produce], context_window=40_000, max_completion_tokens=4_000, max_turns=200)
    assert agent.run_sync(FIRST).status == "success"
    assert agent.context.compactions >= 3
    summaries = model.summary_requests()
    assert "Task A is finished" in summaries[1][1].body["messages"][1]["content"]  # the summariser saw it
    index = [i for i, (s, _, _) in enumerate(model.requests) if s]
    for i in index:
        following = model.requests[i + 1]
        assert not following[0]
        assert following[2].body["messages"][1] == {"role": "user", "content": FIRST}
    second = next(m for m in model.requests[index[1] + 1][2].body["messages"] if is_summary(m))
    assert "could not write this summary" in second["content"]  # the deterministic fallback ...
    assert "Task A is finished" in second["content"]  # ... still says the task is finished
    final = next(m for m in agent.messages if is_summary(m))
    assert "Task A is finished" in final["content"]
    assert agent.messages[1] == {"role": "user", "content": FIRST}
    assert all(tokens <= agent.context.budget.input_budget for _, tokens, _ in model.requests)


@pytest.mark.prepush
def test_context_length_error_leads_to_compaction_and_one_retry(server: FakeServer, make_agent: MakeAgent) -> None:
    model = Model(server, limit=30_000)  # the server's real window is smaller than the agent believes
    for i in range(40):
        model.main.append(reasoning_heavy(i))
    model.main.append(Reply(content="finished"))
    events: list[Event] = []
    agent = make_agent(
        tools=[produce], context_window=100_000, max_completion_tokens=4_000, on_event=events.append, max_turns=100
    )
    result = agent.run_sync(FIRST)
    assert result.status == "success" and result.result == "finished"
    codes = [
        "overflow" if s is False and t + 4_000 > 30_000 else ("summary" if s else "ok") for s, t, _ in model.requests
    ]
    first_overflow = codes.index("overflow")
    after = codes[first_overflow + 1 :]
    summaries = after.index("ok")
    assert summaries >= 1 and set(after[:summaries]) == {"summary"}  # compacted, then retried successfully
    assert codes.count("overflow") == 1  # learnt the real window: no second rejection
    assert any("rejected the request as too long" in e.text for e in events if isinstance(e, Notice))
    assert agent.context.budget.window == 30_000
    reasons = [r["reason"] for r in records(agent) if r["type"] == "compaction"]
    assert reasons[0] == "overflow"


@pytest.mark.prepush
def test_the_summary_request_itself_never_exceeds_the_budget(
    server: FakeServer, make_agent: MakeAgent, tmp_path: Path
) -> None:
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a test agent."},
        {"role": "user", "content": FIRST},
    ]
    for i in range(120):
        call_id = f"functions.produce:{i}"
        history.append(
            {
                "role": "assistant",
                "reasoning_content": code_text(6, i),
                "content": "",
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "produce", "arguments": json.dumps({"n": 40, "seed": i})},
                    }
                ],
            }
        )
        history.append({"role": "tool", "tool_call_id": call_id, "content": code_text(40, i)})
    model = Model(server)
    model.main.append(Reply(content="resumed"))
    agent = make_agent(
        tools=[produce], context_window=30_000, max_completion_tokens=3_000, messages=history, persist=False
    )
    whole = request_tokens({"messages": history})
    assert whole > 3 * agent.context.budget.input_budget  # far more than one request may carry
    result = agent.run_sync("continue")
    assert result.status == "success"
    summaries = model.summary_requests()
    assert len(summaries) >= 3  # summarised in parts, each carrying the summary so far
    assert all(tokens <= agent.context.budget.input_budget for tokens, _ in summaries)
    assert all(tokens <= agent.context.budget.input_budget for _, tokens, _ in model.requests)
    assert model.main_requests()[-1][1].body["messages"][1] == {"role": "user", "content": FIRST}


def test_manual_compaction_with_instructions(server: FakeServer, make_agent: MakeAgent) -> None:
    model = Model(server)
    for i in range(12):
        model.main.append(step_reply(i, 20))
    model.main.append(Reply(content="read them"))
    model.summaries.append(Reply(content="## Goal\nRead parts.\n## Done\n- parts 0-11 read"))
    events: list[Event] = []
    agent = make_agent(tools=[produce], on_event=events.append, max_turns=50)
    agent.run_sync(FIRST)
    before = agent.context.estimate(agent.messages, agent.tools.schemas())

    async def go() -> Any:
        try:
            return await agent.compact("keep the list of part numbers")
        finally:
            await agent.aclose()

    result = asyncio.run(go())
    assert result is not None and not result.fallback and result.summarized > 10
    request = model.summary_requests()[0][1].body
    assert "tools" not in request and "keep the list of part numbers" in request["messages"][1]["content"]
    assert agent.messages[1] == {"role": "user", "content": FIRST}
    assert agent.context.estimate(agent.messages, agent.tools.schemas()) < before / 2
    assert isinstance(events[-1], ContextUpdated) and events[-1].used == agent.context.used
    assert replay(records(agent)) == agent.messages
    assert agent.usage["prompt_tokens"] >= model.summary_requests()[0][0]  # the summary is billed too


# -- prefix stability -------------------------------------------------------------------------------


@pytest.mark.prepush
def test_three_hundred_steps_without_pruning_only_ever_extend_the_prefix(
    server: FakeServer, make_agent: MakeAgent
) -> None:
    model = Model(server)
    for i in range(300):
        model.main.append(step_reply(i, 2))
    model.main.append(Reply(content="done"))
    agent = make_agent(tools=[produce], max_turns=400, persist=False)
    result = agent.run_sync("go")
    assert result.status == "success" and result.num_turns == 301
    reqs = [r for _, r in model.main_requests()]
    assert len(reqs) == 301 and prefix_changes(reqs) == []
    assert agent.context.prunes == 0 and agent.context.compactions == 0
    heads = {r.raw[: r.raw.index(b',"messages":')] for r in reqs}
    assert len(heads) == 1  # model, tools and parameters are byte-identical too


@pytest.mark.prepush
def test_a_growing_session_changes_its_prefix_only_when_it_prunes_or_compacts(
    server: FakeServer, make_agent: MakeAgent
) -> None:
    model = Model(server)
    rng = random.Random(11)
    for i in range(100):
        model.main.append(reasoning_heavy(i) if i % 3 == 0 else step_reply(i, rng.randint(20, 80)))
    model.main.append(Reply(content="done"))
    edited_steps: set[int] = set()
    step = 0

    def watch(event: Event) -> None:
        nonlocal step
        if isinstance(event, StepStarted):
            step = event.step
        elif isinstance(event, Notice) and ("pruned" in event.text or "compacted" in event.text):
            edited_steps.add(step - 1)  # index of that step's request among the main requests

    agent = make_agent(
        tools=[produce], context_window=60_000, max_completion_tokens=4_000, max_turns=200, on_event=watch
    )
    result = agent.run_sync(FIRST)
    assert result.status == "success"
    main = [r for _, r in model.main_requests()]
    changes = prefix_changes(main)
    assert agent.context.prunes >= 1 and agent.context.compactions >= 1
    assert set(changes) == edited_steps  # the prefix changed exactly at the steps that pruned or compacted
    assert len(changes) <= len(main) // 10
    finished = TurnFinished("success", result.result, result.num_turns)
    obj = result_object(agent, finished, 1)
    assert obj["context"]["window"] == 60_000 and obj["context"]["used"] == agent.context.used
    assert obj["context"]["cached_ratio"] > 0.75  # the server's prompt cache is hit on most tokens


def test_bad_context_settings_are_reported_clearly(make_agent: MakeAgent, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="leaves only"):
        make_agent(tools=[produce], context_window=10_000, max_completion_tokens=32_768)
    with pytest.raises(ValueError, match="cannot read the tokenizer file"):
        make_agent(tools=[produce], tokenizer_path=tmp_path / "nope.model")
