"""`@tool`: turn a plain typed function into a Tool (name, docstring description, JSON schema)."""

from __future__ import annotations

import functools
import inspect
import json
import re
import types
import typing
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Union, get_args, get_origin, overload

from kimicode.tools.base import Tool, ToolContext, ToolError, ToolKind, ToolResult
from kimicode.tools.workers import run_blocking

if TYPE_CHECKING:
    import pydantic

_UNSUPPORTED = (complex, bytes, bytearray)  # JSON cannot carry these faithfully


def _check_supported(annotation: Any, tool_name: str) -> None:
    if annotation in _UNSUPPORTED:
        raise TypeError(f"@tool {tool_name}: unsupported parameter type {annotation!r} (JSON cannot carry it)")
    for arg in get_args(annotation):
        _check_supported(arg, tool_name)


def _arguments_model(
    tool_name: str, fields: dict[str, tuple[Any, Any]]
) -> tuple[type[pydantic.BaseModel], dict[str, Any]]:
    """A pydantic model of the parameters (internal field names, aliased to the parameter names, so any
    name works, even `json` or `_private`) and its JSON schema as the model will read it."""
    import pydantic  # here, not at import: `import kimicode` stays light

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a default JSON cannot show is left out of the schema
            model = pydantic.create_model(
                f"{tool_name}_arguments",
                __config__=pydantic.ConfigDict(extra="forbid", populate_by_name=False),
                **fields,  # type: ignore[call-overload]
            )
            schema = model.model_json_schema(by_alias=True)
    except (pydantic.PydanticUserError, pydantic.errors.PydanticSchemaGenerationError, TypeError) as exc:
        message = str(exc).splitlines()[0]
        raise TypeError(f"@tool {tool_name}: unsupported parameter type ({message})") from None
    return model, _tidy(schema)


def _tidy(schema: dict[str, Any]) -> dict[str, Any]:
    """pydantic's schema made plain for models and small servers: no titles, `$defs` inlined unless
    recursive, `X | None` as `{"type": [x, "null"]}`, no `additionalProperties: true` (the default)."""
    defs: dict[str, Any] = schema.pop("$defs", {})
    recursive = {name for name in defs if _refers_to(defs[name], name, defs, set())}

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(v) for v in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/") and ref[8:] not in recursive and ref[8:] in defs:
            rest = {k: v for k, v in node.items() if k != "$ref"}
            return walk({**defs[ref[8:]], **rest})
        out: dict[str, Any] = {}
        for key, value in node.items():
            if (key == "title" and isinstance(value, str)) or (key == "additionalProperties" and value is True):
                continue
            out[key] = {k: walk(v) for k, v in value.items()} if key in ("properties", "$defs") else walk(value)
        if "properties" in node and "additionalProperties" not in node:
            out["additionalProperties"] = False  # a model that ignores extra keys: refuse them, not drop them
        return _nullable_as_type(out)

    tidy: dict[str, Any] = walk(schema)
    if recursive:
        tidy["$defs"] = {name: walk(defs[name]) for name in sorted(recursive)}
    return tidy


def _nullable_as_type(out: dict[str, Any]) -> dict[str, Any]:
    """`anyOf: [X, {"type": "null"}]` with a simple X as X with `"type": [x, "null"]` (and None in its enum)."""
    options = out.get("anyOf")
    if not (isinstance(options, list) and len(options) == 2 and {"type": "null"} in options):
        return out
    other = options[0] if options[1] == {"type": "null"} else options[1]
    if not isinstance(other.get("type"), str):
        return out
    merged = {**other, "type": [other["type"], "null"]}
    if "enum" in merged and None not in merged["enum"]:
        merged["enum"] = [*merged["enum"], None]
    rest = {k: v for k, v in out.items() if k != "anyOf"}
    return {**merged, **rest}


def _refers_to(node: Any, name: str, defs: dict[str, Any], seen: set[str]) -> bool:
    if isinstance(node, list):
        return any(_refers_to(v, name, defs, seen) for v in node)
    if not isinstance(node, dict):
        return False
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = ref[8:]
        if target == name:
            return True
        if target not in seen and target in defs:
            seen.add(target)
            if _refers_to(defs[target], name, defs, seen):
                return True
    return any(_refers_to(v, name, defs, seen) for v in node.values())


def _problems(exc: pydantic.ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = "arguments" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"])
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


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


def _to_text(out: Any) -> ToolResult | str:
    """What the model sees of a return value: strings as they are, bytes decoded (UTF-8, bad bytes
    replaced), `(no output)` for None, JSON for anything pydantic can write as JSON (data, sets as lists, a
    pydantic model or dataclass as its fields, a datetime in ISO 8601; a value that is text alone, such as a
    datetime, without quotes), else `str()`."""
    if isinstance(out, ToolResult | str):
        return out
    if out is None:
        return "(no output)"
    if isinstance(out, bytes | bytearray | memoryview):
        return bytes(out).decode("utf-8", errors="replace")
    from pydantic_core import PydanticSerializationError, to_jsonable_python

    try:
        data = to_jsonable_python(_sets_sorted(out), fallback=_json_default)
        return data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    except (PydanticSerializationError, TypeError, ValueError):
        return str(out)


def _sets_sorted(value: Any) -> Any:
    """Plain data with its sets as sorted lists (when their items can be ordered): the same result each run."""
    if isinstance(value, set | frozenset):
        try:
            return sorted(_sets_sorted(v) for v in value)
        except TypeError:
            return [_sets_sorted(v) for v in value]
    if isinstance(value, dict):
        return {k: _sets_sorted(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_sets_sorted(v) for v in value]
    return value


def _json_default(value: Any) -> Any:
    """JSON for what pydantic cannot write: sets as (sorted, when they can be) lists, bytes as text, else str()."""
    if isinstance(value, set | frozenset):
        try:
            return sorted(value)
        except TypeError:
            return list(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", errors="replace")
    return str(value)


def _hinted(func: Callable[..., Any]) -> Any:
    """Where a callable's annotations live: the wrapped function of a partial, a callable object's
    `__call__`."""
    if isinstance(func, functools.partial):
        return _hinted(func.func)
    if inspect.isfunction(func) or inspect.ismethod(func) or inspect.isbuiltin(func):
        return func
    return type(func).__call__ if callable(func) else func


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    kind: ToolKind = "other",
    timeout: float | None = None,
    repeatable: bool = False,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    kind: ToolKind = "other",
    timeout: float | None = None,
    repeatable: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a Tool from a typed function (sync or async).

    The function's parameters become the JSON schema through pydantic (str, int, float, bool, Literal,
    Enum, `X | None`, lists, dicts, dataclasses, TypedDicts, pydantic models, `Annotated[X, Field(...)]`;
    defaults make them optional) and the arguments are validated and converted to those types before the
    call. A parameter annotated `ToolContext` receives the context instead. Return a string (or a
    ToolResult; dicts and lists are sent as JSON); raise `ToolError` (or any exception) to report an error
    to the model. The description is the docstring; an `Args:` section in it describes the parameters.
    `timeout` (seconds) stops a call that runs longer; `repeatable=True` exempts the tool from the
    agent's `repeat_limit` (a tool meant to be polled).
    """
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0):
        raise ValueError(f"@tool: timeout must be a positive number of seconds (got {timeout!r})")
    if kind not in typing.get_args(ToolKind):
        raise ValueError(f"@tool: kind must be one of {', '.join(typing.get_args(ToolKind))} (got {kind!r})")

    def build(func: Callable[..., Any]) -> Tool:
        import pydantic

        if inspect.isgeneratorfunction(func) or inspect.isasyncgenfunction(func):
            raise TypeError(
                f"@tool {getattr(func, '__name__', func)!r}: a generator function cannot be a tool; "
                "return the whole result instead"
            )
        tool_name = name or getattr(func, "__name__", None)
        if not isinstance(tool_name, str):
            raise TypeError(f"@tool: {func!r} has no __name__: give the tool one with @tool(name=...)")
        if not _NAME_OK.match(tool_name):
            raise ValueError(f"@tool: the name {tool_name!r} must be 1-64 letters, digits, '_' or '-'")
        try:
            hints = typing.get_type_hints(_hinted(func), include_extras=True)
        except Exception as exc:  # a forward reference that does not resolve
            raise TypeError(f"@tool {tool_name}: cannot read the type hints ({exc})") from None
        sig = inspect.signature(func)
        summary, param_docs = _describe(func)
        ctx_param: str | None = None
        fields: dict[str, tuple[Any, Any]] = {}
        names: dict[str, str] = {}  # internal field name -> parameter name
        for pname, param in sig.parameters.items():
            if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
                raise TypeError(f"@tool {tool_name}: *args and **kwargs cannot be described to the model")
            if param.kind is inspect.Parameter.POSITIONAL_ONLY:
                raise TypeError(f"@tool {tool_name}: positional-only parameter {pname!r} cannot be passed by name")
            annotation = hints.get(pname, Any)
            if annotation is ToolContext or (
                get_origin(annotation) in (Union, types.UnionType) and ToolContext in get_args(annotation)
            ):  # `ToolContext` or `ToolContext | None`: the agent passes its context here
                ctx_param = pname
                continue
            _check_supported(annotation, tool_name)
            default = ... if param.default is inspect.Parameter.empty else param.default
            internal = f"p{len(fields)}"
            names[internal] = pname
            fields[internal] = (annotation, pydantic.Field(default, alias=pname))
        model, parameters = _arguments_model(tool_name, fields)
        for pname, prop in parameters.get("properties", {}).items():
            if pname in param_docs and "description" not in prop:  # `Annotated[..., Field(description=)]` wins
                prop["description"] = param_docs[pname]
        parameters.setdefault("properties", {})
        parameters["additionalProperties"] = False
        is_async = inspect.iscoroutinefunction(func)

        async def call(args: dict[str, Any], ctx: ToolContext) -> ToolResult | str:
            try:
                validated = model.model_validate(args)
            except pydantic.ValidationError as exc:
                raise ToolError(f"invalid arguments: {_problems(exc)}") from None
            kwargs = {pname: getattr(validated, internal) for internal, pname in names.items()}
            if ctx_param:
                kwargs[ctx_param] = ctx
            if is_async:
                out = await func(**kwargs)
            else:
                out = await run_blocking(func, **kwargs)  # kimicode's own threads (tools/workers.py)
            return _to_text(out)

        return Tool(
            name=tool_name,
            description=description or summary or func.__name__,
            parameters=parameters,
            fn=call,
            kind=kind,
            timeout=timeout,
            repeatable=repeatable,
        )

    if fn is not None:
        return build(fn)
    return build
