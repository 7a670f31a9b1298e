"""`@tool`: turn a plain typed function into a Tool (name, docstring description, JSON schema)."""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, Union, get_args, get_origin, overload

from kimicode.tools.base import Tool, ToolContext, ToolKind, ToolResult


def json_schema_for(annotation: Any) -> dict[str, Any]:
    """JSON schema of a Python type hint: str, int, float, bool, Literal, Optional, list, dict."""
    if annotation is inspect.Parameter.empty or annotation is Any:
        return {}
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin is Literal:
        values = list(args)
        schema: dict[str, Any] = {"enum": values}
        kinds = {type(v) for v in values}
        if len(kinds) == 1:
            schema.update(json_schema_for(kinds.pop()))
        return schema
    if origin in (Union, types.UnionType):
        non_null = [a for a in args if a is not type(None)]
        if len(non_null) == 1:
            inner = json_schema_for(non_null[0])
            if len(non_null) < len(args):  # Optional[X]: null is allowed too
                if "type" in inner and isinstance(inner["type"], str):
                    inner = {**inner, "type": [inner["type"], "null"]}
                if "enum" in inner and None not in inner["enum"]:
                    inner = {**inner, "enum": [*inner["enum"], None]}
            return inner
        return {"anyOf": [json_schema_for(a) for a in args]}
    if origin in (list, tuple, set, frozenset) or annotation in (list, tuple, set):
        item = json_schema_for(args[0]) if args else {}
        return {"type": "array", "items": item} if item else {"type": "array"}
    if origin is dict or annotation is dict:
        return {"type": "object"}
    simple = {str: "string", int: "integer", float: "number", bool: "boolean"}
    if annotation in simple:
        return {"type": simple[annotation]}
    raise TypeError(f"@tool: unsupported parameter type {annotation!r}")


_ARGS_HEADERS = ("args:", "arguments:", "parameters:", "params:")
_NAME_OK = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def _describe(fn: Callable[..., Any]) -> tuple[str, dict[str, str]]:
    """The docstring without its `Args:` section, and the per-parameter descriptions from that section.

    The `Args:` section ends at the next unindented line (`Returns:`, `Raises:`, ...), which stays part
    of the description the model reads.
    """
    doc = inspect.getdoc(fn) or ""
    summary_lines: list[str] = []
    params: dict[str, str] = {}
    in_args = False
    indent: int | None = None
    current: str | None = None
    for line in doc.splitlines():
        stripped = line.strip()
        if stripped.lower() in _ARGS_HEADERS:
            in_args, indent, current = True, None, None
            continue
        if in_args:
            if not stripped:
                continue
            depth = len(line) - len(line.lstrip())
            if depth == 0:  # the next section
                in_args = False
            else:
                if indent is None:
                    indent = depth
                head, sep, rest = stripped.partition(":")
                name = head.split("(")[0].strip().lstrip("*")
                if depth == indent and sep and name.isidentifier():
                    params[name] = rest.strip()
                    current = name
                elif current:
                    params[current] = (params[current] + " " + stripped).strip()
                continue
        summary_lines.append(line)
    return "\n".join(summary_lines).strip(), params


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def _to_text(out: Any) -> ToolResult | str:
    """What the model sees of a return value: strings as they are, JSON for data, `(no output)` for None."""
    if isinstance(out, ToolResult | str):
        return out
    if out is None:
        return "(no output)"
    if isinstance(out, dict | list | tuple | int | float | bool):
        try:
            return json.dumps(out, ensure_ascii=False, default=str)
        except (TypeError, ValueError):
            return str(out)
    return str(out)


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *, name: str | None = None, description: str | None = None, kind: ToolKind = "other"
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    kind: ToolKind = "other",
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a Tool from a typed function (sync or async).

    The function's parameters become the schema (defaults make them optional); a parameter annotated
    `ToolContext` receives the context instead. Return a string (or a ToolResult; dicts and lists are sent
    as JSON); raise `ToolError` (or any exception) to report an error to the model. The description is
    the docstring; an `Args:` section in it describes the parameters.
    """

    def build(func: Callable[..., Any]) -> Tool:
        hints = typing.get_type_hints(func)
        sig = inspect.signature(func)
        summary, param_docs = _describe(func)
        properties: dict[str, Any] = {}
        required: list[str] = []
        ctx_param: str | None = None
        tool_name = name or func.__name__
        if not _NAME_OK.match(tool_name):
            raise ValueError(f"@tool: the name {tool_name!r} must be 1-64 letters, digits, '_' or '-'")
        for pname, param in sig.parameters.items():
            if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
                raise TypeError(f"@tool {tool_name}: *args and **kwargs cannot be described to the model")
            if param.kind is inspect.Parameter.POSITIONAL_ONLY:
                raise TypeError(f"@tool {tool_name}: positional-only parameter {pname!r} cannot be passed by name")
            annotation = hints.get(pname, param.annotation)
            if annotation is ToolContext or (
                get_origin(annotation) in (Union, types.UnionType) and ToolContext in get_args(annotation)
            ):  # `ToolContext` or `ToolContext | None`: the agent passes its context here
                ctx_param = pname
                continue
            schema = json_schema_for(annotation)
            if pname in param_docs:
                schema["description"] = param_docs[pname]
            if param.default is inspect.Parameter.empty:
                required.append(pname)
            elif _is_json(param.default):  # the model sees the default; the function applies it
                schema["default"] = param.default
            properties[pname] = schema
        parameters: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
        if required:
            parameters["required"] = required
        is_async = inspect.iscoroutinefunction(func)

        async def call(args: dict[str, Any], ctx: ToolContext) -> ToolResult | str:
            kwargs = dict(args)
            if ctx_param:
                kwargs[ctx_param] = ctx
            if is_async:
                out = await func(**kwargs)
            else:
                out = await asyncio.to_thread(func, **kwargs)
            return _to_text(out)

        return Tool(
            name=tool_name,
            description=description or summary or func.__name__,
            parameters=parameters,
            fn=call,
            kind=kind,
        )

    if fn is not None:
        return build(fn)
    return build
