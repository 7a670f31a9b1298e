"""`kimicode undo`, `kimicode sessions diff`, headless `changes`/`checkpoint`, and kill -9 mid-restore."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import bash_turn, invoke, kimicode_command

from kimicode import Agent
from kimicode.agent.modes import is_mode_note
from kimicode.checkpoints import CheckpointStore
from kimicode.prompts import user_words
from kimicode.session.log import load
from kimicode.testing import FakeServer

MakeAgent = Callable[..., Agent]


@pytest.mark.prepush
def test_undo_from_the_shell_restores_files_and_cuts_the_log(
    server: FakeServer, make_agent: MakeAgent, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("original\n")
    agent = make_agent(permission_mode="yolo")
    bash_turn(server, "echo one > a.txt")
    assert agent.run_sync("first").ok
    agent = Agent.resume(
        agent.session_id, base_url=server.base_url, api_key="k", home=agent.home, permission_mode="yolo"
    )
    bash_turn(server, "echo two > a.txt; echo new > b.txt")
    assert agent.run_sync("second").ok
    assert agent.log is not None
    path = agent.log.path

    code, out, err = invoke("undo", "--session", agent.session_id[:12])
    assert code == 0, err
    assert (workspace / "a.txt").read_text() == "one\n" and not (workspace / "b.txt").exists()
    assert "restored b.txt" in out and "restored a.txt" in out
    users = [user_words(m["content"]) for m in load(path).messages if m["role"] == "user" and not is_mode_note(m)]
    assert users == ["first"]  # (the note telling the model it runs in yolo mode, before the prompt, is not the prompt)

    code, out, err = invoke("sessions", "diff", agent.session_id, "--turn", "1", "--no-color")
    assert code == 0 and "-original" in out and "+one" in out and "\x1b[" not in out
    code, out, _ = invoke("sessions", "diff", agent.session_id, "--color")
    assert "\x1b[" in out

    (workspace / "a.txt").write_text("the user's own fix\n")  # outside the agent
    code, out, err = invoke("undo", "--session", agent.session_id, "--turn", "1")
    assert code == 1 and "a.txt" in err and "--force" in err
    assert (workspace / "a.txt").read_text() == "the user's own fix\n"
    prompts = [user_words(m["content"]) for m in load(path).messages if m["role"] == "user" and not is_mode_note(m)]
    assert prompts == ["first"]  # nothing lost (the yolo-mode note is not a prompt)
    code, out, err = invoke("undo", "--session", agent.session_id, "--turn", "1", "--force")
    assert code == 0, err
    assert (workspace / "a.txt").read_text() == "original\n"
    assert [m for m in load(path).messages if m["role"] == "user" and not is_mode_note(m)] == []


@pytest.mark.prepush
def test_undo_errors_are_one_line_without_traceback(workspace: Path) -> None:
    code, _, err = invoke("undo", "--session", "nope-no-such")
    assert code == 1 and err.startswith("kimicode: ") and "Traceback" not in err
    code, _, err = invoke("undo", "--files-only", "--conversation-only", "--session", "x")
    assert code == 2
    code, _, err = invoke("undo", "-C", str(workspace))
    assert code == 1 and "no saved session" in err


@pytest.mark.slow
def test_headless_json_result_has_changes_and_checkpoint(server: FakeServer, workspace: Path, tmp_path: Path) -> None:
    (workspace / "gone.txt").write_text("bye\n")
    bash_turn(server, "rm gone.txt; echo hi > hello.txt")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI_", "OPENAI_", "KIMICODE_"))}
    env.update(KIMICODE_HOME=str(tmp_path / "home"), KIMI_API_KEY="sk-x", KIMI_BASE_URL=server.base_url)
    out = subprocess.run(
        [*kimicode_command(), "-p", "go", "--output-format", "json", "--permission-mode", "yolo"],
        env=env,
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.splitlines()[-1])
    assert result["changes"] == {"added": ["hello.txt"], "modified": [], "deleted": ["gone.txt"]}
    assert isinstance(result["checkpoint"], str) and len(result["checkpoint"]) == 40
    undo = subprocess.run(
        [*kimicode_command(), "undo"],
        env=env,
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert undo.returncode == 0, undo.stderr
    assert (workspace / "gone.txt").read_text() == "bye\n" and not (workspace / "hello.txt").exists()


_RESTORER = """
import sys
from pathlib import Path
from kimicode.checkpoints import CheckpointStore
s = CheckpointStore(Path(sys.argv[1]), Path(sys.argv[2]))
paths = [f"d{i // 100}/f{i}.txt" for i in range(int(sys.argv[4]))]
print("go", flush=True)
s.restore(sys.argv[3], paths, "restore")
"""


@pytest.mark.prepush
def test_kill_9_mid_restore_is_finished_on_next_start(workspace: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    n = 3000
    for i in range(n):
        d = workspace / f"d{i // 100}"
        d.mkdir(exist_ok=True)
        (d / f"f{i}.txt").write_text(f"old {i}\n")
    store = CheckpointStore(home, workspace)
    old = store.snapshot("old").id
    for i in range(n):
        (workspace / f"d{i // 100}" / f"f{i}.txt").write_text(f"new {i}\n")
    killed_mid_way = False
    for delay in (0.25, 0.15, 0.35, 0.5):
        proc = subprocess.Popen(
            [sys.executable, "-c", _RESTORER, str(home), str(workspace), old, str(n)], stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None and proc.stdout.readline().strip() == "go"
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if store.journal.exists():
            killed_mid_way = True
            break
        for i in range(n):  # it finished before the kill: set up again and try sooner/later
            (workspace / f"d{i // 100}" / f"f{i}.txt").write_text(f"new {i}\n")
    if not killed_mid_way:
        pytest.skip("the restore always finished before SIGKILL landed on this machine")
    note = CheckpointStore(home, workspace).recover()  # what the next start does (a stale index.lock too)
    assert note is not None and "interrupted" in note
    assert not store.journal.exists()
    assert all((workspace / f"d{i // 100}" / f"f{i}.txt").read_text() == f"old {i}\n" for i in range(n))
    store.snapshot("after recovery")  # the store still works


@pytest.mark.prepush
def test_sessions_rm_prunes_the_store_but_keeps_what_other_sessions_need(
    server: FakeServer, make_agent: MakeAgent, workspace: Path
) -> None:
    (workspace / "shared.txt").write_text("same content in both sessions\n")
    one = make_agent(permission_mode="yolo")
    bash_turn(server, "echo one-only > one.txt")
    assert one.run_sync("one").ok
    two = make_agent(permission_mode="yolo")
    bash_turn(server, "echo two-only > two.txt")
    r2 = two.run_sync("two")
    assert r2.ok and one.checkpoints is not None and two.checkpoints is not None
    store = one.checkpoints.store
    assert store.dir == two.checkpoints.store.dir  # one store per workspace: deduplicated across sessions
    one_after = one.checkpoints.entries[-1].after
    assert one_after and store.has(one_after)
    code, out, err = invoke("sessions", "rm", one.session_id)
    assert one.session_id in out
    assert code == 0, err
    assert not store.has(one_after)  # pruned with its session
    assert r2.checkpoint and store.has(r2.checkpoint)  # the other session's checkpoints stay
    code, _, err = invoke("undo", "--session", two.session_id, "--files-only")
    assert code == 0, err
    assert not (workspace / "two.txt").exists() and (workspace / "one.txt").exists()


@pytest.mark.prepush
def test_prune_by_age_and_size_keeps_the_newest(workspace: Path, tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "home", workspace)
    ids = []
    for i in range(8):
        (workspace / f"f{i}.bin").write_bytes(os.urandom(200_000))  # incompressible: sizes add up
        ids.append(store.snapshot(f"s{i}", f"sess/{i}").id)
        (workspace / f"f{i}.bin").unlink()
    full = store.size()
    dropped = store.prune(max_mb=full / 2e6)
    assert dropped and store.size() <= full / 2 and store.has(ids[-1]) and not store.has(ids[0])
    assert store.prune(max_age_days=-1) and not store.has(ids[-1])  # everything is older than "tomorrow"


_SNAPSHOTTER = """
import sys
from pathlib import Path
from kimicode.checkpoints import CheckpointStore
print("go", flush=True)
CheckpointStore(Path(sys.argv[1]), Path(sys.argv[2])).snapshot("killed", "s/1")
"""


@pytest.mark.prepush
def test_kill_9_mid_checkpoint_leaves_a_store_that_works(workspace: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    for i in range(2000):
        d = workspace / f"d{i // 100}"
        d.mkdir(exist_ok=True)
        (d / f"f{i}.txt").write_text(f"content {i}\n" * 50)
    proc = subprocess.Popen(
        [sys.executable, "-c", _SNAPSHOTTER, str(home), str(workspace)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "go"
    time.sleep(0.3)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    store = CheckpointStore(home, workspace)
    snap = store.snapshot("after the kill")  # waits for an orphaned git, clears a stale lock, repairs the index
    listed = store.git("ls-tree", "-r", "--name-only", snap.id).decode().split()
    assert len(listed) == 2000
    assert not store.git("fsck", "--no-dangling", check=False).strip()
    (workspace / "d0" / "f0.txt").unlink()
    assert store.changes(snap.id, store.snapshot("later").id).deleted == ["d0/f0.txt"]
