"""Headless runs (`kimicode -p`): printers for text, json and stream-json, signals and exit codes."""

from __future__ import annotations

import asyncio
import json
import shlex
import signal
import sys
import time
from collections.abc import Callable, Mapping
from typing import IO, TYPE_CHECKING, Any

from kimicode.agent.core import Agent
from kimicode.events import (
    ContentDelta,
    Event,
    HookRan,
    MessageCommitted,
    Notice,
    PermissionDenied,
    ReasoningDelta,
    Retrying,
    SubagentEvent,
    ToolArgumentsDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnFinished,
)
from kimicode.termsafe import sanitize

if TYPE_CHECKING:
    from kimicode.agent.structured import Outcome, OutputSpec
    from kimicode.config.redact import Masker

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_LIMIT = 3
EXIT_BUDGET = 4
EXIT_INVALID_OUTPUT = 6
"""`--output-schema`/`--json-schema`: no answer matched the schema (status `invalid_output`)."""
"""`--max-budget-usd` stopped the run (status `budget`)."""
EXIT_TRANSIENT = 75
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143
"""128 + SIGTERM: what shells and CI runners report for a job that was terminated."""
TERMINATED = "terminated by SIGTERM"


def exit_code_for(event: TurnFinished) -> int:
    """The documented exit code for how a turn ended."""
    if event.status == "success":
        return EXIT_OK
    if event.status == "interrupted":
        return EXIT_INTERRUPTED
    if event.status in ("max_turns", "repeat_limit"):
        return EXIT_LIMIT
    if event.error_kind == "transient":
        return EXIT_TRANSIENT
    if event.error_kind == "session_log":  # KIMICODE_HOME unwritable or full: a setup problem, like bad flags
        return EXIT_USAGE
    return EXIT_FAILURE


class SafeText:
    """A text stream that writes what its encoding cannot (a lone surrogate: a file name that is not UTF-8,
    decoded by `os.fsdecode`; any non-ASCII character on an `ascii` stream) as `\\uXXXX` escapes (a UTF-16
    pair above U+FFFF) instead of failing: in a JSON line that is the string's own escape, read back as
    the same text; in plain text it shows which character (or byte) it was."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except UnicodeEncodeError:
            return self.stream.write(_escaped(text, getattr(self.stream, "encoding", None) or "utf-8"))

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()


class Printer:
    """Turns events into the chosen output format."""

    def __init__(
        self,
        fmt: str,
        *,
        include_partial: bool = False,
        verbose: bool = False,
        out: IO[str] | None = None,
        err: IO[str] | None = None,
    ) -> None:
        self.fmt = fmt
        self.include_partial = include_partial
        self.verbose = verbose
        self.out = SafeText(out or sys.stdout)
        self.err = SafeText(err or sys.stderr)
        self._in_reasoning = False
        self.denials: list[PermissionDenied] = []
        self.permission_mode = "default"
        self.masker: Masker | None = None
        """The agent's: every known secret is masked in what is printed (set by `init`)."""

    def line(self, obj: dict[str, Any]) -> None:
        """One JSON object per line, flushed (stream-json)."""
        text = json.dumps(obj, ensure_ascii=False)
        self.out.write((self.masker.mask(text) if self.masker is not None else text) + "\n")
        self.out.flush()

    def init(self, agent: Agent) -> None:
        self.permission_mode = agent.permission_mode
        self.masker = getattr(agent, "masker", None)
        if self.fmt == "stream-json":
            self.line(
                {
                    "type": "init",
                    "session_id": agent.session_id,
                    "model": agent.endpoint.model,
                    "cwd": str(agent.workspace),
                    "tools": agent.tools.names,
                    "permission_mode": agent.permission_mode,
                }
            )

    def event(self, ev: Event) -> None:
        if isinstance(ev, SubagentEvent):
            self._subagent(ev)
            return
        if isinstance(ev, PermissionDenied):
            self.denials.append(ev)
        if self.fmt == "stream-json":
            self._stream_json(ev)
        elif self.verbose:
            self._progress(ev)
        elif isinstance(ev, Notice) and ev.level != "info":
            # warnings (an ignored project setting, a sandbox that is unavailable) are shown even when quiet
            self.err.write(f"kimicode: {ev.level}: {one_line(ev.text)}\n")
            self.err.flush()
        elif self.fmt in ("text", "json") and isinstance(ev, (PermissionDenied, Retrying)):
            # a quiet run still says what it refused and why it is waiting, on stderr: one line each (json's
            # stdout is its one result object)
            self.err.write((denial_line(ev) if isinstance(ev, PermissionDenied) else retry_line(ev)) + "\n")
            self.err.flush()

    def _subagent(self, ev: SubagentEvent) -> None:
        """A subagent's message or denial: a stream-json line with `parent_tool_use_id`, or a text line."""
        inner = ev.event
        if isinstance(inner, PermissionDenied):
            self.denials.append(inner)
        if self.fmt == "stream-json":
            if isinstance(inner, MessageCommitted):
                self.line({"type": "message", "message": inner.message, "parent_tool_use_id": ev.parent_call_id})
            else:
                self.line(
                    {
                        "type": "permission_denied",
                        "parent_tool_use_id": ev.parent_call_id,
                        "tool_name": inner.name,
                        "tool_use_id": inner.call_id,
                        "tool_input": dict(inner.arguments),
                        "reason": inner.reason,
                    }
                )
        elif isinstance(inner, PermissionDenied) and (self.verbose or self.fmt in ("text", "json")):
            self.err.write(f"{denial_line(inner)} (in subagent {one_line(ev.description, 80)})\n")
            self.err.flush()
        elif self.verbose and isinstance(inner, MessageCommitted):
            for call in inner.message.get("tool_calls") or ():
                fn = call.get("function") or {}
                args = str(fn.get("arguments") or "")
                self.err.write(
                    f"  ↳ [{one_line(ev.description, 40)}] → {one_line(str(fn.get('name')), 40)} "
                    f"{one_line(args, 200)}\n"
                )
            self.err.flush()

    def _stream_json(self, ev: Event) -> None:
        if isinstance(ev, HookRan):
            self.line(
                {
                    "type": "hook",
                    "event": ev.hook_event,
                    "command": ev.command,
                    "outcome": ev.outcome,
                    "exit_code": ev.exit_code,
                    "duration_ms": ev.duration_ms,
                    "message": ev.message,
                    "tool_use_id": ev.call_id,
                    "source": ev.source,
                }
            )
        elif isinstance(ev, Notice):
            self.line({"type": "notice", "level": ev.level, "text": ev.text})
        elif isinstance(ev, MessageCommitted):
            if ev.message.get("role") in ("assistant", "tool"):
                self.line({"type": "message", "message": ev.message})
        elif self.include_partial and isinstance(ev, ReasoningDelta):
            self.line({"type": "delta", "kind": "reasoning", "text": ev.text})
        elif self.include_partial and isinstance(ev, ContentDelta):
            self.line({"type": "delta", "kind": "content", "text": ev.text})
        elif self.include_partial and isinstance(ev, ToolArgumentsDelta):
            self.line({"type": "delta", "kind": "tool_arguments", "index": ev.index, "text": ev.text})
        elif isinstance(ev, Retrying):
            retry = {"attempt": ev.attempt, "max_retries": ev.max_retries, "delay": ev.delay, "error": ev.error}
            self.line({"type": "retry", **retry})

    def _progress(self, ev: Event) -> None:
        """`--verbose` text mode: what the agent does, on stderr, one line per thing."""
        w = self.err.write
        if isinstance(ev, ReasoningDelta):
            if not self._in_reasoning:
                w("[thinking] ")
                self._in_reasoning = True
            w(sanitize(ev.text))
        elif isinstance(ev, ContentDelta):
            if self._in_reasoning:
                w("\n")
                self._in_reasoning = False
        elif isinstance(ev, ToolCallStarted):
            if self._in_reasoning:
                w("\n")
                self._in_reasoning = False
            args = json.dumps(dict(ev.arguments), ensure_ascii=False)
            w(f"→ {sanitize(ev.name, sequences='escape')} {sanitize(args[:200], sequences='escape')}\n")
        elif isinstance(ev, ToolCallFinished):
            status = "error" if ev.is_error else "ok"
            w(f"  {one_line(ev.summary or ev.name)} [{status}]\n")
        elif isinstance(ev, PermissionDenied):
            w(denial_line(ev) + "\n")
        elif isinstance(ev, Retrying):
            if self._in_reasoning:
                w("\n")
                self._in_reasoning = False
            w(retry_line(ev) + "\n")
        elif isinstance(ev, Notice):
            w(f"! {sanitize(ev.text, sequences='escape')}\n")
        elif isinstance(ev, HookRan):
            w(f"  hook {ev.hook_event} {one_line(ev.command, 80)}: {ev.outcome} {one_line(ev.message, 120)}\n")
        self.err.flush()

    def result(self, obj: dict[str, Any]) -> None:
        if self.fmt in ("json", "stream-json"):
            self.line(obj)
            if self.fmt == "json" and self.denials:
                self.err.write(denial_summary(self.denials, self.permission_mode) + "\n")
                self.err.flush()
            return
        if self._in_reasoning:
            self.err.write("\n")
        text = obj["result"] or ""
        if "structured_output" in obj:  # --json-schema: the JSON alone, nothing when it never matched
            value = obj["structured_output"]
            text = json.dumps(value, ensure_ascii=False) if obj["status"] == "success" else ""
        if text and _isatty(self.out):  # the model's answer on a terminal: no control sequences
            text = sanitize(text)
        if text:
            self.out.write(text if text.endswith("\n") else text + "\n")
            self.out.flush()
        if obj["status"] == "interrupted":
            self.err.write(f"kimicode: {one_line(obj['error'] or 'interrupted')}\n")
            self.err.flush()
        elif obj["status"] != "success":
            self.err.write(f"kimicode: {obj['status']}: {one_line(obj['error'] or 'no details')}\n")
            self.err.flush()
        if self.denials:
            self.err.write(denial_summary(self.denials, self.permission_mode) + "\n")
            self.err.flush()


def _escaped(text: str, encoding: str) -> str:
    """`text` with each character `encoding` cannot encode as its JSON escape (`\\uXXXX`)."""
    out = []
    for ch in text:
        try:
            ch.encode(encoding)
        except UnicodeEncodeError:
            code = ord(ch)
            if code > 0xFFFF:
                code -= 0x10000
                out.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
            else:
                out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


def _isatty(stream: IO[str] | SafeText) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def one_line(text: str, width: int = 300) -> str:
    """`text` on one line, safe for a terminal: control characters and escape sequences are shown
    escaped (kimicode.termsafe), runs of whitespace become one space, cut to `width` characters."""
    flat = " ".join(sanitize(text, sequences="escape").split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _call_text(name: str, arguments: Mapping[str, Any]) -> str:
    """The refused call in a few words: `bash: npm test`, `write_file src/app.py`, `web_fetch`."""
    command = arguments.get("command")
    if name == "bash" and isinstance(command, str):
        return f"bash: {one_line(command, 120)}"
    for key in ("path", "url", "pattern"):
        value = arguments.get(key)
        if isinstance(value, str) and value:
            return f"{name} {one_line(value, 120)}"
    return name


def denial_line(ev: PermissionDenied) -> str:
    """One stderr line for a refused call, with what would allow it."""
    head = f"kimicode: refused {_call_text(ev.name, ev.arguments)} ({one_line(ev.reason, 200)})"
    if ev.hook:  # no flag allows what a hook refuses: name the hook
        return f"{head}; refused by the {one_line(ev.hook, 400)}: change that hook to allow it"
    if ev.by_rule:
        return f"{head}; a deny rule forbids it"
    rules = (ev.suggestion or "").splitlines()  # one rule per part of a compound command that needs one
    options = [" ".join(f"--allow {shlex.quote(one_line(rule, 200))}" for rule in rules)] if rules else []
    if ev.kind == "edit":
        options.append("--permission-mode accept-edits")
    if not options:
        options.append(f"--allow {shlex.quote(ev.name)}")
    return f"{head}; to allow it: {' or '.join(options)}"


def retry_line(ev: Retrying) -> str:
    """One stderr line per retry: when, then what the server said (which may end in "try again.")."""
    return f"kimicode: retry {ev.attempt}/{ev.max_retries} in {ev.delay:.1f}s after: {one_line(ev.error)}"


def denial_summary(denials: list[PermissionDenied], mode: str) -> str:
    """The last stderr line of a run that refused something: why, and the flags a CI job usually needs."""
    n = len(denials)
    what = f"{n} action{'s were' if n != 1 else ' was'} refused"
    if mode == "default":
        why = (
            "in --permission-mode default a headless run may only read: nothing can be approved; "
            "for a CI fix use e.g. --permission-mode accept-edits --allow 'bash(pytest*)'"
        )
    elif mode == "plan":
        why = "plan mode changes nothing; use --permission-mode accept-edits to let it edit"
    else:
        why = f"in --permission-mode {mode}; see the lines above for the --allow rule each one needs"
    return f"kimicode: {what} ({why})"


def result_object(agent: Agent, finished: TurnFinished, duration_ms: int) -> dict[str, Any]:
    """The final `result` object (the `json` format prints exactly this)."""
    from kimicode.agent.costs import session_cost

    cost = session_cost(agent)
    last = agent.checkpoints.last if agent.checkpoints is not None else None
    taken = last is not None and last.before is not None
    return {
        "type": "result",
        "status": finished.status,
        "result": finished.result,
        "session_id": agent.session_id,
        "num_turns": finished.num_steps,
        "usage": dict(agent.usage),
        "cost_usd": round(cost, 6) if cost is not None else None,
        "duration_ms": duration_ms,
        "permission_denials": [dict(d) for d in finished.permission_denials],
        "error": finished.error,
        "changes": last.changes.as_dict() if taken and last is not None and last.after else None,
        "checkpoint": last.before if taken and last is not None else None,
        "context": {
            "used": agent.context.used,
            "window": agent.effective_window,
            "window_source": agent.window_source,
            "cached_ratio": round(agent.usage["cached_tokens"] / agent.usage["prompt_tokens"], 4)
            if agent.usage.get("prompt_tokens")
            else 0.0,
        },
    }


async def stream_turn(agent: Agent, text: str, printer: Printer) -> TurnFinished:
    """One turn, each event through the printer; its TurnFinished."""
    finished: TurnFinished | None = None
    async for ev in agent.stream(text):
        printer.event(ev)
        if isinstance(ev, TurnFinished):
            finished = ev
    assert finished is not None
    return finished


def add_structured(result: dict[str, Any], outcome: Outcome) -> int | None:
    """Put a structured run's outcome in the result object: `structured_output`, or the status
    `invalid_output` with the validation errors (its exit code, else None)."""
    from kimicode.agent.structured import INVALID, invalid_message

    result["num_turns"] = sum(t.num_steps for t in outcome.turns)
    result["attempts"] = len(outcome.turns)
    result["structured_output"] = outcome.value if outcome.valid else None
    if outcome.valid or result["status"] != "success":
        return None
    result["status"] = INVALID
    result["error"] = invalid_message(outcome)
    result["validation_errors"] = outcome.problems
    return EXIT_INVALID_OUTPUT


async def turn_result(
    agent: Agent, text: str, printer: Printer, spec: OutputSpec | None, start: float
) -> tuple[dict[str, Any], TurnFinished, int | None]:
    """Run one task's turn (with `spec`, until its answer matches: agent/structured.py), events through the
    printer: (the result object, the last TurnFinished, exit 6 when the answer never matched else None)."""
    outcome: Outcome | None = None
    if spec is None:
        finished = await stream_turn(agent, text, printer)
    else:
        from kimicode.agent.structured import until_valid

        outcome = await until_valid(agent, spec, text, lambda t: stream_turn(agent, t, printer))
        finished = outcome.turns[-1]
    result = result_object(agent, finished, int((time.monotonic() - start) * 1000))
    return result, finished, add_structured(result, outcome) if outcome is not None else None


def on_stop_signals(handler: Callable[[signal.Signals], None]) -> Callable[[], None]:
    """Ctrl-C (SIGINT) and SIGTERM call `handler(sig)` on the running loop instead of raising (where the loop
    takes signal handlers); returns the function that gives them back, for a `finally`."""
    loop = asyncio.get_running_loop()
    stops = (signal.SIGINT, signal.SIGTERM)
    for sig in stops:
        try:
            loop.add_signal_handler(sig, handler, sig)
        except (NotImplementedError, RuntimeError):
            pass

    def release() -> None:
        for sig in stops:
            try:
                loop.remove_signal_handler(sig)
            except (NotImplementedError, RuntimeError):
                pass

    return release


async def run_headless(
    agent: Agent, prompt: str, printer: Printer, *, budget: float | None = None, spec: OutputSpec | None = None
) -> int:
    """Run one task to completion; Ctrl-C (exit 130) and SIGTERM (exit 143) interrupt it cleanly.

    With `budget` (dollars) the run stops once its cost passes it: status `budget`, exit 4. With `spec`
    (`--json-schema`) the answer must match it (agent/structured.py): `structured_output`, else exit 6.
    """
    over: list[float] = []
    if budget is not None:  # the batch package is not needed otherwise (~10 ms of imports)
        from kimicode.batch.runner import watch_budget

        over = watch_budget(agent, budget)
    start = time.monotonic()
    hits = 0
    terminated = False

    def on_signal(sig: signal.Signals) -> None:
        nonlocal hits, terminated
        hits += 1
        if hits > 1:  # a second Ctrl-C while cleaning up: leave now
            sys.stderr.write("kimicode: interrupted twice, exiting\n")
            raise SystemExit(EXIT_TERMINATED if terminated else EXIT_INTERRUPTED)
        terminated = sig == signal.SIGTERM
        agent.interrupt()

    release = on_stop_signals(on_signal)
    from kimicode.agent.ecosystem import start_mcp

    await start_mcp(agent)  # so the init message lists the MCP servers' tools
    printer.init(agent)
    try:
        result, finished, invalid = await turn_result(agent, prompt, printer, spec, start)
    finally:
        release()
        await agent.aclose()
    if over and finished.status == "interrupted":
        result["status"] = "budget"
        result["error"] = f"stopped: the cost ${over[0]:.4f} passed --max-budget-usd {budget:g}"
        printer.result(result)
        return EXIT_BUDGET
    if terminated and finished.status == "interrupted":
        result["error"] = TERMINATED
        printer.result(result)
        return EXIT_TERMINATED
    printer.result(result)
    return invalid if invalid is not None else exit_code_for(finished)
