"""The agent: the turn loop that alternates model steps and tool calls, emitting typed events.

One `Agent` is one conversation. `stream()` yields events for a turn; `run()` and `run_sync()` wrap it.
The headless command line, the terminal UI and library users all consume the same events.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import platform
import sys
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from kimicode import errors
from kimicode.agent.ecosystem import after_compaction, close_extras, start_extras, user_content
from kimicode.agent.interrupted import interrupted_answer
from kimicode.agent.modes import note_needed
from kimicode.config.endpoint import kimicode_home
from kimicode.config.settings import Settings, load_settings, resolve_model, switch_model
from kimicode.context.accounting import Breakdown
from kimicode.context.compact import CompactionResult
from kimicode.context.manager import ContextManager, ContextSettings
from kimicode.context.output import (
    DEFAULT_CAP_CHARS,
    DEFAULT_CAP_TOKENS,
    DEFAULT_SPILL_MAX_BYTES,
    set_spill_limit,
)
from kimicode.events import (
    ContentDelta,
    ContextUpdated,
    Event,
    MessageCommitted,
    Notice,
    PermissionDenied,
    ReasoningDelta,
    Retrying,
    StepStarted,
    ToolArgumentsDelta,
    ToolCallFinished,
    ToolCallStarted,
    ToolOutputDelta,
    TurnFinished,
    TurnStarted,
    TurnStatus,
    UsageUpdated,
)
from kimicode.llm.accumulate import usage_numbers
from kimicode.llm.discovery import resolve_window
from kimicode.llm.errors import LLMError
from kimicode.llm.profiles import profile_for, profile_with
from kimicode.permissions.engine import MODES, decide, denial_message, target_path
from kimicode.permissions.pathresolve import approved_paths
from kimicode.permissions.policy import Rule, Rules, parse_rule
from kimicode.prompts import load_prompt
from kimicode.session.log import INTERRUPTED, SessionLog, SessionWriteError, new_session_id
from kimicode.tools.base import CURRENT_CALL_ID, Tool, ToolContext, ToolError, ToolResult
from kimicode.tools.progress import reporting
from kimicode.tools.registry import ToolRegistry, builtin_tools, parse_arguments, validate

if TYPE_CHECKING:
    from kimicode.agent.streams import Emit, EventStream
    from kimicode.config.redact import Masker
    from kimicode.llm.client import ChatClient

T = TypeVar("T")

REPEAT_LIMIT = 5
"""The default `repeat_limit`: identical consecutive calls that end the turn (a warning comes 2 earlier)."""


@dataclass(frozen=True)
class ApprovalRequest:
    """An action that needs a yes before it runs: shown to the user or passed to `approve`."""

    call_id: str
    tool: str
    kind: str
    arguments: Mapping[str, Any]
    reason: str
    path: str | None = None
    preview: str | None = None
    """For tools that change files: the exact unified diff the call would apply, computed by the tool
    itself (CRLF and staleness included); "" when nothing would change."""
    preview_error: str | None = None
    """Why the call would fail as it stands (the file changed, old_string not found, ...)."""


@dataclass(frozen=True)
class Approval:
    """An answer to an ApprovalRequest; `reason` (when denied) is passed on to the model.

    `remember`, with a yes, is a rule in the language of `--allow` (`bash(npm test)`,
    `Bash(git status:*)`, `edit(src/app.py)`) added to the session's allow rules: "don't ask again",
    decided by the same engine as every other rule. A rule that cannot be parsed raises ConfigError."""

    approved: bool
    reason: str = ""
    remember: str | Rule | None = None

    def __post_init__(self) -> None:
        if isinstance(self.remember, str):  # a bad rule fails where it is written, naming the rule
            parse_rule(self.remember, "Approval.remember")


ApproveResult = bool | Approval
ApproveFn = Callable[[ApprovalRequest], ApproveResult | Awaitable[ApproveResult]]


@dataclass
class RunResult:
    """The outcome of one turn (`Agent.run`)."""

    status: TurnStatus
    result: str
    session_id: str
    num_turns: int
    usage: dict[str, int]
    duration_ms: int
    permission_denials: list[dict[str, Any]]
    error: errors.ErrorInfo | None = None
    """Why the turn did not succeed: a string (as before) that also carries `kind`, `status` (HTTP) and
    `retry_after`."""
    error_kind: str | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    """The messages this turn added to the history (user, assistant and tool), as sent to the model."""
    context: dict[str, int] = field(default_factory=dict)
    """Context window use after the turn: `used` and `window` tokens."""
    turn_usage: dict[str, int] = field(default_factory=dict)
    """Tokens of this turn alone (`usage` is the running total of the agent)."""
    hook_errors: list[str] = field(default_factory=list)
    """What the `on_event` hook raised during the turn (the turn itself went on)."""
    changes: dict[str, list[str]] | None = None
    """Files the turn added, modified and deleted (None when no checkpoint was taken: nothing changed)."""
    checkpoint: str | None = None
    """The checkpoint taken before the turn's first change (`kimicode undo` restores it)."""

    @property
    def ok(self) -> bool:
        return self.status == "success"

    def raise_for_status(self) -> RunResult:
        """Return self when the turn succeeded; otherwise raise the matching `KimicodeError`.

        A model failure raises its `ModelError` subclass (`AuthError`, `RateLimitError`, ...); a turn that
        stopped at a limit, was interrupted or failed internally raises `TurnError`. The exception's
        `result` attribute is this RunResult.
        """
        if self.ok:
            return self
        exc: Exception
        if self.status == "error" and self.error is not None and self.error.kind not in ("internal", "hook"):
            exc = self.error.exception()
        else:
            exc = errors.TurnError(str(self.error or f"the turn ended with status {self.status}"), self.status)
        exc.result = self  # type: ignore[attr-defined]
        raise exc


class Agent:
    """A multi-turn coding agent over an OpenAI-compatible endpoint.

    Calling `run` again continues the same conversation. All network and tool work happens inside
    `stream`; constructing an Agent only resolves settings.
    """

    def __init__(
        self,
        *,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        workspace: str | Path = ".",
        tools: Iterable[Tool] | None = None,
        extra_tools: Iterable[Tool] = (),
        permission_mode: str = "default",
        approve: ApproveFn | None = None,
        system_prompt: str | None = None,
        append_system_prompt: str | None = None,
        project_instructions: bool = True,
        thinking: str | None = None,
        context_window: int | None = None,
        max_completion_tokens: int | None = None,
        max_turns: int = 200,
        repeat_limit: int | None = REPEAT_LIMIT,
        tool_timeout: float | None = None,
        max_retries: int = 5,
        retry_base_delay: float = 1.0,
        request_timeout: float = 300.0,
        tool_output_cap: int = DEFAULT_CAP_CHARS,
        tool_output_tokens: int | None = None,
        prune_threshold: float | None = None,
        compact_threshold: float | None = None,
        prune_keep_tokens: int = 100_000,
        tokenizer_path: str | Path | None = None,
        home: str | Path | None = None,
        persist: bool = True,
        session_id: str | None = None,
        messages: list[dict[str, Any]] | None = None,
        on_event: Callable[[Event], None] | None = None,
        headless: bool = False,
        origin: str | None = None,
        config: Settings | None = None,
        allow: Iterable[str] = (),
        deny: Iterable[str] = (),
        ask: Iterable[str] = (),
        rules: Rules | None = None,
        sandbox: str | None = None,
        sandbox_network: bool | None = None,
    ) -> None:
        self._init_args: dict[str, Any] = {k: v for k, v in locals().items() if k != "self"}  # for fork()
        if permission_mode not in MODES:
            raise ValueError(f"permission_mode must be one of {', '.join(MODES)} (got {permission_mode!r})")
        if thinking is not None and thinking not in ("low", "high", "max"):
            raise ValueError(f"thinking must be low, high or max (got {thinking!r})")
        if origin not in (None, "interactive", "headless", "library"):
            raise ValueError(f"origin must be interactive, headless or library (got {origin!r})")
        self.settings = config if config is not None else load_settings(
            Path(workspace).expanduser().resolve(), Path(home).expanduser() if home is not None else kimicode_home()
        )  # the configuration files; flags (the arguments) and the environment win over them
        self.endpoint, self.model_config = resolve_model(self.settings, model=model, base_url=base_url, api_key=api_key)
        self.profile = profile_with(profile_for(self.endpoint.model), self.model_config)
        self.workspace = Path(workspace).expanduser().resolve()
        if not self.workspace.is_dir():
            raise ValueError(f"workspace is not a directory: {self.workspace}")
        self.tools = ToolRegistry(builtin_tools() if tools is None else tools)
        for t in extra_tools:
            self.tools.add(t)
        self.permission_mode = permission_mode
        self.approve = approve
        self.headless = headless
        self.origin = origin or ("headless" if headless else "library")
        """Which face runs the session (`interactive`, `headless`, `library`), recorded in the log for listings."""
        self.thinking = thinking or self.model_config.reasoning_effort or self.settings.get("defaults.thinking")
        self.context_window, self._window_source = resolve_window(
            context_window, self.model_config.context_window, self.endpoint.model, self.profile.context_window
        )
        ctx_max_tokens = self.settings.table("context").get("max_tokens")
        self.max_completion_tokens = (
            max_completion_tokens or self.model_config.max_completion_tokens or ctx_max_tokens or None
        )
        """The answer's token limit when set (argument, model config, `[context] max_tokens`); else fitted."""
        self._discovered = context_window is not None or self.model_config.context_window is not None
        self.max_turns = max_turns
        if repeat_limit is not None and repeat_limit < 2:
            raise ValueError(f"repeat_limit must be at least 2, or None for no limit (got {repeat_limit!r})")
        self.repeat_limit = repeat_limit
        """Identical consecutive tool calls that end the turn (status `repeat_limit`); None: no limit."""
        if tool_timeout is not None and not tool_timeout > 0:
            raise ValueError(f"tool_timeout must be a positive number of seconds (got {tool_timeout!r})")
        self.tool_timeout = tool_timeout
        """Seconds any tool call may run (a tool's own `timeout` wins); None: no limit."""
        self.max_retries = max_retries
        self.retry_base_delay = retry_base_delay
        self.request_timeout = request_timeout
        self.tool_output_cap = tool_output_cap
        self.on_event = on_event
        self.home = Path(home).expanduser() if home is not None else kimicode_home()
        self.project_instructions = project_instructions
        """Add AGENTS.md / CLAUDE.md files (repository root down to the workspace, and the home's) to the prompt."""
        self.session_id = session_id or new_session_id()
        self.log: SessionLog | None = SessionLog(self.home / "sessions", self.session_id) if persist else None
        spill = self.log.spill_dir if self.log else None
        self.ctx = ToolContext(workspace=self.workspace, session_dir=spill)
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0}
        ctx_cfg = self.settings.table("context")  # [context] in the config files; arguments win
        if spill is not None:  # bound the disk the session's saved tool outputs may use
            set_spill_limit(spill, ctx_cfg.get("spill_max_bytes", DEFAULT_SPILL_MAX_BYTES))
        self.context = ContextManager(
            window=self.context_window,
            reserve=self.max_completion_tokens or self.profile.max_completion_tokens,
            tokenizer_path=tokenizer_path or ctx_cfg.get("tokenizer"),
            settings=ContextSettings(
                prune_threshold=(
                    prune_threshold if prune_threshold is not None else ctx_cfg.get("prune_threshold", 0.70)
                ),
                compact_threshold=(
                    compact_threshold if compact_threshold is not None else ctx_cfg.get("compact_threshold", 0.85)
                ),
                prune_keep_tokens=prune_keep_tokens,
                tool_output_tokens=(
                    tool_output_tokens
                    if tool_output_tokens is not None
                    else ctx_cfg.get("tool_output_cap_tokens", DEFAULT_CAP_TOKENS)
                ),
                tool_output_chars=tool_output_cap,
            ),
            spill_dir=spill,
            log=self.log,
            usage=self.usage,
            reserve_explicit=self.max_completion_tokens is not None,
        )
        self._client: ChatClient | None = None
        self._worker: asyncio.Task[Any] | None = None
        self._owner: weakref.ref[EventStream[Any]] | None = None  # the stream consuming `_worker`
        self._interrupted = False
        self._turn_text = ""
        self.resume_warning: str | None = None
        """Set by `resume` when the session was recorded with another model (also sent as a Notice)."""
        self._notices: list[Notice] = []  # emitted at the start of the next turn
        self._emit: Callable[[Event], None] | None = None
        """The running turn's emit (subagents report through it)."""
        self._denials: list[dict[str, Any]] = []
        """The running turn's permission denials (subagents add theirs)."""
        self._notices.extend(Notice(text, "warning") for text in self.settings.ignored)
        self._confine(allow, deny, ask, rules, sandbox, sandbox_network)
        if messages is not None:
            self.messages: list[dict[str, Any]] = messages
            if self.log and not self.log.path.exists():  # a new log for a given history (fork, library)
                self._log_meta()
                for msg in messages:
                    self.log.message(msg)
        else:
            self.messages = [{"role": "system", "content": self._system_prompt(system_prompt, append_system_prompt)}]
            self._log_meta()
            if self.log:
                self.log.message(self.messages[0])
        from kimicode.agent.ecosystem import install

        self.extras = install(self, default_tools=tools is None)
        from kimicode.agent.checkpointing import open_checkpoints

        self.checkpoints = open_checkpoints(self)
        """This session's workspace checkpoints (None when disabled in `[checkpoints]`); see docs/checkpoints.md."""
        """Edit-tool choice, todo list, subagents, image-aware read_file, web_fetch, MCP (agent/ecosystem.py)."""

    # -- setup ------------------------------------------------------------------------------------

    def _confine(
        self,
        allow: Iterable[str],
        deny: Iterable[str],
        ask: Iterable[str],
        rules: Rules | None,
        sandbox: str | None,
        sandbox_network: bool | None,
    ) -> None:
        """Permission rules (fixed for the session), the OS sandbox for bash, and a secret-free child env."""
        import os

        from kimicode.config.settings import config_paths
        from kimicode.permissions.policy import Policy, secret_env_names, session_rules
        from kimicode.tools.sandbox import setup_sandbox
        from kimicode.tools.shell import BASH, bash_tool, scrub_env

        ignored: list[str] = []  # what an untrusted project's config may not loosen
        project_file = config_paths(self.workspace, self.home)[1]
        if rules is None:
            rules = session_rules(
                self.settings, project_file=project_file, allow=allow, deny=deny, ask=ask, ignored=ignored
            )
        self._init_args["rules"] = rules  # forks and resumes keep exactly these rules
        self.sandbox, self.sandbox_warning = setup_sandbox(
            sandbox, sandbox_network, self.settings, self.workspace, self.home,
            project_file=project_file, ignored=ignored, session_dir=self.log.spill_dir if self.log else None,
        )
        self._notices.extend(Notice(text, "warning") for text in ignored)
        """`sandbox_warning` says why a requested sandbox is not used (also sent once as a Notice)."""
        sandboxed = False
        if self.sandbox is not None and self.tools.get("bash") is BASH:
            self.tools.add(bash_tool(self.sandbox))
            sandboxed = not self.sandbox.auto  # auto confines what runs unasked; it changes no decision
        self.policy = Policy(
            rules, kimicode_home=self.home, sandboxed=sandboxed, workspace=self.workspace,
            session_dir=self.ctx.session_dir,
        )
        self.ctx.env = scrub_env(
            os.environ,
            names=secret_env_names(self.settings, self.endpoint.key_source),
            values=(self.endpoint.api_key,),
        )
        from kimicode.config.redact import Masker, known_secrets
        from kimicode.procs import harden_process

        harden_process()  # children cannot read the key under /proc/<pid>/environ
        self.masker = Masker(known_secrets(os.environ, api_key=self.endpoint.api_key, settings=self.settings))
        """Masks every known secret in tool results, the session log, notices and errors."""
        if self.log is not None:
            self.log.masker = self.masker
        self.ctx.mask = self.masker  # command output is masked as it is read
        if self.sandbox_warning:
            self._notices.append(Notice(self.sandbox_warning, "warning"))

    def _system_prompt(self, replace: str | None, append: str | None) -> str:
        text = replace if replace is not None else load_prompt("system.md")
        text = (
            text.replace("{workspace}", str(self.workspace))
            .replace("{platform}", f"{platform.system()} {platform.machine()}")
            .replace("{date}", date.today().isoformat())
        )
        if self.project_instructions:
            from kimicode.config.agentsmd import project_instructions

            section = project_instructions(self.workspace, self.home)
            if section:
                text += "\n\n" + section
        if append:
            text += "\n\n" + append
        return text

    def _log_meta(self) -> None:
        if self.log:
            self.log.append(
                {
                    "type": "meta",
                    "session_id": self.session_id,
                    "model": self.endpoint.model,
                    "base_url": self.endpoint.base_url,
                    "workspace": str(self.workspace),
                    "permission_mode": self.permission_mode,
                    "thinking": self.thinking,
                    "origin": self.origin,
                }
            )

    def _log_settings(self, reason: str, **extra: Any) -> None:
        """Record the model and settings in effect from now on (resume, fork, a model change)."""
        if self.log:
            self.log.append(
                {
                    "type": "settings",
                    "reason": reason,
                    "model": self.endpoint.model,
                    "base_url": self.endpoint.base_url,
                    "workspace": str(self.workspace),
                    "permission_mode": self.permission_mode,
                    "thinking": self.thinking,
                    "origin": self.origin,
                    **extra,
                }
            )

    @property
    def client(self) -> ChatClient:
        """The model client, created on first use (importing the HTTP stack is not free)."""
        if self._client is None:
            from kimicode.llm.client import ChatClient, ClientConfig

            self._client = ChatClient(
                ClientConfig(
                    base_url=self.endpoint.base_url,
                    api_key=self.endpoint.api_key,
                    model=self.endpoint.model,
                    profile=self.profile,
                    effort=self.thinking,
                    max_completion_tokens=self.max_completion_tokens,
                    session_id=self.session_id,
                    max_retries=self.max_retries,
                    retry_base_delay=self.retry_base_delay,
                    timeout=self.request_timeout,
                    reasoning_field=self.model_config.reasoning_field,
                    extra_headers=dict(self.model_config.headers),
                    key_source=self.endpoint.key_source,
                    url_source=self.endpoint.url_source,
                )
            )
        return self._client

    async def _ensure_client(self) -> ChatClient:
        """The client, built in a worker thread the first time: importing `openai` and building its TLS
        context take a second or more, which must not stall the event loop (other agents, timers, the UI)."""
        if self._client is None:
            await asyncio.to_thread(lambda: self.client)
        return self.client

    # -- public API -------------------------------------------------------------------------------

    def stream(self, prompt: str) -> EventStream[None]:
        """Run one turn for `prompt`, yielding every event as it happens; the last is TurnFinished.

        The turn starts at the first iteration (or `async with`). Leaving early (`break`, an exception,
        `aclose()`, the consumer being cancelled) cancels the turn: unfinished tool calls get an
        `interrupted` result and the agent can run again. Each event is queued before `on_event` sees it,
        and a raising hook is reported (a Notice, `RunResult.hook_errors`) without affecting the turn.
        """
        return self._event_stream(lambda emit: self._turn(prompt, emit))

    def _event_stream(self, work: Callable[[Emit], Coroutine[Any, Any, T]]) -> EventStream[T]:
        from kimicode.agent.streams import EventStream

        def on_start(task: asyncio.Task[Any]) -> None:
            self._worker, self._owner = task, ref

        stream = EventStream(work, lambda: self.on_event, self._claim, on_start, self._outgoing)
        ref = weakref.ref(stream)
        return stream

    def _outgoing(self, event: Event) -> Event:
        """Every event once, before the consumer and the hook see it: known secrets masked."""
        return _masked_event(event, self.masker)

    async def _claim(self, stream: EventStream[Any]) -> None:
        """Before new work starts: refuse while a live consumer runs a turn; finish an abandoned one."""
        worker = self._worker
        if worker is not None and not worker.done():
            owner = self._owner() if self._owner is not None else None
            if owner is not None and owner is not stream and not owner.closed:
                raise errors.UsageError("a turn is already running on this agent")
            worker.cancel()  # its consumer left without closing it: stop it and let it clean up
            await asyncio.wait([worker])
        self._interrupted = False

    async def run(self, prompt: str) -> RunResult:
        """Run one turn and return its result (the conversation continues on the next call)."""
        start = time.monotonic()
        before = dict(self.usage)
        added: list[dict[str, Any]] = []  # collected from events: compaction may rewrite the history
        finished: TurnFinished | None = None
        async with self.stream(prompt) as events:
            async for event in events:
                if isinstance(event, MessageCommitted):
                    added.append(cast(dict[str, Any], event.message))  # the committed dict itself
                elif isinstance(event, TurnFinished):
                    finished = event
        assert finished is not None
        error = finished.error
        if error is not None and not isinstance(error, errors.ErrorInfo):
            error = errors.ErrorInfo(error, finished.error_kind or "internal")
        return RunResult(
            status=finished.status,
            result=finished.result,
            session_id=self.session_id,
            num_turns=finished.num_steps,
            usage=dict(self.usage),
            duration_ms=int((time.monotonic() - start) * 1000),
            permission_denials=[dict(d) for d in finished.permission_denials],
            error=error,
            error_kind=finished.error_kind,
            messages=added,
            context={"used": self.context.used, "window": self.context_window},
            turn_usage={k: v - before.get(k, 0) for k, v in self.usage.items()},
            hook_errors=list(events.hook_errors),
            **_checkpoint_fields(self),
        )

    def run_sync(self, prompt: str) -> RunResult:
        """`run` for scripts without an event loop (closes the agent's connections afterwards).

        Inside a running event loop (async code, a notebook) it raises `UsageError`: `await agent.run()`.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self._run_and_close(prompt))
        raise errors.UsageError(
            "run_sync() cannot be used inside a running event loop (async code, a Jupyter notebook): "
            "use `await agent.run(prompt)` instead"
        )

    async def _run_and_close(self, prompt: str) -> RunResult:
        try:
            return await self.run(prompt)
        finally:
            await self.aclose()

    @classmethod
    def resume(cls, session_id: str, *, fork: bool = False, **kwargs: Any) -> Agent:
        """An Agent continuing a saved session (id or unique prefix), like `kimicode -r ID`.

        Takes the same keyword arguments as the constructor. The model, thinking effort and workspace
        default to the recorded ones; the permission mode does not carry over. The session keeps its id
        (and so its prompt cache key) unless `fork=True`, which copies the history into a new session and
        leaves the original untouched. Raises `SessionError` (a ValueError) for an unknown id.
        """
        from kimicode.agent.resume import resume_agent

        return resume_agent(cls, session_id, fork=fork, **kwargs)

    def fork(self, **overrides: Any) -> Agent:
        """A new Agent with a new session id and a copy of this conversation (`--fork`).

        It has this agent's settings unless `overrides` (constructor arguments) change them; the two
        conversations continue independently. `workspace="worktree"` gives the fork its own working tree
        (a git worktree on a new branch; a copy outside git), `"copy"` a copy, `"shared"` (or a path)
        the same tree: see docs/checkpoints.md.
        """
        from kimicode.agent.resume import fork_agent

        return fork_agent(self, **overrides)

    async def rewind(self, turn: int | None = None, *, files: bool = True, conversation: bool = True,
                     force: bool = False) -> Any:
        """Undo turn `turn` and every turn after it (default: the last turn): put back the files they
        changed (`files`) and take them out of the history (`conversation`). Files changed outside
        kimicode since are not overwritten (RestoreConflict) unless `force`. See docs/checkpoints.md."""
        if self._worker is not None and not self._worker.done():
            raise RuntimeError("cannot rewind while a turn is running")
        from kimicode.agent.checkpointing import rewind

        return await rewind(self, turn, files=files, conversation=conversation, force=force)

    def set_model(self, model: str) -> None:
        """Switch the model for the following requests (the history is kept as it is)."""
        self.endpoint, self.model_config = switch_model(self.settings, self.endpoint, model)
        self.profile = profile_with(profile_for(self.endpoint.model), self.model_config)
        self.context_window, self._window_source = resolve_window(
            None, self.model_config.context_window, self.endpoint.model, self.profile.context_window
        )
        self._discovered = self.model_config.context_window is not None
        self.context.forget_window()
        from kimicode.agent.ecosystem import refresh

        refresh(self)  # e.g. apply_patch instead of edit_file for GPT models
        self._reset_client()
        self._log_settings("model")

    def set_thinking(self, effort: str | None) -> None:
        """Change the reasoning effort (`low`, `high`, `max`, or None for the model's default)."""
        if effort is not None and effort not in ("low", "high", "max"):
            raise ValueError(f"thinking must be low, high or max (got {effort!r})")
        self.thinking = effort
        self._reset_client()
        self._log_settings("thinking")

    def _reset_client(self) -> None:
        if self._client is not None:
            client = self._client
            self._client = None
            try:
                asyncio.get_running_loop().create_task(client.aclose())
            except RuntimeError:
                pass  # no loop running: the pool is released with the object

    def compact(self, instructions: str | None = None) -> EventStream[CompactionResult | None]:
        """Summarise the older history now (`/compact`); `instructions` tell the summariser what to keep.

        `await agent.compact()` returns what was replaced, or None when there was nothing to compact;
        `async for event in agent.compact()` streams its events (Notice, ContextUpdated, ...) like a turn,
        with the same guarantees (`on_event` sees them too; leaving early cancels the compaction).
        """
        return self._event_stream(lambda emit: self._compact(instructions, emit))

    async def _compact(self, instructions: str | None, emit: Emit) -> CompactionResult | None:
        client = await self._ensure_client()
        self.context.set_window(self.context_window, self.max_completion_tokens or self.profile.max_completion_tokens)
        kinds = {t.name: t.kind for t in self.tools}
        result = await self.context.compact(
            self.messages, self.tools.schemas(), client, emit, instructions=instructions, tool_kinds=kinds
        )
        after_compaction(self)
        if result is not None:
            self.context.used = self.context.estimate(self.messages, self.tools.schemas())
            emit(ContextUpdated(self.context.used, self.context_window))
        if self.log:
            self.log.sync()
        return result

    @property
    def window_source(self) -> str:
        """Where the context window came from: flag, config, server, known, default, or learnt (from a
        server's context-length error in this session)."""
        if self.context.server_limit and self.context.server_limit < self.context_window:
            return "learnt"
        return self._window_source

    @property
    def effective_window(self) -> int:
        """The window requests are fitted to: the configured one, or smaller when the server said so."""
        return min(self.context_window, self.context.server_limit or self.context_window)

    async def _discover_window(self, emit: Callable[[Event], None]) -> None:
        """Ask the server for its window once (bounded, cached under KIMICODE_HOME); a flag or config wins."""
        from kimicode.llm.discovery import discover_window

        self._discovered = True
        found = await discover_window(
            self.endpoint.base_url, self.endpoint.api_key, self.endpoint.model, self.home,
            headers=dict(self.model_config.headers),
        )
        if found and found != self.context_window:
            self.context_window, self._window_source = found, "server"
            emit(Notice(f"context: the server reports a window of {found:,} tokens for {self.endpoint.model}"))
            try:
                self.context.set_window(found, self.max_completion_tokens or self.profile.max_completion_tokens)
            except ValueError as exc:  # e.g. a 1k window, or --max-tokens larger than the server's window
                raise LLMError(f"the server serves {self.endpoint.model} with a {found:,}-token window: {exc}",
                               "context_length") from None
            emit(ContextUpdated(self.context.used, self.context_window))
        elif found:
            self._window_source = "server"

    def context_breakdown(self) -> Breakdown:
        """Estimated tokens of the next request by category (system, tools, user, assistant, ...)."""
        return self.context.breakdown(self.messages, self.tools.schemas())

    def interrupt(self) -> None:
        """Stop the running turn (the stream or the running tools); history stays valid."""
        self._interrupted = True
        if self._worker is not None and not self._worker.done():
            self._worker.cancel()

    async def aclose(self) -> None:
        """Release the HTTP connection pool, stop the MCP servers and close the session log.

        A turn or compaction still running (its stream abandoned) is cancelled and waited for first."""
        worker = self._worker
        if worker is not None and not worker.done():
            worker.cancel()
            await asyncio.wait([worker])
        await close_extras(self)
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        if self.log:
            self.log.close()

    # -- the turn ---------------------------------------------------------------------------------

    def _commit(self, message: dict[str, Any], emit: Callable[[Event], None]) -> None:
        message = _utf8_safe(message)
        self.messages.append(message)
        if message.get("role") == "assistant" and message.get("content"):
            self._turn_text = str(message["content"])
        if self.log:
            self.log.message(message)
        emit(MessageCommitted(message))

    async def _turn(self, prompt: str, emit: Callable[[Event], None]) -> None:
        steps = 0
        denials: list[dict[str, Any]] = []
        self._denials = denials
        self._emit = emit  # subagents (tools/task.py) report through the parent's stream
        pending: list[dict[str, Any]] = []  # tool calls of the current step still without a result
        self._turn_text = ""
        emit(TurnStarted(prompt, self.session_id))
        for notice in self._notices:  # e.g. the resumed session was recorded with another model
            emit(notice)
        self._notices.clear()

        def finish(
            status: TurnStatus, result: str = "", error: str | None = None, kind: str | None = None
        ) -> None:
            if self.checkpoints is not None:
                from kimicode.agent.checkpointing import end_turn

                end_turn(self, emit)
            info = None if error is None else errors.ErrorInfo(error, kind or status)
            handling = sys.exc_info()[1]  # called while handling a model error: keep its status and retry-after
            if error is not None and isinstance(handling, LLMError) and handling.message == error:
                info = errors.ErrorInfo(
                    error, kind or status, handling.status, handling.retry_after, handling.error_type
                )
            if self.log:
                self.log.append({"type": "turn_end", "status": status, "steps": steps, "usage": dict(self.usage)})
                self.log.sync()
            emit(TurnFinished(status, result, steps, info, kind, tuple(denials)))

        if self.checkpoints is not None:
            self.checkpoints.begin_turn(prompt, len(self.messages))  # the user message goes at this index
        try:
            await start_extras(self, emit)  # MCP servers (bounded by their startup timeout)
            self._commit({"role": "user", "content": user_content(self, prompt)}, emit)  # + attached images
            repeats = _RepeatTracker(self.repeat_limit)
            while True:
                if steps >= self.max_turns:
                    finish("max_turns", self._last_text(), f"stopped after reaching --max-turns {self.max_turns}")
                    return
                if (note := note_needed(self.messages, self.permission_mode)) is not None:
                    self._commit(note, emit)  # the mode changed (or a session starts in one): say so
                steps += 1
                emit(StepStarted(steps))
                completion = await self._model_step(emit)
                message = completion.message
                self._commit(message, emit)
                calls = list(message.get("tool_calls") or ())
                if completion.finish_reason == "content_filter":
                    blocked = "the provider's content filter blocked the response"
                    finish("error", message.get("content") or "", blocked, "content_filter")
                    return
                if not calls:
                    if completion.finish_reason == "length":
                        emit(Notice("the answer was cut off at max_completion_tokens", "warning"))
                    finish("success", message.get("content") or "")
                    return
                pending[:] = calls
                stop = await self._run_tools(calls, completion.finish_reason, repeats, denials, pending, emit)
                if stop:
                    finish("repeat_limit", self._last_text(), stop)
                    return
        except asyncio.CancelledError:
            for call in pending:
                self._commit({"role": "tool", "tool_call_id": call.get("id", ""), "content": INTERRUPTED}, emit)
            pending.clear()
            finish("interrupted", self._last_text(), "interrupted by user")
            if not self._interrupted:
                raise  # cancelled from outside (library cancellation): propagate
        except LLMError as err:
            finish("error", "", err.message, "transient" if err.transient else err.kind)  # no stale answer
        except SessionWriteError as err:  # a full disk or unwritable KIMICODE_HOME: stop, say it once
            for call in pending:
                self.messages.append({"role": "tool", "tool_call_id": call.get("id", ""), "content": INTERRUPTED})
            pending.clear()
            finish("error", "", str(err), "session_log")
        except Exception as exc:  # a bug must end the turn with a valid history, never leave the caller waiting
            error = f"internal error: {type(exc).__name__}: {exc}"
            try:
                for call in pending:
                    result = {"role": "tool", "tool_call_id": call.get("id", ""), "content": f"Error: {error}"}
                    self._commit(result, emit)
                pending.clear()
                finish("error", "", error, "internal")
            except Exception:
                emit(TurnFinished("error", "", steps, error, "internal", tuple(denials)))

    def _last_text(self) -> str:
        """The last assistant text of the current turn ("" when this turn has none: never an older answer)."""
        return self._turn_text

    async def _model_step(self, emit: Callable[[Event], None]) -> Any:
        await self._ensure_client()  # imports the HTTP stack in a thread the first time
        from kimicode.llm.client import Completion, StreamDelta, StreamRetry

        tools = self.tools.schemas()
        kinds = {t.name: t.kind for t in self.tools}
        if not self._discovered:
            await self._discover_window(emit)
        self.context.set_window(self.context_window, self.max_completion_tokens or self.profile.max_completion_tokens)
        est = await self.context.prepare(self.messages, tools, self.client, emit, kinds)  # prune/compact to fit
        after_compaction(self)  # keep the todo list visible to the model
        completion: Completion | None = None
        partial: list[str] = []  # the answer text so far: kept in the history if the user interrupts it
        for attempt in range(2):
            try:
                limit = self.context.completion_tokens(est)  # prompt + max_tokens never over the window
                async for ev in self.client.stream(self.messages, tools, max_completion_tokens=limit):
                    if isinstance(ev, StreamDelta):
                        if ev.kind == "reasoning":
                            emit(ReasoningDelta(ev.text))
                        elif ev.kind == "content":
                            partial.append(ev.text)
                            emit(ContentDelta(ev.text))
                        else:
                            emit(ToolArgumentsDelta(ev.index, ev.text))
                    elif isinstance(ev, StreamRetry):
                        partial.clear()  # the retried request starts the answer over
                        emit(Retrying(ev.attempt, ev.max_retries, ev.delay, ev.error))
                    else:
                        completion = ev
                break
            except asyncio.CancelledError:
                text = "".join(partial)
                if text.strip() and self._interrupted:
                    self._commit(interrupted_answer(text), emit)
                raise
            except LLMError as err:  # too long for the server after all: compact, then retry once
                if err.kind != "context_length" or attempt:
                    raise
                if not await self.context.recover(err, self.messages, tools, self.client, emit, kinds):
                    raise
                est = self.context.last_estimate
                emit(ContextUpdated(est, self.context.budget.window))
        assert completion is not None
        prompt_t, completion_t, cached_t = usage_numbers(completion.usage)
        self.usage["prompt_tokens"] += prompt_t
        self.usage["completion_tokens"] += completion_t
        self.usage["cached_tokens"] += cached_t
        emit(
            UsageUpdated(
                prompt_t,
                completion_t,
                cached_t,
                self.usage["prompt_tokens"],
                self.usage["completion_tokens"],
                self.usage["cached_tokens"],
            )
        )
        if self.log and completion.usage:
            self.log.append({"type": "usage", "usage": completion.usage})
        used = self.context.observe(self.messages, tools, completion.message, completion.usage)
        emit(ContextUpdated(used, self.effective_window, cached_t))
        return completion

    # -- tools ------------------------------------------------------------------------------------

    async def _run_tools(
        self,
        calls: list[dict[str, Any]],
        finish_reason: str | None,
        repeats: _RepeatTracker,
        denials: list[dict[str, Any]],
        pending: list[dict[str, Any]],
        emit: Callable[[Event], None],
    ) -> str | None:
        """Run one step's tool calls (consecutive reads concurrently), committing results in order.

        Returns a reason to stop the turn, or None.
        """
        prepared = [self._prepare(call, finish_reason) for call in calls]
        stop: str | None = None
        for prep in prepared:
            count = repeats.see(prep.signature)
            limit = repeats.limit
            if limit is None or (prep.tool is not None and prep.tool.repeatable):
                continue  # no limit, or a tool that expects identical calls (polling)
            if count >= limit:
                prep.error = (
                    f"Not run: this exact call was repeated {count} times in a row. The turn is stopped."
                )
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
                await self._authorize(prep, denials, emit)
            if self.checkpoints is not None:
                from kimicode.agent.checkpointing import before_change, may_change

                if any(p.error is None and p.tool is not None and may_change(self, p.tool, p.args) for p in batch):
                    await before_change(self, emit)  # a snapshot before the turn's first change
            results = await asyncio.gather(*(self._execute(prep, emit) for prep in batch))
            for prep, content in zip(batch, results, strict=True):
                self._commit({"role": "tool", "tool_call_id": prep.call_id, "content": content}, emit)
                pending[:] = [c for c in pending if c.get("id") != prep.call_id]
            i += len(batch)
        attached = [(prep.call_id, prep.name, prep.images) for prep in prepared if prep.images]
        if attached:  # images cannot go in tool messages: one user message after the step's results
            from kimicode.tools.images import images_message

            self._commit(images_message(attached), emit)
        return stop

    def _prepare(self, call: dict[str, Any], finish_reason: str | None) -> _Prepared:
        fn = call.get("function") or {}
        name = str(fn.get("name") or "")
        raw = fn.get("arguments") or ""
        prep = _Prepared(call_id=str(call.get("id") or ""), name=name, raw=raw)
        tool = self.tools.get(name)
        if tool is None:
            prep.error = f"Unknown tool {name!r}. Available tools: {', '.join(self.tools.names)}."
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

    def forget_session_rules(self) -> None:
        """Drop the rules added by `Approval.remember` answers (the configured rules stay)."""
        self.policy = self.policy.without_session_rules()

    async def _authorize(self, prep: _Prepared, denials: list[dict[str, Any]], emit: Callable[[Event], None]) -> None:
        if prep.error is not None or prep.tool is None:
            return
        tool = prep.tool
        try:
            decision = decide(tool, prep.args, self.permission_mode, self.ctx, self.policy)
        except RecursionError:  # a hostile, deeply nested command line: refuse it, the run goes on
            prep.error = (
                f"Not run: this {tool.name} call is nested too deeply to be checked for permission. "
                "Split it into simpler commands."
            )
            return
        if decision.verdict == "allow":
            return
        reason = decision.reason
        approved = False
        user_reason = ""
        if decision.verdict == "ask" and self.approve is not None:
            diff, problem = await _preview(tool, prep.args, self.ctx)
            request = ApprovalRequest(
                prep.call_id, tool.name, tool.kind, prep.args, reason, target_path(tool, prep.args, self.ctx),
                diff, problem,
            )
            before = approved_paths(tool, prep.args, self.ctx)
            answer = self.approve(request)
            if inspect.isawaitable(answer):
                answer = await answer
            if isinstance(answer, Approval):
                approved, user_reason = answer.approved, answer.reason
                if approved and answer.remember:
                    self.policy = self.policy.with_rule(answer.remember)
            else:
                approved = bool(answer)
            if approved:  # the path approved is the path written: a link swapped in meanwhile refuses
                after = approved_paths(tool, prep.args, self.ctx)
                if after != before:
                    approved = False
                    moved = next((f"{b} now resolves to {a}" for b, a in zip(before, after, strict=False) if a != b),
                                 "the files it touches changed")
                    reason = f"the approved path changed while approval was pending ({moved}); nothing was written"
        if approved:
            prep.approved = True
            return
        headless = self.approve is None
        message = denial_message(tool, self.permission_mode, reason, headless, decision)
        if user_reason:
            message += f" The user said: {user_reason}"
        prep.error = message
        denial = {"tool_name": tool.name, "tool_use_id": prep.call_id, "tool_input": dict(prep.args), "reason": reason}
        denials.append(denial)
        emit(
            PermissionDenied(
                prep.call_id, tool.name, prep.args, reason, decision.suggestion, decision.by_rule, tool.kind
            )
        )

    async def _execute(self, prep: _Prepared, emit: Callable[[Event], None]) -> str:
        """Run one prepared call; every failure becomes an error result for the model."""
        if prep.error is not None or prep.tool is None:
            content = self.masker.mask(prep.error or "error")
            emit(ToolCallFinished(prep.call_id, prep.name, content, True, f"{prep.name}: error"))
            return content
        emit(ToolCallStarted(prep.call_id, prep.name, prep.args))
        started = time.monotonic()
        CURRENT_CALL_ID.set(prep.call_id)  # each call runs in its own task: no reset needed
        timeout = prep.tool.timeout if prep.tool.timeout is not None else self.tool_timeout
        # this call's own cancellation flag; `approved`: the user approved this very call at a prompt
        ctx = replace(self.ctx, cancelled=threading.Event(), approved=bool(prep.approved))
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
        except asyncio.CancelledError:
            ctx.cancelled.set()  # a sync tool's thread cannot be stopped: tell it, and drop its result
            raise
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
            result = ToolResult(
                f"Error: the tool failed unexpectedly ({type(exc).__name__}: {exc})",
                is_error=True,
                summary=f"{prep.name}: internal error",
            )
        masked = self.masker.mask(result.content)  # before the spill file, the history and the log
        content = self.context.cap_tool_output(masked, f"{prep.name}-{prep.call_id}")
        if prep.warning:
            content += prep.warning
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


def _masked_event(event: Event, masker: Masker) -> Event:
    """Notices, retries and the final error/result with every known secret masked (a server's error
    may quote the key; tool results are masked where they are made)."""
    if not masker:
        return event
    if isinstance(event, Notice):
        return dataclasses.replace(event, text=masker.mask(event.text))
    if isinstance(event, Retrying):
        return dataclasses.replace(event, error=masker.mask(event.error))
    if isinstance(event, TurnFinished):
        error = event.error
        if error and masker.mask(error) != error:  # keep the ErrorInfo's kind, status and retry-after
            masked = masker.mask(error)
            error = (
                errors.ErrorInfo(masked, error.kind, error.status, error.retry_after, error.error_type)
                if isinstance(error, errors.ErrorInfo)
                else masked
            )
        return dataclasses.replace(event, result=masker.mask(event.result), error=error)
    return event


async def _preview(tool: Tool, args: Mapping[str, Any], ctx: ToolContext) -> tuple[str | None, str | None]:
    """(diff, None), or (None, why the call would fail), or (None, None) for a tool without a preview."""
    if tool.preview is None:
        return None, None
    try:
        return await asyncio.to_thread(tool.preview, dict(args), ctx), None
    except ToolError as exc:
        return None, str(exc)
    except Exception as exc:  # a broken preview must not stop the question from being asked
        return None, f"no preview ({type(exc).__name__}: {exc})"


def _checkpoint_fields(agent: Agent) -> dict[str, Any]:
    entry = agent.checkpoints.last if agent.checkpoints is not None else None
    if entry is None or entry.before is None:
        return {}
    return {"changes": entry.changes.as_dict() if entry.after else None, "checkpoint": entry.before}


def _utf8_safe(message: dict[str, Any]) -> dict[str, Any]:
    """`message` itself when all its text can be encoded as UTF-8; otherwise a copy with the lone
    surrogates (e.g. a file name with invalid bytes echoed in an error) replaced by U+FFFD, since such
    text can be neither written to the session log nor sent to the model."""
    try:
        json.dumps(message, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return cast(dict[str, Any], _fix_text(message))
    return message


def _fix_text(value: Any) -> Any:
    if isinstance(value, str):
        try:  # bytes smuggled in by surrogateescape (os.fsdecode) come back as the bytes they were
            return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        except UnicodeEncodeError:
            return value.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    if isinstance(value, dict):
        return {_fix_text(k): _fix_text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_fix_text(v) for v in value]
    return value


@dataclass
class _Prepared:
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

    @property
    def signature(self) -> str:
        return f"{self.name}\x00{self.canonical if self.canonical is not None else self.raw.strip()}"


class _RepeatTracker:
    """Counts identical consecutive tool calls across the steps of a turn (`limit` None: never stop)."""

    def __init__(self, limit: int | None = REPEAT_LIMIT) -> None:
        self.limit = limit
        self.last: str | None = None
        self.count = 0

    def see(self, signature: str) -> int:
        if signature == self.last:
            self.count += 1
        else:
            self.last, self.count = signature, 1
        return self.count

