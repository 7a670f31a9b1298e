"""`kimicode batch --engine ray` end to end, on a local Ray of two CPUs (as CI runs it) started by the test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kimicode.testing import FakeServer, RecordedRequest, Reply, ToolCall

ray = pytest.importorskip("ray", reason='Ray is not installed (pip install "kimicode[ray]"); CI installs it')


@pytest.mark.slow
@pytest.mark.xdist_group("ray")  # one Ray at a time, on one xdist worker
def test_cli_runs_a_batch_on_ray_and_resumes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from kimicode.cli.app import app

    def script(req: RecordedRequest) -> Reply:
        prompt = next(m["content"] for m in req.body["messages"] if m["role"] == "user")
        if req.body["messages"][-1]["role"] == "user":
            return Reply(tool_calls=[ToolCall("write_file", {"path": f"{prompt}.txt", "content": prompt})])
        return Reply(content=f"done {prompt}")

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"t{i}", "prompt": f"p{i}"}) + "\n" for i in range(5)) + "{oops\n")
    out = tmp_path / "results.jsonl"
    with FakeServer([script] * 10) as server:
        # the workers read the endpoint and key from their environment, set before Ray starts them
        monkeypatch.setenv("KIMI_API_KEY", "sk-test")
        monkeypatch.setenv("KIMI_BASE_URL", server.base_url)
        monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # as the loopback cluster of test_branches_ray.py
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            logging_level="ERROR",
            _node_ip_address="127.0.0.1",
        )  # loopback only: the interface address would stay in this process
        try:
            args = [
                "batch",
                str(tasks),
                "-o",
                str(out),
                "--engine",
                "ray",
                "--concurrency",
                "4",
                "--permission-mode",
                "yolo",
            ]
            try:
                code = app(args=args, prog_name="kimicode", standalone_mode=False)
            except SystemExit as exc:
                code = exc.code
            first = capsys.readouterr()
            assert ray.cluster_resources()["CPU"] == 2
            try:  # a second run skips every finished task and asks the model nothing
                again = app(args=args, prog_name="kimicode", standalone_mode=False)
            except SystemExit as exc:
                again = exc.code
            second = capsys.readouterr()
        finally:
            ray.shutdown()
        assert len(server.requests) == 10
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["id"] for r in lines) == [f"t{i}" for i in range(5)]
    assert all(r["status"] == "success" and r["changed_files"] == [r["id"].replace("t", "p") + ".txt"] for r in lines)
    assert "line 6" in first.err
    assert int(code or 0) == int(again or 0)
    assert "5 task(s) already finished" in second.err
