"""A real full disk: a tiny tmpfs (bubblewrap `--size`) holds the checkpoint store or the workspace.

Each scenario runs in one process inside its own mount namespace, so the tiny file system lives as
long as the scenario: the agent's turns are driven by the fake server of the test process (the network
is shared), and the script prints what it saw as JSON for the test to check.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import ROOT, bash_turn, tiny_fs_problem

from kimicode.testing import FakeServer

COMMON = r"""
import asyncio, json, os, sys
from pathlib import Path
from kimicode import Agent
from kimicode.checkpoints import CheckpointError

def fill(fs: Path, leave: int) -> None:
    st = os.statvfs(fs)
    with open(fs / "filler", "wb") as fh:
        fh.write(b"\0" * max(0, st.f_bavail * st.f_frsize - leave))

def free(fs: Path) -> None:
    (fs / "filler").unlink()

def make(ws: Path, home: Path, url: str) -> tuple[Agent, list[str]]:
    agent = Agent(base_url=url, api_key="k", model="kimi-k3", workspace=ws, home=home, permission_mode="yolo",
                  retry_base_delay=0.01)
    notices: list[str] = []
    agent.on_event = lambda ev: notices.append(ev.text) if type(ev).__name__ == "Notice" else None
    return agent, notices

def turn(agent: Agent, notices: list[str], prompt: str) -> dict:
    notices.clear()
    r = agent.run_sync(prompt)
    return {"ok": r.ok, "error": r.error, "checkpoint": r.checkpoint, "changes": r.changes, "notices": list(notices)}

def leftovers(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if p.name.startswith(("tmp_", ".kimicode-restore-")) or p.name.endswith(".lock")
                  or p.name == "restore.json")
"""

STORE_FULL = (
    COMMON
    + r"""
ws, home, url = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
tiny = home / "checkpoints"
agent, notices = make(ws, home, url)
out = {}
fill(tiny, 256 * 1024)
out["first"] = turn(agent, notices, "turn 1")
out["first_left"] = leftovers(tiny)
out["first_packs"] = [p.name for p in tiny.rglob("pack-*")]
free(tiny)
out["freed"] = turn(agent, notices, "turn 2")
(ws / "big.bin").write_bytes(os.urandom(2 << 20))  # the user adds a large file between turns
fill(tiny, 256 * 1024)
out["later"] = turn(agent, notices, "turn 3")
out["later_left"] = leftovers(tiny)
free(tiny)
out["after"] = turn(agent, notices, "turn 4")
store = agent.checkpoints.store
out["fsck"] = store.git("fsck", "--strict", "--no-dangling", check=False).decode()
out["stored"] = sorted(store.git("ls-tree", "-r", "--name-only", out["after"]["checkpoint"]).decode().split())
asyncio.run(agent.rewind(conversation=False))
out["t4_after_undo"] = (ws / "t4.txt").exists()
print(json.dumps(out))
"""
)

RESTORE_FULL = (
    COMMON
    + r"""
tiny, home, url = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
ws = tiny / "ws"
ws.mkdir()
original = os.urandom(1 << 20)
(ws / "a.bin").write_bytes(original)
(ws / "b.txt").write_text("original b\n")
agent, notices = make(ws, home, url)
out = {"turn": turn(agent, notices, "break things")}
fill(tiny, 128 * 1024)
def state() -> dict:
    return {p.name: (p.stat().st_size, p.read_bytes()[:20].hex()) for p in sorted(ws.iterdir())}
before = state()
try:
    asyncio.run(agent.rewind(conversation=False))
    out["error"] = None
except CheckpointError as exc:
    out["error"] = str(exc)
out["unchanged"] = state() == before
out["left"] = leftovers(ws) + leftovers(home / "checkpoints")
free(tiny)
asyncio.run(agent.rewind(conversation=False))
out["a_back"] = (ws / "a.bin").read_bytes() == original
out["b_back"] = (ws / "b.txt").read_text()
out["c_gone"] = not (ws / "c.txt").exists()
out["left_after"] = leftovers(ws) + leftovers(home / "checkpoints")
print(json.dumps(out))
"""
)


def run_tiny(tmp: Path, mount: Path, size_mb: int, script: str, *args: str) -> dict[str, Any]:
    why = tiny_fs_problem(tmp)
    if why:
        pytest.skip(why)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [
            "bwrap",
            "--dev-bind",
            "/",
            "/",
            "--size",
            str(size_mb << 20),
            "--tmpfs",
            str(mount),
            sys.executable,
            "-c",
            script,
            *args,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.slow
def test_a_full_store_disk_warns_the_turn_goes_on_and_the_next_checkpoint_works(
    server: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    for i in range(30):  # 3 MB that does not compress: a first checkpoint cannot fit in 256 KB
        (workspace / f"data{i}.bin").write_bytes(os.urandom(100_000))
    home = tmp_path / "home"
    (home / "checkpoints").mkdir(parents=True)
    for n in (1, 2, 3, 4):
        bash_turn(server, f"echo t{n} > t{n}.txt")
    out = run_tiny(tmp_path, home / "checkpoints", 8, STORE_FULL, str(workspace), str(home), server.base_url)

    for key in ("first", "later"):  # the first checkpoint, then a later one, run out of space
        t = out[key]
        assert t["ok"], t["error"]
        assert t["checkpoint"] is None and t["changes"] is None
        warned = [n for n in t["notices"] if "no checkpoint for this turn" in n]
        assert len(warned) == 1, t["notices"]
        assert "no space left on the disk holding the checkpoint store" in warned[0]
        assert "Traceback" not in warned[0] and "Errno" not in warned[0]
        assert out[f"{key}_left"] == []  # no temporary pack, object or lock left behind
    assert out["first_packs"] == []  # the half-written first pack is gone
    assert (workspace / "t1.txt").read_text() == "t1\n" and (workspace / "t3.txt").exists()

    assert out["freed"]["checkpoint"] and out["freed"]["changes"]["added"] == ["t2.txt"]
    assert out["after"]["checkpoint"] and out["after"]["changes"]["added"] == ["t4.txt"]
    assert out["after"]["notices"] == []
    assert {"big.bin", "t3.txt", "data0.bin"} <= set(out["stored"])  # what the failed one missed is in
    assert out["fsck"] == ""
    assert out["t4_after_undo"] is False  # and undo works from there


@pytest.mark.slow
def test_a_restore_that_runs_out_of_space_leaves_the_workspace_as_it_was(server: FakeServer, tmp_path: Path) -> None:
    tiny = tmp_path / "tiny"
    tiny.mkdir()
    bash_turn(server, ": > a.bin; echo changed > b.txt; echo new > c.txt")
    out = run_tiny(tmp_path, tiny, 4, RESTORE_FULL, str(tiny), str(tmp_path / "home"), server.base_url)
    assert out["turn"]["ok"] and out["turn"]["changes"] == {
        "added": ["c.txt"],
        "modified": ["a.bin", "b.txt"],
        "deleted": [],
    }
    assert out["error"] is not None
    assert "the disk is full" in out["error"] and "nothing in the workspace was changed" in out["error"]
    assert out["unchanged"], "a restore that ran out of space changed the workspace"
    assert out["left"] == []  # no staging directory, journal or lock left
    assert out["a_back"] and out["b_back"] == "original b\n" and out["c_gone"]
    assert out["left_after"] == []
