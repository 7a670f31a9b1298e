"""`kimicode serve` over real HTTP (the server on a thread of the test process, the fake model server):
sessions in their own workspaces at once, approvals over HTTP, interrupt, queue and steer, resume after a
restart, fork, undo, diff, and the state a client reads."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kimicode.prompts import user_words
from kimicode.serve.client import ServeClient, ServeClientError
from kimicode.serve.manager import ServeConfig
from kimicode.serve.server import ThreadedServer


def finished(event: dict[str, Any]) -> bool:
    return event["type"] == "TurnFinished"


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


def prompts(state: dict[str, Any]) -> list[str]:
    """The user's messages in a session's history (kimicode's own `[...]` notes to the model left out)."""
    words = [user_words(m["content"]) for m in state["history"] if m["role"] == "user"]
    return [w for w in words if not w.startswith("[")]


@pytest.mark.slow
def test_two_sessions_in_two_workspaces_run_prompts_with_tool_calls_at_once(
    client: ServeClient, make_workspace: Callable[[str], Path]
) -> None:
    a, b = make_workspace("a"), make_workspace("b")
    ids = [client.create(str(a), permission_mode="accept-edits"), client.create(str(b), permission_mode="accept-edits")]
    assert ids[0] != ids[1]
    results: dict[str, list[dict[str, Any]]] = {}

    def drive(sid: str, name: str) -> None:
        results[sid] = client.run(sid, f"write {name}.txt made by {name}")

    threads = [threading.Thread(target=drive, args=(sid, name)) for sid, name in zip(ids, "ab", strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert (a / "a.txt").read_text() == "made by a" and not (a / "b.txt").exists()
    assert (b / "b.txt").read_text() == "made by b" and not (b / "a.txt").exists()
    for sid in ids:
        seen = types(results[sid])
        assert seen[-1] == "TurnFinished" and results[sid][-1]["status"] == "success"
        assert {"TurnStarted", "ToolCallStarted", "ToolCallFinished", "MessageCommitted"} <= set(seen)
        assert all(isinstance(e["seq"], int) for e in results[sid])
    live = {s["id"]: s for s in client.sessions()["sessions"]}
    assert live[ids[0]]["workspace"] == str(a.resolve()) and live[ids[1]]["workspace"] == str(b.resolve())


def test_state_has_status_history_usage_cost_and_context(client: ServeClient, workspace: Path) -> None:
    sid = client.create(str(workspace))
    events = client.run(sid, "hello there")
    assert events[-1]["result"] == "echo: hello there"
    state = client.state(sid)
    assert state["status"] == "idle" and state["permission_mode"] == "default"
    assert [m["role"] for m in state["history"]] == ["user", "assistant"] and prompts(state) == ["hello there"]
    assert state["usage"]["prompt_tokens"] > 0
    assert state["context"]["used"] > 0 and state["context"]["window"] > 0
    assert state["context"]["breakdown"]["system"] > 0
    assert state["cost"]["total"] is not None and state["cost"]["turns"] == [state["turn_records"][0]["cost"]]
    assert state["turn_records"][0]["status"] == "success" and state["seq"] >= events[-1]["seq"]
    cost = next(e for e in client.events(sid, after=0) if e["type"] == "TurnCost")
    assert cost["turn"] == 1 and cost["usage"]["prompt_tokens"] > 0


@pytest.mark.parametrize("decision", ["allow", "deny"])
def test_a_permission_request_is_answered_over_http(client: ServeClient, workspace: Path, decision: str) -> None:
    sid = client.create(str(workspace), permission_mode="default")
    events = client.run(sid, "run echo hi > out.txt", decide=lambda request: decision)  # type: ignore[arg-type,return-value]
    asked = [e for e in events if e["type"] == "PermissionRequested"]
    assert len(asked) == 1 and asked[0]["tool"] == "bash" and asked[0]["arguments"]["command"] == "echo hi > out.txt"
    assert asked[0]["always_rule"] == "bash(echo hi > out.txt)"
    resolved = next(e for e in events if e["type"] == "PermissionResolved")
    assert resolved["request_id"] == asked[0]["request_id"] and resolved["decision"] == decision
    assert (workspace / "out.txt").exists() is (decision == "allow")
    if decision == "deny":
        assert "PermissionDenied" in types(events)
    assert client.pending(sid) == []


def test_allow_always_remembers_the_engines_rule_for_later_calls(client: ServeClient, workspace: Path) -> None:
    sid = client.create(str(workspace), permission_mode="default")
    first = client.run(sid, "run echo one >> log.txt", decide=lambda request: "allow_always")
    assert "PermissionRequested" in types(first)
    second = client.run(sid, "run echo one >> log.txt")  # the default answer would be deny: it is not asked
    assert "PermissionRequested" not in types(second) and second[-1]["status"] == "success"
    third = client.run(sid, "run echo two >> log.txt")  # another command: asked again, denied
    assert "PermissionRequested" in types(third)
    assert (workspace / "log.txt").read_text() == "one\none\n"


def test_answering_an_unknown_request_is_404(client: ServeClient, workspace: Path) -> None:
    sid = client.create(str(workspace))
    with pytest.raises(ServeClientError) as err:
        client.answer(sid, "nope", "allow")
    assert err.value.status == 404
    with pytest.raises(ServeClientError) as bad:
        client.request("POST", f"/sessions/{sid}/permissions/x", {"decision": "yes"})
    assert bad.value.status == 422


def test_interrupt_stops_a_running_command(client: ServeClient, workspace: Path) -> None:
    sid = client.create(str(workspace), permission_mode="yolo")
    after = client.state(sid)["seq"]
    client.send(sid, "run sleep 30")
    start = time.monotonic()
    seen: list[dict[str, Any]] = []
    for event in client.events(sid, after=after):
        seen.append(event)
        if event["type"] == "ToolCallStarted":
            assert client.interrupt(sid)
        if finished(event):
            break
    assert seen[-1]["status"] == "interrupted" and time.monotonic() - start < 20
    assert client.state(sid)["status"] == "idle"
    assert client.run(sid, "still there?")[-1]["result"] == "echo: still there?"


def test_interrupt_refuses_an_open_question(client: ServeClient, workspace: Path) -> None:
    sid = client.create(str(workspace), permission_mode="default")
    after = client.state(sid)["seq"]
    client.send(sid, "run touch never")
    for event in client.events(sid, after=after):
        if event["type"] == "PermissionRequested":
            assert client.state(sid)["status"] == "waiting"
            client.interrupt(sid)
        if finished(event):
            break
    assert not (workspace / "never").exists() and client.pending(sid) == []


def test_messages_queue_in_order_and_steer_joins_the_running_turn(client: ServeClient, workspace: Path) -> None:
    sid = client.create(str(workspace), permission_mode="default")
    after = client.state(sid)["seq"]
    assert client.send(sid, "run touch a")["queued"] == 0
    assert client.send(sid, "second")["queued"] == 1
    started: list[str] = []
    count = 0
    for event in client.events(sid, after=after):
        if event["type"] == "PermissionRequested":
            assert client.send(sid, "also this", steer=True)["steered"]
            client.answer(sid, event["request_id"], "allow")
        if event["type"] == "TurnStarted":
            started.append(event["prompt"])
        if finished(event):
            count += 1
            if count == 2:
                break
    assert started == ["run touch a", "second"]
    assert prompts(client.state(sid)) == ["run touch a", "also this", "second"]


def test_fork_continues_a_copy(client: ServeClient, workspace: Path) -> None:
    sid = client.create(str(workspace))
    client.run(sid, "remember 7")
    fork = client.fork(sid)
    assert fork != sid
    client.run(fork, "now 8")
    original = prompts(client.state(sid))
    forked = prompts(client.state(fork))
    assert original == ["remember 7"] and forked == ["remember 7", "now 8"]


def test_undo_puts_back_the_files_and_the_conversation(client: ServeClient, workspace: Path) -> None:
    sid = client.create(str(workspace), permission_mode="accept-edits")
    client.run(sid, "write notes.txt first")
    client.run(sid, "write notes.txt second")
    assert (workspace / "notes.txt").read_text() == "second"
    assert "+second" in client.diff(sid, turn=2) and "notes.txt" in client.diff(sid)
    done = client.undo(sid)
    assert done["turn"] == 2 and done["files"] == ["notes.txt"]
    assert (workspace / "notes.txt").read_text() == "first"
    assert prompts(client.state(sid)) == ["write notes.txt first"]
    with pytest.raises(ServeClientError) as err:
        client.diff(sid, turn=9)
    assert err.value.status == 404


@pytest.mark.slow
def test_resume_after_a_server_restart(config: ServeConfig, workspace: Path) -> None:
    with ThreadedServer(config) as first, ServeClient(first.url, first.token) as client:
        sid = client.create(str(workspace))
        client.run(sid, "remember the number 7")
    with ThreadedServer(config) as second, ServeClient(second.url, second.token) as client:
        assert second.token != first.token
        assert client.sessions()["sessions"] == []
        saved = {s["id"]: s for s in client.sessions()["saved"]}
        assert saved[sid]["origin"] == "serve" and saved[sid]["live"] is False
        assert client.resume(sid) == sid
        assert prompts(client.state(sid)) == ["remember the number 7"]
        assert client.run(sid, "which number?")[-1]["status"] == "success"
        copy = client.resume(sid, fork=True)
        assert copy != sid and len(client.state(copy)["history"]) == 4


def test_a_closed_session_can_be_resumed(client: ServeClient, workspace: Path) -> None:
    sid = client.create(str(workspace))
    client.run(sid, "hi")
    client.close_session(sid)
    with pytest.raises(ServeClientError) as err:
        client.state(sid)
    assert err.value.status == 404
    assert client.resume(sid) == sid


def test_change_mode_and_model(client: ServeClient, workspace: Path) -> None:
    sid = client.create(str(workspace))
    assert client.settings(sid, permission_mode="plan")["permission_mode"] == "plan"
    assert client.settings(sid, model="other-model")["model"] == "other-model"
