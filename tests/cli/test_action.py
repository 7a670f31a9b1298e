"""action.yml: it declares the inputs and outputs docs/ci.md promises, and its run step works offline
against the fake server, writing GITHUB_OUTPUT and masking the key."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import ROOT

from kimicode.testing import FakeServer, RecordedRequest, Reply, ToolCall


def test_action_declares_its_inputs_outputs_and_steps() -> None:
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    inputs = action["inputs"]
    for name in ("prompt", "api-key", "model", "permission-mode", "allow", "deny", "max-turns", "max-budget-usd"):
        assert name in inputs, name
    assert inputs["prompt"]["required"] is True and inputs["api-key"]["required"] is True
    assert set(action["outputs"]) >= {"result", "session-id", "changed-files", "status", "cost-usd"}
    steps = action["runs"]["steps"]
    assert action["runs"]["using"] == "composite"
    run = next(s for s in steps if s.get("id") == "run")
    assert run["run"] == 'bash "$GITHUB_ACTION_PATH/action/run.sh"'
    # inputs reach the script through env only: no ${{ }} inside any run: text (script injection)
    for step in steps:
        assert "${{" not in step.get("run", ""), step
    assert any("upload-artifact" in s.get("uses", "") for s in steps)
    for output in action["outputs"].values():
        assert re.fullmatch(r"\$\{\{ steps\.run\.outputs\.[a-z-]+ \}\}", output["value"])


def parse_outputs(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    lines = iter(text.splitlines())
    for line in lines:
        name, delim = line.split("<<", 1)
        value: list[str] = []
        for item in lines:
            if item == delim:
                break
            value.append(item)
        out[name] = "\n".join(value)
    return out


@pytest.mark.slow
def test_run_step_writes_outputs_against_the_fake_server(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    (repo / "old.txt").write_text("x")

    def script(req: RecordedRequest) -> Reply:
        if req.body["messages"][-1]["role"] == "user":
            return Reply(tool_calls=[ToolCall("write_file", {"path": "fix.py", "content": "print(1)\n"})])
        return Reply(content="Fixed it.\nTwo lines; KIMICODE_x<<EOF tricks nothing.")

    output = tmp_path / "github_output"
    output.write_text("")
    key = "sk-test-ci-secret-123"
    with FakeServer([script, script]) as server:
        env = {
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
            "HOME": str(tmp_path),
            "GITHUB_OUTPUT": str(output),
            "RUNNER_TEMP": str(tmp_path / "runner"),
            "KC_PROMPT": "fix the test; $(touch pwned) `touch pwned2`",
            "KC_API_KEY": key,
            "KC_BASE_URL": server.base_url,
            "KC_PERMISSION_MODE": "accept-edits",
            "KC_ALLOW": "bash(pytest*)\n\nbash(ls*)",
            "KC_MAX_TURNS": "5",
        }
        done = subprocess.run(
            ["bash", str(ROOT / "action" / "run.sh")], cwd=repo, env=env, capture_output=True, text=True, timeout=60
        )
    assert done.returncode == 0, done.stderr
    assert f"::add-mask::{key}" in done.stdout
    outputs = parse_outputs(output.read_text())
    assert outputs["status"] == "success"
    assert outputs["result"] == "Fixed it.\nTwo lines; KIMICODE_x<<EOF tricks nothing."
    assert outputs["changed-files"] == "fix.py"  # old.txt was untracked before the run too
    log = Path(outputs["session-log"])
    assert log.exists() and outputs["session-id"] in log.name
    assert key not in output.read_text() and key not in log.read_text()
    assert not (repo / "pwned").exists() and not (repo / "pwned2").exists()
    assert server.requests[0].body["messages"][1]["content"].startswith("fix the test; $(touch pwned)")

    env["KC_API_KEY"] = ""
    done = subprocess.run(
        ["bash", str(ROOT / "action" / "run.sh")], cwd=repo, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "api-key input is empty" in done.stdout
