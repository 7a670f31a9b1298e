"""The evaluation-harness example of docs/batch.md runs as printed, against the fake server."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import ROOT

from kimicode.testing import FakeServer, RecordedRequest, Reply, ToolCall

DOC = ROOT / "docs" / "batch.md"


def test_evaluation_harness_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    section = DOC.read_text().split("## Library: an evaluation harness", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    source = code.group(1)
    assert len(source.strip().splitlines()) <= 30  # "a 20-line example": short enough to read at once

    def model(req: RecordedRequest) -> Reply:
        prompt = req.body["messages"][1]["content"]
        if req.body["messages"][-1]["role"] == "user":
            name = "add" if "add" in prompt else "mul"  # the second task gets it wrong
            return Reply(tool_calls=[ToolCall("write_file", {"path": "calc.py", "content": f"def {name}(a, b): ..."})])
        return Reply(content="done")

    with FakeServer([model] * 4) as server:
        monkeypatch.setenv("KIMI_API_KEY", "sk-test")
        monkeypatch.setenv("KIMI_BASE_URL", server.base_url)
        monkeypatch.chdir(tmp_path)
        exec(compile(source, str(DOC), "exec"), {"__name__": "__main__"})
    out = capsys.readouterr().out
    assert re.search(r"add\s+success\s+PASS", out) and re.search(r"sub\s+success\s+FAIL", out)
    assert out.strip().endswith("score: 50%")
    assert (tmp_path / "eval-runs" / "tasks").is_dir()
