"""`@tool`: turn a plain typed function into a Tool (name, docstring description, JSON schema)."""

from __future__ import annotations

import asyncio
import inspect
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
            if len(non_null) < len(args) and "type" in inner and isinstance(inner["type"], str):
                inner = {**inner, "type": [inner["type"], "null"]}
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


def _describe(fn: Callable[..., Any]) -> tuple[str, dict[str, str]]:
    """Docstring summary, plus per-parameter descriptions from an `Args:` section if present."""
    doc = inspect.getdoc(fn) or ""
    summary_lines: list[str] = []
    params: dict[str, str] = {}
    in_args = False
    current: str | None = None
    for line in doc.splitlines():
        stripped = line.strip()
        if stripped.lower() in ("args:", "arguments:", "parameters:"):
            in_args = True
            continue
        if in_args:
            if not stripped:
                current = None
                continue
            head, sep, rest = stripped.partition(":")
            name = head.split("(")[0].strip()
            if sep and name.isidentifier() and line.startswith((" ", "\t")) and not line.startswith("        "):
                params[name] = rest.strip()
                current = name
            elif current:
                params[current] += " " + stripped
            continue
        summary_lines.append(line)
    return "\n".join(summary_lines).strip(), params


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
    `ToolContext` receives the context instead. Return a string (or a ToolResult); raise `ToolError`
    (or any exception) to report an error to the model.
    """

    def build(func: Callable[..., Any]) -> Tool:
        hints = typing.get_type_hints(func)
        sig = inspect.signature(func)
        summary, param_docs = _describe(func)
        properties: dict[str, Any] = {}
        required: list[str] = []
        ctx_param: str | None = None
        for pname, param in sig.parameters.items():
            annotation = hints.get(pname, param.annotation)
            if annotation is ToolContext:
                ctx_param = pname
                continue
            schema = json_schema_for(annotation)
            if pname in param_docs:
                schema["description"] = param_docs[pname]
            if param.default is inspect.Parameter.empty:
                required.append(pname)
            else:
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
            if isinstance(out, ToolResult):
                return out
            return out if isinstance(out, str) else str(out)

        return Tool(
            name=name or func.__name__,
            description=description or summary or func.__name__,
            parameters=parameters,
            fn=call,
            kind=kind,
        )

    if fn is not None:
        return build(fn)
    return build
