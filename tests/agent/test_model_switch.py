"""Moving a conversation onto another model (issue 28): each policy sends exactly what it says, tool-call ids
and arguments never change, and resume and fork replay the recorded switches."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kimicode import Agent, AgentOptions
from kimicode.errors import UsageError
from kimicode.events import Event, Notice
from kimicode.session.log import iter_records, load
from kimicode.testing import FakeServer, Reply, ToolCall

DEEPSEEK_THOUGHT = "deepseek thinks about the glob"


@pytest.fixture
def deepseek() -> Any:
    with FakeServer(dialect="deepseek") as fake:
        yield fake


def start(server: FakeServer, workspace: Path, tmp_path: Path, **settings: Any) -> Agent:
    """A DeepSeek session with one tool call and its answer in the history."""
    server.add(
        Reply(reasoning=DEEPSEEK_THOUGHT, tool_calls=[ToolCall("glob", {"pattern": "*.py"}, id="call_ds_1")]),
        Reply(reasoning="deepseek concludes", content="no python files"),
    )
    opts = AgentOptions(
        base_url=server.base_url,
        api_key="sk-test",
        model="deepseek-reasoner",
        workspace=workspace,
        home=tmp_path / "home",
        retry_base_delay=0.01,
        **settings,
    )
    agent = Agent(opts)
    assert agent.run_sync("find python files").status == "success"
    return agent


def assistants(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m["role"] == "assistant"]


def calls_of(body: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [
        (c["id"], c["function"]["name"], c["function"]["arguments"])
        for m in assistants(body)
        for c in m.get("tool_calls") or ()
    ]


def test_strip_is_kimi_k3s_default_and_leaves_out_only_the_reasoning(
    deepseek: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    agent = start(deepseek, workspace, tmp_path)
    before = [m.get("content") for m in agent.messages if m["role"] == "assistant"]
    events: list[Event] = []
    agent.on_event = events.append
    agent.set_model("kimi-k3")
    deepseek.add(Reply(reasoning="k3 reasons", content="k3 answer"))
    assert agent.run_sync("and now?").result == "k3 answer"
    sent = deepseek.requests[-1].body
    assert sent["model"] == "kimi-k3"
    # every assistant message keeps its content and tool calls; the reasoning DeepSeek wrote is left out
    assert [m.get("reasoning_content") for m in assistants(sent)] == ["", ""]
    assert [m.get("content") for m in assistants(sent)] == before == ["", "no python files"]
    assert calls_of(sent)[0] == ("call_ds_1", "glob", json.dumps({"pattern": "*.py"}))
    assert [m["tool_call_id"] for m in sent["messages"] if m["role"] == "tool"] == ["call_ds_1"]
    notices = [e.text for e in events if isinstance(e, Notice)]
    assert any(
        "from deepseek-reasoner to kimi-k3" in t and "2 earlier messages" in t and "strip" in t for t in notices
    ), notices
    # the stored history is what was sent, and the log replays to it
    assert agent.log is not None
    assert load(agent.log.path).messages == agent.messages
    assert agent.messages[: len(sent["messages"])] == sent["messages"]
    # kimi-k3's own reasoning is kept from now on
    deepseek.add(Reply(content="again"))
    agent.run_sync("more")
    assert [m.get("reasoning_content") for m in assistants(deepseek.requests[-1].body)] == ["", "", "k3 reasons"]


def test_keep_sends_every_message_whole(deepseek: FakeServer, workspace: Path, tmp_path: Path) -> None:
    agent = start(deepseek, workspace, tmp_path)
    agent.set_model("kimi-k3", on_switch="keep")
    deepseek.add(Reply(content="k3 answer"))
    agent.run_sync("and now?")
    sent = deepseek.requests[-1].body
    assert [m.get("reasoning_content") for m in assistants(sent)] == [DEEPSEEK_THOUGHT, "deepseek concludes"]
    assert calls_of(sent)[0] == ("call_ds_1", "glob", json.dumps({"pattern": "*.py"}))


def test_compact_summarises_with_the_new_model_before_its_first_answer(
    deepseek: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    agent = start(deepseek, workspace, tmp_path, on_switch="compact")
    for i in range(3):  # enough history that /compact's summary replaces the older part
        deepseek.add(Reply(reasoning=f"deepseek long thought {i}", content=f"answer {i}: " + "words " * 800))
        agent.run_sync(f"question {i}")
    agent.set_model("kimi-k3")
    assert len(deepseek.requests) == 5  # nothing is sent until the next turn
    deepseek.add(Reply(content="The user asked for python files; glob found none."), Reply(content="k3 answer"))
    assert agent.run_sync("and now?").result == "k3 answer"
    summary_request, sent = deepseek.requests[-2].body, deepseek.requests[-1].body
    assert summary_request["model"] == sent["model"] == "kimi-k3"
    assert DEEPSEEK_THOUGHT in json.dumps(summary_request)  # the summariser reads the history...
    assert "deepseek" not in json.dumps([m.get("reasoning_content") for m in sent["messages"]])  # ...k3 does not
    assert any("glob found none" in str(m.get("content")) for m in sent["messages"])
    assert sent["messages"][-1] == {"role": "user", "content": "and now?"}
    assert agent.log is not None and load(agent.log.path).messages == agent.messages


def test_compact_on_a_short_history_still_leaves_out_the_reasoning(
    deepseek: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    agent = start(deepseek, workspace, tmp_path, on_switch="compact")
    agent.set_model("kimi-k3")
    deepseek.add(Reply(content="k3 answer"))
    assert agent.run_sync("and now?").result == "k3 answer"  # nothing to summarise: no summary request
    assert [m.get("reasoning_content") for m in assistants(deepseek.requests[-1].body)] == ["", ""]
    assert calls_of(deepseek.requests[-1].body)[0][0] == "call_ds_1"


def test_switch_policy_comes_from_option_then_model_then_model_table_then_profile(
    deepseek: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text('[model]\non_switch = "keep"\n[models.kimi-k3]\non_switch = "compact"\n')
    options = AgentOptions.from_workspace(
        workspace, home=home, base_url=deepseek.base_url, api_key="k", model="deepseek-reasoner"
    )
    agent = Agent(options)
    from kimicode.agent.builder import switch_policy

    assert switch_policy(agent.options, agent.model_config, agent.profile) == "keep"  # [model] on_switch
    agent.set_model("kimi-k3")
    assert switch_policy(agent.options, agent.model_config, agent.profile) == "compact"  # models.kimi-k3
    agent.options = agent.options.replace(on_switch="strip")
    assert switch_policy(agent.options, agent.model_config, agent.profile) == "strip"  # the option wins
    bare = Agent(base_url=deepseek.base_url, api_key="k", model="kimi-k3", workspace=workspace)
    assert switch_policy(bare.options, bare.model_config, bare.profile) == "strip"  # kimi-k3's profile
    generic = Agent(base_url=deepseek.base_url, api_key="k", model="llama-3", workspace=workspace)
    assert switch_policy(generic.options, generic.model_config, generic.profile) == "keep"


def test_resume_and_fork_replay_the_recorded_switch(deepseek: FakeServer, workspace: Path, tmp_path: Path) -> None:
    agent = start(deepseek, workspace, tmp_path)
    agent.set_model("kimi-k3")
    deepseek.add(Reply(reasoning="k3 own", content="k3 answer"))
    agent.run_sync("and now?")
    assert agent.log is not None
    records = list(iter_records(agent.log.path))
    switch = [r for r in records if r["type"] == "settings" and r.get("reason") == "model"]
    assert switch and switch[-1]["on_switch"] == "strip" and switch[-1]["switched_from"] == "deepseek-reasoner"
    assert [r["reason"] for r in records if r["type"] == "prune"] == ["model-switch"]
    models = [r.get("model") for r in records if r["type"] == "message" and r["message"]["role"] == "assistant"]
    assert models == ["deepseek-reasoner", "deepseek-reasoner", "kimi-k3"]

    resumed = Agent.resume(agent.session_id, home=tmp_path / "home", base_url=deepseek.base_url, api_key="k")
    assert resumed.endpoint.model == "kimi-k3" and resumed.resume_warning is None
    assert resumed.messages == agent.messages
    deepseek.add(Reply(content="resumed"))
    resumed.run_sync("continue")
    assert [m.get("reasoning_content") for m in assistants(deepseek.requests[-1].body)] == ["", "", "k3 own"]
    # a fork onto another model applies the policy to the child only; kimi-k3's own reasoning is the child's
    # foreign reasoning now
    child = resumed.fork(model="deepseek-reasoner", on_switch="strip")
    assert [m.get("reasoning_content") for m in child.messages if m["role"] == "assistant"] == ["", "", "", ""]
    assert [m.get("reasoning_content") for m in resumed.messages if m["role"] == "assistant"] == ["", "", "k3 own", ""]
    assert calls_of({"messages": child.messages}) == calls_of({"messages": resumed.messages})


def test_resume_with_another_model_applies_its_policy(deepseek: FakeServer, workspace: Path, tmp_path: Path) -> None:
    agent = start(deepseek, workspace, tmp_path)
    events: list[Event] = []
    resumed = Agent.resume(
        agent.session_id,
        home=tmp_path / "home",
        base_url=deepseek.base_url,
        api_key="k",
        model="kimi-k3",
        on_event=events.append,
    )
    assert resumed.resume_warning is not None and "deepseek-reasoner" in resumed.resume_warning
    assert "left out" in resumed.resume_warning
    deepseek.add(Reply(content="k3"))
    resumed.run_sync("go on")
    assert [m.get("reasoning_content") for m in assistants(deepseek.requests[-1].body)] == ["", ""]
    assert calls_of(deepseek.requests[-1].body)[0][0] == "call_ds_1"


def test_switching_to_the_same_model_changes_nothing_and_bad_policies_fail(
    deepseek: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    agent = start(deepseek, workspace, tmp_path)
    before = [dict(m) for m in agent.messages]
    agent.set_model("deepseek-reasoner")
    assert agent.messages == before
    with pytest.raises(ValueError, match="on_switch must be one of keep, strip, compact"):
        agent.set_model("kimi-k3", on_switch="drop")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="on_switch"):
        AgentOptions(on_switch="never")  # type: ignore[arg-type]
    assert agent.endpoint.model == "deepseek-reasoner"


@pytest.mark.prepush
def test_switching_while_a_turn_runs_is_refused(deepseek: FakeServer, workspace: Path, tmp_path: Path) -> None:
    import asyncio

    agent = start(deepseek, workspace, tmp_path)
    deepseek.add(Reply(content="slow", first_delay=1.0))

    async def go() -> None:
        task = asyncio.create_task(agent.run("slow one"))
        await asyncio.sleep(0.2)
        with pytest.raises(UsageError, match="cannot switch the model while a turn is running"):
            agent.set_model("kimi-k3")
        await task

    asyncio.run(go())
    assert agent.endpoint.model == "deepseek-reasoner"


@pytest.mark.prepush
def test_the_cli_flag_reaches_the_policy(deepseek: FakeServer, workspace: Path, tmp_path: Path) -> None:
    import subprocess
    import sys

    agent = start(deepseek, workspace, tmp_path)
    deepseek.add(Reply(content="kept whole"))
    env = {
        "KIMICODE_HOME": str(tmp_path / "home"),
        "OPENAI_API_KEY": "k",
        "OPENAI_BASE_URL": deepseek.base_url,
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
    }
    out = subprocess.run(
        [sys.executable, "-m", "kimicode", "-r", agent.session_id, "-m", "kimi-k3", "--on-switch", "keep", "-p", "go"],
        capture_output=True,
        text=True,
        env=env,
        cwd=workspace,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert [m.get("reasoning_content") for m in assistants(deepseek.requests[-1].body)] == [
        DEEPSEEK_THOUGHT,
        "deepseek concludes",
    ]
    assert "recorded with model deepseek-reasoner" in out.stderr


def test_slash_model_fresh_and_slash_prompt_in_the_terminal(
    deepseek: FakeServer, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio
    import io

    from rich.console import Console

    from kimicode.ui import commands
    from kimicode.ui.app import Session, SessionOptions

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", deepseek.base_url)
    console = Console(file=io.StringIO(), width=200, color_system=None, force_terminal=False)
    session = Session(
        SessionOptions(workspace=workspace, model="deepseek-reasoner", retry_base_delay=0.01), console, plain=True
    )
    for i in range(3):
        deepseek.add(Reply(reasoning=f"deepseek thought {i}", content=f"answer {i}: " + "words " * 800))
    models = [{"id": "deepseek-reasoner", "object": "model"}, {"id": "kimi-k3", "object": "model"}]
    deepseek.get_routes["/v1/models"] = {"object": "list", "data": models}  # /model checks the server's list

    async def go() -> None:
        for i in range(3):
            await session.run_turn(f"question {i}")
        first = session.agent.session_id
        await commands.dispatch(session, "/model kimi-k3 --fast")
        assert session.agent.session_id == first and session.agent.endpoint.model == "deepseek-reasoner"
        await commands.dispatch(session, "/model kimi-k3 --fresh")
        assert session.agent.session_id != first and session.agent.endpoint.model == "kimi-k3"
        deepseek.add(Reply(content="summary of the three questions"), Reply(content="fresh answer"))
        await session.run_turn("go on")
        await commands.dispatch(session, "/prompt")
        await session.agent.aclose()

    asyncio.run(go())
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "/model NAME --fresh continues in a fork" in text
    assert "starts from a summary" in text and "System prompt:" in text and "read_file (" in text
    summary_request, sent = deepseek.requests[-2].body, deepseek.requests[-1].body
    assert summary_request["model"] == sent["model"] == "kimi-k3"
    assert "deepseek thought" not in json.dumps(sent)
    assert any("summary of the three questions" in str(m.get("content")) for m in sent["messages"])


def test_a_custom_commands_model_answers_its_turn_only(
    deepseek: FakeServer, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio
    import io

    from rich.console import Console

    from kimicode.ui import commands
    from kimicode.ui.app import Session, SessionOptions

    home = tmp_path / "home"
    (home / "commands").mkdir(parents=True)
    (home / "commands" / "review.md").write_text(
        "---\ndescription: review\nmodel: deepseek-reasoner\n---\nReview the diff.\n"
    )
    monkeypatch.setenv("KIMICODE_HOME", str(home))
    monkeypatch.setenv("KIMI_API_KEY", "sk-test")
    monkeypatch.setenv("KIMI_BASE_URL", deepseek.base_url)
    console = Console(file=io.StringIO(), width=200, color_system=None, force_terminal=False)
    session = Session(SessionOptions(workspace=workspace, model="kimi-k3", retry_base_delay=0.01), console, plain=True)
    deepseek.add(
        Reply(reasoning="k3 first", content="one"),
        Reply(reasoning="ds review", content="looks fine"),
        Reply(content="three"),
    )

    async def go() -> None:
        await session.run_turn("first")
        await commands.dispatch(session, "/review")
        assert session.agent.endpoint.model == "kimi-k3"  # back after the command's turn
        await session.run_turn("third")
        await session.agent.aclose()

    asyncio.run(go())
    assert [r.body["model"] for r in deepseek.requests] == ["kimi-k3", "deepseek-reasoner", "kimi-k3"]
    # each way the switch policy applied: kimi-k3 does not get DeepSeek's reasoning as its own
    assert "ds review" not in json.dumps(deepseek.requests[-1].body)
