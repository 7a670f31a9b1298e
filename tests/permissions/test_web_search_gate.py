"""Web search is network access (issue 34, finding 8): gated like web_fetch in plan and default modes
(and by a `web_fetch` deny rule), the query shown in the approval; Moonshot's built-in search, which
cannot ask per call, is offered only where it would run without asking."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import sent_tool_results

from kimicode.agent.results import Approval, ApprovalRequest
from kimicode.events import Notice
from kimicode.testing import FakeServer, Reply, ToolCall
from kimicode.ui.format import describe_call

SECRET_QUERY = "sk-live-4242 leaked token"


def searxng(server: FakeServer, home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(f'[web_search]\nprovider = "searxng"\nurl = "{server.base_url}"\n')
    server.get_routes["/v1/search"] = {"results": [{"title": "t", "url": "https://example.com/", "content": "c"}]}


@pytest.mark.parametrize(("mode", "rules"), [("plan", {}), ("default", {}), ("yolo", {"deny": ["web_fetch"]})])
def test_web_search_does_not_run_unasked(
    server: FakeServer, make_agent: Any, tmp_path: Path, mode: str, rules: dict[str, list[str]]
) -> None:
    searxng(server, tmp_path / "home")
    server.add(Reply(tool_calls=[ToolCall("web_search", {"query": SECRET_QUERY})]), Reply(content="done"))
    asked: list[ApprovalRequest] = []

    def approve(request: ApprovalRequest) -> Approval:
        asked.append(request)
        return Approval(False, "no")

    result = make_agent(permission_mode=mode, approve=approve, **rules).run_sync("search")
    assert result.ok
    assert not any("/v1/search" in r for r in server.other_requests)  # the query never left
    [tool_result] = sent_tool_results(server)
    assert "denied" in tool_result.lower() or "no" in tool_result
    if rules:  # a deny rule for web_fetch: no question at all
        assert asked == [] and "web_fetch" in tool_result
    else:
        [request] = asked
        assert SECRET_QUERY in request.reason and SECRET_QUERY in describe_call(request.tool, request.arguments)


def test_an_approved_search_runs(server: FakeServer, make_agent: Any, tmp_path: Path) -> None:
    searxng(server, tmp_path / "home")
    server.add(Reply(tool_calls=[ToolCall("web_search", {"query": "python"})]), Reply(content="done"))
    assert make_agent(approve=lambda r: Approval(True)).run_sync("search").ok
    assert any("/v1/search" in r for r in server.other_requests)


def test_moonshots_builtin_search_is_offered_only_where_it_runs_unasked(
    server: FakeServer, make_agent: Any, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text('[web_search]\nprovider = "moonshot"\n')
    events: list[Any] = []
    agent = make_agent(on_event=events.append)
    server.add(Reply(content="hi"))
    agent.run_sync("x")
    assert "$web_search" not in agent.tools.names
    # a library agent's notices name its options, not the command line's flags (`allow`, not `--allow`)
    assert any(isinstance(e, Notice) and "; allow web_search (or" in e.text for e in events)
    assert "$web_search" in make_agent(permission_mode="yolo").tools.names
    assert "$web_search" in make_agent(allow=["WebSearch"]).tools.names
    assert "$web_search" not in make_agent(permission_mode="yolo", deny=["web_fetch"]).tools.names
