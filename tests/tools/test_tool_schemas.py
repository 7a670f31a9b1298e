"""Tool arguments are validated with jsonschema (draft 2020-12) and `@tool` schemas come from pydantic:
the cases an MCP server or a library user would send, including the hostile ones."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
from collections.abc import Callable
from typing import Annotated, Any, Literal

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typing_extensions import TypedDict

from kimicode import Agent, ToolContext, tool
from kimicode.testing import FakeServer, Reply, ToolCall
from kimicode.tools.registry import validate

MakeAgent = Callable[..., Agent]

MCP_SCHEMA: dict[str, Any] = {  # the shapes MCP servers publish (the old validator accepted anything here)
    "type": "object",
    "properties": {
        "target": {"anyOf": [{"type": "string", "pattern": "^[a-z][a-z0-9_-]*$"}, {"type": "integer", "minimum": 1}]},
        "item": {"$ref": "#/$defs/Item"},
        "tags": {"type": "array", "items": {"type": "string", "minLength": 1}, "maxItems": 3},
        "mode": {"const": "fast"},
    },
    "required": ["target"],
    "additionalProperties": False,
    "$defs": {"Item": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}},
}


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"target": "Bad Name"}, "arguments.target must match one of the allowed forms"),
        ({"target": 0}, "must be >= 1, got 0"),
        ({"target": "ok", "item": {"id": "7"}}, "arguments.item.id must be of type integer, got string"),
        ({"target": "ok", "item": {}}, "arguments.item is missing required property 'id'"),
        ({"target": "ok", "tags": ["a", ""]}, "arguments.tags[1]"),
        ({"target": "ok", "tags": ["a", "b", "c", "d"]}, "arguments.tags"),
        ({"target": "ok", "mode": "slow"}, 'arguments.mode must be "fast"'),
        ({"target": "ok", "extra": 1}, "unknown property 'extra' (allowed: target, item, tags, mode)"),
        ({}, "arguments is missing required property 'target'"),
    ],
)
def test_mcp_schemas_are_enforced_with_paths(args: dict[str, Any], expected: str) -> None:
    problems = validate(MCP_SCHEMA, args)
    assert problems and any(expected in p for p in problems), problems


def test_valid_arguments_pass_and_integers_stay_integers() -> None:
    assert validate(MCP_SCHEMA, {"target": "a-1", "item": {"id": 3}, "tags": ["x"], "mode": "fast"}) == []
    assert validate(MCP_SCHEMA, {"target": 5}) == []
    assert validate({"type": "integer"}, 1.0) == ["arguments must be of type integer, got number"]
    assert validate({"type": "integer"}, True) == ["arguments must be of type integer, got boolean"]


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"$ref": "https://example.invalid/schema.json"}}},  # never fetched
        {"type": "bogus-type"},  # a broken schema
        {"type": "object", "properties": {"a": {"$ref": "#/$defs/Missing"}}},
    ],
)
def test_a_schema_we_cannot_use_is_not_enforced_rather_than_crashing(schema: dict[str, Any]) -> None:
    assert validate(schema, {"a": 1}) == []


def test_draft_07_definitions_refs_still_resolve() -> None:
    schema = {
        "type": "object",
        "definitions": {"S": {"type": "string"}},
        "properties": {"a": {"$ref": "#/definitions/S"}},
    }
    assert validate(schema, {"a": 1}) == ["arguments.a must be of type string, got integer"]


@pytest.mark.prepush
@settings(max_examples=150, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                    max_leaves=10))  # fmt: skip
def test_any_json_value_gives_a_list_of_strings_never_an_exception(value: Any) -> None:
    problems = validate(MCP_SCHEMA, value)
    assert isinstance(problems, list) and all(isinstance(p, str) for p in problems)
    if not isinstance(value, dict):
        assert problems == [f"arguments must be of type object, got {problems[0].rsplit(' ', 1)[-1]}"]


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass
class Point:
    x: int
    y: int = 0


class Owner(TypedDict):
    name: str


class Box(pydantic.BaseModel):
    corner: Point
    label: str | None = None


RECEIVED: dict[str, Any] = {}


@tool
def paint(
    color: Color,
    at: Point,
    box: Box,
    owners: list[Owner],
    size: Annotated[int, pydantic.Field(description="Pixels.", ge=1, le=64)] = 8,
    style: Literal["flat", "glossy"] = "flat",
    json: str | None = None,  # a name that shadows a BaseModel attribute
) -> str:
    """Paint something.

    Args:
        color: Which color.
        size: Overridden by the Annotated description.
    """
    RECEIVED.update(color=color, at=at, box=box, owners=owners, size=size, style=style, json=json)
    return "painted"


def test_pydantic_schema_covers_rich_types() -> None:
    props = paint.parameters["properties"]
    assert props["color"] == {"enum": ["red", "blue"], "type": "string", "description": "Which color."}
    assert props["at"]["properties"] == {"x": {"type": "integer"}, "y": {"type": "integer", "default": 0}}
    assert props["at"]["required"] == ["x"]
    assert props["box"]["properties"]["corner"]["required"] == ["x"]  # a nested model, inlined
    assert props["owners"] == {
        "type": "array",
        "items": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"],
                  "additionalProperties": False},
    }  # fmt: skip
    assert props["size"] == {"type": "integer", "description": "Pixels.", "minimum": 1, "maximum": 64, "default": 8}
    assert props["json"] == {"type": ["string", "null"], "default": None}
    assert "$defs" not in paint.parameters and "title" not in str(paint.parameters)
    assert paint.parameters["required"] == ["color", "at", "box", "owners"]
    assert paint.parameters["additionalProperties"] is False
    good = {"color": "red", "at": {"x": 1}, "box": {"corner": {"x": 2, "y": 3}}, "owners": [{"name": "a"}]}
    assert validate(paint.parameters, good) == []
    assert validate(paint.parameters, {**good, "size": 65}) == ["arguments.size must be <= 64, got 65"]


def test_arguments_arrive_as_the_annotated_types(server: FakeServer, make_agent: MakeAgent) -> None:
    args = {"color": "blue", "at": {"x": 1}, "box": {"corner": {"x": 2}}, "owners": [{"name": "ann"}], "json": "j"}
    server.add(Reply(tool_calls=[ToolCall("paint", args)]), Reply(content="ok"))
    result = make_agent(tools=[paint], persist=False).run_sync("paint")
    assert result.ok and [m["content"] for m in result.messages if m["role"] == "tool"] == ["painted"]
    assert RECEIVED["color"] is Color.BLUE and RECEIVED["at"] == Point(1, 0)
    assert RECEIVED["box"] == Box(corner=Point(2, 0)) and RECEIVED["owners"] == [{"name": "ann"}]
    assert RECEIVED["json"] == "j" and RECEIVED["size"] == 8


def test_a_direct_call_with_bad_arguments_is_a_tool_error(tmp_path: Any) -> None:
    """A caller bypassing the agent's validation still gets a ToolError naming the field, not a TypeError."""
    from kimicode import ToolError

    bad = {"color": "red", "at": {"x": "not a number"}, "box": {"corner": {"x": 1}}, "owners": []}
    with pytest.raises(ToolError, match=r"arguments\.at\.x"):
        asyncio.run(paint.fn(bad, ToolContext(tmp_path)))


class Node(pydantic.BaseModel):
    value: int
    children: list[Node] = []


class Opaque:
    """A class pydantic cannot describe."""


def test_recursive_models_keep_their_defs() -> None:
    @tool
    def walk(root: Node) -> str:
        """Walk a tree."""
        return str(root.value)

    assert walk.parameters["properties"]["root"] == {"$ref": "#/$defs/Node"}
    assert "Node" in walk.parameters["$defs"]
    tree = {"root": {"value": 1, "children": [{"value": 2, "children": [{"value": "x"}]}]}}
    assert validate(walk.parameters, tree) == [
        "arguments.root.children[0].children[0].value must be of type integer, got string"
    ]


def test_types_json_cannot_carry_are_refused_at_definition() -> None:
    with pytest.raises(TypeError, match="unsupported parameter type"):

        @tool
        def raw(data: bytes) -> str:
            """No."""
            return ""

    with pytest.raises(TypeError, match="unsupported parameter type"):

        @tool
        def opaque(thing: Opaque) -> str:  # arbitrary classes have no schema
            """No."""
            return ""


def test_tool_options_are_checked() -> None:
    with pytest.raises(ValueError, match="timeout must be a positive"):
        tool(timeout=0)
    with pytest.raises(ValueError, match="timeout must be a positive"):
        tool(timeout=-1.5)

    @tool(timeout=2.5, repeatable=True)
    def poll() -> str:
        """Poll."""
        return ""

    assert (poll.timeout, poll.repeatable) == (2.5, True)
