"""Approvals inside the agent: the path approved is the path written (a symbolic link swapped in while
the prompt is open refuses the write), and "don't ask again" answers become rules of the same engine."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kimicode.agent.core import Approval, ApprovalRequest
from kimicode.config.endpoint import ConfigError
from kimicode.permissions.pathresolve import PathChanged, open_dir_nofollow
from kimicode.testing import FakeServer, Reply, ToolCall

MakeAgent = Callable[..., Any]


def _tool_results(messages: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "tool"]


@pytest.mark.parametrize("tool", ["write_file", "edit_file", "apply_patch"])
def test_a_link_swapped_in_while_the_prompt_is_open_refuses_the_write(
    server: FakeServer, make_agent: MakeAgent, workspace: Path, tmp_path: Path, tool: str
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "app.py").write_text("old\n")
    (workspace / "out").mkdir()
    (workspace / "out" / "app.py").write_text("old\n")
    args: dict[str, Any] = {
        "write_file": {"path": "out/app.py", "content": "pwned\n"},
        "edit_file": {"path": "out/app.py", "old_string": "old", "new_string": "pwned"},
        "apply_patch": {"input": "*** Begin Patch\n*** Update File: out/app.py\n@@\n-old\n+pwned\n*** End Patch\n"},
    }[tool]
    server.add(Reply(tool_calls=[ToolCall(tool, args)]), Reply(content="done"))

    def approve(request: ApprovalRequest) -> bool:
        shutil.rmtree(workspace / "out")  # the attacker's race: out/ becomes a link while we wait
        (workspace / "out").symlink_to(outside)
        return True

    model = "gpt-5.1" if tool == "apply_patch" else "kimi-k3"
    result = make_agent(approve=approve, model=model).run_sync("go")
    assert (outside / "app.py").read_text() == "old\n"
    (refused,) = _tool_results(result.messages)
    assert "approved path changed" in refused
    assert result.permission_denials and result.permission_denials[0]["tool_name"] == tool


def test_the_write_itself_refuses_a_link_in_any_component(tmp_path: Path) -> None:
    real = tmp_path / "real"
    (real / "sub").mkdir(parents=True)
    fd = open_dir_nofollow(real / "sub")
    os.close(fd)
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(PathChanged):
        open_dir_nofollow(tmp_path / "link" / "sub")
    with pytest.raises(PathChanged):
        open_dir_nofollow(tmp_path / "link")


def test_remember_adds_an_engine_rule_for_the_session(
    server: FakeServer, make_agent: MakeAgent, workspace: Path
) -> None:
    asked: list[str] = []

    def approve(request: ApprovalRequest) -> Approval:
        asked.append(str(request.arguments.get("command")))
        return Approval(True, remember="Bash(mkdir -p:*)")

    server.add(
        Reply(tool_calls=[ToolCall("bash", {"command": "mkdir -p one"})]),
        Reply(tool_calls=[ToolCall("bash", {"command": "mkdir -p two"})]),
        Reply(tool_calls=[ToolCall("bash", {"command": "mkdir -p three; touch c.txt"})]),
        Reply(content="done"),
    )
    agent = make_agent(approve=approve, permission_mode="accept-edits")
    agent.run_sync("go")
    # the first asks; the second is admitted by the remembered rule; the third chains another
    # command, which the rule does not name
    assert asked == ["mkdir -p one", "mkdir -p three; touch c.txt"]
    assert [r.raw for r in agent.policy.rules.allow] == ["Bash(mkdir -p:*)"]
    assert (workspace / "two").is_dir()


def test_a_bad_remembered_rule_is_a_clear_error(server: FakeServer, make_agent: MakeAgent) -> None:
    with pytest.raises(ConfigError, match=r"Approval.remember: .*Bash\(ec\*ho:\*\)"):
        Approval(True, remember="Bash(ec*ho:*)")
    with pytest.raises(ConfigError, match="web_fetch takes domain:HOST"):
        Approval(True, remember="WebFetch(https://example.com)")


def _terminal_approver(workspace: Path, answers: list[str], texts: list[str]) -> Any:
    import io

    from rich.console import Console

    from kimicode.ui.approvals import Approver, SessionRules

    async def choose(question: str, options: list[Any]) -> str | None:
        return answers.pop(0)

    async def ask(message: str, default: str) -> str | None:
        return texts.pop(0) if texts else default

    return Approver(Console(file=io.StringIO(), width=100), workspace, SessionRules(), choose_fn=choose, ask_fn=ask)


def test_the_terminals_prefix_answer_is_an_engine_rule(
    server: FakeServer, make_agent: MakeAgent, workspace: Path
) -> None:
    approver = _terminal_approver(workspace, ["prefix", "prefix"], ["mkdir -p"])
    server.add(
        Reply(tool_calls=[ToolCall("bash", {"command": "mkdir -p a"})]),
        Reply(tool_calls=[ToolCall("bash", {"command": "mkdir -p b"})]),  # the engine admits it
        Reply(tool_calls=[ToolCall("bash", {"command": "mkdir -p $(touch pwned)"})]),  # static or ask
        Reply(content="done"),
    )
    agent = make_agent(approve=approver)
    approver.choose_fn = _refusing(approver.choose_fn, after=1)
    result = agent.run_sync("go")
    assert (workspace / "a").is_dir() and (workspace / "b").is_dir()
    assert not (workspace / "pwned").exists()
    assert [r.raw for r in agent.policy.rules.allow] == ["bash(mkdir -p:*)"]
    assert [d["tool_input"]["command"] for d in result.permission_denials] == ["mkdir -p $(touch pwned)"]
    agent.forget_session_rules()
    assert agent.policy.rules.allow == ()


def _refusing(choose: Any, after: int) -> Any:
    """A choose_fn that gives its scripted answers `after` times, then says no."""
    calls = [0]

    async def wrapped(question: str, options: list[Any]) -> str | None:
        calls[0] += 1
        return await choose(question, options) if calls[0] <= after else "no"

    return wrapped


def test_the_terminals_exact_command_answer_is_a_literal_rule(
    server: FakeServer, make_agent: MakeAgent, workspace: Path
) -> None:
    approver = _terminal_approver(workspace, ["command"], [])
    approver.choose_fn = _refusing(approver.choose_fn, after=1)
    line = "mkdir -p x && touch x/done"
    server.add(
        Reply(tool_calls=[ToolCall("bash", {"command": line})]),
        Reply(tool_calls=[ToolCall("bash", {"command": "rm -rf x"})]),
        Reply(tool_calls=[ToolCall("bash", {"command": line})]),
        Reply(tool_calls=[ToolCall("bash", {"command": "mkdir -p x"})]),  # a part of it: not the exact line
        Reply(content="done"),
    )
    agent = make_agent(approve=approver)
    result = agent.run_sync("go")
    assert (workspace / "x" / "done").exists()
    refused = [d["tool_input"]["command"] for d in result.permission_denials]
    assert refused == ["rm -rf x", "mkdir -p x"]
