"""Structured output: the final answer must be JSON valid against a schema (`--output-schema FILE`,
`--json-schema JSON`, `Agent.run(prompt, output_type=Model)`).

The turn runs as usual (tools included). Its answer is parsed (a JSON document, or one in a ```json fence)
and checked with `jsonschema`; an invalid answer goes back to the model as a new message listing the
validation errors, up to `max_attempts` answers in all, after which the run ends with the status
`invalid_output`. Where the server honours `response_format` with a JSON Schema it is sent as well
(docs/servers.md says which): on every request for servers that combine it with tools (OpenAI,
OpenRouter), on the corrections only for servers that would otherwise stop calling tools (vLLM, SGLang,
llama.cpp, Ollama), and Moonshot and DeepSeek get their JSON mode (`json_object`) on the corrections. A
server that refuses the `response_format` (HTTP 400: llama.cpp's grammar converter refuses some valid schemas)
gets the same request again without it, for the rest of the run, and a notice says so: the answer is still
validated.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, TypeVar
from urllib.parse import urlparse

from kimicode import errors
from kimicode.agent.interrupted import retract_unsent
from kimicode.events import Event, TurnFinished

if TYPE_CHECKING:
    from kimicode.agent.core import Agent
    from kimicode.agent.streams import Emit

DEFAULT_ATTEMPTS = 3
"""Answers the model may give before the run fails (the first and two corrections)."""
MAX_ERRORS_SHOWN = 10
INVALID: Final = "invalid_output"
"""The status of a run whose answer never matched the schema."""

FormatMode = Literal["always", "corrections", "json_object", "off"]
_FENCE = re.compile(r"```(?:json)?\s*\n(.*?)\n?```", re.S)


class TurnLike(Protocol):
    """What the loop reads of a turn's outcome (a TurnFinished or a RunResult)."""

    @property
    def status(self) -> str: ...

    @property
    def result(self) -> str: ...

    @property
    def error_kind(self) -> str | None: ...

    @property
    def error(self) -> Any: ...


T = TypeVar("T", bound=TurnLike)


@dataclass(frozen=True)
class OutputSpec:
    """The schema the answer must satisfy, and the pydantic model to build from it (when given one)."""

    schema: Mapping[str, Any]
    model: Any = None
    max_attempts: int = DEFAULT_ATTEMPTS
    name: str = "output"

    @classmethod
    def of(cls, output_type: Any, max_attempts: int = DEFAULT_ATTEMPTS) -> OutputSpec:
        """From a pydantic model (or any type pydantic can describe, `typing.TypedDict` included) or a JSON
        Schema dict; UsageError for anything else, or for a schema that is not valid JSON Schema."""
        if isinstance(output_type, OutputSpec):
            return output_type
        if isinstance(output_type, Mapping):
            spec = cls(dict(output_type), None, max_attempts, str(output_type.get("title") or "output"))
        else:
            from pydantic import TypeAdapter

            try:
                adapter = TypeAdapter(_describable(output_type))
                schema = adapter.json_schema()
            except Exception as exc:
                raise errors.UsageError(
                    f"output_type must be a pydantic model, a type or a JSON Schema dict ({type(exc).__name__}: {exc})"
                ) from None
            spec = cls(schema, adapter, max_attempts, _name(output_type))
        spec.check_schema()
        return spec

    def check_schema(self) -> None:
        """UsageError for a schema that is not valid JSON Schema or has a `$ref` that cannot be resolved in it
        (nothing is fetched: a remote schema must be inlined, e.g. under `$defs`)."""
        from jsonschema import Draft202012Validator
        from jsonschema.exceptions import SchemaError
        from referencing import Registry
        from referencing.exceptions import Unresolvable
        from referencing.jsonschema import DRAFT202012

        try:
            Draft202012Validator.check_schema(self.schema)
        except SchemaError as exc:
            raise errors.UsageError(f"the output schema is not valid JSON Schema: {exc.message}") from None
        resolver = Registry().with_resource("", DRAFT202012.create_resource(dict(self.schema))).resolver()
        for ref in _refs(self.schema):
            try:
                resolver.lookup(ref)
            except Unresolvable:
                raise errors.UsageError(
                    f"the output schema's $ref {ref!r} cannot be resolved (kimicode fetches "
                    "nothing: put the referenced schema under $defs)"
                ) from None

    def check(self, answer: str) -> tuple[Any, list[str]]:
        """(the value, []) for a valid answer, or (None, what is wrong)."""
        from jsonschema import Draft202012Validator
        from referencing.exceptions import Unresolvable

        try:
            data = parse_answer(answer)
        except ValueError as exc:
            return None, [str(exc)]
        try:
            found = sorted(Draft202012Validator(self.schema).iter_errors(data), key=lambda e: list(e.absolute_path))
        except Unresolvable as exc:  # a $ref check_schema could not see (under a nested $id): the run fails clearly
            return None, [f"(schema): the output schema has a $ref that cannot be resolved: {exc}"]
        problems = [f"{'/'.join(str(p) for p in err.absolute_path) or '(root)'}: {err.message}" for err in found]
        if problems:
            return None, problems
        if self.model is not None:
            try:
                return self.model.validate_python(data), []
            except Exception as exc:  # pydantic's own checks (validators) beyond the schema
                return None, [f"(root): {exc}"]
        return data, []

    def response_format(self) -> dict[str, Any]:
        name = re.sub(r"[^A-Za-z0-9_-]", "_", self.name)[:64] or "output"
        return {"type": "json_schema", "json_schema": {"name": name, "schema": dict(self.schema), "strict": False}}


def _refs(node: Any) -> list[str]:
    """Every `$ref` in a schema."""
    if isinstance(node, Mapping):
        own = [str(node["$ref"])] if isinstance(node.get("$ref"), str) else []
        return own + [
            r
            for key, value in node.items()
            if key not in ("const", "enum", "default", "examples")
            for r in _refs(value)
        ]
    if isinstance(node, list):
        return [r for item in node for r in _refs(item)]
    return []


def _describable(output_type: Any) -> Any:
    """`output_type` as pydantic takes it: a `typing.TypedDict` (refused by pydantic before Python 3.12) is
    rebuilt as the same `typing_extensions.TypedDict`; nested ones inside it still have to be the latter."""
    import sys
    import typing

    import typing_extensions

    if sys.version_info >= (3, 12) or not typing.is_typeddict(output_type) or type(output_type).__module__ != "typing":
        return output_type
    hints = typing.get_type_hints(output_type, include_extras=True)
    required = output_type.__required_keys__
    fields = {
        k: (typing_extensions.Required[v] if k in required else typing_extensions.NotRequired[v])
        for k, v in hints.items()
    }
    return typing_extensions.TypedDict(output_type.__name__, fields)  # type: ignore[operator]


def _name(output_type: Any) -> str:
    return str(getattr(output_type, "__name__", "output"))


def parse_answer(text: str) -> Any:
    """The JSON value of an answer: the whole text, else the one ```json fence in it; ValueError says why."""
    stripped = text.strip()
    if not stripped:
        raise ValueError("the answer is empty; answer with the JSON document alone")
    try:
        return json.loads(stripped)
    except ValueError as first:
        fenced = _FENCE.findall(stripped)
        if len(fenced) == 1:
            try:
                return json.loads(fenced[0])
            except ValueError as exc:
                raise ValueError(f"the JSON in the code block does not parse: {exc}") from None
        if len(fenced) > 1:
            raise ValueError(
                f"the answer has {len(fenced)} JSON code blocks; give one JSON document, and only it"
            ) from None
        raise ValueError(f"the answer is not JSON: {first}") from None


def correction(problems: list[str], schema: Mapping[str, Any]) -> str:
    """The message that sends an invalid answer back."""
    shown = problems[:MAX_ERRORS_SHOWN]
    more = f"\n- … and {len(problems) - len(shown)} more" if len(problems) > len(shown) else ""
    return (
        "Your final answer must be a single JSON document valid against this JSON Schema, with no other "
        "text:\n"
        + json.dumps(schema, ensure_ascii=False)
        + "\n\nYour last answer is not valid:\n- "
        + "\n- ".join(shown)
        + more
        + "\n\nAnswer again with the corrected JSON only."
    )


def instruction(schema: Mapping[str, Any]) -> str:
    """Appended to the prompt: what the final answer must be."""
    return (
        "\n\nWhen you are done, give your final answer as a single JSON document valid against this JSON "
        "Schema, with no other text:\n" + json.dumps(schema, ensure_ascii=False)
    )


def format_mode(base_url: str) -> FormatMode:
    """How this endpoint is sent `response_format` (see the module docstring and docs/servers.md)."""
    host = (urlparse(base_url).hostname or "").lower()
    if host == "api.openai.com" or host.endswith("openrouter.ai"):
        return "always"
    if host.endswith(("moonshot.ai", "moonshot.cn", "deepseek.com")):
        return "json_object"
    return "corrections"


@dataclass
class Outcome:
    """How a structured run went: each attempt's turn, the value (None when never valid), the last problems."""

    turns: list[Any] = field(default_factory=list)
    value: Any = None
    problems: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.problems and bool(self.turns) and self.turns[-1].status == "success"


async def until_valid(agent: Agent, spec: OutputSpec, prompt: str, turn: Callable[[str], Awaitable[T]]) -> Outcome:
    """Run `turn(prompt)` and then corrections until the answer is valid, a turn fails, or the attempts run out.

    `turn` runs one turn on `agent` (streaming it to a printer, or `Agent.run`); the request's
    `response_format` is set here for the turns that get it and put back afterwards."""
    mode = format_mode(agent.endpoint.base_url)
    before = agent.options.response_format
    outcome = Outcome()
    text = prompt + instruction(spec.schema)
    try:
        _use_format(agent, spec.response_format() if mode == "always" else before)
        for attempt in range(1, spec.max_attempts + 1):
            finished = await turn(text)
            if _refused(finished) and agent.options.response_format != before:  # its grammar, not the schema
                mode = "off"
                _use_format(agent, before)
                retract_unsent(agent, agent.messages[-1])  # sent again below, without response_format
                agent.notify(
                    f"structured output: the server refused response_format ({finished.error}); the "
                    "answer is checked against the schema without it",
                    "warning",
                )
                finished = await turn(text)
            outcome.turns.append(finished)
            if finished.status != "success":
                outcome.problems = []
                return outcome
            outcome.value, outcome.problems = spec.check(finished.result)
            if not outcome.problems or attempt == spec.max_attempts:
                return outcome
            text = correction(outcome.problems, spec.schema)
            if mode == "corrections":
                _use_format(agent, spec.response_format())
            elif mode == "json_object":
                _use_format(agent, {"type": "json_object"})
        return outcome
    finally:
        _use_format(agent, before)


def _refused(finished: TurnLike) -> bool:
    """The request was refused as malformed (HTTP 400): with a `response_format` the server cannot take (llama.cpp
    refuses a schema its grammar converter does not handle, e.g. an unanchored `pattern`)."""
    return finished.status == "error" and finished.error_kind == "bad_request"


def _use_format(agent: Agent, value: Mapping[str, Any] | None) -> None:
    if agent.options.response_format != value:
        agent.options = agent.options.replace(response_format=dict(value) if value is not None else None)
        agent.reset_client()


async def structured_turns(
    agent: Agent, spec: OutputSpec, prompt: str, emit: Emit, turn: Callable[[str, Emit], Awaitable[None]]
) -> Any:
    """The work of `agent.stream(prompt, output_type=...)`: `turn(text, emit)` (one turn) and then corrections
    until the answer is valid; returns the value (None when it never matched).

    Each attempt is a turn of its own (TurnStarted ... TurnFinished); the last TurnFinished carries `output`,
    or the status `invalid_output` when the answers never matched the schema."""
    held: list[TurnFinished] = []  # an attempt's TurnFinished, sent once it is known not to be the last

    def capture(event: Event) -> None:
        if isinstance(event, TurnFinished):
            held.append(event)
        else:
            emit(event)

    async def attempt(text: str) -> TurnFinished:
        while held:
            emit(held.pop(0))
        await turn(text, capture)
        return held[-1]

    try:
        outcome = await until_valid(agent, spec, prompt, attempt)
    except BaseException:  # cancelled: every TurnFinished still goes out (the last one says interrupted)
        while held:
            emit(held.pop(0))
        raise
    while len(held) > 1:
        emit(held.pop(0))
    last = held.pop()
    if outcome.valid:
        emit(dataclasses.replace(last, output=outcome.value))
        return outcome.value
    if last.status == "success":
        last = dataclasses.replace(last, status=INVALID, error=invalid_message(outcome), error_kind=INVALID)
    emit(last)
    return None


def invalid_message(outcome: Outcome) -> str:
    """Why a structured run failed, in one line."""
    return f"the answer did not match the output schema after {len(outcome.turns)} attempts: " + "; ".join(
        outcome.problems[:3]
    )
