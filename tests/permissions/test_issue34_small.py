"""Issue 34, finding 10's small parts, end to end: the accept-edits denial hint does not suggest the mode
in use, `jq -n '$ ENV'` (a space) does not print the environment unasked, and the approval panel shows
U+034F (combining grapheme joiner) and its like escaped."""

from __future__ import annotations

import io
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import sent_tool_results
from rich.console import Console

from kimicode.agent.results import ApprovalRequest
from kimicode.testing import FakeServer, Reply, ToolCall
from kimicode.ui.approvals import preview

MakeAgent = Callable[..., Any]


def test_the_accept_edits_denial_hint_does_not_suggest_accept_edits(
    server: FakeServer, make_agent: MakeAgent, workspace: Path
) -> None:
    # a file accept-edits still asks about (another program obeys it) that an `edit(...)` rule may allow
    server.add(
        Reply(tool_calls=[ToolCall("write_file", {"path": ".npmrc", "content": "x=1\n"})]), Reply(content="done")
    )
    make_agent(permission_mode="accept-edits", headless=True).run_sync("x")
    [refusal] = sent_tool_results(server)
    assert "Permission denied" in refusal and "--allow 'edit(.npmrc)'" in refusal, refusal
    assert "--permission-mode accept-edits" not in refusal
    assert not (workspace / ".npmrc").exists()


def test_the_denial_hint_for_what_runs_later_offers_only_what_writes_it(
    server: FakeServer, make_agent: MakeAgent, workspace: Path
) -> None:
    """`.envrc` runs later: no `edit(...)` rule and no mode writes it unasked, so neither is offered; only
    --yolo, with the sandbox off where the sandbox would keep it read-only."""
    server.add(
        Reply(tool_calls=[ToolCall("write_file", {"path": ".envrc", "content": "echo hi\n"})]), Reply(content="done")
    )
    make_agent(permission_mode="accept-edits", headless=True).run_sync("x")
    [refusal] = sent_tool_results(server)
    assert "Permission denied" in refusal and "runs later" in refusal, refusal
    assert "--allow" not in refusal and "--permission-mode" not in refusal
    assert "--yolo (with --sandbox off where the OS sandbox runs" in refusal
    assert not (workspace / ".envrc").exists()


@pytest.mark.skipif(shutil.which("jq") is None, reason="jq is not installed")
@pytest.mark.parametrize(
    "program", ["$ ENV", "$\tENV.KIMICODE_TEST_MARK", '"\\(env.KIMICODE_TEST_MARK)"', "$ # a comment\n ENV"]
)
def test_jq_reading_the_environment_with_a_space_asks(
    server: FakeServer, make_agent: MakeAgent, monkeypatch: pytest.MonkeyPatch, program: str
) -> None:
    monkeypatch.setenv("KIMICODE_TEST_MARK", "visible-in-the-environment")
    server.add(Reply(tool_calls=[ToolCall("bash", {"command": f"jq -n '{program}'"})]), Reply(content="done"))
    make_agent(permission_mode="default", headless=True).run_sync("x")
    [result] = sent_tool_results(server)
    assert "visible-in-the-environment" not in result and "Permission denied" in result, result
    assert "environment" in result


def test_the_approval_panel_escapes_the_combining_grapheme_joiner(tmp_path: Path) -> None:
    buf = io.StringIO()
    request = ApprovalRequest("c1", "bash", "execute", {"command": "rm\u034f -rf x\u17b4 y\u180b"}, "asks", None)
    Console(file=buf, width=120, color_system=None, force_terminal=False).print(preview(request, tmp_path, 120))
    shown = buf.getvalue()
    assert "\u034f" not in shown and "\u17b4" not in shown and "\u180b" not in shown
    assert "rm\\u034f -rf" in shown
