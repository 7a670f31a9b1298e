"""One step's tool calls: prepare (parse, validate, repeat check), authorize (rules, approvals), execute.

Consecutive read-only calls run concurrently; results are committed in the order the model asked for
them. Every failure (unknown tool, bad arguments, denial, timeout, a crashing tool) becomes an error
result for the model, never an exception out of the turn.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from kimicode.agent.results import Approval, ApprovalRequest
from kimicode.config.choices import DEFAULT_REPEAT_LIMIT
from kimicode.events import Event, Notice, PermissionDenied, ToolCallFinished, ToolCallStarted, ToolOutputDelta, frozen
from kimicode.permissions.engine import decide, denial_message, target_path
from kimicode.permissions.pathresolve import approved_paths
from kimicode.tools.base import CURRENT_CALL_ID, Tool, ToolContext, ToolError, ToolResult
from kimicode.tools.progress import reporting
from kimicode.tools.registry import parse_arguments, validate
from kimicode.tools.workers import described, is_async_callable, run_blocking

if TYPE_CHECKING:
    from kimicode.agent.core import Agent
    from kimicode.checkpoints.session import SessionCheckpoints


async def run_tools(
    agent: Agent,
    calls: list[dict[str, Any]],
    finish_reason: str | None,
    repeats: RepeatTracker,
    denials: list[dict[str, Any]],
    pending: list[dict[str, Any]],
    emit: Callable[[Event], None],
) -> str | None:
    """Run one step's tool calls (consecutive reads concurrently), committing results in order.

    Returns a reason to stop the turn, or None.
    """
    prepared = [prepare(agent, call, finish_reason) for call in calls]
    stop: str | None = None
    for prep in prepared:
        count = repeats.see(prep.signature)
        limit = repeats.limit
        if limit is None or (prep.tool is not None and prep.tool.repeatable):
            continue  # no limit, or a tool that expects identical calls (polling)
        if count >= limit:
            prep.error = f"Not run: this exact call was repeated {count} times in a row. The turn is stopped."
            stop = f"stopped: the same {prep.name} call was repeated {count} times in a row"
        elif count >= max(2, limit - 2):
            prep.warning = (
                f"\n\n[warning: you have made this exact call {count} times in a row; it will not give a "
                "different result. Change your approach; at "
                f"{limit} repetitions the turn is stopped.]"
            )
    i = 0
    while i < len(prepared):
        batch = [prepared[i]]
        if prepared[i].concurrent:
            while i + len(batch) < len(prepared) and prepared[i + len(batch)].concurrent:
                batch.append(prepared[i + len(batch)])
        # Permission decisions (and approvals) happen before anything in the batch runs.
        for prep in batch:
            await authorize(agent, prep, denials, emit)
        if (cps := agent.checkpoints) is not None:
            await checkpoint_batch(agent, cps, batch, emit)
        results = await asyncio.gather(*(execute(agent, prep, emit) for prep in batch))
        for prep, content in zip(batch, results, strict=True):
            result = {"role": "tool", "tool_call_id": prep.call_id, "content": content}
            if prep.name.startswith("$"):  # a server's built-in function (Moonshot's $web_search) wants its name
                result["name"] = prep.name
            agent.commit(result, emit)
            pending[:] = [c for c in pending if c.get("id") != prep.call_id]
        i += len(batch)
    attached = [(prep.call_id, prep.name, prep.images) for prep in prepared if prep.images]
    if attached:  # images cannot go in tool messages: one user message after the step's results
        from kimicode.tools.images import images_message

        agent.commit(images_message(attached), emit)
    while agent.extras.steering and not stop:  # typed by the user while the step ran (ecosystem.steer)
        agent.commit({"role": "user", "content": agent.extras.steering.pop(0)}, emit)
    return stop


async def checkpoint_batch(
    agent: Agent, cps: SessionCheckpoints, batch: list[Prepared], emit: Callable[[Event], None]
) -> None:
    """Before a batch runs: a snapshot before the turn's first change, and what each call may change
    noted for the turn's last snapshot (kimicode's own edit tools name their files; see `known_writes`)."""
    from kimicode.agent.checkpointing import before_change, known_writes, may_change

    default = agent.settings.config.subagents.tools
    running = [p for p in batch if p.error is None and p.tool is not None]
    if any(may_change(p.tool, p.args, agent.tools, default) for p in running):
        await before_change(cps, emit)  # a snapshot before the turn's first change
    hooked = agent.extras.hooks is not None
    for p in running:
        cps.note(known_writes(p.tool, p.args, agent.ctx, hooked))


def prepare(agent: Agent, call: dict[str, Any], finish_reason: str | None) -> Prepared:
    fn = call.get("function") or {}
    name = str(fn.get("name") or "")
    raw = fn.get("arguments") or ""
    prep = Prepared(call_id=str(call.get("id") or ""), name=name, raw=raw)
    tool = agent.tools.get(name)
    if tool is None:
        prep.error = f"Unknown tool {name!r}. Available tools: {', '.join(agent.tools.names)}."
        return prep
    prep.tool = tool
    try:
        args = parse_arguments(raw)
    except ValueError as exc:
        if finish_reason == "length":
            prep.error = (
                "The tool call's arguments were cut off because the response reached the output token "
                "limit (max_completion_tokens). Send a smaller call, e.g. write the file in parts."
            )
        else:
            prep.error = f"Invalid arguments for {name}: {exc}. Received: {raw[:300]!r}"
        return prep
    problems = validate(tool.parameters, args)
    if problems:
        prep.error = f"Invalid arguments for {name}: " + "; ".join(problems[:5])
        return prep
    prep.args = args
    prep.canonical = json.dumps(args, sort_keys=True, ensure_ascii=False)
    prep.concurrent = tool.kind == "read"
    return prep


async def authorize(agent: Agent, prep: Prepared, denials: list[dict[str, Any]], emit: Callable[[Event], None]) -> None:
    if prep.error is not None or prep.tool is None:
        return
    tool = prep.tool
    try:
        decision = decide(tool, prep.args, agent.permission_mode, agent.ctx, agent.policy)
    except ToolError as exc:  # a path no file can have (NUL byte): the call fails, the run goes on
        prep.error = f"Error: {exc}"
        return
    except RecursionError:  # a hostile, deeply nested command line: refuse it, the run goes on
        prep.error = (
            f"Not run: this {tool.name} call is nested too deeply to be checked for permission. "
            "Split it into simpler commands."
        )
        return
    if agent.extras.hooks is not None:  # PreToolUse / PermissionRequest hooks (agent/hooking.py)
        judged = await agent.extras.hooking.before_tool(prep, decision, denials, emit)
        if judged is None:
            return  # a hook refused it
        decision = judged
    if decision.verdict == "allow":
        prep.sandbox_profile = decision.profile
        return
    reason = decision.reason
    approved = False
    user_reason = ""
    if decision.verdict == "ask" and agent.approve is not None:
        diff, problem = await preview(tool, prep.args, agent.ctx)
        request = ApprovalRequest(
            prep.call_id,
            tool.name,
            tool.kind,
            frozen(prep.args),
            reason,
            target_path(tool, prep.args, agent.ctx),
            diff,
            problem,
        )
        before = approved_paths(tool, prep.args, agent.ctx)
        if agent.extras.hooks is not None:
            await agent.extras.hooking.notify(
                f"kimicode needs your permission to use {tool.name}", "permission_prompt", emit
            )
        answer, failure = await ask(agent, request)
        if failure is not None:  # a broken callback refuses (fails closed); the turn goes on
            reason = failure
        elif isinstance(answer, Approval):
            approved, user_reason = answer.approved, answer.reason
            if approved and answer.remember:
                agent.policy = agent.policy.with_rule(answer.remember)
        else:
            approved = answer is True
        if approved:  # the path approved is the path written: a link swapped in meanwhile refuses
            after = approved_paths(tool, prep.args, agent.ctx)
            if after != before:
                approved = False
                moved = next(
                    (f"{b} now resolves to {a}" for b, a in zip(before, after, strict=False) if a != b),
                    "the files it touches changed",
                )
                reason = f"the approved path changed while approval was pending ({moved}); nothing was written"
    if approved:
        prep.approved = True
        return
    headless = agent.approve is None
    message = denial_message(tool, agent.permission_mode, reason, headless, decision)
    if user_reason:
        message += f" The user said: {user_reason}"
    prep.error = message
    denial = {"tool_name": tool.name, "tool_use_id": prep.call_id, "tool_input": dict(prep.args), "reason": reason}
    denials.append(denial)
    emit(
        PermissionDenied(
            prep.call_id, tool.name, frozen(prep.args), reason, decision.suggestion, decision.by_rule, tool.kind
        )
    )


async def ask(agent: Agent, request: ApprovalRequest) -> tuple[Approval | bool | None, str | None]:
    """The approve callback's answer, or why it cannot be used: a callback that raises, or returns
    anything but a bool or an `Approval` (a truthy "no" must never approve), refuses the call."""
    approve = agent.approve
    assert approve is not None
    try:  # a sync callback (input(), a GUI dialog) runs in a thread: it must not stop the event loop
        answer = approve(request) if is_async_callable(approve) else await run_blocking(approve, request)
        if inspect.isawaitable(answer):
            answer = await answer
    except asyncio.CancelledError as exc:
        if cancelling():
            raise  # the turn was interrupted while the question was open
        return None, f"the approve callback raised {described(exc)}; the call was refused"
    except BaseException as exc:  # whatever it raises (SystemExit from a prompt library too) refuses
        return None, f"the approve callback raised {described(exc)}; the call was refused"
    if isinstance(answer, Approval | bool):
        return answer, None
    return None, (
        f"the approve callback returned {answer!r} (expected True, False or an Approval); the call was refused"
    )


async def _content_for_model(agent: Agent, prep: Prepared, result: ToolResult, emit: Callable[[Event], None]) -> str:
    """What the model sees of a call's result: masked, capped (the rest spilled), with the call's warning and
    what PostToolUse hooks add; a sandbox notice of the result is also said to the user."""
    notice = (result.display or {}).get("notice")
    if isinstance(notice, str) and notice:  # the sandbox blocked a path: one line for the user too
        emit(Notice(agent.masker.mask(notice), "warning"))
    masked = agent.masker.mask(result.content)  # before the spill file, the history and the log
    content = agent.context.cap_tool_output(masked, f"{prep.name}-{prep.call_id}")
    if prep.warning:
        content += prep.warning
    if agent.extras.hooks is not None:  # PostToolUse hooks may add to what the model sees
        content = await agent.extras.hooking.after_tool(prep, content, result.is_error, emit)
    return content


async def execute(agent: Agent, prep: Prepared, emit: Callable[[Event], None]) -> str:
    """Run one prepared call; every failure becomes an error result for the model."""
    if prep.error is not None or prep.tool is None:
        content = agent.masker.mask(prep.error or "error")
        emit(ToolCallFinished(prep.call_id, prep.name, content, True, f"{prep.name}: error"))
        return content
    emit(ToolCallStarted(prep.call_id, prep.name, frozen(prep.args)))  # a hook cannot change what runs
    started = time.monotonic()
    CURRENT_CALL_ID.set(prep.call_id)  # each call runs in its own task: no reset needed
    timeout = prep.tool.timeout if prep.tool.timeout is not None else agent.tool_timeout
    # this call's own cancellation flag; `approved`: the user approved this very call at a prompt
    ctx = replace(
        agent.ctx, cancelled=threading.Event(), approved=bool(prep.approved), sandbox_profile=prep.sandbox_profile
    )
    deadline = asyncio.timeout(timeout)
    call_id = prep.call_id
    try:
        async with deadline:
            with reporting(lambda text: emit(ToolOutputDelta(call_id, text))):  # bash's live output
                out = await prep.tool.fn(prep.args, ctx)
        result = out if isinstance(out, ToolResult) else ToolResult(str(out))
        prep.images = list(getattr(result, "images", ()) or ())  # an ImageResult (tools/images.py)
    except ToolError as exc:
        result = ToolResult(f"Error: {exc}", is_error=True, summary=f"{prep.name}: {exc}"[:200])
    except asyncio.CancelledError as exc:
        ctx.cancelled.set()  # a sync tool's thread cannot be stopped: tell it, and drop its result
        if cancelling():
            raise
        result = failed(prep.name, exc)  # the tool raised it itself (a library's own timeout): nobody cancelled
    except TimeoutError as exc:
        ctx.cancelled.set()
        if deadline.expired():
            result = ToolResult(
                f"Error: the call timed out after {timeout:g} s and was stopped; nothing it returns later is "
                "used. Try a smaller or faster step.",
                is_error=True,
                summary=f"{prep.name}: timed out after {timeout:g} s",
            )
        else:  # the tool's own timeout (a socket, a subprocess), not ours
            result = ToolResult(f"Error: {exc or 'timed out'}", is_error=True, summary=f"{prep.name}: timed out")
    except Exception as exc:  # a bug in a tool must not end the session
        result = failed(prep.name, exc)
    except BaseException as exc:  # SystemExit from a wrapped CLI (argparse), a stray KeyboardInterrupt:
        ctx.cancelled.set()  # raised by the tool's own code, never by a signal (asyncio cancels instead)
        result = ToolResult(  # so it must not stop the event loop and every other agent on it
            f"Error: the tool raised {type(exc).__name__}({exc}) and was stopped",
            is_error=True,
            summary=f"{prep.name}: {type(exc).__name__}",
        )
    content = await _content_for_model(agent, prep, result, emit)
    emit(
        ToolCallFinished(
            prep.call_id,
            prep.name,
            content,
            result.is_error,
            result.summary,
            result.display,
            int((time.monotonic() - started) * 1000),
        )
    )
    return content


def cancelling() -> bool:
    """True when the running task was asked to stop (a CancelledError raised by nobody's cancel() is not)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def failed(name: str, exc: BaseException) -> ToolResult:
    """The error result of a tool that raised something unexpected (its bug, or a sync tool's StopIteration)."""
    return ToolResult(
        f"Error: the tool failed unexpectedly ({described(exc)})", is_error=True, summary=f"{name}: internal error"
    )


async def preview(tool: Tool, args: Mapping[str, Any], ctx: ToolContext) -> tuple[str | None, str | None]:
    """(diff, None), or (None, why the call would fail), or (None, None) for a tool without a preview."""
    if tool.preview is None:
        return None, None
    try:
        return await asyncio.to_thread(tool.preview, dict(args), ctx), None
    except ToolError as exc:
        return None, str(exc)
    except Exception as exc:  # a broken preview must not stop the question from being asked
        return None, f"no preview ({type(exc).__name__}: {exc})"


@dataclass
class Prepared:
    call_id: str
    name: str
    raw: str
    tool: Tool | None = None
    args: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    warning: str = ""
    concurrent: bool = False
    canonical: str | None = None
    images: list[Mapping[str, Any]] = field(default_factory=list)
    approved: bool = False
    """The user approved it at a prompt (under --sandbox auto it then runs unconfined)."""
    sandbox_profile: Literal["read-only", "workspace-write"] = "workspace-write"
    """The sandbox an allowed bash call runs in (`Decision.profile`)."""

    @property
    def signature(self) -> str:
        return f"{self.name}\x00{self.canonical if self.canonical is not None else self.raw.strip()}"


class RepeatTracker:
    """Counts identical consecutive tool calls across the steps of a turn (`limit` None: never stop)."""

    def __init__(self, limit: int | None = DEFAULT_REPEAT_LIMIT) -> None:
        self.limit = limit
        self.last: str | None = None
        self.count = 0

    def see(self, signature: str) -> int:
        if signature == self.last:
            self.count += 1
        else:
            self.last, self.count = signature, 1
        return self.count
