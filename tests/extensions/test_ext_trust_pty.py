"""The "trust this folder?" question in the real terminal: the installed `kimicode` in a pseudo-terminal,
asked once before the session, the answer used by that very session and remembered."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pexpect
import pytest
from helpers import command_env, kimicode_command

from kimicode.testing import FakeServer, Reply

pytestmark = pytest.mark.slow


def project(ws: Path) -> None:
    """A workspace whose own config has a UserPromptSubmit hook that leaves a file behind."""
    script = ws / "mark.py"
    script.write_text("import json, sys\njson.load(sys.stdin)\nopen('hook-ran', 'w').write('yes')\n")
    (ws / ".kimicode").mkdir()
    command = json.dumps(f"{sys.executable} {script}")
    (ws / ".kimicode" / "config.toml").write_text(
        f'[[hooks.UserPromptSubmit]]\nhooks = [{{ type = "command", command = {command} }}]\n'
    )


def spawn(ws: Path, home: Path, server: FakeServer) -> pexpect.spawn:
    env = command_env(home, server, TERM="dumb", CLAUDE_CONFIG_DIR=str(home.parent / "claude-home"))
    cmd = kimicode_command()
    return pexpect.spawn(cmd[0], cmd[1:], env=env, cwd=str(ws), dimensions=(30, 110), encoding="utf-8", timeout=20)


def chat(child: pexpect.spawn, reply: str) -> None:
    child.expect("Ctrl-D exits")
    child.expect(r"\x1b\[\?25h> ")  # prompt_toolkit has the terminal (keys typed before would be lost)
    child.send("hello")
    child.expect("hello")
    time.sleep(0.3)  # as a user would: Enter after the text is on the line
    child.send("\r")
    child.expect(reply)
    child.expect("> ")
    child.terminate(force=True)


def test_yes_trusts_the_folder_for_this_session_and_the_next(
    server: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    project(workspace)
    server.add(Reply(content="first answer"), Reply(content="second answer"))
    child = spawn(workspace, home, server)
    child.expect(r"Trust this folder\? \[y/N\]")
    assert "hook UserPromptSubmit" in child.before and "mark.py" in child.before
    child.send("y\r")
    child.expect("Trusted")
    chat(child, "first answer")
    assert (workspace / "hook-ran").read_text() == "yes"  # the project's hook ran in this very session
    assert str(workspace.resolve()) in (home / "config.toml").read_text()
    (workspace / "hook-ran").unlink()
    child = spawn(workspace, home, server)
    chat(child, "second answer")  # no question the second time
    assert "Trust this folder" not in child.before
    assert (workspace / "hook-ran").exists()


def test_no_is_remembered_and_the_projects_hook_does_not_run(
    server: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    project(workspace)
    server.add(Reply(content="first answer"))
    child = spawn(workspace, home, server)
    child.expect(r"Trust this folder\? \[y/N\]")
    child.send("n\r")
    child.expect("Not trusted")
    chat(child, "first answer")  # (that it is not asked again: test_ext_trust.py)
    assert not (workspace / "hook-ran").exists()
    assert str(workspace.resolve()) in (home / "trust.json").read_text()
