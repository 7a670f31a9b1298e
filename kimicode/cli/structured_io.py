"""Headless runs for programs: `--output-schema FILE` / `--json-schema JSON` (the answer must be JSON valid
against a schema) and `--input-format stream-json` (a conversation held over stdin).

Streaming input reads Claude Code's shape, one JSON object per line:
`{"type": "user", "message": {"role": "user", "content": "..." | [{"type": "text", "text": ...}, ...]}}`.
The messages run one after the other in one session, each turn streamed as stream-json and ended by its
`result` line; `{"type": "control_request", "request": {"subtype": "interrupt"}}` stops the running turn
(the next message then runs). A line that is not such a message is an `error` line, and reading goes on.
End of input ends the run once the last turn is done.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import threading
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING

from kimicode.cli.ci_flags import FlagError

if TYPE_CHECKING:
    from kimicode.agent.core import Agent
    from kimicode.agent.structured import OutputSpec
    from kimicode.cli.headless import Printer

MAX_SCHEMA_BYTES = 1024 * 1024


def output_spec(output_schema: Path | None, json_schema: str | None) -> OutputSpec | None:
    """The schema of `--output-schema FILE` or `--json-schema JSON` (at most one), checked; FlagError says
    what is wrong with it."""
    from kimicode.agent.structured import OutputSpec
    from kimicode.errors import UsageError

    if output_schema is not None and json_schema is not None:
        raise FlagError("--output-schema and --json-schema both give the schema: use one")
    if output_schema is not None:
        flag = "--output-schema"
        try:
            if output_schema.stat().st_size > MAX_SCHEMA_BYTES:
                raise FlagError(f"--output-schema: {output_schema} is larger than {MAX_SCHEMA_BYTES} bytes")
            text = output_schema.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise FlagError(f"--output-schema: no such file: {output_schema}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise FlagError(f"--output-schema: cannot read {output_schema}: {exc}") from None
    elif json_schema is not None:
        flag, text = "--json-schema", json_schema
    else:
        return None
    try:
        schema = json.loads(text)
    except ValueError as exc:
        raise FlagError(f"{flag}: the schema is not JSON: {exc}") from None
    if not isinstance(schema, dict):
        raise FlagError(f"{flag}: the schema must be a JSON object (got {type(schema).__name__})")
    try:
        return OutputSpec.of(schema)
    except UsageError as exc:
        raise FlagError(f"{flag}: {exc}") from None


def user_text(line: str) -> tuple[str | None, str | None]:
    """(the text of a user message line, None), ("", None) for an interrupt, or (None, what is wrong)."""
    try:
        obj = json.loads(line)
    except ValueError as exc:
        return None, f"not JSON: {exc}"
    if not isinstance(obj, dict):
        return None, "expected a JSON object"
    if obj.get("type") == "control_request":
        request = obj.get("request")
        if isinstance(request, dict) and request.get("subtype") == "interrupt":
            return "", None
        return None, "unsupported control_request (only subtype interrupt is)"
    message = obj.get("message")
    if obj.get("type") != "user" or not isinstance(message, dict) or message.get("role", "user") != "user":
        return None, 'expected {"type": "user", "message": {"role": "user", "content": ...}}'
    content = message.get("content")
    if isinstance(content, str):
        text = content
    elif isinstance(content, list) and all(isinstance(p, dict) for p in content):
        if any(p.get("type") != "text" for p in content):
            return None, "only text content is supported in stream-json input"
        text = "\n".join(str(p.get("text") or "") for p in content)
    else:
        return None, "message.content must be a string or a list of text parts"
    if not text.strip():
        return None, "the message is empty"
    return text, None


def _read_lines(loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[str | None], stream: IO[str]) -> None:
    """Feed stdin's lines to `queue` from a thread (a pipe, a file or a terminal alike); None at the end."""
    try:
        for line in stream:
            loop.call_soon_threadsafe(queue.put_nowait, line)
    finally:
        loop.call_soon_threadsafe(queue.put_nowait, None)


async def run_stream_input(
    agent: Agent,
    printer: Printer,
    *,
    spec: OutputSpec | None = None,
    stream: IO[str] | None = None,
    budget: float | None = None,
) -> int:
    """Hold the conversation of stdin's stream-json lines (see the module docstring); the exit code is the
    last turn's (0 when none failed); Ctrl-C or SIGTERM stops the running turn and the run, and so does
    `budget` (`--max-budget-usd`: status `budget`, exit 4) once the session's cost passes it."""
    from kimicode.agent.ecosystem import start_mcp
    from kimicode.cli.headless import (
        EXIT_BUDGET,
        EXIT_INTERRUPTED,
        EXIT_OK,
        EXIT_TERMINATED,
        exit_code_for,
        on_stop_signals,
        turn_result,
    )

    over: list[float] = []
    if budget is not None:
        from kimicode.batch.runner import watch_budget

        over = watch_budget(agent, budget)

    async def run_turn(text: str) -> int:
        result, finished, invalid = await turn_result(agent, text, printer, spec, time.monotonic())
        if over and finished.status == "interrupted":
            result["status"] = "budget"
            result["error"] = f"stopped: the cost ${over[0]:.4f} passed --max-budget-usd {budget:g}"
            printer.result(result)
            return EXIT_BUDGET
        printer.result(result)
        return invalid if invalid is not None else exit_code_for(finished)

    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[str | None] = asyncio.Queue()
    threading.Thread(target=_read_lines, args=(loop, queue, stream or sys.stdin), daemon=True).start()
    stopped: list[signal.Signals] = []

    def on_signal(sig: signal.Signals) -> None:
        stopped.append(sig)
        agent.interrupt()

    release = on_stop_signals(on_signal)
    code = EXIT_OK
    await start_mcp(agent)
    printer.init(agent)
    pending: list[tuple[int, str]] = []  # (line number, line) read while a turn ran
    number = 0
    ended = False
    try:
        while not stopped:
            if not pending:
                if ended:
                    break
                got = await queue.get()
                if got is None:
                    break
                number += 1
                pending.append((number, got))
            at, line = pending.pop(0)
            if not line.strip():
                continue
            text, problem = user_text(line)
            if problem is not None or text is None:
                printer.line({"type": "error", "error": f"line {at}: {problem}", "line": at})
                continue
            if not text:  # an interrupt with no turn running: nothing to stop
                continue
            turn = asyncio.ensure_future(run_turn(text))
            while not turn.done():  # read on while the turn runs: an interrupt stops it, messages wait
                getter = asyncio.ensure_future(queue.get())
                await asyncio.wait({turn, getter}, return_when=asyncio.FIRST_COMPLETED)
                if not getter.done():
                    getter.cancel()
                    continue
                nxt = getter.result()
                if nxt is None:
                    ended = True
                    continue
                number += 1
                if user_text(nxt) == ("", None):
                    agent.interrupt()
                else:
                    pending.append((number, nxt))
            code = turn.result()
            if over:  # the budget is spent: no further message runs
                break
    finally:
        release()
        await agent.aclose()
    if stopped:
        return EXIT_TERMINATED if stopped[-1] == signal.SIGTERM else EXIT_INTERRUPTED
    return code
