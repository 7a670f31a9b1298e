"""Agent Skills with progressive disclosure, custom subagents (the task tool's `agent`), and custom commands
in Claude Code's places, each with project folders counting only in a trusted workspace."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kimicode.events import Event, Notice
from kimicode.testing import FakeServer, RecordedRequest, Reply, ToolCall

BODY = "Step 1: run the release checklist in checklist.md before tagging."


def make_skill(root: Path, name: str, description: str, body: str = BODY, extra: dict[str, str] | None = None) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(f"---\nname: {name}\ndescription: >\n  {description}\n---\n\n{body}\n")
    for rel, text in (extra or {}).items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    return folder


def trust(home: Path, workspace: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    with (home / "config.toml").open("a") as fh:
        fh.write(f"[trust]\nworkspaces = [{json.dumps(str(workspace))}]\n")


def tool_desc(req: RecordedRequest, name: str) -> str:
    return next(t["function"]["description"] for t in req.body["tools"] if t["function"]["name"] == name)


def test_only_names_and_descriptions_go_out_until_the_model_activates_a_skill(
    make_agent: Callable[..., Any], server: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    folder = make_skill(
        home / "skills",
        "release",
        "Cut a release of this project.",
        extra={"checklist.md": "1. bump version", "scripts/tag.sh": "git tag"},
    )
    server.add(Reply(tool_calls=[ToolCall("skill", {"name": "release"})]), Reply(content="done"))
    make_agent().run_sync("ship it")
    first = json.dumps(server.requests[0].body)
    assert "Cut a release of this project." in tool_desc(server.requests[0], "skill")
    assert BODY not in first and "checklist.md" not in first
    result = server.requests[1].body["messages"][-1]["content"]
    assert BODY in result and str(folder) in result
    assert "- checklist.md" in result and "- scripts/tag.sh" in result


def test_a_project_skill_needs_a_trusted_workspace_and_wins_over_a_users(
    make_agent: Callable[..., Any], server: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    make_skill(tmp_path / "claude-home" / "skills", "lint", "The user's lint skill.")
    make_skill(workspace / ".claude" / "skills", "lint", "The project's lint skill.")
    make_skill(workspace / ".kimicode" / "skills", "deploy", "The project's deploy skill.")
    server.add(Reply(content="a"), Reply(content="b"))
    make_agent().run_sync("x")
    desc = tool_desc(server.requests[0], "skill")
    assert "The user's lint skill." in desc and "project" not in desc
    trust(home, workspace)
    make_agent().run_sync("x")
    desc = tool_desc(server.requests[1], "skill")
    assert "The project's lint skill." in desc and "deploy" in desc and "The user's" not in desc


def test_no_skills_no_tool_and_a_broken_skill_is_reported(
    make_agent: Callable[..., Any], server: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    server.add(Reply(content="a"), Reply(content="b"))
    agent = make_agent()
    assert "skill" not in agent.tools.names
    bad = tmp_path / "home" / "skills" / "bad"
    bad.mkdir(parents=True)
    (bad / "SKILL.md").write_text("---\n[unclosed: x\n---\nbody\n")  # no `key: value` line at all
    nodesc = tmp_path / "home" / "skills" / "nodesc"
    nodesc.mkdir()
    (nodesc / "SKILL.md").write_text("---\nname: nodesc\n---\nbody\n")
    events: list[Event] = []
    agent = make_agent(on_event=events.append)
    agent.run_sync("x")
    texts = [e.text for e in events if isinstance(e, Notice)]
    assert any("bad/SKILL.md: invalid YAML front matter" in t for t in texts)
    assert any("nodesc/SKILL.md: no `description`" in t for t in texts)
    assert "skill" not in agent.tools.names


def test_a_hermetic_library_agent_reads_no_skill(server: FakeServer, tmp_path: Path) -> None:
    from kimicode import Agent

    make_skill(tmp_path / "claude-home" / "skills", "x", "A skill.")
    agent = Agent(base_url=server.base_url, api_key="k", home=tmp_path / "home")
    assert "skill" not in agent.tools.names


def test_skills_and_claude_commands_become_slash_commands(workspace: Path, tmp_path: Path) -> None:
    from kimicode.extensions.slash import load_commands

    home = tmp_path / "home"
    claude = tmp_path / "claude-home"
    make_skill(home / "skills", "release", "Cut a release.")
    make_skill(home / "skills", "review", "Review skill.")
    (claude / "commands").mkdir(parents=True)
    (claude / "commands" / "review.md").write_text(
        "---\ndescription: Review a PR\nargument-hint: [pr]\nallowed-tools: Bash(gh pr view:*), Read\n"
        "model: sonnet\n---\nReview PR $1 with focus on $ARGUMENTS.\n"
    )
    (workspace / ".claude" / "commands").mkdir(parents=True)
    (workspace / ".claude" / "commands" / "deploy.md").write_text("Deploy $ARGUMENTS now.\n")
    found = load_commands(workspace, home, trusted=False)
    assert set(found) == {"release", "review", "skill:review"}
    review = found["review"]
    assert review.scope == "user" and review.model == "sonnet"
    assert review.allowed_tools == ("Bash(gh pr view:*)", "Read")
    assert review.render("42 tests") == "Review PR 42 with focus on 42 tests."
    release = found["release"].render("v2 $1")
    assert BODY in release and release.endswith("v2 $1")  # a skill's text is sent as written
    trusted = load_commands(workspace, home, trusted=True)
    assert trusted["deploy"].scope == "project" and trusted["deploy"].render("prod") == "Deploy prod now."


AGENT = """---
name: reviewer
description: Reviews a change for bugs.
tools: Read, Grep, Bash
model: opus
---
You are a meticulous reviewer. Report bugs only.
"""


def test_a_custom_subagent_gets_its_prompt_and_only_its_tools_within_the_parents_rules(
    make_agent: Callable[..., Any], server: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    agents = tmp_path / "claude-home" / "agents"
    agents.mkdir(parents=True)
    (agents / "reviewer.md").write_text(AGENT)

    def answer(req: RecordedRequest) -> Reply:
        msgs = req.body["messages"]
        child = "meticulous reviewer" in msgs[0]["content"]
        if child:
            if msgs[-1]["role"] == "user":
                return Reply(tool_calls=[ToolCall("bash", {"command": "touch pwned"})])
            return Reply(content="no bugs")
        if msgs[-1]["role"] == "user":
            return Reply(
                tool_calls=[ToolCall("task", {"description": "review", "prompt": "review a.py", "agent": "reviewer"})]
            )
        return Reply(content="parent done")

    server.add(*[answer] * 4)
    result = make_agent(deny=("bash(touch*)",)).run_sync("review")
    parent_req = server.requests[0]
    task = next(t["function"] for t in parent_req.body["tools"] if t["function"]["name"] == "task")
    assert "reviewer: Reviews a change for bugs." in task["description"]
    assert task["parameters"]["properties"]["agent"]["enum"] == ["reviewer"]
    child_req = next(r for r in server.requests if "meticulous reviewer" in r.body["messages"][0]["content"])
    assert sorted(t["function"]["name"] for t in child_req.body["tools"]) == ["bash", "grep", "read_file"]
    assert child_req.body["model"] == parent_req.body["model"]  # `opus` is no model here: the parent's
    assert not (workspace / "pwned").exists()  # the parent's deny rule holds in the subagent
    assert any(d.get("parent_tool_use_id") for d in result.permission_denials)


def test_an_unknown_subagent_is_an_error_for_the_model(
    make_agent: Callable[..., Any], server: FakeServer, tmp_path: Path
) -> None:
    agents = tmp_path / "home" / "agents"
    agents.mkdir(parents=True)
    (agents / "reviewer.md").write_text(AGENT)
    server.add(
        Reply(tool_calls=[ToolCall("task", {"description": "d", "prompt": "p", "agent": "ghost"})]), Reply(content="ok")
    )
    make_agent().run_sync("x")
    result = server.requests[1].body["messages"][-1]["content"]
    assert "ghost" in result and ("reviewer" in result or "enum" in result or "one of" in result)


@pytest.mark.parametrize(
    ("tools", "expected"),
    [
        ("Read, Grep", ["grep", "read_file"]),
        ("[Write, Edit]", ["edit_file", "write_file"]),
        ("Bash(git diff:*)", ["bash"]),
        ("NotebookRead, Read", ["read_file"]),
    ],
)
def test_claude_tool_names_in_agent_files(tools: str, expected: list[str], tmp_path: Path) -> None:
    from kimicode.extensions.agents import read_agent

    path = tmp_path / "a.md"
    path.write_text(f"---\nname: a\ndescription: d\ntools: {tools}\n---\nbody\n")
    got, _ = read_agent(path, "user").tool_names(["read_file", "write_file", "edit_file", "glob", "grep", "bash"])
    assert sorted(got) == expected


@pytest.mark.parametrize("rel", ["../../config.toml", "/etc/passwd", ".", "missing.md", "link.md", "bin.dat"])
def test_a_skill_file_outside_its_folder_or_not_text_is_refused(
    make_agent: Callable[..., Any], server: FakeServer, tmp_path: Path, rel: str
) -> None:
    home = tmp_path / "home"
    folder = make_skill(home / "skills", "s", "A skill.", extra={"ok.md": "fine"})
    (home / "config.toml").write_text("# secret-ish\n")
    (folder / "link.md").symlink_to(home / "config.toml")
    (folder / "bin.dat").write_bytes(b"\x00\x01")
    server.add(
        Reply(tool_calls=[ToolCall("skill", {"name": "s", "file": rel})]),
        Reply(tool_calls=[ToolCall("skill", {"name": "s", "file": "ok.md"})]),
        Reply(content="done"),
    )
    make_agent(headless=True).run_sync("x")
    refused = server.requests[1].body["messages"][-1]["content"]
    assert refused.startswith("Error:") and "secret-ish" not in refused
    assert server.requests[2].body["messages"][-1]["content"] == "fine"


def test_a_projects_files_that_link_outside_the_workspace_are_refused(
    make_agent: Callable[..., Any], server: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    from kimicode.extensions.slash import load_commands

    home = tmp_path / "home"
    secret = tmp_path / "id_rsa"
    secret.write_text("---\nname: key\ndescription: PRIVATE KEY\n---\n-----BEGIN PRIVATE KEY-----\n")
    (workspace / ".claude" / "skills" / "key").mkdir(parents=True)
    (workspace / ".claude" / "skills" / "key" / "SKILL.md").symlink_to(secret)
    (workspace / ".claude" / "agents").mkdir()
    (workspace / ".claude" / "agents" / "key.md").symlink_to(secret)
    (workspace / ".claude" / "commands").mkdir()
    (workspace / ".claude" / "commands" / "key.md").symlink_to(secret)
    make_skill(workspace / ".claude" / "skills", "fine", "A fine skill.")
    trust(home, workspace)
    events: list[Event] = []
    server.add(Reply(content="ok"))
    agent = make_agent(on_event=events.append)
    agent.run_sync("x")
    assert "PRIVATE KEY" not in json.dumps(server.requests[0].body) and "fine" in json.dumps(server.requests[0].body)
    assert sum("links outside the workspace" in e.text for e in events if isinstance(e, Notice)) == 2
    assert "key" not in load_commands(workspace, home, trusted=True)
