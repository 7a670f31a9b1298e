"""The public library surface: the examples of docs/library.md run against the fake server, `@tool`,
tool sets, approvals, events, and a light `import kimicode`."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import pytest
from helpers import ROOT, running

import kimicode
from kimicode import Agent, Approval, ApprovalRequest, ToolContext, ToolError, ToolResult, tool
from kimicode.events import (
    Event,
    MessageCommitted,
    StepStarted,
    ToolCallFinished,
    TurnFinished,
    TurnStarted,
    UsageUpdated,
)
from kimicode.session.log import load
from kimicode.testing import ErrorReply, FakeServer, RecordedRequest, Reply, ToolCall
from kimicode.tools.registry import builtin_tools

MakeAgent = Callable[..., Agent]
DOC = ROOT / "docs" / "library.md"
BUILTIN = [t.name for t in builtin_tools()]  # read_file, write_file, edit_file, glob, grep, bash, ...


def doc_examples() -> dict[str, str]:
    """The named Python examples of docs/library.md (`<!-- example: NAME -->` before a code block)."""
    found = re.findall(r"<!-- example: (\S+) -->\n```python\n(.*?)\n```", DOC.read_text(), re.S)
    return dict(found)


def default_tool_names() -> list[str]:
    """The tools an Agent has without `tools=`: the built-in ones plus those the agent binds to itself."""
    return Agent(api_key="k", base_url="http://127.0.0.1:9/v1", persist=False, workspace=ROOT).tools.names


def tools_of(request: RecordedRequest) -> list[str]:
    return [t["function"]["name"] for t in request.body.get("tools", [])]


def results_in(request: RecordedRequest) -> list[str]:
    return [m["content"] for m in request.body["messages"] if m["role"] == "tool"]


# -- the documented examples, run as written ------------------------------------------------------------


def script_quickstart(server: FakeServer, ws: Path) -> None:
    (ws / "README.md").write_text("# Demo\nA tiny demo project.\n")
    server.add(
        Reply(reasoning="read it", tool_calls=[ToolCall("read_file", {"path": "README.md"})]),
        Reply(content="A tiny demo project."),
    )


def check_quickstart(out: str, server: FakeServer, ws: Path) -> None:
    assert out.splitlines()[0] == "success A tiny demo project."
    assert re.fullmatch(r"2 steps, \d+ prompt tokens", out.splitlines()[1])
    assert "A tiny demo project." in results_in(server.requests[1])[0]


def script_options(server: FakeServer, ws: Path) -> None:
    (ws / "AGENTS.md").write_text("Always run `make test` before you answer.\n")
    server.add(Reply(content="It asks to run make test."))


def check_options(out: str, server: FakeServer, ws: Path) -> None:
    assert out.splitlines() == ["plan 20", "It asks to run make test."]
    assert "Always run `make test` before you answer." in server.requests[0].body["messages"][0]["content"]


def script_stream(server: FakeServer, ws: Path) -> None:
    (ws / "a.py").write_text("")
    (ws / "b.py").write_text("")
    server.add(
        Reply(tool_calls=[ToolCall("glob", {"pattern": "*.py"})]),
        Reply(content="a.py and b.py."),
        Reply(content="Two."),
    )


def check_stream(out: str, server: FakeServer, ws: Path) -> None:
    lines = out.splitlines()
    assert lines[0] == "-> glob {'pattern': '*.py'}"
    assert lines[1].startswith("<- ") and lines[2:] == ["a.py and b.py.", "[success]", "Two."]
    second_turn = server.requests[2].body["messages"]
    assert [m["role"] for m in second_turn] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert server.requests[0].body["reasoning_effort"] == "max"


def script_ledger(server: FakeServer, ws: Path) -> None:
    server.add(*[Reply(tool_calls=[ToolCall("record", {"value": i})]) for i in range(1, 51)])
    server.add(Reply(content="The balance is 1275."))


def check_ledger(out: str, server: FakeServer, ws: Path) -> None:
    assert out.splitlines() == ["success 51 1275", "The balance is 1275."]
    assert len(server.requests) == 51
    last = server.requests[-1]
    assert tools_of(last) == ["record"]
    assert results_in(last) == [f"balance={i * (i + 1) // 2}" for i in range(1, 51)]
    assert last.body["messages"][0]["content"] == "You keep a ledger with the record tool."
    schema = last.body["tools"][0]["function"]
    assert schema["description"].startswith("Add an entry to the ledger")
    assert schema["parameters"]["properties"]["kind"] == {
        "enum": ["credit", "debit"], "type": "string", "description": "Whether the amount is added or taken away.",
        "default": "credit",
    }  # fmt: skip
    assert schema["parameters"]["required"] == ["value"]


def script_tools(server: FakeServer, ws: Path) -> None:
    return None


def check_tools(out: str, server: FakeServer, ws: Path) -> None:
    no_shell, custom = (eval(line) for line in out.splitlines())  # the printed lists of names
    assert no_shell == [n for n in BUILTIN if n != "bash"]
    assert custom == [n for n in default_tool_names() if n != "write_file"]  # read_file kept its place


def script_approve(server: FakeServer, ws: Path) -> None:
    server.add(
        Reply(tool_calls=[ToolCall("bash", {"command": "git log -1 --oneline"})]),
        Reply(tool_calls=[ToolCall("bash", {"command": "git -c alias.x='!touch removed.txt' x"})]),  # an alias
        Reply(content="Showed the commit; deleting was refused."),
    )


def check_approve(out: str, server: FakeServer, ws: Path) -> None:
    lines = out.splitlines()
    assert lines[0].startswith("refused bash: ") and lines[1] == "Showed the commit; deleting was refused."
    shown = results_in(server.requests[1])[-1]
    assert "[exit code: " in shown and "denied" not in shown  # read-only: asked (the ask rule), approved
    assert not (ws / "removed.txt").exists()  # the alias that runs a shell command: refused
    refused = results_in(server.requests[2])[-1]
    assert "this script approves only commands kimicode judges read-only" in refused


def script_cancel(server: FakeServer, ws: Path) -> None:
    server.add(Reply(tool_calls=[ToolCall("bash", {"command": "sleep 30.25 & echo $! > child.pid; wait"})]))


def check_cancel(out: str, server: FakeServer, ws: Path) -> None:
    assert out == "stopped: interrupted by user\n"
    assert (ws / "child.pid").read_text().strip()  # it started; inside the sandbox its pid is the namespace's
    deadline = time.monotonic() + 5
    while running(b"sleep\x0030.25\x00"):  # the running command was killed with the turn
        assert time.monotonic() < deadline, "the command survived the cancellation"
        time.sleep(0.05)
    (log,) = (Path(os.environ["KIMICODE_HOME"]) / "sessions").glob("*.jsonl")
    saved = load(log)
    assert saved.repaired == 0  # the interrupted result was committed before the task ended
    # the example's agent runs in a non-default mode: a note opening the prompt's message tells the model so
    assert [m["role"] for m in saved.messages] == ["system", "user", "assistant", "tool"]
    assert saved.messages[1]["content"].startswith("[permission mode: ")
    assert [r["status"] for r in saved.records if r["type"] == "turn_end"] == ["interrupted"]


def script_sessions(server: FakeServer, ws: Path) -> None:
    server.add(Reply(content="I will remember 7."), Reply(content="7"), Reply(content="Now 8."))


def check_sessions(out: str, server: FakeServer, ws: Path) -> None:
    lines = out.splitlines()
    assert lines[:2] == ["7", "Now 8."]
    first, resumed, forked = (r.body for r in server.requests)
    assert resumed["prompt_cache_key"] == first["prompt_cache_key"] != forked["prompt_cache_key"]
    assert resumed["messages"][1] == {"role": "user", "content": "Remember the number 7."}
    assert forked["messages"][: len(resumed["messages"])] == resumed["messages"]
    assert forked["messages"][-2]["content"] == "7"
    listed = [line.split(" ", 2) for line in lines[2:]]  # newest first: the branch, then the original
    assert [(sid, turns) for sid, turns, _ in listed] == [
        (forked["prompt_cache_key"], "3"),
        (first["prompt_cache_key"], "2"),
    ]
    assert {prompt for _, _, prompt in listed} == {"Remember the number 7."}


def script_hooks(server: FakeServer, ws: Path) -> None:
    server.add(Reply(tool_calls=[ToolCall("bash", {"command": "sleep 30"})]), Reply(content="Hello."))


def check_hooks(out: str, server: FakeServer, ws: Path) -> None:
    assert out.splitlines() == [
        "notice: on_event hook raised RuntimeError: the dashboard is down (on TurnStarted)",  # once per turn
        "success Hello. True",
    ]
    second = server.requests[1].body["messages"]
    # the prompt (opened by the note telling the model it runs in yolo mode), the abandoned call (closed), the
    # new prompt
    assert [m["role"] for m in second] == ["system", "user", "assistant", "tool", "user"]
    assert second[1]["content"].startswith("[permission mode: yolo]")
    assert second[3]["content"] == "interrupted by user"  # the abandoned call, closed in the history


def script_errors(server: FakeServer, ws: Path) -> None:
    for _ in range(2):
        server.add(ErrorReply(429, "slow down", "rate_limit_error", headers={"Retry-After": "0"}))


def check_errors(out: str, server: FakeServer, ws: Path) -> None:
    assert out.splitlines() == [
        "error transient 429 0.0",
        "rate limited; retry in 0.0 s",
        "this turn: 0 prompt tokens, 0 in total",
    ]
    assert len(server.requests) == 2  # max_retries=1: one retry


def script_sync_tools(server: FakeServer, ws: Path) -> None:
    server.add(
        Reply(tool_calls=[ToolCall("crunch", {"rows": 10})]),
        Reply(tool_calls=[ToolCall("crunch", {"rows": 1000})]),
        *[Reply(tool_calls=[ToolCall("job_status", {"job": "7"})]) for _ in range(5)],
        Reply(content="Job 7 is still running."),
    )


def check_sync_tools(out: str, server: FakeServer, ws: Path) -> None:
    assert out.splitlines() == [
        "processed 10 rows",
        "Error: the call timed out after 1 s and was stopped;",
        *["running"] * 5,  # a repeatable tool is not stopped by repeat_limit=4
        "success",
    ]


def script_own_parts(server: FakeServer, ws: Path) -> None:
    pass  # the example brings its own client: nothing is asked of the server


def check_own_parts(out: str, server: FakeServer, ws: Path) -> None:
    answer, kinds, resumed = out.splitlines()
    assert answer == "2 + 3 = 5" and resumed == "5 messages read back from the store"
    records = kinds.split()
    assert records[:3] == ["meta", "message", "message"] and records[-1] == "turn_end"
    assert records.count("message") == 5 and "usage" in records
    assert server.requests == [] and server.other_requests == []


SCENARIOS: dict[str, tuple[Callable[[FakeServer, Path], None], Callable[[str, FakeServer, Path], None]]] = {
    "quickstart": (script_quickstart, check_quickstart),
    "options": (script_options, check_options),
    "stream": (script_stream, check_stream),
    "ledger": (script_ledger, check_ledger),
    "tools": (script_tools, check_tools),
    "approve": (script_approve, check_approve),
    "cancel": (script_cancel, check_cancel),
    "sessions": (script_sessions, check_sessions),
    "hooks": (script_hooks, check_hooks),
    "errors": (script_errors, check_errors),
    "sync-tools": (script_sync_tools, check_sync_tools),
    "own-parts": (script_own_parts, check_own_parts),
}


def test_every_documented_example_is_tested() -> None:
    assert set(doc_examples()) == set(SCENARIOS)


@pytest.mark.prepush
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_documented_example_runs_against_the_fake_server(
    name: str, server: FakeServer, workspace: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KIMI_API_KEY", "sk-docs-example")
    monkeypatch.setenv("KIMI_BASE_URL", server.base_url)
    monkeypatch.chdir(workspace)
    script, check = SCENARIOS[name]
    script(server, workspace)
    code = compile(doc_examples()[name], f"docs/library.md:{name}", "exec")
    exec(code, {"__name__": "__main__"})
    out = capsys.readouterr().out
    check(out, server, workspace)


# -- @tool ----------------------------------------------------------------------------------------------


def test_tool_schema_from_hints_and_docstring() -> None:
    @tool
    def search(
        query: str,
        mode: Literal["fast", "thorough"],
        limit: int = 10,
        ratio: float = 0.5,
        exact: bool = False,
        paths: list[str] | None = None,
        tags: list[int] = [],  # noqa: B006 - a default the model sees
        options: dict[str, Any] | None = None,
        level: Literal["a", "b"] | None = None,
        ctx: ToolContext | None = None,
    ) -> str:
        """Search the code base.

        Longer explanation for the model.

        Args:
            query: What to look for,
                continued on the next line.
            mode: How hard to look.

        Returns:
            The matches, one per line.
        """
        return ""

    schema = search.parameters
    props = schema["properties"]
    assert search.name == "search"
    assert search.description == (
        "Search the code base.\n\nLonger explanation for the model.\n\nReturns:\n    The matches, one per line."
    )
    assert props["query"] == {"type": "string", "description": "What to look for, continued on the next line."}
    assert props["mode"] == {"enum": ["fast", "thorough"], "type": "string", "description": "How hard to look."}
    assert props["limit"] == {"type": "integer", "default": 10}
    assert props["ratio"] == {"type": "number", "default": 0.5}
    assert props["exact"] == {"type": "boolean", "default": False}
    assert props["paths"] == {"type": ["array", "null"], "items": {"type": "string"}, "default": None}
    assert props["tags"] == {"type": "array", "items": {"type": "integer"}, "default": []}
    assert props["options"] == {"type": ["object", "null"], "default": None}
    assert props["level"] == {"enum": ["a", "b", None], "type": ["string", "null"], "default": None}
    assert schema["required"] == ["query", "mode"] and schema["additionalProperties"] is False
    assert "ctx" not in props  # `ToolContext | None` receives the context too
    assert search.kind == "other"


def test_tool_options_and_bad_definitions() -> None:
    @tool(name="find-things", description="Custom description.", kind="read")
    async def finder(ctx: ToolContext, pattern: str) -> str:
        """Ignored docstring."""
        return pattern

    assert (finder.name, finder.description, finder.kind) == ("find-things", "Custom description.", "read")
    assert list(finder.parameters["properties"]) == ["pattern"]  # the context is not shown to the model
    with pytest.raises(ValueError, match="must be 1-64 letters"):
        tool(name="bad name!")(lambda: "")
    with pytest.raises(TypeError, match=r"\*args and \*\*kwargs"):

        @tool
        def variadic(*items: str) -> str:
            """No."""
            return ""

    with pytest.raises(TypeError, match="unsupported parameter type"):

        @tool
        def odd(value: complex) -> str:
            """No."""
            return ""


def test_custom_tools_sync_async_errors_and_return_values(
    server: FakeServer, make_agent: MakeAgent, workspace: Path
) -> None:
    seen: dict[str, Any] = {}

    @tool
    def sync_tool(word: str, times: int = 2) -> str:
        """Repeat a word."""
        return " ".join([word] * times)

    @tool
    async def async_tool(ctx: ToolContext, items: list[str]) -> dict[str, Any]:
        """Count items (async, with the context)."""
        await asyncio.sleep(0)
        seen["workspace"] = ctx.workspace
        return {"count": len(items), "first": items[0]}

    @tool
    def refuses(reason: str) -> str:
        """Always fails with a message for the model."""
        raise ToolError(f"cannot do that: {reason}")

    @tool
    def crashes() -> str:
        """A bug in a tool."""
        raise KeyError("missing")

    @tool
    def silent() -> None:
        """Returns nothing."""

    @tool
    def rich_result() -> ToolResult:
        """Returns a ToolResult."""
        return ToolResult("to the model", summary="short")

    server.add(
        Reply(
            tool_calls=[
                ToolCall("sync_tool", {"word": "hey"}),
                ToolCall("async_tool", {"items": ["a", "b"]}),
                ToolCall("refuses", {"reason": "policy"}),
                ToolCall("crashes", {}),
                ToolCall("silent", {}),
                ToolCall("rich_result", {}),
                ToolCall("sync_tool", {"word": 3}),  # invalid: never reaches the function
                ToolCall("sync_tool", {"word": "x", "extra": 1}),
            ]
        ),
        Reply(content="done"),
    )
    events: list[Event] = []
    agent = make_agent(tools=[sync_tool, async_tool, refuses, crashes, silent, rich_result], on_event=events.append)
    result = agent.run_sync("use them")
    assert result.ok and result.result == "done"
    contents = results_in(server.requests[1])
    assert contents[0] == "hey hey"
    assert json.loads(contents[1]) == {"count": 2, "first": "a"}
    assert contents[2] == "Error: cannot do that: policy"
    assert contents[3].startswith("Error: the tool failed unexpectedly (KeyError")
    assert contents[4] == "(no output)"
    assert contents[5] == "to the model"
    assert "arguments.word must be of type string" in contents[6]
    assert "unknown property 'extra'" in contents[7]
    assert seen["workspace"] == workspace.resolve()
    finished = [e for e in events if isinstance(e, ToolCallFinished)]
    assert [e.is_error for e in finished] == [False, False, True, True, False, False, True, True]
    assert finished[5].summary == "short"


# -- tool sets, approvals, events, multi-turn ------------------------------------------------------------


def test_builtin_tools_can_be_removed_or_replaced(server: FakeServer, make_agent: MakeAgent) -> None:
    @tool(kind="read")
    def grep(pattern: str) -> str:
        """My own grep."""
        return f"custom grep for {pattern}"

    server.add(Reply(content="a"), Reply(tool_calls=[ToolCall("grep", {"pattern": "x"})]), Reply(content="b"),
               Reply(content="c"))  # fmt: skip
    make_agent(tools=[]).run_sync("no tools")
    assert "tools" not in server.requests[0].body
    replaced = make_agent(extra_tools=[grep])
    replaced.run_sync("grep")
    assert tools_of(server.requests[1]) == default_tool_names()  # same place in the list, new function
    assert results_in(server.requests[2]) == ["custom grep for x"]
    replaced.tools.remove("bash")
    replaced.run_sync("again")
    assert tools_of(server.requests[3]) == [n for n in default_tool_names() if n != "bash"]
    assert {"read_file", "write_file", "edit_file", "glob", "grep", "bash"} <= set(BUILTIN)


def test_sync_and_async_approval_callbacks(server: FakeServer, make_agent: MakeAgent, workspace: Path) -> None:
    asked: list[ApprovalRequest] = []

    def sync_approve(request: ApprovalRequest) -> bool:
        asked.append(request)
        return request.kind == "edit"

    async def async_approve(request: ApprovalRequest) -> Approval:
        await asyncio.sleep(0)
        asked.append(request)
        return Approval(False, "not today")

    server.add(
        Reply(tool_calls=[ToolCall("write_file", {"path": "a.txt", "content": "A"}),
                          ToolCall("bash", {"command": "touch b.txt"})]),
        Reply(content="one"),
        Reply(tool_calls=[ToolCall("write_file", {"path": "c.txt", "content": "C"})]),
        Reply(content="two"),
    )  # fmt: skip
    first = make_agent(approve=sync_approve).run_sync("write and run")
    assert (workspace / "a.txt").read_text() == "A" and not (workspace / "b.txt").exists()
    assert [d["tool_name"] for d in first.permission_denials] == ["bash"]
    second = make_agent(approve=async_approve).run_sync("write")
    assert not (workspace / "c.txt").exists()
    assert "The user said: not today" in results_in(server.requests[3])[0]
    assert second.ok and [r.tool for r in asked] == ["write_file", "bash", "write_file"]
    assert asked[0].path == str(workspace.resolve() / "a.txt") and asked[1].arguments == {"command": "touch b.txt"}


def test_run_continues_the_conversation_and_reports_events(server: FakeServer, make_agent: MakeAgent) -> None:
    server.add(
        Reply(content="first", usage={"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}),
        Reply(content="second", usage={"prompt_tokens": 20, "completion_tokens": 3, "total_tokens": 23}),
    )
    events: list[Event] = []
    agent = make_agent(on_event=events.append)

    async def go() -> tuple[Any, Any]:
        try:
            return await agent.run("one"), await agent.run("two")
        finally:
            await agent.aclose()

    one, two = asyncio.run(go())
    assert (one.result, two.result) == ("first", "second")
    assert [m["role"] for m in two.messages] == ["user", "assistant"] and two.messages[0]["content"] == "two"
    assert two.usage == {"prompt_tokens": 30, "completion_tokens": 5, "cached_tokens": 0}
    assert one.session_id == two.session_id == agent.session_id
    assert [m["content"] for m in server.requests[1].body["messages"][1:]] == ["one", "first", "two"]
    kinds = [type(e) for e in events]
    assert kinds.count(TurnStarted) == 2 and kinds.count(TurnFinished) == 2
    assert kinds[:2] == [TurnStarted, MessageCommitted] and StepStarted in kinds and UsageUpdated in kinds


# -- packaging --------------------------------------------------------------------------------------------


@pytest.mark.prepush
def test_import_kimicode_is_light() -> None:
    code = (
        "import sys, kimicode\n"
        "heavy = ('prompt_toolkit', 'rich', 'openai', 'typer', 'httpx', 'httpx2', 'pydantic')\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & set(heavy)))\n"
        "from kimicode import Agent, tool\n"
        "agent = Agent(api_key='k', persist=False)\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'prompt_toolkit', 'rich', 'typer'}))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI_", "OPENAI_", "MOONSHOT_"))}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["[]", "[]"]


def test_the_package_is_typed_and_exports_its_api() -> None:
    assert (Path(kimicode.__file__).parent / "py.typed").is_file()
    for name in kimicode.__all__:
        assert getattr(kimicode, name) is not None
    with pytest.raises(AttributeError):
        kimicode.no_such_name  # noqa: B018
