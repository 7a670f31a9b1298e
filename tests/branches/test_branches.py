"""Parallel branches from the library: explore, verify, choose, apply, undo, continue byte for byte."""

from __future__ import annotations

import asyncio
import json
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from branches_helpers import (
    BUGGY,
    GOOD,
    GOOD_BIG,
    VERIFY,
    WRONG,
    Router,
    dot_git_state,
    explore_and_close,
    git_project,
    write_turn,
)
from helpers import git

from kimicode import Agent
from kimicode.agent.modes import mode_text
from kimicode.branches import all_records
from kimicode.prompts import NOTES_SEPARATOR
from kimicode.testing import FakeServer, Reply
from kimicode.testing.replies import ErrorReply

pytestmark = pytest.mark.prepush  # the branches process (a worker), its overlay and sandbox: the pre-push tier

MakeAgent = Callable[..., Agent]


def test_explore_applies_the_verified_branch_and_undo_takes_it_back(
    server: FakeServer, make_agent: MakeAgent, workspace: Path, tmp_path: Path
) -> None:
    git_project(workspace)
    state = dot_git_state(workspace)
    parent = make_agent(permission_mode="accept-edits")
    router = Router(
        server,
        {
            "parent": [Reply(content="hello"), Reply(content="next answer")],
            "1": write_turn(WRONG, "multiplied"),
            "2": write_turn(GOOD_BIG, "big fix"),
            "3": write_turn(GOOD, "small fix"),
        },
    )
    assert parent.run_sync("hi").ok

    async def go() -> Any:
        try:
            return await parent.explore("fix add", n=3, verify=VERIFY)
        finally:
            await parent.aclose()

    ex = asyncio.run(go())
    by_k = {b.k: b for b in ex.branches}
    assert [by_k[k].status for k in (1, 2, 3)] == ["failed", "verified", "verified"]
    assert by_k[1].verify_exit == 1 and by_k[2].verify_exit == 0
    assert ex.chosen is not None and ex.chosen.k == 3  # both verified: fewer changed lines wins
    assert ex.status == "done" and ex.applied is ex.chosen
    assert (workspace / "app.py").read_text() == GOOD
    assert (workspace / "notes.txt").read_text() == "uncommitted\n"  # untouched by the apply
    for b in ex.branches:  # the others are kept: each an overlay holding what it changed, nothing else
        assert b.tree is not None and b.tree["kind"] == "overlay"
        upper = Path(b.tree["root"]) / "upper"  # (the verify sandbox's placeholders copy .git up, empty)
        assert [p.name for p in upper.rglob("*") if not (p.is_dir() and not any(p.iterdir()))] == ["app.py"]
    assert git(workspace, "branch", "--list", "kimicode/*") == ""  # no git branch until a branch is opened
    opened = ex.open(by_k[1])  # a worktree on the documented branch, with the branch's files
    assert f"kimicode/branch-{parent.session_id}-1" in git(workspace, "branch", "--list", "kimicode/*")
    assert git(opened, "rev-parse", "--abbrev-ref", "HEAD").strip() == f"kimicode/branch-{parent.session_id}-1"
    assert (opened / "app.py").read_text() == WRONG
    assert (opened / "notes.txt").read_text() == "uncommitted\n"
    assert not (opened / "secret.env").exists()
    assert dot_git_state(workspace) == state  # the user's .git: only the documented branches were added
    # all branches shared the parent's prompt cache key
    keys = {r.body.get("prompt_cache_key") for rs in router.by_branch.values() for r in rs}
    assert keys == {parent.session_id}
    # record on disk, private
    path = tmp_path / "home" / "branches" / f"{ex.id}.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text())["chosen"] == ex.chosen.id

    # the session continues from the chosen branch's history, byte for byte
    resumed = Agent.resume(parent.session_id, home=tmp_path / "home", base_url=server.base_url, api_key="sk-test-x")
    assert resumed.run_sync("and now?").ok
    last_branch = router.by_branch["3"][-1].raw
    parent_next = router.by_branch["parent"][-1].raw
    sent = json.loads(last_branch)["messages"]
    wire = [json.dumps(m, ensure_ascii=False, separators=(",", ":")).encode() for m in sent]
    prefix = b"[" + b",".join(wire)
    assert prefix in parent_next
    after = json.loads(parent_next)["messages"]
    assert after[len(sent)]["role"] == "assistant" and after[len(sent)]["content"] == "small fix"
    # resumed in default (the parent ran in accept-edits): the change is told first, the user's words last
    assert after[len(sent) + 1] == {"role": "user", "content": mode_text("default") + NOTES_SEPARATOR + "and now?"}

    # kimicode undo takes the applied change back (files and conversation)
    from typer.testing import CliRunner

    from kimicode.cli.app import app

    out = CliRunner().invoke(
        app, ["undo", "--session", parent.session_id, "--files-only", "--force", "-C", str(workspace)]
    )
    assert out.exit_code == 0, out.output
    assert (workspace / "app.py").read_text() == BUGGY


def test_no_branch_verified_applies_nothing(server: FakeServer, make_agent: MakeAgent, workspace: Path) -> None:
    git_project(workspace)
    parent = make_agent(permission_mode="accept-edits")
    Router(server, {"1": write_turn(WRONG), "2": write_turn(WRONG)})
    ex = asyncio.run(explore_and_close(parent, n=2, verify=VERIFY))
    assert ex.status == "no_verified" and ex.chosen is None and ex.applied is None
    assert (workspace / "app.py").read_text() == BUGGY
    assert ex.to_dict()["cost_usd_per_verified"] is None
    assert [b["verified"] for b in ex.to_dict()["branches"]] == [False, False]


def test_verify_that_hangs_times_out_and_a_crashed_branch_does_not_stop_the_others(
    server: FakeServer, make_agent: MakeAgent, workspace: Path
) -> None:
    git_project(workspace)
    parent = make_agent(permission_mode="accept-edits")
    Router(
        server,
        {
            "1": write_turn(GOOD + "import time\ntime.sleep(60)\n"),  # importing app hangs: verify must time out
            "2": [ErrorReply(400, "the model rejected the request", "invalid_request_error")],  # its turn fails
            "3": write_turn(GOOD),
        },
    )
    ex = asyncio.run(explore_and_close(parent, n=3, verify=VERIFY, verify_timeout=1.5))
    by_k = {b.k: b for b in ex.branches}
    assert by_k[1].status == "failed" and by_k[1].verify_timed_out and by_k[1].verify_exit is None
    assert "timed out" in by_k[1].verify_output
    assert by_k[2].status == "error" and by_k[2].error
    assert by_k[3].status == "verified" and ex.chosen is by_k[3]
    assert (workspace / "app.py").read_text() == GOOD


def test_apply_never_leaves_the_workspace_and_records_are_listed(
    server: FakeServer, make_agent: MakeAgent, workspace: Path, tmp_path: Path
) -> None:
    (workspace / "app.py").write_text(BUGGY)  # not a git repository: branches are copies
    parent = make_agent(permission_mode="accept-edits")
    Router(server, {"1": write_turn(GOOD), "2": write_turn(GOOD_BIG)})
    ex = asyncio.run(explore_and_close(parent, n=2, verify=VERIFY, apply=False, workspace="copy"))
    assert ex.chosen is not None and ex.applied is None
    assert (workspace / "app.py").read_text() == BUGGY
    assert all(b.tree and b.tree["kind"] == "copy" for b in ex.branches)
    assert [r.id for r in all_records(tmp_path / "home")] == [ex.id]
    assert "+    return a + b" in ex.diff(ex.chosen)


def test_a_branch_store_borrows_the_parent_stores_objects(
    server: FakeServer, make_agent: MakeAgent, workspace: Path, tmp_path: Path
) -> None:
    git_project(workspace)
    for i in range(300):
        (workspace / f"m{i}.py").write_text(f"x = {i}\n" * 50)
    git(workspace, "add", "-A")
    git(workspace, "commit", "-qm", "more")
    (workspace / "m1.py").write_text("uncommitted\n")
    (workspace / "m2.py").unlink()
    (workspace / "link").symlink_to("app.py")
    parent = make_agent(permission_mode="accept-edits")
    Router(server, {"1": write_turn(GOOD)})
    ex = asyncio.run(explore_and_close(parent, n=1, verify=VERIFY, apply=False, workspace="worktree"))
    b = ex.branches[0]
    tree = Path(str(b.workspace))
    assert (tree / "m1.py").read_text() == "uncommitted\n" and not (tree / "m2.py").exists()
    assert (tree / "link").is_symlink() and (tree / "m3.py").read_text() == "x = 3\n" * 50
    assert set(git(tree, "status", "--porcelain").split()) >= {"m1.py", "m2.py", "app.py", "link"}
    from kimicode.checkpoints.store import CheckpointStore

    store = CheckpointStore(tmp_path / "home", tree)
    assert (store.git_dir / "objects" / "info" / "alternates").is_file()
    counts = dict(line.split(": ") for line in store.git("count-objects", "-v").decode().splitlines())
    assert int(counts["count"]) + int(counts["in-pack"]) < 20  # its own objects: the changes, not 300 files
    assert store.git("fsck", "--strict", "--no-dangling", check=False) == b""
    assert b.changes == {"added": [], "modified": ["app.py"], "deleted": []}
