"""Explorations under faults: a full disk while branches are created; permissions no wider than the parent's."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from branches_helpers import GOOD, VERIFY, Router, git_project, write_turn
from helpers import ROOT, git, tiny_fs_problem

from kimicode import Agent
from kimicode.testing import FakeServer, Reply, ToolCall

pytestmark = pytest.mark.prepush  # the branches process (a worker), its overlay and sandbox: the pre-push tier

FULL_DISK = r"""
import asyncio, json, os, sys
from pathlib import Path
from kimicode import Agent

ws, home, url = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
tiny = home / "worktrees"
st = os.statvfs(tiny)
with open(tiny / "filler", "wb") as fh:  # room for one branch's checkout (about 1.2 MB), not two
    fh.write(b"\0" * max(0, st.f_bavail * st.f_frsize - 1_800_000))
agent = Agent(base_url=url, api_key="k", model="kimi-k3", workspace=ws, home=home,
              permission_mode="accept-edits", retry_base_delay=0.01)
async def go():
    try:
        return await agent.explore("fix add", n=2, verify=sys.argv[4], apply=False)
    finally:
        await agent.aclose()
ex = asyncio.run(go())
print(json.dumps({"branches": [b.to_dict() for b in ex.branches], "status": ex.status,
                  "left": sorted(p.name for p in tiny.iterdir())}))
"""


def test_a_full_disk_while_creating_branches_fails_that_branch_cleanly(
    server: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    why = tiny_fs_problem(tmp_path)
    if why:
        pytest.skip(why)
    git_project(workspace)
    (workspace / "data.bin").write_bytes(os.urandom(1_200_000))  # each checkout needs 1.2 MB
    git(workspace, "add", "-A")
    git(workspace, "commit", "-qm", "data")
    home = tmp_path / "home"
    (home / "worktrees").mkdir(parents=True)
    Router(server, {"1": write_turn(GOOD), "2": write_turn(GOOD)})
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "KIMICODE_BRANCH_OVERLAY": "0",
    }  # worktrees: each needs a checkout (overlays: test_branches_overlay)
    proc = subprocess.run(
        [
            "bwrap",
            "--dev-bind",
            "/",
            "/",
            "--size",
            str(4 << 20),
            "--tmpfs",
            str(home / "worktrees"),
            sys.executable,
            "-c",
            FULL_DISK,
            str(workspace),
            str(home),
            server.base_url,
            VERIFY,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    states = {b["k"]: (b["status"], b["error"]) for b in out["branches"]}
    assert states[1][0] == "verified", out["branches"][0]
    assert states[2][0] == "error" and "is full" in str(states[2][1])
    assert out["status"] == "done"
    assert out["left"] == ["branch-" + out["branches"][0]["tree"]["branch"].split("branch-", 1)[1], "filler"]
    # nothing of the failed branch is left in the repository: no branch, no worktree entry
    branches = git(workspace, "branch", "--list", "kimicode/*")
    assert branches.count("kimicode/branch-") == 1 and branches.strip().endswith("-1")
    assert git(workspace, "worktree", "list", "--porcelain").count("worktree ") == 2


MakeAgent = Callable[..., Agent]


def test_a_branch_is_confined_like_its_parent(
    server: FakeServer, make_agent: MakeAgent, workspace: Path, tmp_path: Path
) -> None:
    git_project(workspace)
    outside = tmp_path / "outside.txt"
    parent = make_agent(permission_mode="accept-edits", sandbox="workspace-write")
    Router(
        server,
        {
            "1": [
                Reply(tool_calls=[ToolCall("write_file", {"path": str(workspace / "app.py"), "content": "pwned"})]),
                Reply(tool_calls=[ToolCall("bash", {"command": f"echo pwned > {outside}"})]),
                Reply(tool_calls=[ToolCall("bash", {"command": "rm -rf ~/.ssh"})]),
                Reply(content="tried"),
            ]
        },
    )

    async def go() -> Any:
        try:
            return await parent.explore("fix add", n=1, verify=VERIFY, apply=False)
        finally:
            await parent.aclose()

    ex = asyncio.run(go())
    b = ex.branches[0]
    assert (workspace / "app.py").read_text() != "pwned"  # the parent's tree is outside the branch's workspace
    assert not outside.exists()
    child = Agent.resume(str(b.session_id), home=tmp_path / "home", base_url=server.base_url, api_key="k")
    assert child.permission_mode in ("default", "accept-edits")
    assert child.workspace == Path(str(b.workspace))
    from kimicode.session.store import load_session

    results = [m["content"] for m in load_session(tmp_path / "home", str(b.session_id)).messages if m["role"] == "tool"]
    assert "Permission denied" in results[0]


@pytest.mark.parametrize(
    "tree",
    [
        {"kind": "copy", "root": "{victim}"},
        {"kind": "worktree", "root": "{home}/worktrees/branch-x-1", "repo": "{ws}", "branch": "main"},
        {"kind": "copy", "root": "{home}/worktrees/../../victim"},
        {"kind": "copy", "root": "relative/worktrees/branch-x"},
    ],
)
def test_a_damaged_record_cannot_point_removal_elsewhere(tree: dict[str, str], workspace: Path, tmp_path: Path) -> None:
    from kimicode.branches.trees import remove_branch_tree
    from kimicode.checkpoints.store import CheckpointError

    git_project(workspace)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("mine")
    (tmp_path / "home" / "worktrees" / "branch-x-1").mkdir(parents=True)
    filled = {k: v.format(victim=victim, home=tmp_path / "home", ws=workspace) for k, v in tree.items()}
    with pytest.raises(CheckpointError, match="refusing"):
        remove_branch_tree(filled)
    assert (victim / "keep.txt").read_text() == "mine"
    assert "main" in git(workspace, "branch", "--list", "main")
