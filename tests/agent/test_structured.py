"""Structured output (`--output-schema`, `--json-schema`, `Agent.run(output_type=...)`) and streaming input
(`--input-format stream-json`), against the fake server."""

from __future__ import annotations

import asyncio
import io
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import stream_json_user
from pydantic import BaseModel

from kimicode.agent import structured
from kimicode.agent.structured import OutputSpec, format_mode, parse_answer
from kimicode.errors import TurnError, UsageError
from kimicode.testing import FakeServer, Reply, ToolCall


class Release(BaseModel):
    version: str
    breaking: bool
    notes: list[str]


GOOD = '{"version": "1.2.0", "breaking": false, "notes": ["faster"]}'
SCHEMA = {
    "type": "object",
    "required": ["version", "breaking"],
    "additionalProperties": False,
    "properties": {
        "version": {"type": "string", "pattern": "^[0-9]+\\.[0-9]+\\.[0-9]+$"},
        "breaking": {"type": "boolean"},
        "notes": {"type": "array", "items": {"type": "string"}},
    },
}


def test_valid_answer_first_time_as_a_pydantic_model(
    make_agent: Callable[..., Any], server: FakeServer, workspace: Path
) -> None:
    (workspace / "CHANGES").write_text("1.2.0: faster\n")
    server.add(Reply(tool_calls=[ToolCall("read_file", {"path": "CHANGES"})]), Reply(content=GOOD))
    result = asyncio.run(make_agent().run("summarise the release", output_type=Release))
    assert result.ok and result.output == Release(version="1.2.0", breaking=False, notes=["faster"])
    first = server.requests[0].body
    assert '"version"' in first["messages"][-1]["content"]  # the schema is in the prompt
    assert "response_format" not in first  # a local server gets it on corrections only (tools still work)
    assert [m["role"] for m in result.messages] == ["user", "assistant", "tool", "assistant"]


def test_invalid_then_valid_sends_the_errors_back(make_agent: Callable[..., Any], server: FakeServer) -> None:
    server.add(
        Reply(content="Here you go: {not json"),
        Reply(content='{"version": "1.2", "breaking": "no"}'),
        Reply(content="```json\n" + GOOD + "\n```"),
        Reply(content="plain text again"),
    )
    agent = make_agent()
    result = asyncio.run(agent.run("release?", output_type=SCHEMA))
    assert result.ok and result.output == json.loads(GOOD)
    second, third = server.requests[1].body, server.requests[2].body
    assert "not JSON" in second["messages"][-1]["content"]
    problems = third["messages"][-1]["content"]
    assert "version: '1.2' does not match" in problems and "breaking: 'no' is not of type 'boolean'" in problems
    fmt = second["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["schema"] == SCHEMA
    assert result.num_turns == 3 and len([m for m in result.messages if m["role"] == "user"]) == 3
    assert agent.options.response_format is None  # put back: the next run is unconstrained
    plain = asyncio.run(agent.run("and now talk"))
    assert plain.output is None and "response_format" not in server.requests[3].body


def test_never_valid_fails_with_its_own_status(make_agent: Callable[..., Any], server: FakeServer) -> None:
    server.add(*(Reply(content=f"attempt {i}") for i in range(3)))
    result = asyncio.run(make_agent().run("release?", output_type=Release))
    assert result.status == "invalid_output" and result.output is None and not result.ok
    assert "after 3 attempts" in str(result.error) and result.error_kind == "invalid_output"
    assert server.remaining == 0 and len(server.requests) == 3
    with pytest.raises(TurnError):
        result.raise_for_status()


def test_openai_gets_response_format_on_every_request(
    make_agent: Callable[..., Any], server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(structured, "format_mode", lambda url: "always")
    server.add(Reply(tool_calls=[ToolCall("glob", {"pattern": "*"})]), Reply(content=GOOD))
    assert asyncio.run(make_agent().run("x", output_type=Release)).ok
    assert all(r.body["response_format"]["json_schema"]["name"] == "Release" for r in server.requests)


def test_format_modes_and_answer_parsing() -> None:
    assert format_mode("https://api.openai.com/v1") == "always"
    assert format_mode("https://openrouter.ai/api/v1") == "always"
    assert format_mode("https://api.moonshot.ai/v1") == "json_object"
    assert format_mode("https://api.deepseek.com") == "json_object"
    assert format_mode("http://localhost:8000/v1") == "corrections"
    assert parse_answer(' {"a": 1} ') == {"a": 1}
    assert parse_answer("Sure:\n```json\n[1, 2]\n```\n") == [1, 2]
    for bad in ("", "```json\n{}\n```\n```json\n{}\n```", "{'a': 1}"):
        with pytest.raises(ValueError):
            parse_answer(bad)
    with pytest.raises(UsageError, match="not valid JSON Schema"):
        OutputSpec.of({"type": "objekt"})
    with pytest.raises(UsageError):
        OutputSpec.of(object())


# -- the command line (in this process) ------------------------------------------------------------


@pytest.fixture
def cli(
    monkeypatch: pytest.MonkeyPatch, server: FakeServer, workspace: Path, capsys: pytest.CaptureFixture[str]
) -> Callable[..., tuple[int, str, str]]:
    monkeypatch.setenv("KIMI_API_KEY", "sk-test")
    monkeypatch.setenv("KIMI_BASE_URL", server.base_url)
    monkeypatch.setenv("KIMICODE_RETRY_BASE_DELAY", "0.01")
    monkeypatch.chdir(workspace)

    def run(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
        from kimicode.cli.app import app

        if stdin is not None:
            monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        try:
            code = app(args=list(args), prog_name="kimicode", standalone_mode=False)
        except SystemExit as exc:
            code = exc.code
        out = capsys.readouterr()
        return int(code or 0), out.out, out.err

    return run


@pytest.mark.prepush
def test_cli_inline_schema_prints_the_json_alone(cli: Callable[..., tuple[int, str, str]], server: FakeServer) -> None:
    server.add(Reply(content="```json\n" + GOOD + "\n```"))
    code, out, err = cli("-p", "release?", "--json-schema", json.dumps(SCHEMA))
    assert code == 0, err
    assert json.loads(out) == json.loads(GOOD) and out.count("\n") == 1


def test_cli_schema_file_invalid_then_valid_json_result(
    cli: Callable[..., tuple[int, str, str]], server: FakeServer, tmp_path: Path
) -> None:
    schema = tmp_path / "release.schema.json"
    schema.write_text(json.dumps(SCHEMA))
    server.add(Reply(content='{"version": 1}'), Reply(content=GOOD))
    code, out, err = cli("-p", "release?", "--output-schema", str(schema), "--output-format", "json")
    assert code == 0, err
    result = json.loads(out)
    assert result["status"] == "success" and result["structured_output"] == json.loads(GOOD)
    assert result["attempts"] == 2 and result["num_turns"] == 2


@pytest.mark.prepush
def test_cli_never_valid_exits_6(cli: Callable[..., tuple[int, str, str]], server: FakeServer) -> None:
    server.add(*(Reply(content="no JSON, sorry") for _ in range(3)))
    code, out, err = cli("-p", "release?", "--json-schema", json.dumps(SCHEMA))
    assert code == 6 and out == ""
    assert "invalid_output: the answer did not match the output schema after 3 attempts" in err
    server.add(*(Reply(content="{}") for _ in range(3)))
    code, out, _ = cli("-p", "release?", "--json-schema", json.dumps(SCHEMA), "--output-format", "json")
    result = json.loads(out)
    assert code == 6 and result["status"] == "invalid_output" and result["structured_output"] is None
    assert any("'version' is a required property" in p for p in result["validation_errors"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--json-schema", "{not json"], "--json-schema: the schema is not JSON"),
        (["--json-schema", "[1]"], "must be a JSON object"),
        (["--json-schema", '{"type": 5}'], "not valid JSON Schema"),
        (["--output-schema", "/no/such/file.json"], "no such file"),
        (["--json-schema", "{}", "--output-schema", "x.json"], "use one"),
    ],
)
def test_cli_bad_schemas_are_usage_errors(
    cli: Callable[..., tuple[int, str, str]], args: list[str], message: str
) -> None:
    code, _, err = cli("-p", "x", *args)
    assert code == 2 and message in err


def test_stream_input_three_messages_and_a_malformed_line(
    cli: Callable[..., tuple[int, str, str]], server: FakeServer
) -> None:
    server.add(Reply(content="one"), Reply(content="two"), Reply(content="three"))
    lines = (
        stream_json_user("first")
        + "{broken json\n"
        + json.dumps({"type": "user", "message": "hi"})
        + "\n"
        + json.dumps({"type": "user", "message": {"role": "user", "content": [{"type": "text", "text": "second"}]}})
        + "\n\n"
        + stream_json_user("third")
    )
    code, out, err = cli("--input-format", "stream-json", "--output-format", "stream-json", stdin=lines)
    assert code == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    assert events[0]["type"] == "init"
    results = [e for e in events if e["type"] == "result"]
    assert [r["result"] for r in results] == ["one", "two", "three"]
    assert len({r["session_id"] for r in results}) == 1  # one session
    errors = [e for e in events if e["type"] == "error"]
    assert [e["line"] for e in errors] == [2, 3] and "not JSON" in errors[0]["error"]
    sent = server.requests[2].body["messages"]
    assert [m["content"] for m in sent if m["role"] == "user"] == ["first", "second", "third"]


def test_stream_input_with_a_schema_and_bad_flags(cli: Callable[..., tuple[int, str, str]], server: FakeServer) -> None:
    server.add(Reply(content="nope"), Reply(content=GOOD))
    code, out, _ = cli(
        "--input-format",
        "stream-json",
        "--output-format",
        "stream-json",
        "--json-schema",
        json.dumps(SCHEMA),
        stdin=stream_json_user("release?"),
    )
    result = [json.loads(line) for line in out.splitlines()][-1]
    assert code == 0 and result["structured_output"] == json.loads(GOOD) and result["attempts"] == 2
    code, _, err = cli("--input-format", "stream-json", stdin="")
    assert code == 2 and "--output-format stream-json" in err
    code, _, err = cli("-p", "x", "--input-format", "stream-json", "--output-format", "stream-json", stdin="")
    assert code == 2


def test_schemas_with_refs(make_agent: Callable[..., Any], server: FakeServer) -> None:
    """Local $refs work; a remote or dangling one is refused before anything is sent (nothing is fetched)."""
    for bad in ({"$ref": "https://example.com/schema.json"}, {"properties": {"a": {"$ref": "#/$defs/gone"}}}):
        with pytest.raises(UsageError, match="cannot be resolved"):
            asyncio.run(make_agent().run("x", output_type=bad))
    assert server.requests == []
    schema = {
        "$defs": {"v": {"type": "string"}},
        "type": "object",
        "required": ["a"],
        "properties": {"a": {"$ref": "#/$defs/v"}},
    }
    server.add(Reply(content='{"a": 1}'), Reply(content='{"a": "x"}'))
    result = asyncio.run(make_agent().run("x", output_type=schema))
    assert result.output == {"a": "x"}
    assert "a: 1 is not of type 'string'" in server.requests[1].body["messages"][-1]["content"]


def test_stream_input_stops_at_the_budget(
    cli: Callable[..., tuple[int, str, str]], server: FakeServer, tmp_path: Path, workspace: Path
) -> None:
    (tmp_path / "home").mkdir(exist_ok=True)
    (tmp_path / "home" / "config.toml").write_text('[models."kimi-k3"]\nprices = { input = 1000.0, output = 1000.0 }\n')
    (workspace / "a.txt").write_text("x")
    spend = {"prompt_tokens": 1000, "completion_tokens": 10, "total_tokens": 1010}  # $1.01 a request
    server.add(
        Reply(content="one", usage=spend),
        *(Reply(tool_calls=[ToolCall("read_file", {"path": "a.txt"})], usage=spend) for _ in range(5)),
    )
    code, out, _ = cli(
        "--input-format",
        "stream-json",
        "--output-format",
        "stream-json",
        "--max-budget-usd",
        "2.5",
        stdin=stream_json_user("first") + stream_json_user("second") + stream_json_user("never run"),
    )
    results = [json.loads(line) for line in out.splitlines() if '"type": "result"' in line]
    assert code == 4 and [r["status"] for r in results] == ["success", "budget"]
    assert len(server.requests) == 3


def test_two_json_blocks_get_a_correction_that_says_so(make_agent: Callable[..., Any], server: FakeServer) -> None:
    two = 'Here:\n```json\n{"version": "1.0.0"}\n```\nor:\n```json\n' + GOOD + "\n```\n"
    server.add(Reply(content=two), Reply(content=GOOD))
    result = asyncio.run(make_agent().run("describe it", output_type=Release))
    assert result.ok and result.output.version == "1.2.0"
    sent = server.requests[1].body["messages"][-1]["content"]
    assert "2 JSON code blocks" in sent and "not JSON" not in sent


LLAMA_GRAMMAR_REFUSAL = (
    "Unable to generate parser for this template. Automatic parser generation failed: JSON schema conversion "
    "failed:\nPattern must start with '^' and end with '$'"
)
"""What a real llama-server answers (HTTP 400, invalid_request_error) to a response_format whose schema has an
unanchored `pattern`, a valid JSON Schema its grammar converter refuses."""


def test_a_response_format_the_server_refuses_falls_back_to_validation_and_says_so(
    make_agent: Callable[..., Any], server: FakeServer
) -> None:
    from kimicode.events import Notice
    from kimicode.testing import ErrorReply, RecordedRequest

    def llama(req: RecordedRequest) -> Reply | ErrorReply:
        if req.body.get("response_format"):
            return ErrorReply(400, LLAMA_GRAMMAR_REFUSAL, "invalid_request_error")
        corrected = "not valid" in req.body["messages"][-1]["content"]
        return Reply(content='{"code": "ABC"}' if corrected else "The code is ABC.")

    server.add(*[llama] * 6)
    events: list[Any] = []
    agent = make_agent(on_event=events.append)
    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": "[A-Z]{3}"}}, "required": ["code"]}
    result = asyncio.run(agent.run("What is the code?", output_type=schema))
    assert result.status == "success" and result.output == {"code": "ABC"}, result.error
    refused = [r for r in server.requests if r.body.get("response_format")]
    assert len(refused) == 1  # tried once on the correction, then not again
    said = [e.text for e in events if isinstance(e, Notice) and "refused response_format" in e.text]
    assert said and "Pattern must start with" in said[0] and "checked against the schema" in said[0]
    users = [m for m in agent.messages if m["role"] == "user"]
    assert sum("not valid" in str(m["content"]) for m in users) == 1  # the refused correction was not kept twice
