"""`kimicode attach`: a terminal that follows a session `kimicode serve` holds, beside the page (docs/serve.md).

A session has one writer: the server. The terminal therefore attaches as one more HTTP client of it, as the
page does: it reads the session's events (server-sent events, from where the session is) and renders them
with the terminal's own `TurnView` (streamed answer text, tool calls with short results and diffs, notices),
shows each permission request and answers it over HTTP, sends typed lines as messages (queued behind a
running turn, or steered into it) and interrupts the turn over HTTP. Whatever one client does, every client
sees: a prompt sent from the page streams here, a request answered here is resolved in the page.

`Follower` is the face without a terminal loop (tests drive it with a `ServeClient` and a console writing to
a buffer); `follow` runs it under a prompt_toolkit prompt, printing above the line being typed.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any

from rich.console import Console
from rich.text import Text

from kimicode import events as library_events
from kimicode.serve.client import ServeClient, ServeClientError
from kimicode.termsafe import sanitize
from kimicode.ui.format import describe_call, diff_text, money, one_line
from kimicode.ui.recap import recap
from kimicode.ui.view import TurnView

DECISIONS = {
    "y": "allow",
    "yes": "allow",
    "allow": "allow",
    "a": "allow_always",
    "always": "allow_always",
    "n": "deny",
    "no": "deny",
    "deny": "deny",
}
"""What may be typed to answer an open permission request (after `n`, the rest is the reason given)."""
SAID = {"allow": "allowed once", "allow_always": "always allowed", "deny": "denied"}
TURN_EVENTS = frozenset(
    {
        "StepStarted",
        "ReasoningDelta",
        "ContentDelta",
        "ToolArgumentsDelta",
        "Retrying",
        "MessageCommitted",
        "ToolCallStarted",
        "ToolOutputDelta",
        "ToolCallFinished",
        "PermissionDenied",
        "TurnFinished",
        "SubagentEvent",
    }
)
"""The library events a turn's `TurnView` renders (a Notice too, when a turn is on screen)."""
KEYS = (
    "Enter sends a message (queued behind a running turn) · Ctrl-S or /steer TEXT steers the running turn · "
    "Ctrl-C interrupts it · Ctrl-D detaches (the session goes on in the server)"
)


def library_event(data: Mapping[str, Any]) -> Any:
    """The `kimicode.events` record a decoded server event stands for (its fields are the dataclass's,
    unchanged: serve/wire.py), or None for the server's own events and for anything that does not fit."""
    cls = getattr(library_events, str(data.get("type", "")), None)
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        return None
    names = {f.name for f in dataclasses.fields(cls)}
    fields = {k: v for k, v in data.items() if k in names}
    if cls is library_events.SubagentEvent:
        fields["event"] = library_event(fields.get("event") or {})
        if fields["event"] is None:
            return None
    if cls is library_events.TurnFinished:
        fields["permission_denials"] = tuple(fields.get("permission_denials") or ())
    try:
        return cls(**fields)
    except TypeError:  # a server of another version: a field missing or unknown
        return None


class Follower:
    """One attached terminal's view of a served session: renders its events and acts on it over HTTP."""

    def __init__(self, client: ServeClient, session_id: str, console: Console, *, show_reasoning: bool = False) -> None:
        self.client = client
        self.session_id = session_id
        self.console = console
        self.show_reasoning = show_reasoning
        self.status = "idle"
        self.pending: dict[str, dict[str, Any]] = {}
        """The open permission requests, oldest first (the next answer typed goes to the first)."""
        self.mine: set[str] = set()
        """Requests this terminal answered (their resolution is not announced as someone else's)."""
        self.view: TurnView | None = None
        self.closed = False
        self.replay_until: int | None = None
        """The attach point while a turn that was running then is replayed (the events kept up to it)."""
        self.held: list[dict[str, Any]] = []
        self.asked: list[dict[str, Any]] = []
        self.lock = threading.RLock()
        """Events come from the reader thread's hand-off and keys from the prompt: one at a time."""

    # -- output ---------------------------------------------------------------------------------------

    def say(self, text: str, style: str = "dim") -> None:
        line = Text(sanitize(text, sequences="escape"), style=style)
        if self.view is not None:
            self.view.print(line)
        else:
            self.console.print(line, highlight=False)

    def _turn_view(self) -> TurnView:
        if self.view is None:
            self.view = TurnView(
                self.console,
                plain=True,
                show_reasoning=self.show_reasoning,
                tool_kind=lambda name: "execute" if name == "bash" else None,
            )
            self.view.start()
        return self.view

    # -- opening --------------------------------------------------------------------------------------

    def open(self) -> int:
        """Say where the session stands (its last exchange, a running turn, open requests); the sequence
        number to follow its events after."""
        state = self.client.state(self.session_id)
        self.status = str(state.get("status", "idle"))
        head = (
            f"attached to session {self.session_id} in {state.get('workspace', '?')} "
            f"({state.get('model', '?')}, {state.get('permission_mode', '?')})"
        )
        history = list(state.get("history") or [])
        running = self.status in ("running", "waiting") and int(state.get("seq", 0)) > 0
        if running:  # the running turn is replayed from its prompt below: the recap is of the turns before it
            users = [n for n, m in enumerate(history) if m.get("role") == "user"]
            history = history[: users[-1]] if users else history
        for line in recap(history, head, width=self.console.size.width):
            self.console.print(line, highlight=False)
        self.say(KEYS)
        seq = int(state.get("seq", 0))
        self.asked = list(state.get("pending_permissions") or [])
        if running:  # the running turn is shown from its start
            self.replay_until = seq
            return 0
        self._ask_open()
        return seq

    def _ask_open(self) -> None:
        """The requests that were open when the terminal attached (not answered since)."""
        for request in self.asked:
            self.handle(request)
        self.asked = []

    def _replayed(self, data: Mapping[str, Any]) -> bool:
        """While a turn that ran before attaching is replayed: keep the kept events up to the attach point,
        then render the turn from its TurnStarted. True when `data` was taken (kept, or rendered so)."""
        if self.replay_until is None:
            return False
        seq = data.get("seq")
        taken = isinstance(seq, int) and seq <= self.replay_until
        if taken:
            self.held.append(dict(data))
            if isinstance(seq, int) and seq < self.replay_until:
                return True
        held, self.held, self.replay_until = self.held, [], None
        start = max((n for n, e in enumerate(held) if e.get("type") == "TurnStarted"), default=None)
        if start is None:  # the turn began before the events the server keeps
            self.say("a turn is running: its output follows from here", "yellow")
        for event in held[start:] if start is not None else []:
            self.handle(event)
        resolved = {e.get("request_id") for e in held if e.get("type") == "PermissionResolved"}
        self.asked = [r for r in self.asked if r.get("request_id") not in resolved]
        self._ask_open()
        return taken

    # -- events ---------------------------------------------------------------------------------------

    def handle(self, data: Mapping[str, Any]) -> None:
        """Render one decoded server event."""
        with self.lock:
            if self._replayed(data):
                return
            kind = str(data.get("type", ""))
            if kind == "TurnStarted":
                self._end_turn()
                self.say(f"› {one_line(str(data.get('prompt', '')), 400)}", "bold")
                self._turn_view()
            elif kind in TURN_EVENTS or (kind == "Notice" and self.view is not None):
                event = library_event(data)
                if event is not None:
                    self._turn_view().handle(event)
                if kind == "TurnFinished":
                    self._end_turn()
            elif kind == "Notice":
                level = str(data.get("level", "info"))
                self.say(f"· {data.get('text', '')}", {"warning": "yellow", "error": "red"}.get(level, "dim"))
            elif kind in ("PermissionRequested", "PermissionResolved"):
                self._on_permission(kind, data)
            else:
                self._on_server_event(kind, data)

    def _end_turn(self) -> None:
        if self.view is not None:
            self.view.close()
            self.view = None

    def _on_permission(self, kind: str, data: Mapping[str, Any]) -> None:
        request_id = str(data.get("request_id", ""))
        if kind == "PermissionRequested":
            if request_id not in self.pending:
                self.pending[request_id] = dict(data)
                self._ask(data)
            return
        asked = self.pending.pop(request_id, None)
        decision = SAID.get(str(data.get("decision", "")), str(data.get("decision", "")))
        what = describe_call(str(asked["tool"]), asked.get("arguments") or {}, 100) if asked else request_id
        where = "" if request_id in self.mine else " (answered by another client)"
        self.mine.discard(request_id)
        self.say(f"  {decision}: {what}{where}", "red" if decision == "denied" else "green")

    def _ask(self, request: Mapping[str, Any]) -> None:
        """Show a permission request: the call, why it is asked, the exact diff of an edit, the answers."""
        if self.view is not None:
            self.view.answer.finish()  # the question starts on a line of its own
        call = describe_call(str(request.get("tool", "?")), request.get("arguments") or {})
        self.say(f"? allow {call}", "bold yellow")
        if request.get("reason"):
            self.say(f"  {one_line(str(request['reason']), 300)}")
        preview = request.get("preview")
        if isinstance(preview, str) and preview.strip():
            rendered = diff_text(preview, 40)
            if self.view is not None:
                self.view.print(rendered)
            else:
                self.console.print(rendered, highlight=False)
        rule = request.get("always_rule")
        always = f"a: always allow {rule}" if rule else "a: always allow this exact call"
        self.say(f"  answer: y: allow once · {always} · n [REASON]: deny", "yellow")

    def _on_server_event(self, kind: str, data: Mapping[str, Any]) -> None:
        """The server's own events (Queued, Steered, StatusChanged, TurnCost, ...)."""
        if kind == "StatusChanged":
            self.status = str(data.get("status", self.status))
        elif kind == "Queued":
            self.say(f"· queued ({data.get('position')}): {one_line(str(data.get('text', '')), 200)}")
        elif kind == "Steered":
            self.say(f"· steered into the turn: {one_line(str(data.get('text', '')), 200)}")
        elif kind == "TurnCost":
            cost, total = data.get("cost"), data.get("total_cost")
            if isinstance(cost, int | float):
                tail = f" · session {money(float(total))}" if isinstance(total, int | float) else ""
                self.say(f"· turn cost {money(float(cost))}{tail}")
        elif kind == "Rewound":
            self.say(f"· undone: turn {data.get('turn')}")
        elif kind == "ExplorationFinished":
            self.say("· exploration finished (see its branches in the page: kimicode web)")
        elif kind == "SessionClosed":
            self._end_turn()
            self.closed = True
            self.say("the session was closed in the server", "yellow")

    # -- acting ---------------------------------------------------------------------------------------

    def submit(self, line: str) -> bool:
        """A line typed at the prompt: an answer to the open request, a command or a message. False when the
        user asked to detach."""
        text = line.strip()
        if not text:
            return True
        with self.lock:
            if text in ("/exit", "/quit", "/detach"):
                return False
            if text.startswith("/steer"):
                self.steer(text[len("/steer") :].strip())
            elif text == "/interrupt":
                self.interrupt()
            elif self.pending:
                self._answer(text)
            elif text.startswith("/"):
                self.say(
                    f"{text.split()[0]}: an attached terminal sends messages only (/steer TEXT, /interrupt, "
                    f"/exit); other commands run in `kimicode -r {self.session_id}` once the server has "
                    "closed the session",
                    "yellow",
                )
            else:
                self._call(self.client.send, self.session_id, text)
        return True

    def _answer(self, text: str) -> None:
        word, _, reason = text.partition(" ")
        decision = DECISIONS.get(word.lower())
        if decision is None:
            self.say(
                "a permission request is open: answer y (allow once), a (always) or n [REASON] (deny); "
                "Ctrl-C interrupts the turn",
                "yellow",
            )
            return
        request_id = next(iter(self.pending))
        self.mine.add(request_id)
        if not self._call(self.client.answer, self.session_id, request_id, decision, reason.strip())[0]:
            self.mine.discard(request_id)

    def steer(self, text: str) -> None:
        """Send `text` into the running turn (the server queues it when no turn runs)."""
        if text:
            self._call(self.client.send, self.session_id, text, steer=True)

    def interrupt(self) -> None:
        """Stop the running turn over HTTP (its open requests are refused; queued messages stay)."""
        if self._call(self.client.interrupt, self.session_id) == (True, False):
            self.say("no turn is running (Ctrl-D detaches)")

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> tuple[bool, Any]:
        """One request to the server: (done, its answer); a refusal is said in one line and the session goes
        on."""
        try:
            return True, fn(*args, **kwargs)
        except ServeClientError as exc:  # refused, or (status 0) the server is gone
            self.say(f"✗ {exc.message}" if exc.status == 0 else f"✗ the server refused: {exc.message}", "red")
        return False, None

    def prompt(self) -> str:
        """The prompt's text: the question when a request is open."""
        if self.pending:
            return "allow? [y/a/n] "
        return "… " if self.status in ("running", "waiting") else "› "


def pump(stream: ServeClient, session_id: str, after: int, deliver: Callable[[dict[str, Any]], None]) -> str | None:
    """Hand each of the session's events after `after` to `deliver` until the session closes (None) or the
    stream ends otherwise (why, in words: the server stopped, or the connection broke)."""
    try:
        for event in stream.events(session_id, after=after):
            deliver(event)
            if event.get("type") == "SessionClosed":
                return None
    except ServeClientError as exc:
        if exc.status == 404:  # closed before the stream was opened
            deliver({"type": "SessionClosed"})
            return None
        return f"lost the server: {exc.message}"
    except Exception as exc:  # the connection broke (the HTTP library's errors): said once, then detached
        return f"lost the server: {type(exc).__name__}: {exc}"
    return "the server ended the session's events (it stopped)"


class LineWriter:
    """A console's file that hands whole lines to the current `sys.stdout` (prompt_toolkit's proxy prints
    them above the line being typed; a half line would be redrawn under the prompt)."""

    def __init__(self) -> None:
        self.buffer = ""

    def write(self, text: str) -> int:
        self.buffer += text
        head, sep, self.buffer = self.buffer.rpartition("\n")
        if sep:
            sys.stdout.write(head + "\n")
            sys.stdout.flush()
        return len(text)

    def flush(self) -> None:
        """Whole lines only (see the class)."""

    def isatty(self) -> bool:
        return False
