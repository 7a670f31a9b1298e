"""Hostile use of the library's definitions: `@tool` on odd callables and signatures, `AgentOptions`
with wrong types, async hooks, failed endpoints. Mistakes must fail at definition time with an error
naming the problem, never later as a traceback from inside a turn."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from pathlib import Path
from typing import Any

import pydantic
import pytest
from helpers import lib_agent

import kimicode
from kimicode import Agent, AgentOptions, tool
from kimicode.events import Event
from kimicode.testing import ErrorReply, FakeServer, Reply, ToolCall

# -- @tool on odd signatures -------------------------------------------------------------------------------


def test_tool_rejects_var_args_and_var_kwargs_at_decoration() -> None:
    def star(*items: str) -> str:
        """x"""
        return ""

    def stars(**opts: str) -> str:
        """x"""
        return ""

    for fn in (star, stars):
        with pytest.raises(TypeError, match=r"\*args and \*\*kwargs"):
            tool(fn)


@pytest.mark.parametrize("bad", [0, -1, "5", float("nan")])
def test_tool_timeout_must_be_a_positive_number(bad: Any) -> None:
    with pytest.raises(ValueError, match="timeout"):
        tool(timeout=bad)


def test_tool_rejects_an_unknown_kind() -> None:
    with pytest.raises(ValueError, match="kind"):
        tool(kind="write")  # type: ignore[arg-type]


def test_tool_from_a_callable_without_a_name_says_to_pass_one() -> None:
    class Counter:
        def __call__(self, n: int) -> str:
            return str(n)

    def add(a: int, b: int) -> str:
        """Add."""
        return str(a + b)

    for fn in (Counter(), functools.partial(add, 1)):
        with pytest.raises(TypeError, match="name="):
            tool(fn)
    assert tool(name="inc")(functools.partial(add, 1)).parameters["required"] == ["b"]


def test_tool_rejects_generators_at_decoration() -> None:
    async def agen(n: int) -> Any:
        """Yield."""
        yield n

    def gen(n: int) -> Any:
        """Yield."""
        yield n

    for fn in (agen, gen):
        with pytest.raises(TypeError, match="generator"):
            tool(fn)


def test_unannotated_parameters_take_any_json_and_stay_required() -> None:
    @tool
    def loose(value, flag=False):  # type: ignore[no-untyped-def]
        """Take anything."""
        return repr(value)

    assert loose.parameters["required"] == ["value"]
    assert set(loose.parameters["properties"]) == {"value", "flag"}


def test_mutable_default_is_not_shared_between_calls(server: FakeServer, tmp_path: Path) -> None:
    @tool
    def collect(item: str, bag: list[str] = []) -> str:  # noqa: B006 - the point of the test
        """Add an item to a bag."""
        bag.append(item)
        return str(len(bag))

    server.add(
        Reply(tool_calls=[ToolCall("collect", {"item": "a"}), ToolCall("collect", {"item": "b"})]), Reply(content="ok")
    )
    result = lib_agent(server, tmp_path, tools=[collect]).run_sync("go")
    assert [m["content"] for m in result.messages if m["role"] == "tool"] == ["1", "1"]


class Point(pydantic.BaseModel):
    x: int
    y: int | None = None


@dataclasses.dataclass
class Box:
    corners: list[Point]
    label: str | None = None


def test_pydantic_and_nested_optional_arguments_validated_and_converted(server: FakeServer, tmp_path: Path) -> None:
    seen: list[Any] = []

    @tool
    def place(box: Box, origin: Point | None = None) -> str:
        """Place a box."""
        seen.append((box, origin))
        return "placed"

    server.add(
        Reply(tool_calls=[ToolCall("place", {"box": {"corners": [{"x": "one"}]}})]),
        Reply(tool_calls=[ToolCall("place", {"box": {"corners": [{"x": 1}, {"x": 2, "y": None}]}})]),
        Reply(content="ok"),
    )
    result = lib_agent(server, tmp_path, tools=[place]).run_sync("go")
    contents = [m["content"] for m in result.messages if m["role"] == "tool"]
    assert "corners" in contents[0] and "integer" in contents[0] and contents[1] == "placed"
    box, origin = seen[0]
    assert isinstance(box, Box) and isinstance(box.corners[1], Point) and origin is None


# -- AgentOptions with wrong types and names ---------------------------------------------------------------


def test_options_unknown_name_names_the_nearest() -> None:
    with pytest.raises(TypeError, match="max_turns"):
        AgentOptions().replace(max_turn=3)
    with pytest.raises(TypeError, match="max_turns"):
        Agent(max_turn=3, api_key="k")
    with pytest.raises(TypeError, match="max_turns"):
        AgentOptions(max_turn=3)  # type: ignore[call-arg]


def test_options_are_frozen() -> None:
    options = AgentOptions()
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.max_turns = 3  # type: ignore[misc]
    assert options.replace(max_turns=3).max_turns == 3 and options.max_turns == 200


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("max_turns", "5"),
        ("max_turns", 0),
        ("thinking", "medium"),
        ("permission_mode", "YOLO"),
        ("context_window", "big"),
        ("context_window", -1),
        ("max_completion_tokens", 0),
        ("retry_base_delay", -1),
        ("request_timeout", "30"),
        ("tool_timeout", 0),
        ("repeat_limit", 1),
        ("model", 5),
        ("workspace", 5),
        ("persist", "no"),
        ("allow", 5),
        ("tool_output_cap", -3),
    ],
)
def test_options_wrong_values_raise_naming_the_setting(name: str, value: Any) -> None:
    with pytest.raises((TypeError, ValueError), match=name):
        AgentOptions(**{name: value})


# -- hooks ---------------------------------------------------------------------------------------------------


def test_async_on_event_hook_is_reported_not_silently_dropped(server: FakeServer, tmp_path: Path) -> None:
    """Refused at construction (tests/agent/test_library_contained.py); one assigned later is reported."""
    seen: list[str] = []

    async def hook(event: Event) -> None:
        seen.append(type(event).__name__)

    server.add(Reply(content="hi"))
    agent = lib_agent(server, tmp_path)
    agent.on_event = hook
    result = agent.run_sync("go")
    assert result.status == "success"
    assert result.hook_errors and "async" in result.hook_errors[0]


# -- failing endpoints -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "kind", "status", "cls"),
    [
        (ErrorReply(401, "bad key", "authentication_error"), "auth", 401, kimicode.AuthError),
        (
            ErrorReply(429, "slow down", "rate_limit_error", {"retry-after": "7"}),
            "transient",
            429,
            kimicode.RateLimitError,
        ),
        (ErrorReply(500, "boom"), "transient", 500, kimicode.ServerUnavailableError),
    ],
)
def test_failed_requests_give_typed_errors(
    server: FakeServer, tmp_path: Path, reply: ErrorReply, kind: str, status: int, cls: type[Exception]
) -> None:
    from kimicode.llm.client import ChatClient, ClientConfig

    waits: list[float] = []

    async def record(delay: float) -> None:  # the retry's wait, recorded instead of slept (7 s for the 429)
        waits.append(delay)

    server.add(*[reply] * 3)
    client = ChatClient(
        ClientConfig(
            base_url=server.base_url,
            api_key="sk-test",
            model="kimi-k3",
            max_retries=1,
            retry_base_delay=0.01,
            sleep=record,
        )
    )
    result = lib_agent(server, tmp_path, client=client).run_sync("go")
    assert result.status == "error" and result.error_kind == kind
    assert result.error is not None and result.error.status == status and result.error.kind == kind
    assert len(waits) == (kind == "transient")  # one retry of a transient error, none of a refused key
    if status == 429:
        assert result.error.retry_after == 7 and waits == [7.0]  # the server's retry-after is what it waited
    with pytest.raises(cls) as info:
        result.raise_for_status()
    assert isinstance(info.value, kimicode.KimicodeError)
    assert "sk-test" not in str(info.value)


def test_context_length_error_is_typed(tmp_path: Path) -> None:
    with FakeServer(context_window=50) as server:
        server.add(*[Reply(content="never")] * 4)
        result = lib_agent(server, tmp_path, max_retries=0, context_window=100_000).run_sync("x " * 400)
    assert result.status == "error"
    assert result.error is not None and result.error.kind == "context_length"
    with pytest.raises(kimicode.ContextLengthError):
        result.raise_for_status()


def test_one_agent_failing_does_not_disturb_the_others(server: FakeServer, tmp_path: Path) -> None:
    def route(request: Any) -> Reply | ErrorReply:
        text = request.body["messages"][-1]["content"]
        return ErrorReply(401, "bad key", "authentication_error") if "bad" in text else Reply(content="fine")

    server.add(*[route] * 20)

    async def main() -> list[str]:
        agents = [lib_agent(server, tmp_path / str(i), max_retries=0) for i in range(6)]
        results = await asyncio.gather(*(a.run("bad" if i % 2 else "good") for i, a in enumerate(agents)))
        await asyncio.gather(*(a.aclose() for a in agents))
        return [r.status for r in results]

    assert asyncio.run(main()) == ["success", "error"] * 3


# -- collaborators of the wrong kind ----------------------------------------------------------------------------


def plain_function(path: str) -> str:
    """Not decorated."""
    return path


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"tools": [plain_function]}, "@tool"),
        ({"extra_tools": [plain_function]}, "@tool"),
        ({"tools": "read_file"}, "tools"),
        ({"approve": "yes"}, "approve"),
        ({"on_event": print, "approve": True}, "approve"),
        ({"on_event": "print"}, "on_event"),
    ],
)
def test_collaborators_of_the_wrong_kind_fail_at_construction(
    server: FakeServer, tmp_path: Path, kw: dict[str, Any], match: str
) -> None:
    with pytest.raises(TypeError, match=match):
        lib_agent(server, tmp_path, **kw)


def test_two_tools_with_one_name_are_refused(server: FakeServer, tmp_path: Path) -> None:
    @tool(name="same")
    def first() -> str:
        """One."""
        return "1"

    @tool(name="same")
    def second() -> str:
        """Two."""
        return "2"

    with pytest.raises(ValueError, match="same"):
        lib_agent(server, tmp_path, tools=[first, second])
