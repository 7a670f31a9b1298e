"""Running hooks: each matching command gets one JSON object on stdin and answers by exit code or JSON
on stdout (Claude Code's protocol); hooks of one event run in parallel, each under its timeout.

`Hooks.run` returns one `Verdict` for the event: the strongest decision of its hooks (deny over ask over
allow; block), their reasons, the context they add, an `updatedInput`, a request to stop, messages for
the user, and one `HookReport` per hook for events and the session log.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from kimicode.extensions.hooks import HookSet, HookSpec, hook_variables

MAX_OUTPUT = 256 * 1024
"""Bytes of a hook's stdout or stderr that are read (a hook is not a data pipe)."""
PERMISSION_EVENTS = frozenset({"PreToolUse", "PermissionRequest"})
BLOCKING_EVENTS = frozenset({"PreToolUse", "PermissionRequest", "UserPromptSubmit", "Stop", "SubagentStop"})
"""Events whose hooks may refuse (exit code 2, `decision: "block"`, `permissionDecision: "deny"`)."""
CONTEXT_EVENTS = frozenset({"SessionStart", "UserPromptSubmit"})
"""Events whose hooks' plain stdout is added to the conversation (as in Claude Code)."""
Decision = Literal["allow", "ask", "deny", "block"]
_RANK = {"allow": 1, "ask": 2, "deny": 3, "block": 3}


@dataclass(frozen=True)
class HookReport:
    """How one hook run went: what faces and the session log show."""

    event: str
    command: str
    source: str
    outcome: str
    """`ok`, `allow`, `ask`, `deny`, `block`, `context`, `stop`, `failed` (fail open) or `refused`
    (failed closed)."""
    exit_code: int | None
    duration_ms: int
    message: str = ""


@dataclass
class Verdict:
    """What the hooks of one event decided together."""

    decision: Decision | None = None
    reasons: list[str] = field(default_factory=list)
    context: list[str] = field(default_factory=list)
    updated_input: dict[str, Any] | None = None
    stop: str | None = None
    """`continue: false` from a hook: the turn ends, with this reason (its `stopReason`)."""
    messages: list[str] = field(default_factory=list)
    """Lines for the user: `systemMessage`s and failures."""
    reports: list[HookReport] = field(default_factory=list)

    @property
    def reason(self) -> str:
        return "; ".join(r for r in self.reasons if r) or "a hook refused it"

    def decide(self, decision: Decision, reason: str = "") -> None:
        if self.decision is None or _RANK[decision] > _RANK[self.decision]:
            self.decision = decision
        if reason and decision in ("deny", "block", "ask"):
            self.reasons.append(reason)


EMPTY = Verdict()


@dataclass
class _Run:
    spec: HookSpec
    exit_code: int | None
    stdout: str
    stderr: str
    duration_ms: int
    error: str | None = None


async def _run_one(spec: HookSpec, stdin: bytes, cwd: str, env: Mapping[str, str]) -> _Run:
    """Run one hook in its own process group; a timeout kills the group. A hook function (`spec.call`)
    runs in-process under the same timeout."""
    started = time.monotonic()
    if spec.call is not None:
        try:
            async with asyncio.timeout(spec.timeout):
                code, answer, complaint = await spec.call(stdin)
        except TimeoutError:
            return _Run(
                spec, None, "", "", int((time.monotonic() - started) * 1000), f"timed out after {spec.timeout:g} s"
            )
        return _Run(spec, code, answer.strip(), complaint.strip(), int((time.monotonic() - started) * 1000))
    try:
        proc = await asyncio.create_subprocess_exec(
            "/bin/sh",
            "-c",
            spec.command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=cwd,
            env=dict(env),
            start_new_session=True,
        )
    except OSError as exc:
        return _Run(spec, None, "", "", 0, f"could not start: {exc}")
    try:
        async with asyncio.timeout(spec.timeout):
            out, err, _ = await asyncio.gather(_keep(proc.stdout), _keep(proc.stderr), _feed(proc.stdin, stdin))
            await proc.wait()
    except TimeoutError:
        _kill(proc.pid)
        with contextlib.suppress(Exception):
            await proc.wait()
        ms = int((time.monotonic() - started) * 1000)
        return _Run(spec, None, "", "", ms, f"timed out after {spec.timeout:g} s")
    except asyncio.CancelledError:
        _kill(proc.pid)
        raise
    ms = int((time.monotonic() - started) * 1000)
    return _Run(spec, proc.returncode, _text(out), _text(err), ms)


async def _keep(stream: asyncio.StreamReader | None) -> bytes:
    """The first MAX_OUTPUT bytes of a hook's output; the rest is read and dropped (a hook that floods
    its output must not fill kimicode's memory)."""
    kept = bytearray()
    while stream is not None and (chunk := await stream.read(65536)):
        if len(kept) < MAX_OUTPUT:
            kept += chunk[: MAX_OUTPUT - len(kept)]
    return bytes(kept)


async def _feed(pipe: asyncio.StreamWriter | None, data: bytes) -> None:
    """Write the payload; a hook that exits without reading it is not an error."""
    if pipe is None:
        return
    try:
        pipe.write(data)
        await pipe.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        with contextlib.suppress(OSError):
            pipe.close()


def _kill(pid: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)


def _text(data: bytes) -> str:
    return data[:MAX_OUTPUT].decode("utf-8", errors="replace").strip()


def _first_line(text: str, width: int = 300) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= width else line[: width - 1] + "…"


def _interpret(run: _Run, verdict: Verdict) -> HookReport:
    spec = run.spec
    event = spec.event

    def report(outcome: str, message: str = "") -> HookReport:
        return HookReport(event, spec.command, spec.source, outcome, run.exit_code, run.duration_ms, message)

    if (
        run.error is None
        and run.exit_code == 0
        and run.stdout.startswith("{")
        and _json_answer(run.stdout) is None
        and spec.fails_closed
    ):  # a guard's answer cut off (too long, a crash mid-write) is a failure
        run.error = "its JSON answer could not be read (malformed, or over 256 KiB)"
    if run.error is not None or run.exit_code not in (0, 2):
        why = run.error or f"exit code {run.exit_code}" + (f": {_first_line(run.stderr)}" if run.stderr else "")
        if spec.fails_closed and event in BLOCKING_EVENTS:
            reason = f"the {event} hook `{_first_line(spec.command, 80)}` failed ({why}); refused (fail closed)"
            verdict.decide("deny" if event in PERMISSION_EVENTS else "block", reason)
            verdict.messages.append(reason)
            return report("refused", why)
        went = {"PreToolUse": "the call went ahead", "PermissionRequest": "the usual question applies"}
        tail = went.get(event, "ignored")
        hint = ' (on_error = "block" refuses instead)' if event in PERMISSION_EVENTS else ""
        verdict.messages.append(f"the {event} hook `{_first_line(spec.command, 80)}` failed ({why}); {tail}{hint}")
        return report("failed", why)
    if run.exit_code == 2:
        reason = run.stderr or f"blocked by the {event} hook"
        if event in PERMISSION_EVENTS:
            verdict.decide("deny", reason)
            return report("deny", _first_line(reason))
        if event in BLOCKING_EVENTS:
            verdict.decide("block", reason)
            return report("block", _first_line(reason))
        if event in ("PostToolUse", "PostToolUseFailure"):
            verdict.context.append(reason)  # shown to the model, as in Claude Code
            return report("block", _first_line(reason))
        verdict.messages.append(f"{event} hook: {_first_line(reason)}")
        return report("ok", _first_line(reason))
    answer = _json_answer(run.stdout)
    if answer is None:
        if run.stdout and event in CONTEXT_EVENTS:
            verdict.context.append(run.stdout)
            return report("context")
        return report("ok")
    return _apply_json(answer, spec, verdict, report)


def _json_answer(stdout: str) -> dict[str, Any] | None:
    if not stdout.startswith("{"):
        return None
    try:
        data = json.loads(stdout)
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def _apply_json(answer: dict[str, Any], spec: HookSpec, verdict: Verdict, report: Any) -> HookReport:
    """Claude Code's JSON answer: continue/stopReason, systemMessage, decision/reason and the event's
    hookSpecificOutput (permissionDecision, updatedInput, additionalContext, PermissionRequest's decision)."""
    event = spec.event
    outcome = "ok"
    if isinstance(answer.get("systemMessage"), str) and answer["systemMessage"].strip():
        verdict.messages.append(answer["systemMessage"].strip())
    specific = answer.get("hookSpecificOutput")
    specific = specific if isinstance(specific, dict) else {}
    reason = str(answer.get("reason") or "")
    decision = answer.get("decision")
    if event in PERMISSION_EVENTS:
        outcome = _permission_answer(answer, specific, event, verdict) or outcome
    elif decision == "block":
        if event in BLOCKING_EVENTS:
            verdict.decide("block", reason or f"blocked by the {event} hook")
        elif reason:
            verdict.context.append(reason)  # PostToolUse: the reason is told to the model
        outcome = "block"
    context = specific.get("additionalContext")
    if isinstance(context, str) and context.strip():
        verdict.context.append(context.strip())
        outcome = outcome if outcome != "ok" else "context"
    if answer.get("continue") is False:
        verdict.stop = str(answer.get("stopReason") or f"stopped by the {event} hook")
        outcome = "stop"
    return report(outcome, _first_line(verdict.reason) if outcome in ("deny", "block") else "")  # type: ignore[no-any-return]


def _permission_answer(answer: dict[str, Any], specific: dict[str, Any], event: str, verdict: Verdict) -> str | None:
    """PreToolUse's `permissionDecision` (or the older `decision: approve|block`) and PermissionRequest's
    `decision.behavior`; the first `updatedInput` given with an allow (or no decision) is kept."""
    choice: str | None = None
    reason = ""
    updated: Any = None
    if event == "PreToolUse":
        choice = specific.get("permissionDecision")
        reason = str(specific.get("permissionDecisionReason") or answer.get("reason") or "")
        updated = specific.get("updatedInput")
        legacy = answer.get("decision")
        if choice is None and legacy in ("approve", "block"):
            choice = "allow" if legacy == "approve" else "deny"
    else:
        inner = specific.get("decision")
        if isinstance(inner, dict):
            choice = inner.get("behavior")
            reason = str(inner.get("message") or "")
            updated = inner.get("updatedInput")
    if isinstance(updated, dict) and choice in (None, "allow", "ask") and verdict.updated_input is None:
        verdict.updated_input = updated
    for known in ("allow", "ask", "deny"):
        if choice == known:
            verdict.decide(known, reason or f"the {event} hook said {known}")
            return known
    return None


class Hooks:
    """The hooks of one agent: which match an event, and running them with the common payload fields."""

    def __init__(self, hookset: HookSet, workspace: Path, env: Mapping[str, str]) -> None:
        self.set = hookset
        self.workspace = workspace
        self.env = dict(env)

    def matching(self, event: str, values: tuple[str, ...] = ()) -> list[HookSpec]:
        """The hooks that would run (an empty list costs one dict lookup)."""
        return self.set.matching(event, values)

    async def run(self, specs: list[HookSpec], payload: Mapping[str, Any]) -> Verdict:
        """Run `specs` in parallel with `payload` on stdin, each with the project folder (and its plugin's
        folder) in its environment, and combine their answers in configuration order."""
        verdict = Verdict()
        if not specs:
            return verdict
        # A lone surrogate (from a model's `"\ud800"`) cannot be UTF-8: it becomes the JSON escape `\ud800`
        # (inside a JSON string, where json.dumps put it), so the hook still gets valid JSON and nothing crashes.
        stdin = json.dumps(payload, ensure_ascii=False, default=str).encode("utf-8", "backslashreplace")
        cwd = str(self.workspace)
        runs = await asyncio.gather(
            *(_run_one(s, stdin, cwd, {**self.env, **hook_variables(self.workspace, s.plugin_root)}) for s in specs)
        )
        for run in runs:  # the first updatedInput wins
            verdict.reports.append(_interpret(run, verdict))
        return verdict
