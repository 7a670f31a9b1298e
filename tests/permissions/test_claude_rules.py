"""Claude Code's permission rule syntax, decided by kimicode's engine as Claude Code documents it
(code.claude.com/docs/en/permissions): one table of examples per rule form, `match` (the rule applies)
and `not_match` (it does not), and the settings files read as Claude Code reads them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kimicode.config.endpoint import ConfigError
from kimicode.config.settings import Settings
from kimicode.permissions.claude import claude_rules, parse_claude_rule
from kimicode.permissions.engine import decide
from kimicode.permissions.policy import Policy, Rules
from kimicode.permissions.sources import session_rules
from kimicode.tools.base import Tool, ToolContext
from kimicode.tools.files import EDIT_FILE, READ_FILE, WRITE_FILE
from kimicode.tools.search import GREP
from kimicode.tools.shell import BASH
from kimicode.tools.web import WEB_FETCH


async def _noop(args: dict[str, Any], ctx: ToolContext) -> str:
    return "ok"


MCP_ISSUE = Tool("mcp__github__create_issue", "an MCP tool", {"type": "object"}, _noop, kind="execute")
MCP_OTHER = Tool("mcp__gitlab__create_issue", "an MCP tool", {"type": "object"}, _noop, kind="execute")
TOOLS = {
    "bash": BASH,
    "read": READ_FILE,
    "edit": EDIT_FILE,
    "write": WRITE_FILE,
    "grep": GREP,
    "fetch": WEB_FETCH,
    "mcp": MCP_ISSUE,
    "mcp_other": MCP_OTHER,
}
ARG = {"bash": "command", "read": "path", "edit": "path", "write": "path", "grep": "path", "fetch": "url"}

# (rule, [(tool, argument) that the rule applies to], [(tool, argument) it does not apply to])
CASES: list[tuple[str, list[tuple[str, str]], list[tuple[str, str]]]] = [
    ("Bash", [("bash", "ls"), ("bash", "curl https://x.org")], [("read", "README.md")]),
    ("Bash(*)", [("bash", "rm x")], [("edit", "x.txt")]),
    (
        "Bash(npm run test)",
        [("bash", "npm run test"), ("bash", "npm  run test"), ("bash", "cd sub && npm run test")],
        [("bash", "npm run test -- -x"), ("bash", "npm run testx"), ("bash", "npm run build")],
    ),
    (
        "Bash(npm run test:*)",
        [("bash", "npm run test"), ("bash", "npm run test -- --watch"), ("bash", "echo hi && npm run test foo")],
        [("bash", "npm run testx"), ("bash", "npm run build"), ("bash", "npm test")],
    ),
    (
        "Bash(curl:*)",
        [
            ("bash", "curl https://example.com"),
            ("bash", "curl"),
            ("bash", "ls | curl -d @- x.org"),
            ("bash", "sudo curl x.org"),
        ],
        [("bash", "curlie x.org"), ("bash", "echo curl")],
    ),
    ("Bash(ls *)", [("bash", "ls"), ("bash", "ls -la")], [("bash", "lsof"), ("bash", "cat ls")]),
    ("Bash(ls*)", [("bash", "ls -la"), ("bash", "lsof")], [("bash", "cat x")]),
    (
        "Bash(git * main)",
        [("bash", "git push origin main"), ("bash", "git checkout main")],
        [("bash", "git push origin dev"), ("bash", "git main x")],
    ),
    ("Read", [("read", "src/a.py"), ("grep", "src")], [("edit", "src/a.py"), ("bash", "ls")]),
    ("Read(./.env)", [("read", ".env")], [("read", "sub/.env"), ("read", ".envrc"), ("edit", "x.py")]),
    ("Read(.env)", [("read", ".env"), ("read", "sub/dir/.env")], [("read", ".env.example"), ("read", "env")]),
    ("Read(*.pem)", [("read", "server.pem"), ("read", "certs/ca.pem")], [("read", "server.pem.txt")]),
    (
        "Read(./secrets/**)",
        [("read", "secrets/a.txt"), ("read", "secrets/x/y.txt"), ("grep", "secrets/x")],
        [("read", "other/secrets/a.txt"), ("read", "secrets.txt")],
    ),
    ("Read(/docs/**)", [("read", "docs/a.md")], [("read", "/docs/a.md"), ("read", "src/docs/a.md")]),
    ("Read(//tmp/claude-abs-*)", [("read", "/tmp/claude-abs-1")], [("read", "tmp/claude-abs-1")]),
    ("Read(~/.aws/**)", [("read", "~/.aws/credentials")], [("read", ".aws/credentials")]),
    ("Edit(src/**)", [("edit", "src/a.py"), ("write", "src/x/b.py")], [("edit", "test/a.py"), ("read", "src/a.py")]),
    (
        "Edit(/src/**/*.ts)",
        [("edit", "src/a/b.ts"), ("write", "src/c.ts")],
        [("edit", "src/a/b.js"), ("edit", "lib/src/a.ts")],
    ),
    ("Write(*.lock)", [("write", "package.lock"), ("edit", "sub/poetry.lock")], [("write", "lock.txt")]),
    ("WebFetch", [("fetch", "https://example.com/")], [("bash", "ls")]),
    (
        "WebFetch(domain:example.com)",
        [("fetch", "https://example.com/a"), ("fetch", "https://docs.example.com/")],
        [("fetch", "https://example.org/"), ("fetch", "https://notexample.com/")],
    ),
    ("mcp__github", [("mcp", "")], [("mcp_other", "")]),
    ("mcp__github__*", [("mcp", "")], [("mcp_other", "")]),
    ("mcp__github__create_issue", [("mcp", "")], [("mcp_other", "")]),
]


@pytest.fixture
def place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    ws = tmp_path / "ws"
    ws.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(home / ".claude"))
    kc = tmp_path / "kc"
    kc.mkdir()
    return {"ws": ws, "home": home, "kc": kc}


def _decide(place: dict[str, Any], rules: Rules, key: str, value: str, mode: str = "default") -> str:
    tool = TOOLS[key]
    args = {ARG[key]: value} if key in ARG else {}
    if key == "write":
        args["content"] = "x"
    policy = Policy(rules, kimicode_home=place["kc"], user_home=place["home"], workspace=place["ws"])
    return decide(tool, args, mode, ToolContext(workspace=place["ws"]), policy).verdict


@pytest.mark.parametrize(("rule", "match", "not_match"), CASES, ids=[c[0] for c in CASES])
def test_each_rule_form_decides_as_claude_code_documents(
    place: dict[str, Any], rule: str, match: list[tuple[str, str]], not_match: list[tuple[str, str]]
) -> None:
    parsed = parse_claude_rule(rule, "settings.json: permissions.deny")
    rules = Rules(deny=(parsed,))
    for key, value in match:
        assert _decide(place, rules, key, value) == "deny", f"{rule} should apply to {key} {value!r}"
    for key, value in not_match:
        assert _decide(place, rules, key, value) != "deny", f"{rule} should not apply to {key} {value!r}"


@pytest.mark.parametrize(
    ("rule", "command", "verdict"),
    [
        ("Bash(pytest:*)", "pytest -q tests", "allow"),
        ("Bash(make test)", "make test", "allow"),
        ("Bash(make test)", "make test && make deploy", "ask"),
        ("Bash(npm run *)", "npm run lint", "allow"),
    ],
)
def test_allow_rules_run_without_asking(place: dict[str, Any], rule: str, command: str, verdict: str) -> None:
    rules = Rules(allow=(parse_claude_rule(rule),))
    assert _decide(place, rules, "bash", command) == verdict


@pytest.mark.parametrize(
    ("rule", "why"),
    [
        ("Skill(release)", "one skill"),
        ("Agent(reviewer)", "one subagent"),
        ("NotebookRead(x)", "no tool"),
        ("PowerShell(Get-Item *)", "no tool"),
        ("mcp__github(x)", "no specifier"),
        ("Bash(", "syntax"),
    ],
)
def test_rules_kimicode_cannot_apply_are_refused_with_the_reason(rule: str, why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        parse_claude_rule(rule, "f")


def _settings_file(path: Path, perms: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"permissions": perms}))


def test_user_project_and_local_files_join_and_name_their_file(place: dict[str, Any]) -> None:
    ws, home = place["ws"], place["home"]
    _settings_file(
        home / ".claude" / "settings.json",
        {"allow": ["Bash(pytest:*)"], "deny": ["Bash(curl:*)"], "defaultMode": "acceptEdits"},
    )
    _settings_file(ws / ".claude" / "settings.json", {"allow": ["Bash(touch:*)"], "ask": ["Bash(git push:*)"]})
    _settings_file(ws / ".claude" / "settings.local.json", {"deny": ["Read(./.env)", "Skill(x)"]})
    trusted = claude_rules(ws, trusted=True)
    assert [r.raw for r in trusted.rules.allow] == ["Bash(pytest:*)", "Bash(touch:*)"]
    assert [r.raw for r in trusted.rules.deny] == ["Bash(curl:*)", "Read(./.env)"]
    assert trusted.rules.deny[0].source == "~/.claude/settings.json: permissions.deny"
    assert trusted.rules.deny[1].source.endswith("ws/.claude/settings.local.json: permissions.deny")
    assert any("Skill(x)" in u and "not used" in u for u in trusted.unused)
    assert any("defaultMode" in u and "--permission-mode" in u for u in trusted.unused)
    untrusted = claude_rules(ws, trusted=False)  # the project may restrict, not loosen
    assert [r.raw for r in untrusted.rules.allow] == ["Bash(pytest:*)"]
    assert [r.raw for r in untrusted.rules.deny] == ["Bash(curl:*)", "Read(./.env)"]
    assert [r.raw for r in untrusted.rules.ask] == ["Bash(git push:*)"]
    assert len(untrusted.ignored) == 1 and "settings.json: permissions.allow ignored" in untrusted.ignored[0]


def test_session_rules_merge_claude_rules_with_kimicodes(place: dict[str, Any]) -> None:
    _settings_file(place["home"] / ".claude" / "settings.json", {"deny": ["Bash(curl:*)"]})
    ignored: list[str] = []
    rules = session_rules(Settings(), deny=["bash(wget*)"], ignored=ignored, claude_workspace=place["ws"])
    assert [r.raw for r in rules.deny] == ["bash(wget*)", "Bash(curl:*)"]
    hermetic = session_rules(Settings(), deny=["bash(wget*)"])
    assert [r.raw for r in hermetic.deny] == ["bash(wget*)"]


def test_a_broken_settings_file_is_reported_not_fatal(place: dict[str, Any]) -> None:
    path = place["home"] / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text("{not json")
    found = claude_rules(place["ws"], trusted=True)
    assert not found.rules and any("invalid JSON" in u for u in found.unused)
