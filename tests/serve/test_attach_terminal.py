"""The installed `kimicode attach` in a pseudo-terminal, beside a `ServeClient` standing for the page, both
on one session of an installed `kimicode serve` (found through KIMICODE_HOME/serve.json); and `kimicode -r`
of that session naming `kimicode attach` instead of a bare "busy"."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest
from helpers import command_env, kimicode_command
from terminals import Terminal

from kimicode.serve.client import ServeClient
from kimicode.testing import FakeServer

pytestmark = pytest.mark.slow


@pytest.fixture
def page(model: FakeServer, tmp_path: Path) -> Iterator[ServeClient]:
    """`kimicode serve` as a process of its own, and a client of it standing for the page."""
    env = command_env(tmp_path / "home", model)
    proc = subprocess.Popen(
        [*kimicode_command(), "serve", "--sandbox", "off"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())
        with ServeClient(first["url"], first["token"], timeout=20) as client:
            yield client
    finally:
        proc.terminate()
        proc.wait(20)


def test_attach_follows_the_session_beside_the_page(
    page: ServeClient, model: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    env = command_env(tmp_path / "home", model)
    sid = page.create(str(workspace), permission_mode="default")
    assert page.run(sid, "first from the page")[-1]["result"] == "echo: first from the page"

    # the terminal cannot open it (one writer), and says where to follow it instead
    busy = subprocess.run(
        [*kimicode_command(), "-r", sid, "-p", "hi"], capture_output=True, text=True, env=env, cwd=workspace, timeout=60
    )
    assert busy.returncode == 2 and f"kimicode attach {sid}" in busy.stderr and "kimicode serve" in busy.stderr

    term = Terminal(["attach"], env, workspace, cols=120, rows=40)  # the server's only session, found
    try:
        term.wait_for(f"attached to session {sid}")
        term.wait_for("› first from the page")  # where the session stands: its last exchange
        term.wait_for(lambda: term.text.rstrip().endswith("›"))

        page.send(sid, "hello from the page")  # the page's prompt streams in the terminal
        term.wait_for("echo: hello from the page")

        after = page.state(sid)["seq"]
        term.type("hello from the terminal\r")  # the terminal's prompt streams in the page
        events = page.until(sid, lambda e: e["type"] == "TurnFinished", after=after)
        assert any(e["type"] == "TurnStarted" and e["prompt"] == "hello from the terminal" for e in events)
        assert events[-1]["result"] == "echo: hello from the terminal"
        term.wait_for("echo: hello from the terminal")

        after = page.state(sid)["seq"]
        term.type("run echo from-the-tty > proof.txt\r")
        term.wait_for("? allow")
        term.wait_for("allow? [y/a/n]")
        term.type("y\r")  # answered in the terminal, resolved for the page
        events = page.until(sid, lambda e: e["type"] == "TurnFinished", after=after)
        assert [e["decision"] for e in events if e["type"] == "PermissionResolved"] == ["allow"]
        assert (workspace / "proof.txt").read_text() == "from-the-tty\n"
        term.wait_for("allowed once: ")

        after = page.state(sid)["seq"]
        page.send(sid, "run sleep 30")  # the page's turn asks; Ctrl-C on the terminal's empty line stops it
        term.wait_for("? allow bash: sleep 30")
        term.type("\x03")
        events = page.until(sid, lambda e: e["type"] == "TurnFinished", after=after)
        assert events[-1]["status"] == "interrupted"
        term.wait_for("Interrupted")

        term.type("\x04")  # Ctrl-D: the terminal detaches, the session goes on in the server
        term.child.expect(pexpect.EOF, timeout=20)
        term.child.close()
        assert term.child.exitstatus == 0
        assert page.state(sid)["status"] == "idle"
    finally:
        term.close()
