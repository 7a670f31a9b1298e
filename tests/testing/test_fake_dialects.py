"""FakeServer dialects: each one's raw stream shape, ids, usage places, errors, window and discovery.

The wire is read raw (urllib, SSE bytes) so a shape can be checked exactly, and through the openai SDK
so a careless integration sees what it would see against the real server.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from helpers import FIXTURES, ROOT

from kimicode.testing import DIALECTS, ErrorReply, FakeServer, RawReply, Reply, ToolCall, get_dialect

REAL = ["moonshot", "openai", "vllm", "sglang", "llamacpp", "ollama", "openrouter", "deepseek", "litellm"]
STREAMS = FIXTURES / "streams"

ID_PATTERNS = {
    "moonshot": r"functions\.read_file:\d+",
    "openai": r"call_[A-Za-z0-9]{24}",
    "vllm": r"chatcmpl-tool-[0-9a-f]{32}",
    "sglang": r"call_[0-9a-f]{24}",
    "llamacpp": r"[A-Za-z0-9]{32}",
    "ollama": r"call_[a-z0-9]{8}",
    "openrouter": r"call_[A-Za-z0-9]{24}",
    "deepseek": r"call_\d\d_[A-Za-z0-9]{24}",
    "litellm": r"call_[A-Za-z0-9]{24}",
}


def post(srv: FakeServer, body: dict[str, Any], path: str = "/v1/chat/completions") -> tuple[int, bytes]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{srv.port}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def events(raw: bytes) -> list[Any]:
    """The data events of an SSE body (JSON decoded, ``[DONE]`` kept as a string)."""
    out: list[Any] = []
    for line in raw.decode().split("\n"):
        if line.startswith("data: "):
            data = line[6:]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def chat(stream: bool = True, include_usage: bool = True, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    if stream and include_usage:
        body["stream_options"] = {"include_usage": True}
    return body | extra


@pytest.fixture
def served() -> Iterator[list[FakeServer]]:
    started: list[FakeServer] = []
    yield started
    for srv in started:
        srv.stop()


def start(served: list[FakeServer], **kwargs: Any) -> FakeServer:
    srv = FakeServer(**kwargs).start()
    served.append(srv)
    return srv


REPLY = dict(
    reasoning="plan it", content="done", tool_calls=[ToolCall("read_file", {"path": "a.txt"})], cached_tokens=3
)


@pytest.mark.parametrize("name", REAL)
def test_each_dialect_streams_its_own_shape(served: list[FakeServer], name: str) -> None:
    dialect = get_dialect(name)
    srv = start(served, dialect=name)
    srv.add(Reply(**REPLY))  # type: ignore[arg-type]
    status, raw = post(srv, chat())
    assert status == 200
    evs = events(raw)
    assert evs[-1] == "[DONE]"
    chunks = [e for e in evs if isinstance(e, dict)]
    deltas = [c["choices"][0]["delta"] for c in chunks if c.get("choices")]
    # reasoning under the dialect's field name, and never under the other one
    reasoning = {k: "".join(d.get(k, "") for d in deltas) for k in ("reasoning_content", "reasoning")}
    if dialect.reasoning_field is None:
        assert reasoning == {"reasoning_content": "", "reasoning": ""}
    else:
        assert reasoning[dialect.reasoning_field] == "plan it"
        other = "reasoning" if dialect.reasoning_field == "reasoning_content" else "reasoning_content"
        assert reasoning[other] == ""
    assert "".join(d.get("content") or "" for d in deltas) == "done"
    # tool-call id in the server's own style, given once, arguments reassembled by index
    calls = [tc for d in deltas for tc in d.get("tool_calls", [])]
    ids = [tc["id"] for tc in calls if "id" in tc]
    assert len(ids) == 1 and re.fullmatch(ID_PATTERNS[name], ids[0]), ids
    assert json.loads("".join(tc["function"].get("arguments", "") for tc in calls)) == {"path": "a.txt"}
    # the first chunk
    first = deltas[0]
    if name == "llamacpp":
        assert first == {"role": "assistant", "content": None}
    elif name == "litellm":
        assert first == {"role": "assistant"}
    elif name == "ollama":
        assert all(d.get("role") == "assistant" for d in deltas)  # role in every delta, no empty opener
        assert first.get("reasoning") == "plan it"
    # usage: exactly one place per the dialect, cached tokens where it puts them
    with_usage = [c for c in chunks if c.get("usage")]
    in_choice = [c for c in chunks if c.get("choices") and c["choices"][0].get("usage")]
    assert len(with_usage) == 1
    usage = with_usage[0]["usage"]
    assert usage["prompt_tokens"] > 0
    if name == "moonshot":
        assert len(in_choice) == 1 and usage["cached_tokens"] == 3
    else:
        assert in_choice == []
    if name == "litellm":
        assert with_usage[0]["choices"] == [{"index": 0, "delta": {}}]
    else:
        assert with_usage[0]["choices"] == []
    if name == "deepseek":
        assert usage["prompt_cache_hit_tokens"] == 3
        assert usage["prompt_cache_miss_tokens"] == usage["prompt_tokens"] - 3
    if dialect.cached in ("details", "both", "deepseek"):
        assert usage["prompt_tokens_details"] == {"cached_tokens": 3}
    if name == "ollama":
        assert "prompt_tokens_details" not in usage and "cached_tokens" not in usage
    if name == "openai":
        assert all("usage" in c for c in chunks)  # "usage": null on all the others
    if name == "llamacpp":
        assert "timings" in with_usage[0] and chunks[0]["system_fingerprint"] == "b0-unknown"
    if name == "openrouter":
        assert raw.startswith(b": OPENROUTER PROCESSING\n\n")
        details = [d["reasoning_details"] for d in deltas if "reasoning_details" in d]
        assert "".join(x[0]["text"] for x in details) == "plan it"


@pytest.mark.parametrize("name", ["llamacpp", "openrouter"])
def test_usage_always_sent_where_the_server_always_sends_it(served: list[FakeServer], name: str) -> None:
    srv = start(served, dialect=name)
    srv.add(Reply(content="x"))
    _, raw = post(srv, chat(include_usage=False))
    assert [c for c in events(raw) if isinstance(c, dict) and c.get("usage")], "usage chunk missing"


@pytest.mark.parametrize("name", ["openai", "vllm", "sglang", "ollama", "deepseek"])
def test_usage_only_when_asked(served: list[FakeServer], name: str) -> None:
    srv = start(served, dialect=name)
    srv.add(Reply(content="x"))
    _, raw = post(srv, chat(include_usage=False))
    assert not [c for c in events(raw) if isinstance(c, dict) and c.get("usage")]


@pytest.mark.parametrize("name", REAL)
def test_sdk_reads_every_dialect(served: list[FakeServer], name: str) -> None:
    """A plain openai-SDK integration gets the content, the tool call and the usage from each dialect."""
    srv = start(served, dialect=name)
    srv.add(Reply(**REPLY), Reply(**REPLY))  # type: ignore[arg-type]
    with openai.OpenAI(base_url=srv.base_url, api_key="k", max_retries=0) as client:
        stream = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True, stream_options={"include_usage": True}
        )
        chunks = list(stream)
        whole = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "done"
    assert sum(1 for c in chunks if c.usage) == 1
    assert whole.choices[0].message.content == "done"
    assert whole.choices[0].message.tool_calls is not None
    assert re.fullmatch(ID_PATTERNS[name], whole.choices[0].message.tool_calls[0].id)
    assert whole.usage is not None and whole.usage.prompt_tokens > 0


CONTEXT_WORDING = {
    "moonshot": r"Your request exceeded model token limit: 1000 \(requested: \d+\)",
    "openai": r"maximum context length is 1000 tokens\. However, your messages resulted in \d+ tokens",
    "vllm": r"maximum context length is 1000 tokens\. However, your request has \d+ input tokens",
    "sglang": r"The input \(\d+ tokens\) is longer than the model's context length \(1000 tokens\)\.",
    "llamacpp": r"request \(\d+ tokens\) exceeds the available context size \(1000 tokens\)",
    "openrouter": r"This endpoint's maximum context length is 1000 tokens",
    "deepseek": r"maximum context length is 1000 tokens\. However, you requested \d+ tokens",
    "litellm": r"^litellm\.ContextWindowExceededError: .*maximum context length is 1000 tokens",
    "ollama-refuses": r'^\{"error": \{"code": 400, "message": "request \(\d+ tokens\) exceeds the available',
}


@pytest.mark.parametrize("name", sorted(CONTEXT_WORDING))
def test_over_the_window_gets_the_dialects_context_error_and_keeps_the_script(
    served: list[FakeServer], name: str
) -> None:
    srv = start(served, dialect=name, context_window=1000)
    srv.add(Reply(content="small"))
    status, raw = post(srv, chat(messages=[{"role": "user", "content": "x" * 8000}]))
    assert status == 400
    body = json.loads(raw)
    err = body if name == "sglang" else body["error"]
    assert re.search(CONTEXT_WORDING[name], err["message"]), err
    assert srv.remaining == 1  # the refused request did not use up the scripted reply
    status, raw = post(srv, chat())
    assert status == 200 and srv.remaining == 0
    if name == "llamacpp":
        assert err["type"] == "exceed_context_size_error" and err["n_ctx"] == 1000
        assert err["n_prompt_tokens"] == len(srv.requests[0].raw) // 4
    if name == "openai":
        assert err["code"] == "context_length_exceeded"


def test_vllm_and_moonshot_count_the_completion_llamacpp_does_not(served: list[FakeServer]) -> None:
    """vLLM refuses prompt + max_tokens over the window (with its 'max_tokens is too large' wording)."""
    for name, refused in (("vllm", True), ("moonshot", True), ("sglang", True), ("llamacpp", False), ("openai", False)):
        srv = start(served, dialect=name, context_window=1000)
        srv.add(Reply(content="ok"))
        status, raw = post(srv, chat(max_completion_tokens=5000))
        assert (status == 400) is refused, (name, raw)
        if name == "vllm":
            assert b"'max_tokens' or 'max_completion_tokens' is too large: 5000" in raw
        if name == "sglang":
            assert b"Requested token count exceeds the model's maximum context length of 1000 tokens" in raw


def test_ollama_truncates_silently_and_reports_what_it_kept(served: list[FakeServer]) -> None:
    srv = start(served, dialect="ollama", context_window=500)
    srv.add(Reply(content="I only saw the end"))
    status, raw = post(srv, chat(messages=[{"role": "user", "content": "y" * 9000}]))
    assert status == 200
    usage = next(c for c in events(raw) if isinstance(c, dict) and c.get("usage"))["usage"]
    assert usage["prompt_tokens"] == 500


@pytest.mark.parametrize("name", REAL)
@pytest.mark.parametrize("kind", ["auth", "rate_limit", "overloaded", "server"])
def test_error_kinds_carry_each_servers_status_and_body(served: list[FakeServer], name: str, kind: Any) -> None:
    srv = start(served, dialect=name)
    err = srv.error(kind)
    srv.add(err)
    status, raw = post(srv, chat())
    assert status == err.status
    assert json.loads(raw)  # valid JSON, as the real servers send
    if kind == "auth":
        assert status == 401
    if kind == "rate_limit" and name in ("moonshot", "openai", "openrouter", "deepseek", "litellm", "sglang"):
        assert status == 429
    if kind in ("overloaded", "server"):
        assert status >= 500 or (name == "moonshot" and status == 429)


def test_discovery_endpoints_report_the_window(served: list[FakeServer]) -> None:
    def get(srv: FakeServer, path: str) -> Any:
        with urllib.request.urlopen(f"http://127.0.0.1:{srv.port}{path}", timeout=5) as resp:
            return json.loads(resp.read())

    vllm = start(served, dialect="vllm", context_window=4096, model="qwen")
    card = get(vllm, "/v1/models")["data"][0]
    assert (card["id"], card["max_model_len"]) == ("qwen", 4096)
    llama = start(served, dialect="llamacpp", context_window=8192)
    assert get(llama, "/v1/models")["data"][0]["meta"]["n_ctx"] == 8192
    assert get(llama, "/props")["default_generation_settings"]["n_ctx"] == 8192
    router = start(served, dialect="openrouter", context_window=2048)
    assert get(router, "/v1/models")["data"][0]["context_length"] == 2048
    ollama = start(served, dialect="ollama", context_window=2048)
    status, raw = post(ollama, {"model": "fake-model"}, path="/api/show")
    assert status == 200 and json.loads(raw)["model_info"]["llama.context_length"] == 2048
    plain = start(served)  # the default dialect keeps answering 404 off the chat route
    with pytest.raises(urllib.error.HTTPError):
        get(plain, "/v1/models")
    assert plain.requests == [] and vllm.requests == []


def test_reply_fields_still_override_the_dialect(served: list[FakeServer]) -> None:
    srv = start(served, dialect="vllm")
    srv.add(Reply(reasoning="r", reasoning_field="reasoning_content", tool_calls=[ToolCall("x")], id_style="kimi"))
    _, raw = post(srv, chat())
    deltas = [c["choices"][0]["delta"] for c in events(raw) if isinstance(c, dict) and c.get("choices")]
    assert any(d.get("reasoning_content") == "r" for d in deltas)
    assert any(tc.get("id") == "functions.x:0" for d in deltas for tc in d.get("tool_calls", []))


def test_raw_reply_is_served_byte_for_byte(served: list[FakeServer]) -> None:
    recording = STREAMS / "llamacpp" / "kimicode-plain.response.txt"
    reply = RawReply.from_recording(recording)
    srv = start(served)
    srv.add(reply, RawReply(b'{"odd": true}', status=418, headers={"Content-Type": "application/json"}))
    with urllib.request.urlopen(
        urllib.request.Request(f"{srv.base_url}/chat/completions", data=b"{}"), timeout=5
    ) as resp:
        assert resp.headers["Server"] == "llama.cpp"
        assert resp.read() == reply.body
    assert reply.body == recording.read_bytes().split(b"\n\n", 1)[1]
    status, raw = post(srv, chat())
    assert (status, raw) == (418, b'{"odd": true}')


def test_hostile_construction_is_refused_clearly() -> None:
    with pytest.raises(ValueError, match=r"unknown FakeServer dialect 'gpt-proxy'; known: .*vllm"):
        FakeServer(dialect="gpt-proxy")
    for bad in (0, -5, True, "4k", 1.5):
        with pytest.raises(ValueError, match="context_window"):
            FakeServer(context_window=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no 'teapot' error"):
        get_dialect("vllm").error("teapot")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="bytes"):
        RawReply("text")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="status"):
        RawReply(b"", status=700)
    with pytest.raises(ValueError, match="cached_tokens"):
        Reply(cached_tokens=-1)
    assert set(REAL) <= set(DIALECTS) and isinstance(DIALECTS["vllm"].error("auth"), ErrorReply)


def test_raw_recording_parsing_handles_bare_bodies_and_bad_status(tmp_path: Path) -> None:
    bare = RawReply.from_recording(STREAMS / "litellm" / "tool-call-via-litellm.response.txt")
    assert bare.is_stream() and b"".join(bare.events()) == bare.body
    json_body = tmp_path / "e.json"
    json_body.write_bytes(b'{"error": 1}')
    assert not RawReply.from_recording(json_body).is_stream()
    broken = tmp_path / "x.txt"
    broken.write_bytes(b"HTTP/1.1 OK\r\n\r\nbody")
    with pytest.raises(ValueError, match="not an HTTP status line"):
        RawReply.from_recording(broken)


@pytest.mark.prepush
def test_the_testing_package_imports_nothing_else_from_kimicode() -> None:
    """Users vendor or import kimicode.testing alone: its modules only import each other and the stdlib."""
    import ast

    package = ROOT / "kimicode" / "testing"
    for module in package.glob("*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert not name.startswith("kimicode") or name.startswith("kimicode.testing"), (module.name, name)
                assert name.split(".")[0] not in ("openai", "httpx", "httpx2", "pydantic"), (module.name, name)


def test_a_custom_dialect_built_from_a_real_one(served: list[FakeServer]) -> None:
    """A user's own gateway: vLLM's shape with a keep-alive comment and its own window."""
    import dataclasses

    mine = dataclasses.replace(get_dialect("vllm"), name="my-gateway", keepalive=b": ping\n\n", context_window=2048)
    srv = start(served, dialect=mine)
    srv.add(Reply(content="hello", reasoning="r"))
    _, raw = post(srv, chat())
    assert raw.startswith(b": ping\n\n")
    deltas = [c["choices"][0]["delta"] for c in events(raw) if isinstance(c, dict) and c.get("choices")]
    assert "".join(d.get("reasoning", "") for d in deltas) == "r"
    with urllib.request.urlopen(f"http://127.0.0.1:{srv.port}/v1/models", timeout=5) as resp:
        assert json.loads(resp.read())["data"][0]["max_model_len"] == 2048


@pytest.mark.parametrize("name", ["openai", "llamacpp", "ollama"])
def test_faults_still_work_in_every_dialect(served: list[FakeServer], name: str) -> None:
    srv = start(served, dialect=name)
    srv.add(Reply(content="abcdefghijklmnop", chunk_size=2, cut_after=3))
    with openai.OpenAI(base_url=srv.base_url, api_key="k", max_retries=0) as client:
        stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], stream=True)
        with pytest.raises(openai.APIConnectionError):
            list(stream)
