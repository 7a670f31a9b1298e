"""web_fetch against a real local HTTP server: HTML to text, redirects, limits, schemes, permissions."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from kimicode.permissions.engine import decide
from kimicode.testing import FakeServer, Reply, ToolCall
from kimicode.tools.base import ToolContext, ToolError, ToolResult
from kimicode.tools.web import html_to_text, web_fetch_tool

PAGE = """<!doctype html><html><head><title>The  Docs</title><style>body{color:red}</style>
<script>var secret = 1;</script></head><body><nav><a href="/home">Home</a> menu</nav>
<h1>Install</h1><p>Run   the <b>installer</b> then read <a href="/guide">the guide</a>.</p>
<ul><li>first</li><li>second</li></ul><pre>def f():
    return 1</pre><p>Caf&eacute; &amp; <code>x = 2</code></p><img src="a.png" alt="diagram"></body></html>"""

ROUTES: dict[str, tuple[int, dict[str, str], bytes]] = {
    "/page": (200, {"Content-Type": "text/html; charset=utf-8"}, PAGE.encode()),
    "/latin": (200, {"Content-Type": "text/html; charset=iso-8859-1"}, "<p>gar\xe7on</p>".encode("latin-1")),
    "/json": (200, {"Content-Type": "application/json"}, b'{"ok": true}'),
    "/png": (200, {"Content-Type": "image/png"}, b"\x89PNG\r\n\x1a\n" + b"\0" * 100),
    "/big": (200, {"Content-Type": "text/plain"}, b"word " * 20_000),
    "/missing": (404, {"Content-Type": "text/html"}, b"<h1>Not here</h1>"),
    "/r1": (302, {"Location": "/r2"}, b""),
    "/r2": (301, {"Location": "/page"}, b""),
    "/loop": (302, {"Location": "/loop"}, b""),
    "/to-file": (302, {"Location": "file:///etc/passwd"}, b""),
}


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        status, headers, body = ROUTES.get(self.path, (404, {}, b"no route"))
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return None


@pytest.fixture
def site(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def fetch(url: str, workspace: Path, **limits: Any) -> ToolResult:
    tool = web_fetch_tool(**limits)
    out = asyncio.run(tool.fn({"url": url}, ToolContext(workspace=workspace)))
    assert isinstance(out, ToolResult)
    return out


def fetch_into(tool: Any, url: str, ctx: ToolContext) -> ToolResult:
    async def go() -> ToolResult:
        out = await tool.fn({"url": url}, ctx)
        assert isinstance(out, ToolResult)
        return out

    return asyncio.run(go())


def test_html_becomes_readable_text(site: str, workspace: Path) -> None:
    out = fetch(f"{site}/r1", workspace)
    text = out.content
    assert f"URL: {site}/page" in text and "(redirected 2 times)" in text and "Title: The Docs" in text
    assert "# Install" in text and "Run the **installer**" not in text  # no emphasis markup, plain words
    assert "Run the installer then read [the guide](" + site + "/guide)." in text
    assert "- first\n- second" in text
    assert "```\ndef f():\n    return 1\n```" in text
    assert "Café & `x = 2`" in text and "[image: diagram]" in text
    assert "secret" not in text and "color:red" not in text and "menu" not in text
    assert not out.is_error and out.display is not None and out.display["status"] == 200


def test_text_types_charsets_and_errors(site: str, workspace: Path) -> None:
    assert "garçon" in fetch(f"{site}/latin", workspace).content
    assert '{"ok": true}' in fetch(f"{site}/json", workspace).content
    missing = fetch(f"{site}/missing", workspace)
    assert missing.is_error and "HTTP status: 404" in missing.content and "# Not here" in missing.content
    with pytest.raises(ToolError, match="image/png"):
        fetch(f"{site}/png", workspace)


def test_limits(site: str, workspace: Path) -> None:
    big = fetch(f"{site}/big", workspace, max_chars=1000)
    assert "cut: showing the first 1,000 of" in big.content
    assert "the rest was not saved: no session directory" in big.content
    tool = web_fetch_tool(max_chars=1000)
    spilled = fetch_into(tool, f"{site}/big", ToolContext(workspace=workspace, session_dir=workspace / "s"))
    saved = spilled.content.split("the whole text is saved at ", 1)[1].split(":", 1)[0]
    assert Path(saved).read_text() == "word " * 20_000  # the page's end is not lost
    with pytest.raises(ToolError, match="too many redirects"):
        fetch(f"{site}/loop", workspace, max_redirects=3)
    with pytest.raises(ToolError, match="redirects to a URL that cannot be fetched"):
        fetch(f"{site}/to-file", workspace)


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.com/x", "javascript:alert(1)", "no-scheme"])
def test_only_http_and_https(url: str, workspace: Path) -> None:
    with pytest.raises(ToolError, match="only http and https"):
        fetch(url, workspace)


def test_unreachable_host_is_a_clear_error(workspace: Path) -> None:
    with pytest.raises(ToolError, match="cannot fetch"):
        fetch("http://127.0.0.1:9/nothing", workspace, timeout=5.0)


def test_html_parser_edge_cases() -> None:
    title, text = html_to_text("<p>unclosed <a href='javascript:x()'>js link</a> <a href='/rel'>rel</a>", "http://h/d/")
    assert title == "" and "js link" in text and "[js link]" not in text and "[rel](http://h/rel)" in text


def test_asks_by_default_and_runs_when_allowed(
    make_agent: Callable[..., Any], server: FakeServer, site: str, workspace: Path
) -> None:
    tool = web_fetch_tool()
    ctx = ToolContext(workspace=workspace)
    decision = decide(tool, {"url": site}, "accept-edits", ctx)
    assert decision.verdict == "ask" and "fetches from the network" in decision.reason
    assert decide(tool, {"url": site}, "yolo", ctx).verdict == "allow"
    server.add(Reply(tool_calls=[ToolCall("web_fetch", {"url": f"{site}/page"})]), Reply(content="read it"))
    agent = make_agent(approve=lambda request: request.tool == "web_fetch")
    assert "web_fetch" in agent.tools.names
    assert agent.run_sync("read the docs").ok
    assert "# Install" in server.requests[1].body["messages"][-1]["content"]
    server.add(Reply(tool_calls=[ToolCall("web_fetch", {"url": f"{site}/page"})]), Reply(content="denied"))
    headless = make_agent(headless=True)
    result = headless.run_sync("read the docs")
    assert result.permission_denials and result.permission_denials[0]["tool_name"] == "web_fetch"
