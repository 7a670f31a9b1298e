"""The adversarial corpus (adversarial_corpus.py) run through `decide`: every hostile line asks or is
refused under the rules that admit its innocent form, in default, accept-edits and plan modes; every
deny-evasion line is refused or asks under `bash` + `bash(rm*)`; every hostile file-tool call asks or
is refused; and the innocent forms run, so the corpus can fail both ways."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from adversarial_corpus import (
    ALLOW,
    DENY_ALLOW,
    DENY_LINES,
    DENY_RULES,
    FILE_CALLS,
    HOSTILE,
    INNOCENT,
    INNOCENT_NO_RULES,
    READ_ONLY_ABUSE,
    WRITES_IN_WORKSPACE,
)

from kimicode.permissions.engine import decide
from kimicode.permissions.policy import Policy, load_rules
from kimicode.tools.base import Tool, ToolContext
from kimicode.tools.files import EDIT_FILE, READ_FILE, WRITE_FILE
from kimicode.tools.search import GLOB, GREP
from kimicode.tools.shell import BASH

MODES = ("default", "accept-edits", "plan")
TOOLS: dict[str, Tool] = {t.name: t for t in (READ_FILE, WRITE_FILE, EDIT_FILE, GREP, GLOB)}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A workspace with secrets under other names, a fake home and KIMICODE_HOME."""
    root = tmp_path_factory.mktemp("adversarial")
    ws, home, kc = root / "ws", root / "home", root / "kc"
    (ws / "src").mkdir(parents=True)
    (ws / ".git").mkdir()
    (ws / "README.md").write_text("hello\n")
    (ws / "src" / "app.py").write_text("print(1)\n")
    (ws / ".env").write_text("API_KEY=sk-secret\n")
    os.link(ws / ".env", ws / "notes.txt")  # a hard link to .env under an innocent name
    (ws / "envlink").symlink_to(ws / ".env")
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("KEY")
    (home / ".aws").mkdir()
    (home / ".aws" / "credentials").write_text("[default]\n")
    (ws / "sshlink").symlink_to(home / ".ssh")
    (root / "outside").mkdir()
    (ws / "outlink").symlink_to(root / "outside")
    (kc / "sessions").mkdir(parents=True)
    (kc / "sessions" / "other.jsonl").write_text(json.dumps({"v": 1, "workspace": "/elsewhere"}) + "\n")
    (kc / "config.toml").write_text("")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(home))
        mp.chdir(ws)
        yield {"ws": ws, "home": home, "kc": kc, "ctx": ToolContext(workspace=ws)}


def _fill(text: str, world: dict[str, Any]) -> str:
    return (
        text.replace("{ws}", str(world["ws"]))
        .replace("{home}", str(world["home"]))
        .replace("{kc}", str(world["kc"]))
        .replace("{pid}", str(os.getpid()))
    )


def _policy(world: dict[str, Any], allow: Sequence[str], deny: Sequence[str] = ()) -> Policy:
    rules = load_rules((), allow=allow, deny=deny)
    return Policy(rules, kimicode_home=world["kc"], user_home=world["home"], workspace=world["ws"])


def _bash(world: dict[str, Any], line: str, mode: str, allow: Sequence[str], deny: Sequence[str] = ()) -> str:
    decision = decide(BASH, {"command": _fill(line, world)}, mode, world["ctx"], _policy(world, allow, deny))
    return decision.verdict


def test_the_corpus_is_large_enough() -> None:
    assert len(HOSTILE) + len(DENY_LINES) + len(FILE_CALLS) + len(READ_ONLY_ABUSE) >= 300


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("line", HOSTILE)
def test_hostile_lines_ask_or_are_refused(world: dict[str, Any], line: str, mode: str) -> None:
    assert _bash(world, line, mode, ALLOW) in ("ask", "deny"), line


@pytest.mark.parametrize("line", WRITES_IN_WORKSPACE)
def test_writes_in_the_workspace_ask_except_in_accept_edits(world: dict[str, Any], line: str) -> None:
    assert _bash(world, line, "default", ALLOW) == "ask"
    assert _bash(world, line, "plan", ALLOW) in ("ask", "deny")
    assert _bash(world, line, "accept-edits", ALLOW) == "allow"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("line", INNOCENT)
def test_innocent_forms_run(world: dict[str, Any], line: str, mode: str) -> None:
    assert _bash(world, line, mode, ALLOW) == "allow", line


@pytest.mark.parametrize("mode", ["default", "plan"])
@pytest.mark.parametrize("line", INNOCENT_NO_RULES)
def test_read_only_commands_run_without_rules(world: dict[str, Any], line: str, mode: str) -> None:
    assert _bash(world, line, mode, []) == "allow", line


@pytest.mark.parametrize("mode", ["default", "plan"])
@pytest.mark.parametrize("line", READ_ONLY_ABUSE)
def test_the_read_only_allowance_is_not_abused(world: dict[str, Any], line: str, mode: str) -> None:
    assert _bash(world, line, mode, []) in ("ask", "deny"), line


@pytest.mark.parametrize("line", DENY_LINES)
def test_deny_reaches_everywhere(world: dict[str, Any], line: str) -> None:
    for mode in ("default", "yolo"):
        assert _bash(world, line, mode, DENY_ALLOW, DENY_RULES) in ("deny", "ask"), (line, mode)


@pytest.mark.parametrize("line", ["ls -la", "git status", "cat README.md | wc -l", "echo rm x"])
def test_deny_does_not_overreach(world: dict[str, Any], line: str) -> None:
    assert _bash(world, line, "default", DENY_ALLOW, DENY_RULES) == "allow"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("tool", "args"), FILE_CALLS, ids=[f"{t}-{json.dumps(a)}" for t, a in FILE_CALLS])
def test_hostile_file_calls_ask_or_are_refused(
    world: dict[str, Any], tool: str, args: dict[str, Any], mode: str
) -> None:
    filled = {k: _fill(v, world) if isinstance(v, str) else v for k, v in args.items()}
    allow = ["read", "edit(src/**)"]  # every ordinary read, and edits below src/
    decision = decide(TOOLS[tool], filled, mode, world["ctx"], _policy(world, allow))
    assert decision.verdict in ("ask", "deny"), (tool, filled, decision)


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("read_file", {"path": "README.md"}),
        ("grep", {"pattern": "x", "path": "src"}),
        ("glob", {"pattern": "*.py"}),
        ("write_file", {"path": "src/new.py", "content": "x"}),
        ("edit_file", {"path": "src/app.py", "old_string": "1", "new_string": "2"}),
    ],
)
def test_innocent_file_calls_run(world: dict[str, Any], tool: str, args: dict[str, Any]) -> None:
    decision = decide(TOOLS[tool], args, "accept-edits", world["ctx"], _policy(world, ["read", "edit(src/**)"]))
    assert decision.verdict == "allow", decision
