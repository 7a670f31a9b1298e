"""The policy inside the agent and the command line: rules from config files and flags, rules that the
model cannot change, and child processes without the agent's secrets."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import headless_json, tool_results, write

from kimicode.agent.core import Approval, ApprovalRequest
from kimicode.config.endpoint import ConfigError
from kimicode.testing import FakeServer, Reply, ToolCall

MakeAgent = Callable[..., Any]


def test_rules_from_the_config_files_apply(
    server: FakeServer, make_agent: MakeAgent, workspace: Path, tmp_path: Path
) -> None:
    write(tmp_path / "home" / "config.toml", '[permissions]\nallow = ["bash(echo hi*)"]\ndeny = ["bash(rm*)"]\n')
    write(workspace / ".kimicode" / "config.toml", '[permissions]\nallow = ["bash"]\ndeny = []\n')
    server.add(
        Reply(
            tool_calls=[
                ToolCall("bash", {"command": "echo hi there"}),
                ToolCall("bash", {"command": "ls > /dev/null && rm -f nothing"}),
            ]
        ),
        Reply(content="done"),
    )
    result = make_agent(headless=True).run_sync("go")
    ran, refused = tool_results(result.messages)
    assert ran == "hi there\n[exit code: 0]"
    assert "denied by the rule `bash(rm*)`" in refused and "rules forbid" in refused  # the user's deny survives
    assert [d["tool_name"] for d in result.permission_denials] == ["bash"]


def test_an_untrusted_project_cannot_grant_itself_permissions(
    server: FakeServer, make_agent: MakeAgent, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KIMICODE_BWRAP", "")
    write(
        workspace / ".kimicode" / "config.toml",
        '[permissions]\nallow = ["bash"]\nask = ["bash(git push*)"]\n[sandbox]\nnetwork = true\n',
    )
    agent = make_agent(sandbox="workspace-write")
    assert agent.policy.rules.allow == () and [r.raw for r in agent.policy.rules.ask] == ["bash(git push*)"]
    server.add(Reply(tool_calls=[ToolCall("bash", {"command": "touch pwned"})]), Reply(content="ok"))
    events: list[Any] = []
    agent.on_event = events.append
    agent.run_sync("go")
    assert not (workspace / "pwned").exists()
    notices = " ".join(getattr(e, "text", "") for e in events if type(e).__name__ == "Notice")
    assert "permissions.allow ignored: this workspace is not trusted" in notices
    assert "sandbox.network = true ignored" in notices
    # once the user trusts the workspace, the project's rules apply
    write(tmp_path / "home" / "config.toml", f'[trust]\nworkspaces = ["{workspace}"]\n')
    trusted = make_agent()
    assert [r.raw for r in trusted.policy.rules.allow] == ["bash"]


def test_what_the_model_writes_does_not_change_this_sessions_rules(
    server: FakeServer, make_agent: MakeAgent, workspace: Path
) -> None:
    seen: list[ApprovalRequest] = []

    def approve(request: ApprovalRequest) -> Approval:
        seen.append(request)
        return Approval(request.tool == "write_file", "not now")

    config = {"path": ".kimicode/config.toml", "content": '[permissions]\nallow = ["bash"]\n'}
    server.add(
        Reply(tool_calls=[ToolCall("write_file", config)]),
        Reply(tool_calls=[ToolCall("bash", {"command": "touch pwned"})]),
        Reply(content="done"),
    )
    agent = make_agent(permission_mode="accept-edits", approve=approve)
    result = agent.run_sync("go")
    # writing kimicode's own config needed approval even in accept-edits; it was given and the file written
    assert [r.tool for r in seen] == ["write_file", "bash"]
    assert "kimicode's configuration" in seen[0].reason
    assert (workspace / ".kimicode" / "config.toml").exists()
    # ... but the new rule has no effect on this session: bash still asked, and was refused
    assert not (workspace / "pwned").exists()
    assert "not now" in tool_results(result.messages)[1]
    assert agent.policy.rules.allow == () and agent.permission_mode == "accept-edits"
    fork = agent.fork()  # a fork keeps exactly the session's rules, not the file's new ones
    assert fork.policy.rules == agent.policy.rules


def test_commands_do_not_see_the_agents_secrets(
    server: FakeServer, make_agent: MakeAgent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(
        tmp_path / "home" / "config.toml",
        '[providers.groq]\nbase_url = "https://example.invalid/v1"\napi_key_env = "GROQ_KEY"\n',
    )
    monkeypatch.setenv("GROQ_KEY", "groq-secret-value")
    monkeypatch.setenv("ALIAS_OF_THE_KEY", "sk-test-secret-key")  # the key in use, under an innocent name
    monkeypatch.setenv("HARMLESS", "visible")
    server.add(Reply(tool_calls=[ToolCall("bash", {"command": "env"})]), Reply(content="ok"))
    result = make_agent(permission_mode="yolo").run_sync("env")
    (output,) = tool_results(result.messages)
    assert "HARMLESS=visible" in output
    assert "groq-secret-value" not in output and "sk-test-secret-key" not in output and "GROQ_KEY" not in output


def test_a_malformed_rule_is_a_clear_error(make_agent: MakeAgent, workspace: Path) -> None:
    write(workspace / ".kimicode" / "config.toml", '[permissions]\ndeny = ["bash(git"]\n')
    with pytest.raises(ConfigError, match=r"config.toml: permissions.deny: bad permission rule"):
        make_agent()


# -- the command line --------------------------------------------------------------------------------


@pytest.mark.slow
def test_allow_and_deny_flags(server: FakeServer, workspace: Path, tmp_path: Path) -> None:
    server.add(
        Reply(
            tool_calls=[
                ToolCall("bash", {"command": "git status"}),
                ToolCall("bash", {"command": "git status; touch pwned"}),
                ToolCall("bash", {"command": "echo $((1+1))"}),
            ]
        ),
        Reply(content="done"),
    )
    code, result, _ = headless_json(
        server, tmp_path / "home", workspace, "--allow", "bash(git status*)", "--allow", "bash(echo*)"
    )
    assert code == 0
    ran, compound, unparsable = tool_results(server.requests[-1].body["messages"])
    assert "[exit code:" in ran and not ran.startswith("Permission denied")
    assert compound.startswith("Permission denied") and "--allow 'bash(touch pwned)'" in compound
    assert unparsable.startswith("Permission denied") and "cannot be checked" in unparsable
    assert not (workspace / "pwned").exists()
    assert len(result["permission_denials"]) == 2

    server.add(Reply(tool_calls=[ToolCall("bash", {"command": "echo x | rm -rf y"})]), Reply(content="done"))
    code, result, _ = headless_json(server, tmp_path / "home", workspace, "--yolo", "--deny", "bash(rm*)")
    assert code == 0 and result["permission_denials"][0]["tool_name"] == "bash"


@pytest.mark.slow
def test_plan_mode_and_bad_rules_on_the_command_line(server: FakeServer, workspace: Path, tmp_path: Path) -> None:
    (workspace / "a.txt").write_text("a\n")
    server.add(
        Reply(
            tool_calls=[
                ToolCall("read_file", {"path": "a.txt"}),
                ToolCall("write_file", {"path": "a.txt", "content": "b"}),
            ]
        ),
        Reply(content="here is the plan"),
    )
    code, result, _ = headless_json(server, tmp_path / "home", workspace, "--permission-mode", "plan")
    read, write = tool_results(server.requests[-1].body["messages"])
    assert code == 0 and result["result"] == "here is the plan"
    assert "a" in read and "plan mode" in write and (workspace / "a.txt").read_text() == "a\n"
    code, _, stderr = headless_json(server, tmp_path / "home", workspace, "--deny", "bash(")
    assert code == 2 and "--deny: bad permission rule 'bash('" in stderr
