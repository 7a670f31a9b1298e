"""The README's newcomer checklist runs as written on a fresh virtual environment (issue 23): clone, install,
first run (`kimicode doctor`), first task, undo, against the fake server. Two substitutions only, both for
a machine without network: the clone comes from this repository, and the new venv sees the machine's
packages (`--system-site-packages`) so that pip need not download kimicode's dependencies."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT

from kimicode.testing import FakeServer, Reply, ToolCall

pytestmark = pytest.mark.slow


def checklist() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## A newcomer's checklist", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.S)
    assert block is not None
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_the_checklist_has_the_five_steps() -> None:
    lines = checklist()
    assert lines[0].startswith("git clone ") and "pip install" in lines[1] and "-m venv" in lines[1]
    assert "kimicode doctor" in lines and lines[-1] == "kimicode undo"
    assert any(line.startswith("kimicode -p ") for line in lines)
    assert not any(re.match(r"^pip3? install", line) for line in lines)  # never into the system's Python


def test_the_checklist_runs_as_written(tmp_path: Path) -> None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.fail("the checklist test needs git and a git checkout of kimicode")
    lines = checklist()
    script = []
    for line in lines:
        line = re.sub(r"https://github\.com/OWNER/kimicode", str(ROOT), line)
        line = line.replace("-m venv kimicode-venv", "-m venv --system-site-packages kimicode-venv")
        line = line.replace("python3 -m venv", f"{sys.executable} -m venv")
        script.append(line)
    with FakeServer() as server:
        server.add(
            Reply(
                tool_calls=[ToolCall("edit_file", {"path": "calc.py", "old_string": "a - b", "new_string": "a + b"})]
            ),
            Reply(content="Fixed add()."),
        )
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("KIMI_", "MOONSHOT_", "OPENAI_", "KIMICODE_", "VIRTUAL_ENV"))
        }
        env.update(KIMICODE_HOME=str(tmp_path / "home"), KIMI_BASE_URL=server.base_url, HOME=str(tmp_path))
        done = subprocess.run(
            ["bash", "-euxc", "\n".join(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
        )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    calc = tmp_path / "demo" / "calc.py"
    assert calc.read_text() == "def add(a, b):\n    return a - b\n"  # the task fixed it, undo put it back
    assert "Fixed add()." in done.stdout
    assert "kimicode" in (tmp_path / "kimicode-venv" / "bin" / "kimicode").read_text()  # installed there
    assert "undid turn 1" in done.stderr and "restored calc.py" in done.stdout
    assert len(server.requests) == 2  # the task's two steps; doctor and undo need no model
