"""`kimicode attach`: a terminal and the page follow one served session at once (issue 39).

In process: the server on a thread (real HTTP), a `ServeClient` standing for the page, and the attached
terminal's `Follower` reading the same session's events on a thread of its own and writing to a buffer,
exactly as the command does under its prompt.
"""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from kimicode.cli.attach import TURN_EVENTS, Follower, library_event, pump
from kimicode.serve.client import ServeClient
from kimicode.serve.server import ThreadedServer


class Attached:
    """The attached terminal: a Follower fed by its own event stream, its output in `text`."""

    def __init__(self, live: ThreadedServer, session_id: str) -> None:
        self.out = io.StringIO()
        self.client = ServeClient(live.url, live.token, timeout=20)
        self.stream = ServeClient(live.url, live.token, timeout=20)
        console = Console(file=self.out, width=100, color_system=None, force_terminal=False)
        self.follower = Follower(self.client, session_id, console)
        after = self.follower.open()
        self.ended: str | None = "still reading"
        self.thread = threading.Thread(target=self._read, args=(session_id, after), daemon=True)
        self.thread.start()

    def _read(self, session_id: str, after: int) -> None:
        self.ended = pump(self.stream, session_id, after, self.follower.handle)

    @property
    def text(self) -> str:
        with self.follower.lock:
            return self.out.getvalue()

    def wait(self, check: str | Callable[[], bool], timeout: float = 20) -> None:
        test = (lambda: check in self.text) if isinstance(check, str) else check
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if test():
                return
            time.sleep(0.02)
        raise AssertionError(f"timed out waiting for {check!r}; the terminal shows:\n{self.text}")

    def close(self) -> None:
        self.stream.close()
        self.client.close()


@pytest.fixture
def attach(live: ThreadedServer) -> Iterator[Callable[[str], Attached]]:
    opened: list[Attached] = []

    def make(session_id: str) -> Attached:
        opened.append(Attached(live, session_id))
        return opened[-1]

    yield make
    for one in opened:
        one.close()


def turn(client: ServeClient, sid: str, after: int) -> list[dict[str, Any]]:
    return client.until(sid, lambda e: e["type"] == "TurnFinished", after=after)


@pytest.mark.slow  # about 1 s: two turns, two streams
def test_the_page_and_the_terminal_see_each_others_prompts_stream(
    client: ServeClient, attach: Callable[[str], Attached], workspace: Path
) -> None:
    sid = client.create(str(workspace), permission_mode="default")
    term = attach(sid)
    assert f"attached to session {sid}" in term.text and "(no messages yet)" in term.text

    after = client.state(sid)["seq"]
    client.send(sid, "hello from the page")  # the page's prompt ...
    page = turn(client, sid, after)
    assert "".join(e["text"] for e in page if e["type"] == "ContentDelta") == "echo: hello from the page"
    term.wait("echo: hello from the page")  # ... streams in the terminal too
    assert "› hello from the page" in term.text

    after = client.state(sid)["seq"]
    assert term.follower.submit("hello from the terminal")  # the terminal's prompt ...
    page = turn(client, sid, after)  # ... streams in the page
    assert page[0]["type"] in ("StatusChanged", "TurnStarted")
    assert any(e["type"] == "TurnStarted" and e["prompt"] == "hello from the terminal" for e in page)
    assert "".join(e["text"] for e in page if e["type"] == "ContentDelta") == "echo: hello from the terminal"
    term.wait("echo: hello from the terminal")
    assert [m["content"] for m in client.state(sid)["history"] if m["role"] == "assistant"][-2:] == [
        "echo: hello from the page",
        "echo: hello from the terminal",
    ]


def test_a_request_answered_in_the_terminal_is_resolved_in_the_page(
    client: ServeClient, attach: Callable[[str], Attached], workspace: Path
) -> None:
    sid = client.create(str(workspace), permission_mode="default")
    term = attach(sid)
    after = client.state(sid)["seq"]
    client.send(sid, "run echo attached > proof.txt")
    requested = client.until(sid, lambda e: e["type"] == "PermissionRequested", after=after)[-1]
    term.wait("? allow")
    assert "echo attached > proof.txt" in term.text and "y: allow once" in term.text
    assert term.follower.prompt() == "allow? [y/a/n] "
    term.follower.submit("maybe")  # not an answer: said, and the request stays open
    assert "answer y (allow once)" in term.text and client.pending(sid)

    term.follower.submit("y")
    events = turn(client, sid, requested["seq"])
    resolved = next(e for e in events if e["type"] == "PermissionResolved")
    assert resolved["request_id"] == requested["request_id"] and resolved["decision"] == "allow"
    assert events[-1]["status"] == "success" and (workspace / "proof.txt").read_text() == "attached\n"
    term.wait("allowed once: ")
    term.wait(lambda: "done: " in term.text)
    assert "answered by another client" not in term.text and client.pending(sid) == []

    # the other way round: the page denies, the terminal says who answered, and its prompt is a prompt again
    after = client.state(sid)["seq"]
    client.send(sid, "run echo refused > no.txt")
    requested = client.until(sid, lambda e: e["type"] == "PermissionRequested", after=after)[-1]
    term.wait(lambda: term.text.count("? allow") == 2)
    client.answer(sid, requested["request_id"], "deny", "not now")
    turn(client, sid, requested["seq"])
    term.wait("denied: ")
    assert "(answered by another client)" in term.text and not (workspace / "no.txt").exists()
    term.wait(lambda: term.follower.prompt() == "› ")


def test_the_terminal_denies_with_a_reason_and_interrupts_over_http(
    client: ServeClient, attach: Callable[[str], Attached], workspace: Path
) -> None:
    sid = client.create(str(workspace), permission_mode="default")
    term = attach(sid)
    after = client.state(sid)["seq"]
    term.follower.submit("run echo x > denied.txt")
    term.wait("? allow")
    term.follower.submit("n use the tests instead")
    events = turn(client, sid, after)
    assert next(e for e in events if e["type"] == "PermissionResolved")["decision"] == "deny"
    denied = next(e for e in events if e["type"] == "ToolCallFinished")
    assert "use the tests instead" in denied["content"] and not (workspace / "denied.txt").exists()

    after = client.state(sid)["seq"]
    client.send(sid, "run sleep 30")
    client.until(sid, lambda e: e["type"] == "PermissionRequested", after=after)
    term.wait(lambda: term.text.count("? allow") == 2)
    term.follower.interrupt()  # Ctrl-C in the terminal: the turn stops, for the page as well
    assert turn(client, sid, after)[-1]["status"] == "interrupted"
    term.wait("Interrupted")
    term.follower.interrupt()
    term.wait("no turn is running")


def test_the_terminal_detaches_when_the_session_closes(
    client: ServeClient, attach: Callable[[str], Attached], workspace: Path
) -> None:
    sid = client.create(str(workspace))
    term = attach(sid)
    assert term.follower.submit("/help") and "an attached terminal sends messages only" in term.text
    assert not term.follower.submit("/exit")
    term.follower.submit("one more")
    term.wait("echo: one more")  # the terminal's stream is open: it sees the session close
    client.close_session(sid)
    term.wait("the session was closed in the server")
    term.thread.join(10)
    assert term.follower.closed and not term.thread.is_alive() and term.ended is None


def test_every_turn_event_the_terminal_renders_is_a_library_event() -> None:
    for name in TURN_EVENTS:
        assert library_event({"type": name}) is None  # fields missing: refused, never half-built
    finished = library_event(
        {
            "type": "TurnFinished",
            "status": "success",
            "result": "ok",
            "num_steps": 1,
            "permission_denials": [],
            "seq": 4,
            "ts": 1.0,
        }
    )
    assert finished is not None and finished.result == "ok" and finished.permission_denials == ()
    assert library_event({"type": "PermissionRequested", "request_id": "x"}) is None
    sub = library_event(
        {
            "type": "SubagentEvent",
            "parent_call_id": "c",
            "description": "d",
            "event": {"type": "MessageCommitted", "message": {"role": "assistant"}},
        }
    )
    assert sub is not None and sub.event.message == {"role": "assistant"}


def test_attaching_during_a_turn_shows_it_from_its_start_and_its_open_question(
    client: ServeClient, attach: Callable[[str], Attached], workspace: Path
) -> None:
    sid = client.create(str(workspace), permission_mode="default")
    client.run(sid, "before")
    after = client.state(sid)["seq"]
    client.send(sid, "run echo late > late.txt")
    requested = client.until(sid, lambda e: e["type"] == "PermissionRequested", after=after)[-1]
    term = attach(sid)  # the turn started before the terminal came: it is replayed from its prompt
    term.wait("? allow")
    assert term.text.count("› run echo late > late.txt") == 1 and term.text.count("? allow") == 1
    assert term.text.index("● echo: before") < term.text.index("› run echo late")  # the recap: the turn before
    assert term.follower.prompt() == "allow? [y/a/n] "
    term.follower.submit("a")
    events = turn(client, sid, requested["seq"])
    assert [e["decision"] for e in events if e["type"] == "PermissionResolved"] == ["allow_always"]
    assert (workspace / "late.txt").read_text() == "late\n"
    term.wait("always allowed: ")


def test_a_session_the_server_holds_is_named_with_attach(tmp_path: Path) -> None:
    from kimicode.config.serve_state import explain_refusal
    from kimicode.session.lock import SessionBusyError

    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / "serve.json").write_text('{"url": "http://127.0.0.1:9", "token": "t", "pid": 4242}')
    held = SessionBusyError("session s1 is in use by process 4242", session_id="s1", holder=4242)
    said = explain_refusal(held, home)
    assert "kimicode attach s1" in said and "http://127.0.0.1:9" in said and "--fork" in said
    other = SessionBusyError("session s1 is in use by process 77", session_id="s1", holder=77)
    assert explain_refusal(other, home) == "session s1 is in use by process 77"  # not the server: as it was
    (home / "serve.json").unlink()
    assert explain_refusal(held, home) == "session s1 is in use by process 4242"


def test_the_terminal_steers_the_running_turn(
    client: ServeClient, attach: Callable[[str], Attached], workspace: Path
) -> None:
    sid = client.create(str(workspace), permission_mode="default")
    term = attach(sid)
    after = client.state(sid)["seq"]
    client.send(sid, "run echo steered > s.txt")
    term.wait("? allow")  # the turn runs (it waits for the answer): a message steered now goes into it
    term.follower.submit("/steer and then stop")
    steered = client.until(sid, lambda e: e["type"] == "Steered", after=after)[-1]
    assert steered["text"] == "and then stop"
    term.wait("· steered into the turn: and then stop")
    term.follower.submit("y")
    assert turn(client, sid, steered["seq"])[-1]["status"] == "success"


def test_which_server_and_session_attach_picks(
    live: ThreadedServer, client: ServeClient, make_workspace: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from kimicode.cli.attach_cmd import AttachError, choose_session, server

    with pytest.raises(AttachError, match=r"no running `kimicode serve`.*kimicode web"):
        server(None)
    with pytest.raises(AttachError, match="KIMICODE_SERVE_TOKEN"):
        server(live.url)
    monkeypatch.setenv("KIMICODE_SERVE_TOKEN", live.token)
    assert server(live.url + "/") == (live.url, live.token)
    (tmp_path / "home").mkdir(exist_ok=True)
    (tmp_path / "home" / "serve.json").write_text(json.dumps({"url": live.url, "token": "t", "pid": 1}))
    monkeypatch.delenv("KIMICODE_SERVE_TOKEN")
    assert server(None) == (live.url, "t") and server(live.url) == (live.url, "t")

    with pytest.raises(AttachError, match="no live session"):
        choose_session(client, None)
    first = client.create(str(make_workspace("a")))
    assert choose_session(client, None) == first == choose_session(client, first[:-4])
    second = client.create(str(make_workspace("b")))
    with pytest.raises(AttachError, match=rf"several live sessions.*kimicode attach {second}"):
        choose_session(client, None)
    with pytest.raises(AttachError, match="no session 'nope'"):
        choose_session(client, "nope")
    client.run(second, "keep me")
    client.close_session(second)  # saved, not live: attaching resumes it in the server
    assert choose_session(client, second) == second and client.state(second)["status"] == "idle"
