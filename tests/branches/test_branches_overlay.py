"""Overlay branches: a branch's workspace holds its changed files only, runs in its own namespace, and
cannot write below itself; the fallback to worktrees; a crash of the branches' process; attacks."""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from branches_helpers import BUGGY, GOOD, VERIFY, WRONG, Router, bash, explore_and_close, git, git_project, write_turn

from kimicode import Agent
from kimicode.branches.explore import resume_exploration
from kimicode.branches.manage import remove_exploration
from kimicode.branches.overlay import unavailable
from kimicode.branches.record import load_record
from kimicode.checkpoints.store import store_dir
from kimicode.errors import UsageError
from kimicode.testing import FakeServer, Reply, ToolCall
from kimicode.testing.replies import RecordedRequest

pytestmark = pytest.mark.prepush  # the branches process (a worker), its overlay and sandbox: the pre-push tier

MakeAgent = Callable[..., Agent]


@pytest.fixture(autouse=True)
def _needs_overlays(tmp_path: Path) -> None:
    why = unavailable(tmp_path / "probe-home", tmp_path / "probe-ws")
    if why is not None and os.environ.get("KIMICODE_BRANCH_OVERLAY") is None:
        pytest.fail(f"overlay branches are not available on this machine: {why}")


def digest(root: Path) -> dict[str, str]:
    """Every entry under `root` (the .git directory included): its type and content, or link target."""
    out: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            out[rel] = "-> " + os.readlink(path)
        elif path.is_file():
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            out[rel] = "dir"
    return out


def test_a_branch_holds_only_what_it_changed_and_nothing_below_it_is_written(
    server: FakeServer, make_agent: MakeAgent, workspace: Path
) -> None:
    git_project(workspace)
    for i in range(200):
        (workspace / "pkg" / f"m{i}.py").parent.mkdir(exist_ok=True)
        (workspace / "pkg" / f"m{i}.py").write_text(f"x = {i}\n" * 100)
    git(workspace, "add", "pkg")
    git(workspace, "commit", "-qm", "more")
    before = digest(workspace)
    parent = make_agent(permission_mode="yolo", sandbox="workspace-write")
    Router(
        server,
        {
            "1": [
                bash(
                    "rm notes.txt; echo c > c.txt && git add c.txt && git -c user.name=b -c user.email=b@x commit -qm "
                    "in-branch; echo '[x]' >> .git/config; cat secret.env > seen.txt; git log --format=%s -1 > log.txt"
                ),
                *write_turn(GOOD),
            ],
            "2": write_turn(WRONG),
        },
    )
    ex = asyncio.run(explore_and_close(parent, n=2, verify=VERIFY, apply=False))
    one, two = sorted(ex.branches, key=lambda b: b.k)
    assert (one.status, two.status) == ("verified", "failed")  # verify ran on each branch's merged view
    assert digest(workspace) == before  # the user's files and .git: not a byte changed, no branch added
    assert one.changes == {"added": ["c.txt", "log.txt", "seen.txt"], "modified": ["app.py"], "deleted": ["notes.txt"]}
    upper = Path(str(one.tree and one.tree["root"])) / "upper"
    files = {str(p.relative_to(upper)) for p in upper.rglob("*") if not p.is_dir()}
    mine = {"app.py", "notes.txt", "seen.txt", "log.txt", "c.txt"}
    assert mine <= files
    assert not any(f.startswith("pkg/") for f in files)  # the 200 unchanged files are not in the branch
    assert all(f.startswith(".git/") for f in files - mine)  # its commit: in its own copy of .git's files
    whiteout = os.lstat(upper / "notes.txt")  # the deletion: a 0/0 character device
    assert stat.S_ISCHR(whiteout.st_mode) and whiteout.st_rdev == 0
    upper_two = Path(str(two.tree and two.tree["root"])) / "upper"
    # the verify command's sandbox made (and removed) read-only placeholders in .git (docs/permissions.md,
    # "Persistence"), which copies that folder up, empty: nothing in it
    assert [p.name for p in upper_two.rglob("*") if not (p.is_dir() and not any(p.iterdir()))] == ["app.py"]
    opened = ex.open(one)  # git works inside a branch: its commit is in its own .git, seen when opened
    assert (opened / "seen.txt").read_text() == "TOKEN=1\n"  # ignored files are there (the live workspace)
    assert (opened / "log.txt").read_text() == "in-branch\n"
    assert not (opened / "notes.txt").exists() and (opened / "app.py").read_text() == GOOD
    base = Path(str(one.tree and one.tree["base"])) / "tree"
    assert (base / "app.py").read_text() == BUGGY and (base / "notes.txt").is_file()
    assert not (Path(str(one.workspace)) / "app.py").exists()  # outside the branches' process: empty
    # removing the exploration takes everything back: directories, the opened worktree and its git branch
    home = Path(str(parent.home))
    stores = {p.name for p in (home / "checkpoints").iterdir()}
    assert remove_exploration(home, load_record(home, ex.id))[-1] == f"removed exploration {ex.id}"
    assert list((home / "worktrees").iterdir()) == []
    assert git(workspace, "branch", "--list", "kimicode/*") == ""
    # only the workspace's own worktree is left (not "'open' absent": xdist's temp paths contain "popen-gw1")
    assert len(git(workspace, "worktree", "list").splitlines()) == 1, git(workspace, "worktree", "list")
    assert {p.name for p in (home / "checkpoints").iterdir()} == stores - {
        store_dir(home.resolve(), p).name for p in (base, Path(str(one.workspace)), Path(str(two.workspace)), opened)
    }
    after = digest(workspace)
    packed = workspace / ".git" / "packed-refs"  # `git branch -D` leaves this file, with no ref in it
    assert {k: v for k, v in after.items() if k != ".git/packed-refs"} == before
    assert not packed.exists() or "kimicode" not in packed.read_text()


def test_an_overlay_branch_outside_git(server: FakeServer, make_agent: MakeAgent, workspace: Path) -> None:
    (workspace / "app.py").write_text(BUGGY)
    parent = make_agent(permission_mode="accept-edits")
    Router(server, {"1": write_turn(GOOD)})
    ex = asyncio.run(explore_and_close(parent, n=1, verify=VERIFY))
    b = ex.branches[0]
    assert b.tree is not None and b.tree["kind"] == "overlay" and b.tree["repo"] is None
    assert ex.applied is b and (workspace / "app.py").read_text() == GOOD
    from typer.testing import CliRunner

    from kimicode.cli.app import app

    env = {"KIMICODE_HOME": str(parent.home)}
    shown = CliRunner().invoke(app, ["branches", "show", b.id, "--no-diff"], env=env)
    assert shown.exit_code == 0 and f"an overlay: `kimicode branches open {b.id}`" in shown.output
    out = CliRunner().invoke(app, ["branches", "open", b.id], env=env)
    assert out.exit_code == 0, out.output
    opened = Path(out.output.strip())  # a plain directory holding the branch's files
    assert (opened / "app.py").read_text() == GOOD and not (opened / ".git").exists()
    assert ex.open(b) == opened  # made once


def test_the_fallback_to_worktrees_says_why(
    server: FakeServer, make_agent: MakeAgent, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    git_project(workspace)
    monkeypatch.setenv("KIMICODE_BRANCH_OVERLAY", "0")
    parent = make_agent(permission_mode="accept-edits")
    Router(server, {"1": write_turn(GOOD)})
    ex = asyncio.run(explore_and_close(parent, n=1, verify=VERIFY))
    b = ex.branches[0]
    assert b.tree is not None and b.tree["kind"] == "worktree" and (Path(str(b.workspace)) / "app.py").is_file()
    assert ex.status == "done" and (workspace / "app.py").read_text() == GOOD
    notice = ex.to_dict()["notice"]
    assert notice.startswith("each branch is a full checkout") and "KIMICODE_BRANCH_OVERLAY=0" in notice
    with pytest.raises(UsageError, match="cannot be overlays here: KIMICODE_BRANCH_OVERLAY=0"):
        asyncio.run(explore_and_close(make_agent(permission_mode="accept-edits"), n=1, workspace="overlay"))


def _kill_the_branches_process(request: RecordedRequest) -> Reply:
    me = os.getpid()
    for pid in os.listdir("/proc"):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == me and b"kimicode.branches.child" in cmdline:
            os.kill(int(pid), signal.SIGKILL)
    return Reply(content="never delivered")


def test_a_crash_of_the_branches_process_marks_them_crashed_and_resume_finishes(
    server: FakeServer, make_agent: MakeAgent, workspace: Path, tmp_path: Path
) -> None:
    git_project(workspace)
    parent = make_agent(permission_mode="accept-edits")
    Router(server, {"1": [_kill_the_branches_process]})
    ex = asyncio.run(explore_and_close(parent, n=1, verify=VERIFY))
    b = ex.branches[0]
    assert b.status == "crashed" and "killed by signal 9" in str(b.error)
    assert ex.applied is None and (workspace / "app.py").read_text() == BUGGY
    Router(server, {"1": write_turn(GOOD)})
    again = Agent.resume(
        parent.session_id,
        home=tmp_path / "home",
        base_url=server.base_url,
        api_key="sk-x",
        permission_mode="accept-edits",
    )

    async def resume() -> Any:
        try:
            return await resume_exploration(again, load_record(tmp_path / "home", ex.id))
        finally:
            await again.aclose()

    done = asyncio.run(resume())
    assert done.branches[0].status == "verified" and done.applied is not None
    assert (workspace / "app.py").read_text() == GOOD


def test_attacks_on_an_overlay_branch_reach_nothing_outside_it(
    server: FakeServer, make_agent: MakeAgent, workspace: Path, tmp_path: Path
) -> None:
    git_project(workspace)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep\n")
    (workspace / "out").symlink_to(outside)  # links in the lower pointing out of the workspace
    (workspace / "back").symlink_to(workspace)
    git(workspace, "add", "-A")
    git(workspace, "commit", "-qm", "links")
    before, before_outside = digest(workspace), digest(outside)
    parent = make_agent(permission_mode="accept-edits", sandbox="workspace-write", allow=("bash(*)",))
    attack = (
        "echo p > out/keep.txt; echo p > out/new.txt; echo p > back/app.py; rm -f back/notes.txt; "
        'umount "$PWD" 2>/dev/null; echo $? > umount-exit.txt; ln -s ../outside/keep.txt evil; '
        "ln -s /etc evildir; rm .gitignore"
    )
    Router(
        server,
        {
            "1": [
                bash(attack),
                Reply(tool_calls=[ToolCall("write_file", {"path": "back/app.py", "content": "pwned"})]),
                Reply(tool_calls=[ToolCall("write_file", {"path": str(outside / "w.txt"), "content": "p"})]),
                *write_turn(GOOD),
            ]
        },
    )
    ex = asyncio.run(explore_and_close(parent, n=1, verify=VERIFY, apply=False))
    b = ex.branches[0]
    assert b.status == "verified"
    assert digest(workspace) == before and digest(outside) == before_outside
    opened = ex.open(b)
    assert (opened / "umount-exit.txt").read_text().strip() != "0"  # it could not unmount its overlay
    # applying it writes the links and the deletion into the workspace, as the branch made them, nothing else
    applied = Agent.resume(ex.record.parent_session, home=tmp_path / "home", base_url=server.base_url, api_key="sk-x")

    async def apply() -> None:
        from kimicode.branches.exploration import Exploration

        try:
            await Exploration(load_record(tmp_path / "home", ex.id), applied).apply(b.id)
        finally:
            await applied.aclose()

    asyncio.run(apply())
    assert os.readlink(workspace / "evil") == "../outside/keep.txt" and os.readlink(workspace / "evildir") == "/etc"
    notice = load_record(tmp_path / "home", ex.id).notice or ""  # and says so (issue 34)
    assert "evil -> ../outside/keep.txt" in notice and "evildir -> /etc" in notice, notice
    assert not (workspace / ".gitignore").exists() and (workspace / "app.py").read_text() == GOOD
    assert digest(outside) == before_outside


def test_a_branch_without_the_sandbox_still_cannot_unmount_its_overlay(
    server: FakeServer, make_agent: MakeAgent, workspace: Path
) -> None:
    git_project(workspace)
    parent = make_agent(permission_mode="yolo", sandbox="off")
    Router(server, {"1": [bash('umount "$PWD"; echo $? > umount-exit.txt; echo x > under.txt'), *write_turn(GOOD)]})
    ex = asyncio.run(explore_and_close(parent, n=1, verify=VERIFY, apply=False))
    b = ex.branches[0]
    assert b.status == "verified"
    assert b.changes is not None and "under.txt" in b.changes["added"]  # written into the overlay
    assert os.listdir(str(b.workspace)) == []  # not into the directory below it
    assert (ex.open(b) / "umount-exit.txt").read_text().strip() != "0"
