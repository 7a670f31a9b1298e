"""`kimicode doctor` against real local servers: the fake server, a `/models` server in several moods, a
port nobody listens on, and a redirect that must not carry the key away."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kimicode.cli.app import app
from kimicode.cli.doctor import mask
from kimicode.testing import FakeServer

KEY = "sk-doctor-0123456789-secret"


class ModelsServer:
    """GET /v1/models answers what `reply` returns: (status, headers, body bytes); requests are recorded."""

    def __init__(self, reply: Callable[[], tuple[int, dict[str, str], bytes]]) -> None:
        self.reply = reply
        self.requests: list[dict[str, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                outer.requests.append({"path": self.path, **{k.lower(): v for k, v in self.headers.items()}})
                status, headers, body = outer.reply()
                self.send_response(status)
                for k, v in {"Content-Length": str(len(body)), **headers}.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def models_server() -> Iterator[Callable[..., ModelsServer]]:
    made: list[ModelsServer] = []

    def make(status: int = 200, body: Any = None, headers: dict[str, str] | None = None) -> ModelsServer:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        server = ModelsServer(lambda: (status, headers or {"Content-Type": "application/json"}, raw))
        made.append(server)
        return server

    yield make
    for server in made:
        server.close()


def doctor(monkeypatch: pytest.MonkeyPatch, base_url: str | None, *args: str, key: str | None = KEY) -> tuple[int, str]:
    if key is not None:
        monkeypatch.setenv("KIMI_API_KEY", key)
    if base_url is not None:
        monkeypatch.setenv("KIMI_BASE_URL", base_url)
    monkeypatch.setenv("KIMICODE_BWRAP", "")  # the same result with or without bubblewrap installed
    result = CliRunner().invoke(app, ["doctor", "--timeout", "5", *args])
    return result.exit_code, result.output


def lines_of(output: str, name: str) -> list[str]:
    return [line for line in output.splitlines() if line[7:].startswith(name)]


def test_against_the_fake_server(monkeypatch: pytest.MonkeyPatch, server: FakeServer, workspace: Path) -> None:
    code, out = doctor(monkeypatch, server.base_url, "-C", str(workspace))
    assert code == 0, out  # warnings only: the fake server does not list models, bwrap is "absent"
    assert KEY not in out and mask(KEY) in out and "KIMI_API_KEY" in out
    [endpoint] = lines_of(out, "endpoint")
    assert endpoint.startswith("[warn]") and "does not list its models" in endpoint and "'kimi-k3'" in endpoint
    [sandbox] = lines_of(out, "sandbox")
    assert sandbox.startswith("[warn]") and "apt install bubblewrap" in out
    assert lines_of(out, "ripgrep")[0].startswith(("[ok]", "[warn]"))
    assert "Everything kimicode needs works" in out


def test_an_unreachable_port_fails_with_what_to_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:  # a port that was free a moment ago: nobody listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, out = doctor(monkeypatch, f"http://127.0.0.1:{port}/v1")
    assert code == 1
    [endpoint] = lines_of(out, "endpoint")
    assert endpoint.startswith("[FAIL]") and f"127.0.0.1:{port}" in endpoint and "refused" in endpoint.lower()
    assert "fix: check the base URL" in out and "1 problem to fix" in out


@pytest.mark.prepush
def test_model_listed_and_context_window_compared(
    monkeypatch: pytest.MonkeyPatch, models_server: Callable[..., ModelsServer]
) -> None:
    srv = models_server(
        body={"object": "list", "data": [{"id": "kimi-k3", "context_length": 262_144}, {"id": "kimi-k2.6"}]}
    )
    code, out = doctor(monkeypatch, srv.base_url)
    assert code == 0, out
    assert lines_of(out, "endpoint")[0].startswith("[ok]") and "kimi-k3 listed (2 models)" in out
    [ctx] = lines_of(out, "context")  # kimicode uses the server's window (it asks at every session start)
    assert ctx.startswith("[ok]") and "262,144 tokens (as the server reports)" in ctx and "1,048,576" not in ctx
    assert srv.requests[0]["path"] == "/v1/models" and srv.requests[0]["authorization"] == f"Bearer {KEY}"
    code, out = doctor(monkeypatch, srv.base_url, "--json")
    report = json.loads(out)
    assert report["ok"] is True and {c["name"] for c in report["checks"]} >= {
        "config",
        "API key",
        "endpoint",
        "context",
        "sandbox",
        "ripgrep",
        "mcp",
    }
    assert KEY not in out


@pytest.mark.parametrize(
    "entry",
    [
        {"id": "kimi-k3", "owned_by": "llamacpp", "meta": {"n_ctx": 32_768, "n_ctx_train": 1_048_576}},  # llama.cpp
        {"id": "kimi-k3", "top_provider": {"context_length": 32_768}},  # OpenRouter
        {"id": "kimi-k3", "max_model_len": 32_768},  # vLLM
    ],
)
def test_the_window_is_read_as_discovery_reads_it(
    monkeypatch: pytest.MonkeyPatch, models_server: Callable[..., ModelsServer], entry: dict[str, object]
) -> None:
    srv = models_server(body={"object": "list", "data": [entry]})
    code, out = doctor(monkeypatch, srv.base_url)
    [ctx] = lines_of(out, "context")
    assert code == 0 and ctx.startswith("[ok]") and "32,768" in ctx, out  # the serving window, never n_ctx_train


@pytest.mark.parametrize(
    ("window", "status", "words"),
    [
        (1_200, "[FAIL]", "too small for any request"),
        (2_048, "[warn]", "only 1 of 6 tools fit"),  # a compact tool set: it works, with less
        (16_384, "[ok]", "system prompt and tools about"),
    ],
)
def test_a_window_too_small_to_work_is_said(
    monkeypatch: pytest.MonkeyPatch, models_server: Callable[..., ModelsServer], window: int, status: str, words: str
) -> None:
    srv = models_server(body={"object": "list", "data": [{"id": "kimi-k3", "max_model_len": window}]})
    code, out = doctor(monkeypatch, srv.base_url)
    [ctx] = lines_of(out, "context")
    assert ctx.startswith(status) and words in ctx, out
    assert (code == 1) == (status == "[FAIL]") and ("Everything" in out) == (status != "[FAIL]")
    [estimate] = lines_of(out, "estimate")
    assert "not calibrated yet" in estimate


def test_a_template_without_tools_makes_a_small_window_work(
    monkeypatch: pytest.MonkeyPatch, server: FakeServer
) -> None:
    server.dialect = __import__("kimicode.testing", fromlist=["DIALECTS"]).DIALECTS["llamacpp"]
    server.served_model, server.context_window, server.tools_counted = "kimi-k3", 2048, False
    code, out = doctor(monkeypatch, server.base_url)
    [ctx] = lines_of(out, "context")
    assert code == 0 and ctx.startswith("[ok]") and "2,048" in ctx and "leaves the tool definitions out" in ctx, out
    assert "counts each session's first request" in lines_of(out, "estimate")[0]


def test_a_model_the_server_does_not_list(
    monkeypatch: pytest.MonkeyPatch, models_server: Callable[..., ModelsServer]
) -> None:
    srv = models_server(body={"data": [{"id": f"m{i}"} for i in range(12)]})
    code, out = doctor(monkeypatch, srv.base_url, "--model", "kimi-k3")
    assert code == 1
    [endpoint] = lines_of(out, "endpoint")
    assert "'kimi-k3' is not among the 12 models" in endpoint and "m0, m1" in endpoint and "…" in endpoint
    assert "fix: pick one with --model or KIMI_MODEL" in out


@pytest.mark.parametrize(
    ("status", "body", "verdict", "said"),
    [
        (401, {"error": {"message": "Invalid Authentication"}}, "[FAIL]", "rejected the key (HTTP 401)"),
        (503, b"down", "[FAIL]", "HTTP 503"),
        (200, b"<html>not json</html>", "[warn]", "does not list its models"),
        (200, {"data": "nope"}, "[warn]", "does not list its models"),
    ],
)
def test_server_moods(
    status: int,
    body: Any,
    verdict: str,
    said: str,
    monkeypatch: pytest.MonkeyPatch,
    models_server: Callable[..., ModelsServer],
) -> None:
    code, out = doctor(monkeypatch, models_server(status, body).base_url)
    [endpoint] = lines_of(out, "endpoint")
    assert endpoint.startswith(verdict) and said in endpoint
    assert code == (1 if verdict == "[FAIL]" else 0)
    assert KEY not in out


def test_a_redirect_is_not_followed_with_the_key(
    monkeypatch: pytest.MonkeyPatch, models_server: Callable[..., ModelsServer]
) -> None:
    elsewhere = models_server(body={"data": [{"id": "kimi-k3"}]})
    redirector = models_server(302, b"", {"Location": f"{elsewhere.base_url}/models"})
    code, out = doctor(monkeypatch, redirector.base_url)
    assert code == 1 and "redirects to" in out and "not followed" in out
    assert elsewhere.requests == []  # the key never reached the other server


@pytest.mark.prepush
def test_missing_key_and_broken_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, workspace: Path) -> None:
    code, out = doctor(monkeypatch, None, key=None)
    assert code == 1
    [key] = lines_of(out, "API key")
    assert key.startswith("[FAIL]") and "no API key" in key and "KIMI_API_KEY" in out
    assert not lines_of(out, "endpoint")  # nothing to reach without a key
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text("[defaults]\nmodle = 'x'\n")
    code, out = doctor(monkeypatch, None, key=None)
    assert code == 1 and "config.toml:2" in out and "modle" in out


@pytest.mark.prepush
def test_stored_key_file_mode_and_project_auth(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, workspace: Path, models_server: Callable[..., ModelsServer]
) -> None:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    config = home / "config.toml"
    config.write_text(f'[auth]\napi_key = "{KEY}"\n')
    config.chmod(0o644)
    (workspace / ".kimicode").mkdir()
    (workspace / ".kimicode" / "config.toml").write_text('[auth]\napi_key = "sk-from-the-repository-123456"\n')
    srv = models_server(body={"data": [{"id": "kimi-k3"}]})
    code, out = doctor(monkeypatch, srv.base_url, "-C", str(workspace), key=None)
    assert code == 1
    assert f"chmod 600 {config}" in out
    assert "[auth] ignored" in out  # a repository cannot supply the key
    assert "(from [auth] api_key in config.toml)" in out and mask(KEY) in out
    assert srv.requests[0]["authorization"] == f"Bearer {KEY}"
    config.chmod(0o600)
    code, out = doctor(monkeypatch, srv.base_url, "-C", str(workspace), key=None)
    assert code == 0, out


@pytest.mark.prepush
def test_sandbox_asked_for_but_missing_and_a_broken_mcp_server(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, server: FakeServer
) -> None:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text(
        '[sandbox]\nmode = "workspace-write"\n\n[mcp_servers.broken]\ncommand = "/nonexistent/mcp-server"\n'
        "startup_timeout = 5\n"
    )
    code, out = doctor(monkeypatch, server.base_url)
    assert code == 1
    assert lines_of(out, "sandbox")[0].startswith("[FAIL]")
    [mcp] = lines_of(out, "mcp")
    assert mcp.startswith("[FAIL]") and "broken" in mcp


def test_masking() -> None:
    assert mask("sk-abcdefghijklmnopqrstuvwxyz") == "sk-…wxyz"
    assert mask("short-key") == "(hidden, 9 characters)"
    assert "secret" not in mask("sk-super-secret-key-value")


def test_help_names_the_key_variables_and_config_locations() -> None:
    out = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "100"}).output
    for needle in (
        "KIMI_API_KEY",
        "MOONSHOT_API_KEY",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "KIMICODE_HOME",
        "config.toml",
        ".kimicode/config.toml",
        "kimicode doctor",
    ):
        assert needle in out, needle
