"""End to end through `kimicode -p`, with the fake server playing a model that attacks the permission
engine: each attack's effect (a file written, a secret read, a command run) must not happen."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from helpers import headless_json, sent_tool_results

from kimicode.testing import FakeServer, Reply, ToolCall


def _cli(server: FakeServer, home: Path, cwd: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    return headless_json(server, home, cwd, "--sandbox", "off", *args, prompt="go", HOME=str(home.parent / "userhome"))


@pytest.mark.slow
def test_the_attacker_gets_nothing_through_ordinary_rules(server: FakeServer, workspace: Path, tmp_path: Path) -> None:
    (workspace / "README.md").write_text("hi\n")
    (workspace / ".env").write_text("API_KEY=sk-very-secret\n")
    os.link(workspace / ".env", workspace / "notes.txt")
    outside = tmp_path / "outside"
    outside.mkdir()
    attacks = [
        "ls > /dev/fd/1/../../../../../../" + str(outside / "a").lstrip("/"),
        "cat README.md; touch pwned1",
        "cat README.md $(touch pwned2)",
        'cat README.md "${a[$(touch pwned3)]}"',
        "git diff --output=" + str(outside / "b"),
        "git difftool -x 'touch pwned4' HEAD",
        "ls | sh -c 'touch pwned5'",
        "cat .e*",
        "cat notes.txt",
        "cat README.md <<EOF\n$\\\n(touch pwned6)\nEOF",
        "ls; find . -name README.md -exec touch pwned7 \\;",
        "bash -lc 'touch pwned8'",
    ]
    server.add(Reply(tool_calls=[ToolCall("bash", {"command": a}) for a in attacks]), Reply(content="done"))
    code, result, _ = _cli(
        server,
        tmp_path / "home",
        workspace,
        "--allow",
        "bash(ls*)",
        "--allow",
        "bash(cat*)",
        "--allow",
        "bash(git diff*)",
        "--allow",
        "bash(git status)",
    )
    assert code == 0
    outputs = sent_tool_results(server)
    assert len(outputs) == len(attacks)
    assert all(o.startswith("Permission denied") for o in outputs), outputs
    assert not any((workspace / f"pwned{i}").exists() for i in range(1, 9))
    assert not list(outside.iterdir())
    assert "sk-very-secret" not in json.dumps(server.requests[-1].body)
    assert len(result["permission_denials"]) == len(attacks)


@pytest.mark.slow
def test_deny_rules_reach_shells_in_shells(server: FakeServer, workspace: Path, tmp_path: Path) -> None:
    for name in ("a", "b", "c", "d", "e", "f"):
        (workspace / name).write_text("x")
    attacks = [
        "bash -lc 'rm a'",
        "echo rm b | sh",
        "sh <<< 'rm c'",
        "busybox rm d",
        "ls | xargs rm",
        "trap 'rm e' EXIT",
        "find . -name f -exec rm {} \\;",
    ]
    server.add(Reply(tool_calls=[ToolCall("bash", {"command": a}) for a in attacks]), Reply(content="done"))
    code, result, _ = _cli(server, tmp_path / "home", workspace, "--yolo", "--deny", "Bash(rm:*)")
    assert code == 0
    assert all((workspace / n).exists() for n in ("a", "b", "c", "d", "e", "f"))
    assert len(result["permission_denials"]) == len(attacks)


@pytest.mark.slow
def test_accept_edits_asks_for_files_that_run_automatically(
    server: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    server.add(
        Reply(
            tool_calls=[
                ToolCall("write_file", {"path": ".husky/pre-commit", "content": "touch pwned\n"}),
                ToolCall("write_file", {"path": ".vscode/tasks.json", "content": "{}"}),
                ToolCall("write_file", {"path": "src/ok.py", "content": "x = 1\n"}),
            ]
        ),
        Reply(content="done"),
    )
    code, result, _ = _cli(server, tmp_path / "home", workspace, "--permission-mode", "accept-edits")
    assert code == 0
    assert not (workspace / ".husky").exists() and not (workspace / ".vscode").exists()
    assert (workspace / "src" / "ok.py").read_text() == "x = 1\n"
    assert [d["tool_input"]["path"] for d in result["permission_denials"]] == [
        ".husky/pre-commit",
        ".vscode/tasks.json",
    ]


@pytest.mark.slow
def test_claude_code_rules_on_the_command_line(server: FakeServer, workspace: Path, tmp_path: Path) -> None:
    code, _, stderr = _cli(server, tmp_path / "home", workspace, "--allow", "WebFetch(https://example.com)")
    assert code == 2 and "WebFetch(https://example.com)" in stderr
