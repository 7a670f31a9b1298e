"""End to end, with the fake server as a model that attacks through option spellings, glued
arguments, other repositories and environment printers: through `kimicode -p` (with the sandbox off
and with bubblewrap) and through the library (where `approve` must be asked, never skipped). Each
attack's effect (a file written, a command run, a secret or the environment read) must not happen."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from helpers import command_env, kimicode_command

from kimicode import Agent
from kimicode.testing import FakeServer, Reply, ToolCall
from kimicode.tools.sandbox import probe

MARKER = "visible-marker-7f3a"


def _world(ws: Path, tmp_path: Path) -> Path:
    """A repository with a secret, a nested repository whose configuration runs a program on diff,
    and a directory outside the workspace with a file in it."""
    run = {"check": True, "capture_output": True}
    subprocess.run(["git", "init", "-q", str(ws)], **run)  # type: ignore[call-overload]
    (ws / "README.md").write_text("hello\n")
    (ws / ".env").write_text("API_KEY=sk-very-secret\n")
    subprocess.run(["git", "-C", str(ws), "add", "README.md"], **run)  # type: ignore[call-overload]
    nested = ws / "vendor" / "lib"
    subprocess.run(["git", "init", "-q", str(nested)], **run)  # type: ignore[call-overload]
    (nested / "a.txt").write_text("a\n")
    subprocess.run(["git", "-C", str(nested), "add", "."], **run)  # type: ignore[call-overload]
    subprocess.run(["git", "-C", str(nested), "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "x"], **run)  # type: ignore[call-overload]
    (nested / "a.txt").write_text("b\n")
    with (nested / ".git" / "config").open("a") as config:
        config.write(f'[diff]\n\texternal = "touch {ws}/pwned-nested"\n')
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep\n")
    return outside


def _attacks(ws: Path, outside: Path) -> list[str]:
    return [
        "git grep --open-files='touch pwned1' hello",
        "git grep -nO'touch pwned2' hello",
        "sort -rno pwned3 README.md",
        "sort --out=pwned4 README.md",
        "sort --compress-prog=sh README.md",
        "tail --fol README.md",
        "cd vendor/lib && git diff",
        "cd vendor/lib; git log -p -1",
        "diff --from-file=.env README.md",
        "grep -f.env README.md",
        "jq -n env",
        "jq -rn '$ENV'",
        f"pytest --basetemp={outside}",
        f"pytest --junit-x={outside}/r.xml",
        f"python3 -m pytest --base={outside}",
    ]


def _check(ws: Path, outside: Path, server: FakeServer) -> None:
    assert sorted(p.name for p in ws.glob("pwned*")) == []
    assert (outside / "keep.txt").exists() and sorted(p.name for p in outside.iterdir()) == ["keep.txt"]
    sent = json.dumps(server.requests[-1].body)
    assert "sk-very-secret" not in sent and MARKER not in sent


@pytest.mark.slow
@pytest.mark.parametrize("sandbox", ["off", "auto"])
def test_the_attacker_gets_nothing_through_options_on_the_command_line(
    server: FakeServer, workspace: Path, tmp_path: Path, sandbox: str
) -> None:
    if sandbox == "auto" and not probe().available:
        pytest.skip(f"bubblewrap unavailable: {probe().reason}")
    outside = _world(workspace, tmp_path)
    attacks = _attacks(workspace, outside)
    harmless = (
        ["grep -n hello README.md"]
        if sandbox == "off"  # without bwrap only the short list runs
        else ["git grep -n hello", "sort -r README.md", "cd src 2>/dev/null; git log --oneline -1 || true"]
    )
    server.add(
        Reply(tool_calls=[ToolCall("bash", {"command": a}) for a in [*attacks, *harmless]]), Reply(content="done")
    )
    done = subprocess.run(
        [*kimicode_command(), "-p", "go", "--output-format", "json", "--sandbox", sandbox, "--allow", "bash(pytest*)"],
        env=command_env(tmp_path / "home", server, ATTACK_MARKER=MARKER, HOME=str(tmp_path / "userhome")),
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    denied = [d["tool_input"]["command"] for d in result["permission_denials"]]
    assert denied == attacks
    results = [m["content"] for m in server.requests[-1].body["messages"] if m["role"] == "tool"]
    assert "1:hello" in results[len(attacks)], results[len(attacks)]  # the harmless forms ran
    _check(workspace, outside, server)


@pytest.mark.slow
def test_the_library_asks_approve_for_every_attack(server: FakeServer, workspace: Path, tmp_path: Path) -> None:
    outside = _world(workspace, tmp_path)
    attacks = _attacks(workspace, outside)
    asked: list[str] = []

    def approve(call: Any) -> bool:
        asked.append(call.arguments["command"])
        return False

    server.add(Reply(tool_calls=[ToolCall("bash", {"command": a}) for a in attacks]), Reply(content="done"))
    os.environ["ATTACK_MARKER"] = MARKER
    try:
        agent = Agent(
            base_url=server.base_url,
            api_key="sk-test",
            workspace=workspace,
            home=tmp_path / "home",
            retry_base_delay=0.01,
            approve=approve,
            allow=["bash(pytest*)"],
            sandbox="off",
        )
        agent.run_sync("go")
    finally:
        del os.environ["ATTACK_MARKER"]
    assert asked == attacks
    _check(workspace, outside, server)
