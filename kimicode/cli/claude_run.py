"""Claude protocol mode, part 4: the run. stdin carries Claude Code's stream-json input (user messages,
control requests and the SDK's control responses), stdout gets Claude's messages (kimicode/cli/claude_out.py).

Control requests answered: `initialize` (hooks and SDK MCP servers registered, the system prompt of the
TypeScript SDK taken), `interrupt` (acknowledged at once; the running turn stops and ends with its result),
`set_permission_mode` (Claude's mode names), `set_model`, `mcp_status`, `get_context_usage`, `end_session`;
any other subtype gets an error response naming it. Messages run one after the other in one session;
the end of stdin ends the run once the last turn is done.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import threading
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from kimicode.cli.claude_args import CLAUDE_MODES, KIMICODE_TO_CLAUDE, ClaudeArgs, UsageExit, parse_claude_args
from kimicode.cli.claude_control import Channel, SdkApprover, SdkServer, connect_servers
from kimicode.cli.claude_out import ClaudeWriter
from kimicode.cli.structured_io import user_text

if TYPE_CHECKING:
    from kimicode.agent.core import Agent
    from kimicode.agent.structured import OutputSpec
    from kimicode.events import TurnFinished

Request = dict[str, Any]


def run_claude(args: list[str]) -> int:
    """Parse Claude's command line and hold the conversation; the exit code."""
    import os

    from kimicode.cli.claude_args import say_ignored

    os.environ.pop("CLAUDE_CODE_ENTRYPOINT", None)  # not inherited by commands: a nested kimicode speaks its own
    try:
        parsed = parse_claude_args(args)
        spec = _spec(parsed)
    except UsageExit as exc:
        sys.stderr.write(f"kimicode: {exc}\n")
        return 2
    say_ignored(parsed)
    return asyncio.run(ClaudeSession(parsed, spec).run(sys.stdin))


def _spec(parsed: ClaudeArgs) -> OutputSpec | None:
    if parsed.json_schema is None:
        return None
    from kimicode.cli.ci_flags import FlagError
    from kimicode.cli.structured_io import output_spec

    try:
        return output_spec(None, parsed.json_schema)
    except FlagError as exc:
        raise UsageExit(str(exc)) from None


def open_agent(parsed: ClaudeArgs, approve: Any) -> Agent:
    """The session's agent: new, or the one `--resume`/`--continue` names (UsageExit when that fails)."""
    from kimicode.agent.core import Agent
    from kimicode.agent.options import AgentOptions
    from kimicode.cli.sessions import resume_target
    from kimicode.config.endpoint import ConfigError, kimicode_home
    from kimicode.config.settings import load_settings

    def options_for(place: Path) -> AgentOptions:
        config = load_settings(place.expanduser().resolve(), kimicode_home(), trust=False)
        if parsed.mcp_servers:
            config = config.with_changes({"mcp_servers": parsed.mcp_servers})
        return AgentOptions.from_workspace(place, headless=True, **parsed.settings, config=config)

    extra = {"approve": approve} if approve is not None else {}
    try:
        target = resume_target(
            continue_=parsed.continue_, resume=parsed.resume, fork=parsed.fork, workspace=parsed.workspace
        )
        if target is None:
            return Agent(options_for(parsed.workspace), **extra)
        return Agent.resume(target, fork=parsed.fork, options=options_for, **extra)
    except (ConfigError, ValueError, TypeError) as exc:
        raise UsageExit(str(exc)) from None


class ClaudeSession:
    """One process's conversation in Claude's protocol."""

    def __init__(self, parsed: ClaudeArgs, spec: OutputSpec | None, out: IO[str] | None = None) -> None:
        self.parsed = parsed
        self.spec = spec
        self.writer = ClaudeWriter("", "", partial=parsed.partial, out=out)
        self.channel = Channel(self.writer.line)
        self.approver = SdkApprover(self.channel) if parsed.permission_tool else None
        self.servers = [SdkServer(self.channel, name) for name in parsed.sdk_servers]
        self.agent: Agent | None = None
        self.turns: asyncio.Queue[str | None] = asyncio.Queue()
        self.initialized = asyncio.Event()
        self.hooks: dict[str, Any] = {}
        self.code = 0
        self.stopped: list[signal.Signals] = []
        self.tasks: set[asyncio.Task[None]] = set()
        """Control requests being answered (kept so that none is collected while it runs)."""

    # -- the run -------------------------------------------------------------------------------------

    async def run(self, stream: IO[str]) -> int:
        from kimicode.cli.headless import EXIT_INTERRUPTED, EXIT_TERMINATED, on_stop_signals

        lines: asyncio.Queue[str | None] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        threading.Thread(target=_read_lines, args=(loop, lines, stream), daemon=True).start()
        release = on_stop_signals(self._on_signal)
        reader = asyncio.ensure_future(self._read(lines))
        try:
            await self._turns()
        except UsageExit as exc:
            sys.stderr.write(f"kimicode: {exc}\n")
            return 2
        finally:
            release()
            reader.cancel()
            self.channel.close()
            if self.agent is not None:
                await self.agent.aclose()
        if self.stopped:
            return EXIT_TERMINATED if self.stopped[-1] == signal.SIGTERM else EXIT_INTERRUPTED
        return self.code

    def _on_signal(self, sig: signal.Signals) -> None:
        self.stopped.append(sig)
        if self.agent is not None:
            self.agent.interrupt()
        self.turns.put_nowait(None)

    async def _read(self, lines: asyncio.Queue[str | None]) -> None:
        """Route each stdin line: responses to the channel, requests to their handler, messages to turns."""
        number = 0
        while (line := await lines.get()) is not None:
            number += 1
            if line.strip():
                self._route(line, number)
        self.channel.close()
        self.turns.put_nowait(None)

    def _route(self, line: str, number: int) -> None:
        try:
            obj = json.loads(line)
        except ValueError as exc:
            self._notice(f"line {number}: not JSON: {exc}", "error")
            return
        kind = obj.get("type") if isinstance(obj, dict) else None
        if kind == "control_response":
            self.channel.answered(obj)
        elif kind == "control_request":
            task = asyncio.ensure_future(self._control(obj))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        elif kind in ("control_cancel_request", "keep_alive", "update_environment_variables"):
            pass
        else:
            text, problem = user_text(line)
            if problem is not None or not text:
                self._notice(f"line {number}: {problem or 'an empty message'}", "error")
            else:
                self.turns.put_nowait(text)

    def _notice(self, text: str, level: str = "warning") -> None:
        self.writer.line(
            {"type": "system", "subtype": "notice", "level": level, "text": text, "session_id": self.writer.session_id}
        )

    async def _turns(self) -> None:
        while (text := await self.turns.get()) is not None and not self.stopped:
            agent = await self._ready_agent()
            self.code = await self._turn(agent, text)

    async def _ready_agent(self) -> Agent:
        """The agent, made at the first message (after `initialize`, which may carry the system prompt);
        the SDK's MCP servers connected."""
        if self.agent is not None:
            return self.agent
        if self.servers or self.hooks:
            try:
                await asyncio.wait_for(self.initialized.wait(), timeout=60)
            except TimeoutError:
                pass
        agent = open_agent(self.parsed, self.approver)
        if self.approver is not None:
            self.approver.agent = agent
        self.agent = agent
        self.writer.masker = getattr(agent, "masker", None)
        from kimicode.agent.ecosystem import start_mcp

        await start_mcp(agent)
        await connect_servers(self.servers, agent, lambda text: self._notice(text))
        if self.hooks:
            from kimicode.cli.claude_hooks import install_hooks

            install_hooks(agent, self.hooks, self.channel, lambda text: self._notice(text))
        return agent

    async def _turn(self, agent: Agent, text: str) -> int:
        from kimicode.cli.headless import EXIT_BUDGET, EXIT_INTERRUPTED, EXIT_OK, exit_code_for

        over: list[float] = []
        if self.parsed.budget is not None:
            from kimicode.batch.runner import watch_budget

            over = watch_budget(agent, self.parsed.budget)
        self.writer.init(agent, mcp_servers=self._server_status(agent), ignored=self.parsed.ignored)
        before = dict(agent.usage)
        start = time.monotonic()
        structured: tuple[bool, Any] | None = None
        if self.spec is None:
            finished = await self._stream(agent, text)
        else:
            from kimicode.agent.structured import INVALID, until_valid

            outcome = await until_valid(agent, self.spec, text, lambda t: self._stream(agent, t))
            finished = outcome.turns[-1]
            structured = (outcome.valid, outcome.value)
        status: str = finished.status
        error = finished.error
        if over and status == "interrupted":
            status, error = "budget", f"stopped: the cost ${over[0]:.4f} passed --max-budget-usd"
        elif structured is not None and not structured[0] and status == "success":
            status, error = INVALID, "the answer did not match the JSON schema"
        usage = {k: agent.usage.get(k, 0) - before.get(k, 0) for k in agent.usage}
        self.writer.result(
            agent,
            finished,
            status=status,
            error=error,
            duration_ms=int((time.monotonic() - start) * 1000),
            usage=usage,
            structured=structured,
        )
        if status == "budget":
            return EXIT_BUDGET
        code = exit_code_for(finished)
        return EXIT_OK if code == EXIT_INTERRUPTED else code

    async def _stream(self, agent: Agent, text: str) -> TurnFinished:
        from kimicode.events import TurnFinished

        finished: TurnFinished | None = None
        async for ev in agent.stream(text):
            self.writer.event(ev)
            if isinstance(ev, TurnFinished):
                finished = ev
        assert finished is not None
        return finished

    def _server_status(self, agent: Agent) -> list[dict[str, str]]:
        out = [{"name": s.name, "status": s.status} for s in self.servers]
        manager = getattr(agent.extras, "mcp", None)
        for state in getattr(manager, "servers", None) or ():
            out.append({"name": state.config.name, "status": "connected" if state.status == "ready" else state.status})
        return out

    # -- control requests from the SDK ------------------------------------------------------------------

    async def _control(self, message: dict[str, Any]) -> None:
        request_id = message.get("request_id")
        request = message.get("request")
        subtype = request.get("subtype") if isinstance(request, dict) else None
        handler = {
            "initialize": self._initialize,
            "interrupt": self._interrupt,
            "set_permission_mode": self._set_mode,
            "set_model": self._set_model,
            "mcp_status": self._mcp_status,
            "get_context_usage": self._context_usage,
            "end_session": self._end_session,
        }.get(str(subtype))
        if handler is None or not isinstance(request, dict):
            self._respond(
                request_id,
                error=f"kimicode does not support the control request {subtype!r} "
                "(docs/programs.md lists what Claude protocol mode answers)",
            )
            return
        try:
            self._respond(request_id, await handler(request))
        except (ValueError, UsageExit) as exc:
            self._respond(request_id, error=str(exc))

    def _respond(self, request_id: Any, response: dict[str, Any] | None = None, error: str | None = None) -> None:
        body: dict[str, Any] = {"request_id": request_id}
        if error is not None:
            body.update(subtype="error", error=error)
        else:
            body.update(subtype="success", response=response or {})
        self.writer.line({"type": "control_response", "response": body})

    async def _initialize(self, request: Request) -> Request:
        hooks = request.get("hooks")
        if isinstance(hooks, dict):
            self.hooks = hooks
        for name in request.get("sdkMcpServers") or ():  # the TypeScript SDK names them here too
            if isinstance(name, str) and name not in {s.name for s in self.servers}:
                self.servers.append(SdkServer(self.channel, name))
        prompt = request.get("systemPrompt")
        if isinstance(prompt, list):
            prompt = "\n\n".join(str(p) for p in prompt)
        if isinstance(prompt, str) and prompt:
            self.parsed.settings["system_prompt"] = prompt
        append = request.get("appendSystemPrompt")
        if isinstance(append, str) and append:
            self.parsed.settings["append_system_prompt"] = append
        self.initialized.set()
        mode = self.parsed.settings.get("permission_mode", "default")
        return {
            "commands": [],
            "agents": [],
            "output_style": "default",
            "available_output_styles": ["default"],
            "models": [],
            "account": {},
            "permission_mode": KIMICODE_TO_CLAUDE.get(mode, mode),
            "hook_on_failure_supported": False,
        }

    async def _interrupt(self, request: Request) -> Request:
        if self.agent is not None and self.agent.busy:
            self.agent.interrupt()
        return {}

    async def _set_mode(self, request: Request) -> Request:
        mode = str(request.get("mode"))
        mine = CLAUDE_MODES.get(mode, mode if mode in KIMICODE_TO_CLAUDE else None)
        if mine is None:
            raise ValueError(f"unknown permission mode {mode!r} (expected one of {', '.join(CLAUDE_MODES)})")
        self.parsed.settings["permission_mode"] = mine
        if self.agent is not None:
            self.agent.set_permission_mode(mine)
        return {"mode": KIMICODE_TO_CLAUDE[mine]}

    async def _set_model(self, request: Request) -> Request:
        from kimicode.cli.claude_args import is_claude_model

        model = request.get("model")
        if not isinstance(model, str) or not model or is_claude_model(model):
            return {}  # the default, or a Claude model: kimicode's configured model stays
        self.parsed.settings["model"] = model
        if self.agent is not None:
            self.agent.set_model(model)
        return {"model": model}

    async def _mcp_status(self, request: Request) -> Request:
        servers = (
            self._server_status(self.agent)
            if self.agent is not None
            else [{"name": s.name, "status": s.status} for s in self.servers]
        )
        return {"mcpServers": servers}

    async def _context_usage(self, request: Request) -> Request:
        if self.agent is None:
            return {"totalTokens": 0, "maxTokens": 0}
        return {"totalTokens": self.agent.context.used, "maxTokens": self.agent.effective_window}

    async def _end_session(self, request: Request) -> Request:
        if self.agent is not None and self.agent.busy:
            self.agent.interrupt()
        self.turns.put_nowait(None)
        return {}


def _read_lines(loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[str | None], stream: IO[str]) -> None:
    """stdin's lines into `queue` from a thread; None at the end."""
    try:
        for line in stream:
            loop.call_soon_threadsafe(queue.put_nowait, line)
    finally:
        loop.call_soon_threadsafe(queue.put_nowait, None)
