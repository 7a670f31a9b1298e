"""Headless explorations (`kimicode -p --branches N --verify CMD`) and `kimicode branches ...`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from branches_helpers import BUGGY, GOOD, GOOD_BIG, VERIFY, WRONG, Router, git_project, write_turn
from helpers import git
from typer.testing import CliRunner

from kimicode.cli.app import app
from kimicode.testing import FakeServer, Reply, ToolCall

pytestmark = pytest.mark.prepush  # the branches process (a worker), its overlay and sandbox: the pre-push tier


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KIMI_API_KEY", "sk-test-secret-key")
    monkeypatch.setenv("KIMICODE_RETRY_BASE_DELAY", "0.01")


def run_cli(server: FakeServer, ws: Path, *args: str) -> tuple[int, Any, str]:
    out = CliRunner().invoke(
        app,
        [
            "-p",
            "fix add",
            "--base-url",
            server.base_url,
            "-C",
            str(ws),
            "--permission-mode",
            "accept-edits",
            "--output-format",
            "json",
            *args,
        ],
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    return out.exit_code, json.loads(lines[-1]) if lines else None, out.stderr


def test_headless_applies_the_verified_branch_with_models_spread(
    env: None, server: FakeServer, workspace: Path
) -> None:
    git_project(workspace)
    router = Router(server, {"1": write_turn(WRONG), "2": write_turn(GOOD, "fixed it")})
    code, result, err = run_cli(
        server,
        workspace,
        "--branches",
        "2",
        "--verify",
        VERIFY,
        "--branch-models",
        "kimi-k3,other-model",
        "--branch-thinking",
        "low,high",
    )
    assert code == 0, err
    assert result["status"] == "success" and result["result"] == "fixed it"
    branches = {b["id"].rsplit("-", 1)[1]: b for b in result["branches"]}
    assert branches["1"]["verified"] is False and branches["1"]["verify_exit"] == 1
    assert branches["2"]["verified"] is True and branches["2"]["verify_exit"] == 0
    assert result["chosen"] == branches["2"]["id"] == result["applied"]
    assert result["changes"] == {"added": [], "modified": ["app.py"], "deleted": []}
    for b in result["branches"]:
        assert set(b) >= {"id", "status", "verified", "verify_exit", "changes", "cost_usd", "session_id", "workspace"}
    assert "cost_usd_total" in result and "cost_usd_per_verified" in result
    assert (workspace / "app.py").read_text() == GOOD
    assert {r.body["model"] for r in router.by_branch["2"]} == {"other-model"}
    assert {r.body["model"] for r in router.by_branch["1"]} == {"kimi-k3"}


def test_headless_no_branch_verified_has_its_own_exit_code(env: None, server: FakeServer, workspace: Path) -> None:
    git_project(workspace)
    Router(server, {"1": write_turn(WRONG), "2": write_turn(WRONG)})
    code, result, _ = run_cli(server, workspace, "--branches", "2", "--verify", VERIFY)
    assert code == 5
    assert result["status"] == "no_verified" and result["chosen"] is None and result["changes"] is None
    assert (workspace / "app.py").read_text() == BUGGY


def test_apply_never_then_branches_apply_show_and_rm(
    env: None, server: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    git_project(workspace)
    Router(server, {"1": write_turn(GOOD_BIG), "2": write_turn(GOOD)})
    code, result, err = run_cli(server, workspace, "--branches", "2", "--verify", VERIFY, "--apply", "never")
    assert code == 0, err
    assert result["applied"] is None and (workspace / "app.py").read_text() == BUGGY
    runner = CliRunner()
    listed = runner.invoke(app, ["branches", "list", "-C", str(workspace)])
    assert result["exploration"] in listed.stdout and "* " + result["chosen"] in listed.stdout
    other = next(b["id"] for b in result["branches"] if b["id"] != result["chosen"])
    shown = runner.invoke(app, ["branches", "show", other, "--no-color"])
    assert "total = a + b" in shown.stdout and "verified yes" in shown.stdout
    applied = runner.invoke(app, ["branches", "apply", other])
    assert applied.exit_code == 0, applied.stderr
    assert (workspace / "app.py").read_text() == GOOD_BIG
    again = runner.invoke(app, ["branches", "apply", result["chosen"]])
    assert again.exit_code == 1 and "applied already" in again.stderr
    undo = runner.invoke(app, ["undo", "--session", result["session_id"], "-C", str(workspace)])
    assert undo.exit_code == 0, undo.stderr
    assert (workspace / "app.py").read_text() == BUGGY
    tree = Path(next(b["workspace"] for b in result["branches"] if b["id"] == other))
    removed = runner.invoke(app, ["branches", "rm", other])
    assert removed.exit_code == 0 and not tree.exists()
    assert f"branch-{result['session_id']}" not in git(workspace, "branch", "--list", f"*-{other.rsplit('-', 1)[1]}")
    # sessions rm of the parent removes the remaining branch: worktree, git branch, session
    rm = runner.invoke(app, ["sessions", "rm", result["session_id"]])
    assert rm.exit_code == 0, rm.stderr
    assert "kimicode/" not in git(workspace, "branch", "--list")
    assert not list((tmp_path / "home" / "worktrees").iterdir())
    assert git(workspace, "worktree", "list").count("\n") == 1
    assert not (tmp_path / "home" / "branches").exists() or not list((tmp_path / "home" / "branches").iterdir())


def test_judge_model_chooses_among_verified_branches(env: None, server: FakeServer, workspace: Path) -> None:
    git_project(workspace)

    def verdict(req: Any) -> Reply:
        text = next(m["content"] for m in reversed(req.body["messages"]) if "### branch" in str(m.get("content")))
        heads = [line for line in text.splitlines() if line.startswith("### branch")]
        big = next(line.split()[2] for line in heads if "4 changed" in line)
        return Reply(content=f'I prefer the commented one.\n{{"branch": "{big}", "reason": "clearer"}}')

    Router(server, {"1": write_turn(GOOD), "2": write_turn(GOOD_BIG), "parent": [verdict]})
    code, result, err = run_cli(server, workspace, "--branches", "2", "--verify", VERIFY, "--judge-model", "judge-m")
    assert code == 0, err
    assert result["chosen"].endswith("-2"), result["chosen_reason"]
    assert "judged by judge-m: clearer" in result["chosen_reason"]
    assert (workspace / "app.py").read_text() == GOOD_BIG


def test_flags_are_checked(env: None, workspace: Path) -> None:
    runner = CliRunner()
    out = runner.invoke(app, ["-p", "x", "--verify", "true", "-C", str(workspace)])
    assert out.exit_code == 2 and "--verify goes with --branches N" in out.stderr
    out = runner.invoke(app, ["-p", "x", "--branches", "2", "--pick", "best", "-C", str(workspace)])
    assert out.exit_code == 2 and "--pick must be one of" in out.stderr
    out = runner.invoke(app, ["--branches", "2", "-C", str(workspace)])
    assert out.exit_code == 2


def _branch_processes(home: Path) -> list[int]:
    """Processes running overlay branches for KIMICODE_HOME `home`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"kimicode.branches.child" in cmdline and f"KIMICODE_HOME={home}".encode() in environ:
            found.append(int(pid))
    return found


@pytest.mark.slow
def test_ctrl_c_mid_exploration_then_resume(env: None, workspace: Path, tmp_path: Path) -> None:
    git_project(workspace)
    home = tmp_path / "home"
    with FakeServer() as server:
        slow = Reply(content="", first_delay=30)  # branch 2 is still waiting for the model at Ctrl-C
        router = Router(server, {"1": write_turn(GOOD), "2": [slow, *write_turn(GOOD_BIG)]})
        cmd = [
            sys.executable,
            "-m",
            "kimicode",
            "-p",
            "fix add",
            "--branches",
            "2",
            "--verify",
            VERIFY,
            "--base-url",
            server.base_url,
            "-C",
            str(workspace),
            "--permission-mode",
            "accept-edits",
            "--output-format",
            "json",
        ]
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "KIMICODE_HOME": str(home)},
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            recs = list((home / "branches").glob("*.json")) if (home / "branches").is_dir() else []
            states = [b["status"] for r in recs for b in json.loads(r.read_text())["branches"]]
            if "verified" in states and len(router.by_branch.get("2", [])) >= 1:
                break
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 130, err
        result = json.loads(out.splitlines()[-1])
        assert result["status"] == "interrupted" and "kimicode branches resume" in result["error"]
        rec = json.loads((home / "branches" / f"{result['exploration']}.json").read_text())
        states = {b["k"]: b["status"] for b in rec["branches"]}
        assert states == {1: "verified", 2: "interrupted"} and rec["status"] == "interrupted"
        assert {b["tree"]["kind"] for b in rec["branches"]} == {"overlay"}
        assert _branch_processes(home) == []  # the branches' process was stopped with kimicode
        assert (workspace / "app.py").read_text() == BUGGY
        resume = [
            sys.executable,
            "-m",
            "kimicode",
            "branches",
            "resume",
            result["exploration"],
            "--output-format",
            "json",
            "--permission-mode",
            "accept-edits",
        ]
        done = subprocess.run(
            resume,
            capture_output=True,
            text=True,
            timeout=60,
            env={
                **os.environ,
                "KIMICODE_HOME": str(home),
                "KIMICODE_RETRY_BASE_DELAY": "0.01",
                "KIMI_BASE_URL": server.base_url,
            },
        )
        assert done.returncode == 0, done.stderr
        final = json.loads(done.stdout.splitlines()[-1])
        by_k = {b["id"].rsplit("-", 1)[1]: b for b in final["branches"]}
        assert by_k["1"]["status"] == "verified" and by_k["2"]["status"] == "verified", by_k["2"]["error"]
        assert len(router.by_branch["1"]) == 2  # the finished branch was kept, not run again
        assert final["chosen"] == by_k["1"]["id"]  # fewer changed lines
        assert (workspace / "app.py").read_text() == GOOD


def test_costs_per_branch_per_verified_and_in_total(
    env: None, server: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text("[models.kimi-k3]\nprices = { input = 1.0, output = 2.0 }\n")
    git_project(workspace)
    Router(server, {"1": write_turn(WRONG), "2": write_turn(GOOD), "3": write_turn(GOOD_BIG)})
    code, result, err = run_cli(server, workspace, "--branches", "3", "--verify", VERIFY)
    assert code == 0, err
    costs = [b["cost_usd"] for b in result["branches"]]
    assert all(isinstance(c, float) and c > 0 for c in costs)
    assert result["cost_usd_total"] == pytest.approx(sum(costs), abs=1e-5)
    assert result["cost_usd_per_verified"] == pytest.approx(sum(costs) / 2, abs=1e-5)
    assert result["cost_usd"] == result["cost_usd_total"]


def test_headless_json_with_a_file_name_that_is_not_utf8(env: None, server: FakeServer, workspace: Path) -> None:
    """A branch that makes a file whose name is not UTF-8 (`caf\\xe9.txt`, Latin-1): the json result is still
    one valid line, the name escaped as the session log writes it, and the file is applied byte for byte."""
    git_project(workspace)
    make = Reply(tool_calls=[ToolCall("bash", {"command": "printf 'latin\\n' > \"$(printf 'caf\\351.txt')\""})])
    Router(server, {"1": [make, *write_turn(GOOD)], "2": write_turn(WRONG)})
    code, result, err = run_cli(server, workspace, "--branches", "2", "--verify", VERIFY, "--permission-mode", "yolo")
    assert code == 0, err
    assert result["applied"] is not None and result["changes"]["modified"] == ["app.py"]
    (added,) = result["changes"]["added"]
    assert os.fsencode(added) == b"caf\xe9.txt"
    assert (workspace / os.fsdecode(b"caf\xe9.txt")).read_bytes() == b"latin\n"
    assert (workspace / "app.py").read_text() == GOOD
