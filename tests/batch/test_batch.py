"""kimicode.batch: isolated workspaces and homes, result lines, bad lines, retries, the shared 429 gate."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from kimicode.batch import SharedRateLimiter, Task, TaskError, TaskResult, parse_lines, run
from kimicode.batch.results import ResultWriter, finished_ids, read_results
from kimicode.batch.workspace import task_dir_name
from kimicode.prompts import user_words
from kimicode.testing import ErrorReply, FakeServer, RecordedRequest, Reply, ToolCall


def prompt_of(req: RecordedRequest) -> str:
    """The first user message of a request (says which task sent it)."""
    for msg in req.body["messages"]:
        if msg["role"] == "user":
            return user_words(str(msg["content"]))  # kimicode's notes (the permission mode) open it
    return ""


def collect(tasks: list[Any], server: FakeServer, tmp_path: Path, **kw: Any) -> dict[str, TaskResult]:
    async def go() -> dict[str, TaskResult]:
        out: dict[str, TaskResult] = {}
        opts: dict[str, Any] = {
            "base_url": server.base_url,
            "api_key": "sk-test",
            "model": "kimi-k3",
            "root": tmp_path / "batch",
            "retry_base_delay": 0.01,
        }
        opts.update(kw)
        async for r in run(tasks, **opts):
            assert r.id not in out
            out[r.id] = r
        return out

    return asyncio.run(go())


def writer_script(req: RecordedRequest) -> Reply:
    """Each task writes `<prompt>.txt` then answers `done <prompt>`."""
    p = prompt_of(req)
    if req.body["messages"][-1]["role"] == "user":
        return Reply(tool_calls=[ToolCall("write_file", {"path": f"{p}.txt", "content": p})])
    return Reply(content=f"done {p}")


def test_tasks_run_isolated_copied_workspaces_and_homes(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "keep.txt").write_text("original")
    tasks = [{"id": f"t{i}", "prompt": f"p{i}", "workspace": str(src)} for i in range(4)]
    with FakeServer([writer_script] * 8) as server:
        results = collect(tasks, server, tmp_path, concurrency=3)
    assert set(results) == {"t0", "t1", "t2", "t3"}
    assert (src / "keep.txt").read_text() == "original" and sorted(p.name for p in src.iterdir()) == ["keep.txt"]
    workspaces = {r.workspace for r in results.values()}
    logs = {r.session_log for r in results.values()}
    assert len(workspaces) == 4 and len(logs) == 4
    for i in range(4):
        r = results[f"t{i}"]
        assert r.status == "success" and r.result == f"done p{i}"
        assert r.changed_files == [f"p{i}.txt"]  # only its own file: no other task wrote here
        ws = Path(str(r.workspace))
        assert (ws / "keep.txt").read_text() == "original"
        log = Path(str(r.session_log))
        assert log.exists() and log.is_relative_to(tmp_path / "batch")
        assert r.usage["prompt_tokens"] > 0 and r.num_turns == 2


def test_in_place_workspace_is_used_as_is(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    with FakeServer([writer_script] * 2) as server:
        results = collect([{"id": "a", "prompt": "x", "workspace": str(src), "in_place": True}], server, tmp_path)
    assert results["a"].workspace == str(src.resolve())
    assert (src / "x.txt").read_text() == "x"


def _bare_repo(tmp_path: Path) -> tuple[Path, str, str]:
    work = tmp_path / "origin"
    work.mkdir()

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
            cwd=work,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()

    git("init", "-q", "-b", "main")
    (work / "f.txt").write_text("v1\n")
    git("add", ".")
    git("commit", "-qm", "one")
    first = git("rev-parse", "HEAD")
    (work / "f.txt").write_text("v2\n")
    git("commit", "-qam", "two")
    second = git("rev-parse", "HEAD")
    bare = tmp_path / "repo.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], check=True)
    return bare, first, second


def test_repo_and_ref_are_cloned_and_diff_reported(tmp_path: Path) -> None:
    bare, first, _ = _bare_repo(tmp_path)

    def edit(req: RecordedRequest) -> Reply:
        if req.body["messages"][-1]["role"] == "user":
            return Reply(tool_calls=[ToolCall("write_file", {"path": "f.txt", "content": "patched\n"})])
        return Reply(content="patched")

    tasks = [
        {"id": "old", "prompt": "fix", "repo": str(bare), "ref": first, "diff": True},
        {"id": "head", "prompt": "fix", "repo": str(bare)},
        {"id": "nope", "prompt": "fix", "repo": str(tmp_path / "missing.git")},
        {"id": "badref", "prompt": "fix", "repo": str(bare), "ref": "no-such-ref"},
    ]
    with FakeServer([edit] * 4) as server:
        results = collect(tasks, server, tmp_path, concurrency=2)
    old = results["old"]
    assert old.status == "success" and old.changed_files == ["f.txt"]
    assert old.diff is not None and "-v1" in old.diff and "+patched" in old.diff
    assert results["head"].diff is None and results["head"].changed_files == ["f.txt"]
    # a failed clone is that task's error, named, and never stops the others
    for bad in ("nope", "badref"):
        assert results[bad].status == "error" and results[bad].error_kind == "workspace"
        assert "git" in str(results[bad].error)


def test_bad_lines_are_reported_by_line_number() -> None:
    text = "\n".join(
        [
            '{"id": "ok1", "prompt": "a"}',
            "",
            "# a comment",
            "{not json",
            '{"id": "ok2", "prompt": "b", "timout": 5}',
            '["a list"]',
            '{"id": "ok1", "prompt": "again"}',
            '{"id": "../../etc", "prompt": "x"}',
            '{"id": "w", "prompt": "x", "workspace": "a", "repo": "b"}',
            '{"id": "m", "prompt": "x", "max_turns": 0}',
            '{"id": "e", "prompt": "   "}',
            '{"id": "t", "prompt": "x", "thinking": "huge"}',
            '{"id": "ok3", "prompt": "c", "allow": "bash(ls*)"}',
            '{"id": "ip1", "prompt": "c", "workspace": "shared", "in_place": true}',
            '{"id": "ip2", "prompt": "c", "workspace": "./shared/", "in_place": true}',
        ]
    )
    tasks, bad = parse_lines(text.splitlines(), base=Path("/srv/tasks"))
    assert [t.id for t in tasks] == ["ok1", "ok3", "ip1"] and tasks[1].allow == ("bash(ls*)",)
    assert tasks[2].workspace == "/srv/tasks/shared"
    lines = {b.line: str(b) for b in bad}
    assert sorted(lines) == [4, 5, 6, 7, 8, 9, 10, 11, 12, 15]
    assert "already used by line 14" in lines[15]
    assert "not valid JSON" in lines[4] and "timout" in lines[5] and "JSON object" in lines[6]
    assert "duplicate id 'ok1' (first on line 1)" in lines[7] and "id must be" in lines[8]
    assert "not both" in lines[9] and "max_turns" in lines[10] and "prompt" in lines[11]


def test_library_rejects_bad_tasks_before_running_anything(tmp_path: Path) -> None:
    async def go(tasks: list[Any], **kw: Any) -> None:
        async for _ in run(tasks, root=tmp_path, **kw):
            pass

    with pytest.raises(TaskError, match="duplicate"):
        asyncio.run(go([Task("a", "x"), Task("a", "y")]))
    with pytest.raises(TaskError, match="missing 'prompt'"):
        asyncio.run(go([{"id": "a"}]))
    with pytest.raises(TaskError, match="in place"):
        asyncio.run(
            go(
                [
                    Task("a", "x", workspace=str(tmp_path), in_place=True),
                    Task("b", "y", workspace=str(tmp_path) + "/.", in_place=True),
                ]
            )
        )
    with pytest.raises(ValueError, match="engine"):
        asyncio.run(go([], engine="spark"))
    with pytest.raises(ValueError, match="concurrency"):
        asyncio.run(go([Task("a", "x")], concurrency=0))


def test_task_dir_names_never_collide() -> None:
    assert task_dir_name("a/b") != task_dir_name("a_b")
    assert "/" not in task_dir_name("../../x") and not task_dir_name("..x").startswith("/")


def test_a_crashing_task_is_retried_then_recorded_without_stopping_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []

    import kimicode.batch.runner as runner

    real = runner.run_task

    async def flaky(task: Task, opts: Any, gate: Any = None, attempt: int = 1) -> TaskResult:
        if task.id == "crash":
            calls.append(attempt)
            raise RuntimeError("worker fell over")
        if task.id == "twice":
            calls.append(attempt)
            if attempt < 3:
                raise OSError("disk hiccup")
        return await real(task, opts, gate, attempt)

    import kimicode.batch.local as local

    monkeypatch.setattr(local, "run_task", flaky)
    with FakeServer([Reply(content="fine")] * 2) as server:
        results = collect([Task("crash", "x"), Task("twice", "y"), Task("ok", "z")], server, tmp_path, max_attempts=3)
    assert results["crash"].status == "crashed" and results["crash"].attempts == 3
    assert "worker fell over" in str(results["crash"].error)
    assert results["twice"].status == "success" and results["twice"].attempts == 3
    assert results["ok"].status == "success"


def test_timeout_and_budget_stop_a_task_with_their_own_status(tmp_path: Path) -> None:
    home = tmp_path / "userhome"
    home.mkdir()
    (home / "config.toml").write_text('[models."kimi-k3"]\nprices = { input = 1000.0, output = 1000.0 }\n')

    def loop(req: RecordedRequest) -> Reply:
        if prompt_of(req) == "slow":
            return Reply(content="late", first_delay=5)
        return Reply(
            tool_calls=[ToolCall("bash", {"command": "echo hi"})],
            usage={"prompt_tokens": 1000, "completion_tokens": 10, "total_tokens": 1010},
        )

    with FakeServer([loop] * 20) as server:
        results = collect(
            [Task("slow", "slow", timeout=0.5), Task("spend", "spend", budget_usd=2.5)],
            server,
            tmp_path,
            home=home,
            permission_mode="yolo",
        )
    assert results["slow"].status == "timeout" and "0.5s" in str(results["slow"].error)
    spend = results["spend"]
    assert spend.status == "budget" and spend.cost_usd is not None and spend.cost_usd > 2.5
    assert spend.num_turns <= 3  # stopped right after the step that passed the budget


def test_gate_holds_every_sharer_for_retry_after() -> None:
    async def go() -> list[float]:
        gate = SharedRateLimiter()
        t0 = time.monotonic()
        gate.throttled(0.3)
        gate.throttled(0.1)  # never shortens
        gate.throttled(-5)
        waits = await asyncio.gather(*(gate.wait() for _ in range(5)))
        assert waits == [None] * 5
        return [time.monotonic() - t0, gate.throttles]

    elapsed, throttles = asyncio.run(go())
    assert elapsed >= 0.29 and throttles == 3


@pytest.mark.prepush
def test_a_429_slows_every_task_honouring_retry_after(tmp_path: Path) -> None:
    stamps: dict[str, list[float]] = {"A": [], "B": []}
    limited: list[float] = []

    def script(req: RecordedRequest) -> Reply | ErrorReply:
        p = prompt_of(req)
        stamps[p].append(time.monotonic())
        if p == "A" and not limited:
            limited.append(time.monotonic())
            return ErrorReply(429, "rate limit reached", "rate_limit_error", headers={"Retry-After": "1"})
        if p == "B" and req.body["messages"][-1]["role"] == "user":  # B's first step is slow, then asks again
            return Reply(tool_calls=[ToolCall("bash", {"command": "true"})], first_delay=0.3)
        return Reply(content=f"ok {p}")

    with FakeServer([script] * 10) as server:
        results = collect([Task("a", "A"), Task("b", "B")], server, tmp_path, concurrency=2, permission_mode="yolo")
    assert results["a"].status == results["b"].status == "success"
    assert len(stamps["B"]) == 2
    # B never got a 429 itself, yet its next request waited for A's Retry-After
    assert stamps["B"][1] - limited[0] >= 0.95
    assert stamps["A"][1] - limited[0] >= 0.95


def test_results_file_resume_and_torn_lines(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    w = ResultWriter(path)
    w.write(TaskResult("a", "success"))
    w.write(TaskResult("b", "interrupted"))
    w.write(TaskResult("c", "error"))
    w.close()
    with path.open("a") as fh:
        fh.write('{"id": "d", "status": "succ')  # killed mid-line
    w = ResultWriter(path)
    w.write(TaskResult("e", "success"))
    w.close()
    results, unreadable = read_results(path)
    assert sorted(results) == ["a", "b", "c", "e"] and unreadable == 1
    assert finished_ids(results) == {"a", "c", "e"}
    assert finished_ids(results, retry_failed=True) == {"a", "e"}
    assert json.loads(path.read_text().splitlines()[-1])["id"] == "e"


def test_checkpoints_are_off_in_a_batch_unless_asked_for(tmp_path: Path) -> None:
    tasks = [{"id": "a", "prompt": "a"}]
    with FakeServer([writer_script] * 4) as server:
        off = collect(tasks, server, tmp_path / "off")
        on = collect(tasks, server, tmp_path / "on", checkpoints=True)
    assert off["a"].ok and on["a"].ok
    assert off["a"].changed_files == on["a"].changed_files == ["a.txt"]

    def stores(root: Path) -> list[Path]:
        return [p for p in (root / "batch" / "tasks").rglob("git") if p.is_dir() and (p / "HEAD").exists()]

    assert stores(tmp_path / "off") == []
    assert len(stores(tmp_path / "on")) == 1
