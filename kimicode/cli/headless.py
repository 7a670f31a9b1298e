"""Headless runs (`kimicode -p`): printers for text, json and stream-json, signals and exit codes."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from typing import IO, Any

from kimicode.agent.core import Agent
from kimicode.agent.events import (
    ContentDelta,
    Event,
    MessageCommitted,
    Notice,
    PermissionDenied,
    ReasoningDelta,
    Retrying,
    ToolArgumentsDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnFinished,
)

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_LIMIT = 3
EXIT_TRANSIENT = 75
EXIT_INTERRUPTED = 130


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
    return EXIT_FAILURE


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
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self._in_reasoning = False

    def line(self, obj: dict[str, Any]) -> None:
        """One JSON object per line, flushed (stream-json)."""
        self.out.write(json.dumps(obj, ensure_ascii=False) + "\n")
        self.out.flush()

    def init(self, agent: Agent) -> None:
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
        if self.fmt == "stream-json":
            self._stream_json(ev)
        elif self.verbose:
            self._progress(ev)
        elif isinstance(ev, Notice) and ev.level != "info":
            # warnings (an ignored project setting, a sandbox that is unavailable) are shown even when quiet
            self.err.write(f"kimicode: {ev.level}: {ev.text}\n")
            self.err.flush()

    def _stream_json(self, ev: Event) -> None:
        if isinstance(ev, Notice):
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
            w(ev.text)
        elif isinstance(ev, ContentDelta):
            if self._in_reasoning:
                w("\n")
                self._in_reasoning = False
        elif isinstance(ev, ToolCallStarted):
            if self._in_reasoning:
                w("\n")
                self._in_reasoning = False
            args = json.dumps(dict(ev.arguments), ensure_ascii=False)
            w(f"→ {ev.name} {args[:200]}\n")
        elif isinstance(ev, ToolCallFinished):
            status = "error" if ev.is_error else "ok"
            w(f"  {ev.summary or ev.name} [{status}]\n")
        elif isinstance(ev, PermissionDenied):
            w(f"✗ denied {ev.name}: {ev.reason}\n")
        elif isinstance(ev, Retrying):
            w(f"↻ retry {ev.attempt}/{ev.max_retries} in {ev.delay:.1f}s: {ev.error}\n")
        elif isinstance(ev, Notice):
            w(f"! {ev.text}\n")
        self.err.flush()

    def result(self, obj: dict[str, Any]) -> None:
        if self.fmt in ("json", "stream-json"):
            self.line(obj)
            return
        if self._in_reasoning:
            self.err.write("\n")
        text = obj["result"] or ""
        if text:
            self.out.write(text if text.endswith("\n") else text + "\n")
            self.out.flush()
        if obj["status"] != "success":
            self.err.write(f"kimicode: {obj['status']}: {obj['error'] or 'no details'}\n")
            self.err.flush()


def result_object(agent: Agent, finished: TurnFinished, duration_ms: int) -> dict[str, Any]:
    """The final `result` object (the `json` format prints exactly this)."""
    return {
        "type": "result",
        "status": finished.status,
        "result": finished.result,
        "session_id": agent.session_id,
        "num_turns": finished.num_steps,
        "usage": dict(agent.usage),
        "duration_ms": duration_ms,
        "permission_denials": [dict(d) for d in finished.permission_denials],
        "error": finished.error,
        "context": {
            "used": agent.context.used,
            "window": agent.context_window,
            "cached_ratio": round(agent.usage["cached_tokens"] / agent.usage["prompt_tokens"], 4)
            if agent.usage.get("prompt_tokens")
            else 0.0,
        },
    }


async def run_headless(agent: Agent, prompt: str, printer: Printer) -> int:
    """Run one task to completion; Ctrl-C / SIGTERM interrupt it cleanly (exit 130)."""
    start = time.monotonic()
    loop = asyncio.get_running_loop()
    hits = 0

    def on_signal() -> None:
        nonlocal hits
        hits += 1
        if hits > 1:  # a second Ctrl-C while cleaning up: leave now
            sys.stderr.write("kimicode: interrupted twice, exiting\n")
            raise SystemExit(EXIT_INTERRUPTED)
        agent.interrupt()

    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, on_signal)
        except (NotImplementedError, RuntimeError):
            pass
    from kimicode.agent.ecosystem import start_mcp

    await start_mcp(agent)  # so the init message lists the MCP servers' tools
    printer.init(agent)
    finished: TurnFinished | None = None
    try:
        async for ev in agent.stream(prompt):
            printer.event(ev)
            if isinstance(ev, TurnFinished):
                finished = ev
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.remove_signal_handler(sig)
            except (NotImplementedError, RuntimeError):
                pass
        await agent.aclose()
    assert finished is not None
    printer.result(result_object(agent, finished, int((time.monotonic() - start) * 1000)))
    return exit_code_for(finished)
