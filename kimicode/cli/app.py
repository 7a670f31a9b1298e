"""The typer application: flags, environment, and dispatch to the headless or interactive face."""

from __future__ import annotations

import asyncio
import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from kimicode._version import __version__
from kimicode.cli.batch_cmd import batch
from kimicode.cli.config_cmd import config_app
from kimicode.cli.doctor import doctor
from kimicode.cli.mcp_cmd import mcp_app
from kimicode.cli.plugin_cmd import plugin_app
from kimicode.cli.sessions import sessions_app
from kimicode.config.choices import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_MAX_TURNS,
    DEFAULT_PERMISSION_MODE,
    DEFAULT_REQUEST_TIMEOUT,
    EFFORTS,
    PERMISSION_MODES,
    SANDBOX_MODES,
    SCOPES,
    SWITCH_POLICIES,
)

if TYPE_CHECKING:
    from kimicode.agent.core import Agent
    from kimicode.agent.options import AgentOptions

app = typer.Typer(
    name="kimicode",
    help="A coding agent for kimi-k3 and any OpenAI-compatible endpoint.\n\n"
    'Run `kimicode` for an interactive session (`kimicode "PROMPT"` opens one with that first prompt), or '
    "`kimicode -p PROMPT` to run one task headless.",
    epilog="\b\n"
    "Environment:\n"
    "  KIMI_API_KEY (or MOONSHOT_API_KEY)  the API key for Moonshot's kimi-k3\n"
    "  KIMI_BASE_URL, KIMI_MODEL           endpoint and model (default https://api.moonshot.ai/v1, kimi-k3)\n"
    "  OPENAI_API_KEY, OPENAI_BASE_URL     any other OpenAI-compatible endpoint\n"
    "  KIMICODE_HOME                       kimicode's state and config (default ~/.kimicode)\n"
    "\b\n"
    "Configuration: KIMICODE_HOME/config.toml (yours; a key pasted on first run is stored there, mode\n"
    "0600) and .kimicode/config.toml in the workspace (the project's). `kimicode doctor` checks the setup.\n"
    "Exit codes: 0 ok, 1 failure, 2 usage, 3 limit, 4 budget, 5 no branch verified (--branches), 6 invalid\n"
    "structured output, 75 transient (retry the job), 130 Ctrl-C, 143 SIGTERM.",
    add_completion=False,
    no_args_is_help=False,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


class OutputFormat(StrEnum):
    text = "text"
    json = "json"
    stream_json = "stream-json"


class InputFormat(StrEnum):
    text = "text"
    stream_json = "stream-json"


# typer's choices, made from the literals in kimicode/config/choices.py
Thinking = StrEnum("Thinking", [(v, v) for v in EFFORTS])  # type: ignore[misc]
PermissionModeOpt = StrEnum("PermissionModeOpt", [(v.replace("-", "_"), v) for v in PERMISSION_MODES])  # type: ignore[misc]
DEFAULT_MODE_OPT = PermissionModeOpt(DEFAULT_PERMISSION_MODE)
SandboxOpt = StrEnum("SandboxOpt", [(v.replace("-", "_"), v) for v in SANDBOX_MODES])  # type: ignore[misc]
ScopeOpt = StrEnum("ScopeOpt", [(v, v) for v in SCOPES])  # type: ignore[misc]
OnSwitchOpt = StrEnum("OnSwitchOpt", [(v, v) for v in SWITCH_POLICIES])  # type: ignore[misc]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"kimicode {__version__}")
        raise typer.Exit()


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print `kimicode: message` on stderr and return an Exit to raise."""
    typer.echo(f"kimicode: {message}", err=True)
    return typer.Exit(code)


@app.callback(invoke_without_command=True)
def main(
    ctx: typer.Context,
    prompt: Annotated[
        str | None,
        typer.Option("-p", "--print", help="Run this task headless and exit ('-' reads it from stdin)."),
    ] = None,
    output_format: Annotated[
        OutputFormat, typer.Option("--output-format", help="text (the answer), json (one object), stream-json.")
    ] = OutputFormat.text,
    include_partial: Annotated[
        bool, typer.Option("--include-partial", help="stream-json: also emit text deltas as they stream.")
    ] = False,
    output_schema: Annotated[
        Path | None,
        typer.Option(
            "--output-schema",
            metavar="FILE",
            help="The final answer must be JSON valid against this JSON Schema "
            "(sent back to the model with the errors until it is; exit 6 when it never is).",
        ),
    ] = None,
    json_schema: Annotated[
        str | None, typer.Option("--json-schema", metavar="JSON", help="As --output-schema, with the schema inline.")
    ] = None,
    input_format: Annotated[
        InputFormat,
        typer.Option(
            "--input-format",
            help="text (the -p prompt) or stream-json: user messages as JSON lines on stdin, "
            "one turn each (with --output-format stream-json).",
        ),
    ] = InputFormat.text,
    model: Annotated[str | None, typer.Option("--model", "-m", help="Model id (env KIMI_MODEL).")] = None,
    base_url: Annotated[str | None, typer.Option("--base-url", help="Endpoint (env KIMI_BASE_URL).")] = None,
    thinking: Annotated[Thinking | None, typer.Option("--thinking", help="Reasoning effort.")] = None,
    max_turns: Annotated[
        int, typer.Option("--max-turns", min=1, help="Maximum model steps per task.")
    ] = DEFAULT_MAX_TURNS,
    cwd: Annotated[
        Path | None, typer.Option("-C", "--cwd", help="Workspace directory (default: the current one).")
    ] = None,
    permission_mode: Annotated[
        PermissionModeOpt, typer.Option("--permission-mode", help="What may run without asking.")
    ] = DEFAULT_MODE_OPT,
    yolo: Annotated[bool, typer.Option("--yolo", help="Shorthand for --permission-mode yolo.")] = False,
    allow: Annotated[
        list[str] | None,
        typer.Option(
            "--allow",
            metavar="RULE",
            help="Run matching calls without asking, e.g. 'bash(git diff*)', 'edit(src/**)' (repeatable).",
        ),
    ] = None,
    deny: Annotated[
        list[str] | None,
        typer.Option("--deny", metavar="RULE", help="Never run matching calls, e.g. 'bash(rm*)' (repeatable)."),
    ] = None,
    sandbox: Annotated[
        SandboxOpt | None,
        typer.Option(
            "--sandbox",
            help="auto (default): commands that run without asking run in a bubblewrap "
            "sandbox (Linux), the workspace writable, the rest read-only, no network; workspace-write: "
            "every command runs there without asking; off: never.",
        ),
    ] = None,
    sandbox_network: Annotated[
        bool, typer.Option("--sandbox-network", help="Allow network access inside the sandbox.")
    ] = False,
    tool_choice: Annotated[
        str | None,
        typer.Option(
            "--tool-choice",
            metavar="auto|none|required|TOOL",
            help="Sent with each request: required makes the model call a tool every step, a tool's "
            "name forces that tool (servers that honour it: vLLM, OpenAI; llama.cpp accepts it only).",
        ),
    ] = None,
    max_retries: Annotated[
        int, typer.Option("--max-retries", min=0, help="Retries of transient API failures.")
    ] = DEFAULT_MAX_RETRIES,
    request_timeout: Annotated[
        float, typer.Option("--request-timeout", min=1, help="Seconds to wait for the server or its next chunk.")
    ] = DEFAULT_REQUEST_TIMEOUT,
    context_window: Annotated[
        int | None,
        typer.Option("--context-window", min=1024, help="Context window in tokens (default: the model's)."),
    ] = None,
    max_tokens: Annotated[
        int | None,
        typer.Option(
            "--max-tokens",
            min=1,
            help="Most tokens of one answer (default: the model's, at most a "
            "quarter of the window; config: [context] max_tokens).",
        ),
    ] = None,
    scope: Annotated[
        ScopeOpt | None,
        typer.Option(
            "--scope",
            help="strict: the model does only what was asked (no new files, dependencies or "
            "refactors; asks, or with -p states its assumption and stops, when unclear); [agent] scope.",
        ),
    ] = None,
    on_switch: Annotated[
        OnSwitchOpt | None,
        typer.Option(
            "--on-switch",
            help="When the model changes (-m on resume or fork, /model): keep earlier "
            "messages whole, strip another model's reasoning, or compact first. Config: [model] on_switch.",
        ),
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show progress on stderr.")] = False,
    continue_: Annotated[
        bool, typer.Option("-c", "--continue", help="Continue the latest session of this workspace.")
    ] = False,
    resume: Annotated[
        str | None,
        typer.Option("-r", "--resume", metavar="[ID]", help="Resume a session by id (no id: pick one in a terminal)."),
    ] = None,
    fork: Annotated[
        bool, typer.Option("--fork", help="With -c/-r: continue in a new session, leaving the original as it is.")
    ] = False,
    append_system_prompt: Annotated[
        str | None, typer.Option("--append-system-prompt", help="Text added to the end of the system prompt.")
    ] = None,
    system_prompt_file: Annotated[
        Path | None, typer.Option("--system-prompt-file", help="Replace kimicode's system prompt with this file.")
    ] = None,
    max_budget_usd: Annotated[
        float | None,
        typer.Option("--max-budget-usd", min=0, help="Stop when the run's cost passes this (status budget, exit 4)."),
    ] = None,
    no_session_persistence: Annotated[
        bool, typer.Option("--no-session-persistence", help="Write no session log (nothing to resume).")
    ] = False,
    trust_workspace: Annotated[
        bool, typer.Option("--trust-workspace", help="Trust the workspace's own config for this run (CI checkouts).")
    ] = False,
    mcp_config: Annotated[
        Path | None,
        typer.Option("--mcp-config", metavar="FILE", help="Start the MCP servers of this .mcp.json-style file."),
    ] = None,
    worktree: Annotated[
        bool,
        typer.Option(
            "--worktree",
            help="With --fork: give the fork its own working tree (a git worktree on a "
            "new branch; a copy outside git).",
        ),
    ] = False,
    branches: Annotated[
        int | None,
        typer.Option(
            "--branches",
            min=1,
            help="Run the task in N branches at once, each in its own worktree; keep the best (docs/branches.md).",
        ),
    ] = None,
    verify: Annotated[
        str | None,
        typer.Option(
            "--verify",
            metavar="CMD",
            help="With --branches: run CMD in each branch's workspace (sandboxed); exit 0 = verified.",
        ),
    ] = None,
    verify_timeout: Annotated[
        float, typer.Option("--verify-timeout", min=1, help="With --verify: seconds before the command is killed.")
    ] = 600.0,
    pick: Annotated[
        str,
        typer.Option(
            "--pick",
            help="With --branches: auto (verified, fewer changed lines, cheaper), first-verified, smallest, "
            "cheapest, ask.",
        ),
    ] = "auto",
    apply_: Annotated[
        str, typer.Option("--apply", help="With --branches: auto (apply the chosen branch) or never.")
    ] = "auto",
    branch_models: Annotated[
        str | None,
        typer.Option(
            "--branch-models", metavar="A,B,...", help="With --branches: spread the branches over these models."
        ),
    ] = None,
    branch_thinking: Annotated[
        str | None,
        typer.Option(
            "--branch-thinking", metavar="low,high,...", help="With --branches: spread them over these efforts."
        ),
    ] = None,
    judge_model: Annotated[
        str | None,
        typer.Option(
            "--judge-model", metavar="M", help="With --branches: let model M compare the verified diffs and choose."
        ),
    ] = None,
    engine: Annotated[
        str, typer.Option("--engine", help="With --branches: local (this process) or ray (a Ray cluster).")
    ] = "local",
    ray_address: Annotated[
        str | None,
        typer.Option("--ray-address", help="With --engine ray: the cluster (default: RAY_ADDRESS, else a local Ray)."),
    ] = None,
    version: Annotated[
        bool, typer.Option("--version", "-V", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
    add_dir: Annotated[
        list[Path] | None,
        typer.Option(
            "--add-dir",
            metavar="DIR",
            help="Another directory the agent may read and change files in (as in the workspace; repeatable).",
        ),
    ] = None,
    first_prompt: Annotated[str | None, typer.Option("--first-prompt", hidden=True)] = None,
) -> None:
    """Run kimicode: check the flags, then open the terminal session or run the task headless."""
    if ctx.invoked_subcommand is not None:
        return
    workspace = _workspace(cwd)
    if worktree and not fork:
        raise fail("--worktree goes with --fork (-c --fork --worktree, or -r ID --fork --worktree)")
    fork_workspace = "worktree" if worktree else "shared"
    target = _resume_target(continue_=continue_, resume=resume, fork=fork, workspace=workspace)
    from kimicode.cli.options import flag_settings

    settings = flag_settings(  # the Agent settings both faces take from the flags (cli/options.py)
        ctx,
        model=model,
        base_url=base_url,
        permission_mode=permission_mode.value,
        yolo=yolo,
        thinking=thinking.value if thinking else None,
        max_turns=max_turns,
        max_retries=max_retries,
        request_timeout=request_timeout,
        retry_base_delay=_retry_base_delay(),
        context_window=context_window,
        max_tokens=max_tokens,
        allow=allow,
        deny=deny,
        sandbox=sandbox.value if sandbox is not None else None,
        sandbox_network=sandbox_network,
        scope=scope.value if scope else None,
        on_switch=on_switch.value if on_switch else None,
        tool_choice=tool_choice,
    )
    settings.update(_added_dirs(add_dir))
    streaming = input_format is InputFormat.stream_json  # the messages come from stdin (cli/structured_io.py)
    headless_flags = (system_prompt_file, append_system_prompt, max_budget_usd, mcp_config)
    prompt = _headless_prompt(
        prompt,
        first_prompt,
        streaming=streaming,
        output_format=output_format,
        headless_flags=any(v is not None for v in headless_flags) or no_session_persistence or trust_workspace,
    )
    from kimicode.cli.branches_cmd import branch_flags

    try:
        flags = branch_flags(
            branches,
            verify=verify,
            verify_timeout=verify_timeout,
            pick=pick,
            apply=apply_,
            models=branch_models,
            thinking=branch_thinking,
            judge_model=judge_model,
            engine=engine,
            address=ray_address,
            ctx=ctx,
        )
    except ValueError as exc:
        raise fail(str(exc)) from None
    if prompt is None and flags is not None:
        raise fail("--branches applies to headless runs: add -p PROMPT (in the terminal: /branches N)")
    spec = _output_spec(
        output_schema, json_schema, headless=prompt is not None, streaming=streaming, branching=flags is not None
    )
    checked = _checked_options(workspace, trust_workspace, settings)
    if prompt is None:
        _open_terminal(
            workspace,
            own_workspace=cwd is None and target is not None,
            model=model,
            base_url=base_url,
            resume=target,
            fork=fork,
            fork_workspace=fork_workspace,
            first_prompt=first_prompt,
            settings=settings,
        )
    prompt = _whole_prompt(prompt, streaming)
    settings.update(_ci_settings(system_prompt_file, append_system_prompt, no_session_persistence))
    agent = _open_agent(
        checked,
        settings,
        workspace,
        own_workspace=cwd is None,
        target=target,
        fork=fork,
        fork_workspace=fork_workspace,
        trust=trust_workspace,
        mcp_config=mcp_config,
        budget=max_budget_usd,
    )
    _say_where(agent, forked_apart=fork and fork_workspace != "shared", verbose=verbose)
    from kimicode.cli.headless import Printer, run_headless

    printer = Printer(output_format.value, include_partial=include_partial, verbose=verbose)
    if flags is not None:  # --branches (cli/branches_cmd.py)
        from kimicode.cli.branches_cmd import run_branches

        raise typer.Exit(asyncio.run(run_branches(agent, prompt, printer, flags)))
    if streaming:
        from kimicode.cli.structured_io import run_stream_input

        raise typer.Exit(asyncio.run(run_stream_input(agent, printer, spec=spec, budget=max_budget_usd)))
    raise typer.Exit(asyncio.run(run_headless(agent, prompt, printer, budget=max_budget_usd, spec=spec)))


# -- main's steps, in the order it takes them --------------------------------------------------------------


def _workspace(cwd: Path | None) -> Path:
    """The workspace: -C/--cwd, else the current directory; it must be a directory."""
    workspace = (cwd or Path.cwd()).expanduser()
    if not workspace.is_dir():
        raise fail(f"-C/--cwd: not a directory: {workspace}")
    return workspace


def _resume_target(*, continue_: bool, resume: str | None, fork: bool, workspace: Path) -> str | None:
    """The session -c/-r name (an id), or None for a new one."""
    from kimicode.cli.sessions import resume_target

    try:
        return resume_target(continue_=continue_, resume=resume, fork=fork, workspace=workspace)
    except ValueError as exc:
        raise fail(str(exc)) from None


def _retry_base_delay() -> float | None:
    """KIMICODE_RETRY_BASE_DELAY (config/endpoint.py reads it), a usage error when it is not a number."""
    from kimicode.config.endpoint import ConfigError, retry_base_delay

    try:
        return retry_base_delay()
    except ConfigError as exc:
        raise fail(str(exc)) from None


def _added_dirs(add_dir: list[Path] | None) -> dict[str, Any]:
    """`--add-dir`: the directories as a setting; each must exist."""
    if not add_dir:
        return {}
    missing = [str(d) for d in add_dir if not d.expanduser().is_dir()]
    if missing:
        raise fail(f"--add-dir: not a directory: {', '.join(missing)}")
    return {"add_dirs": tuple(add_dir)}


def _headless_prompt(
    prompt: str | None,
    first_prompt: str | None,
    *,
    streaming: bool,
    output_format: OutputFormat,
    headless_flags: bool,
) -> str | None:
    """The -p prompt (`-`: read from stdin, which stream-json input always is), None for the terminal face;
    flags that only a headless run takes need one."""
    if streaming and (prompt not in (None, "-") or output_format is not OutputFormat.stream_json):
        raise fail(
            "--input-format stream-json reads the messages from stdin: use it with --output-format "
            "stream-json and without a -p prompt"
        )
    prompt = "-" if streaming else prompt
    if prompt is not None and first_prompt is not None:
        raise fail(
            f'two prompts: -p {prompt!r} and {first_prompt!r} (kimicode "PROMPT" opens a session with it; '
            "-p runs it headless)"
        )
    if prompt is None and headless_flags:
        raise fail(
            "--max-budget-usd, --system-prompt-file, --append-system-prompt, --no-session-persistence, "
            "--trust-workspace and --mcp-config apply to headless runs: add -p PROMPT"
        )
    return prompt


def _output_spec(
    output_schema: Path | None, json_schema: str | None, *, headless: bool, streaming: bool, branching: bool
) -> Any:
    """The structured output's schema (--output-schema / --json-schema), or None; only a headless run takes
    one, and --branches takes neither it nor stream-json input."""
    from kimicode.cli.ci_flags import FlagError
    from kimicode.cli.structured_io import output_spec

    try:
        spec = output_spec(output_schema, json_schema)
    except FlagError as exc:
        raise fail(str(exc)) from None
    if (spec is not None or streaming) and branching:
        raise fail("--branches does not take --output-schema, --json-schema or --input-format stream-json")
    if spec is not None and not headless:
        raise fail("--output-schema and --json-schema apply to headless runs: add -p PROMPT")
    return spec


def _checked_options(workspace: Path, trust: bool, settings: dict[str, Any]) -> AgentOptions:
    """The options in the workspace: the configuration files are read (and checked) once, before anything
    starts."""
    from kimicode.agent.options import AgentOptions
    from kimicode.config.endpoint import ConfigError

    try:
        return AgentOptions.from_workspace(workspace, trust=trust, **settings)
    except (ConfigError, ValueError, TypeError) as exc:
        raise fail(str(exc)) from None


def _open_terminal(
    workspace: Path,
    *,
    own_workspace: bool,
    model: str | None,
    base_url: str | None,
    first_prompt: str | None,
    settings: dict[str, Any],
    **session: Any,
) -> NoReturn:
    """No -p: the interactive session, in a terminal (the first run asks for a key); elsewhere a usage
    error. `own_workspace`: a session resumed without -C keeps its own workspace."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        if first_prompt is not None:
            raise fail(
                'kimicode "PROMPT" opens an interactive session, which needs a terminal: run it headless with -p PROMPT'
            )
        raise fail("no prompt: pass -p PROMPT (or -p - to read it from stdin)")
    from kimicode.cli.firstrun import ensure_key
    from kimicode.config.endpoint import kimicode_home

    if not ensure_key(workspace, kimicode_home(), model=model, base_url=base_url, out=sys.stderr):
        raise typer.Exit(2)  # no key: first_run said what to set
    from kimicode.ui.launch import run_interactive

    raise typer.Exit(
        run_interactive(
            workspace=None if own_workspace else workspace, first_prompt=first_prompt, **session, **settings
        )
    )


def _whole_prompt(prompt: str, streaming: bool) -> str:
    """The task: `-p -` reads stdin to its end; `-p TEXT` takes what is already piped in after it; stream-json
    input is read as the run goes (cli/structured_io.py)."""
    if streaming:
        return prompt
    from kimicode.cli.stdin import read_all_stdin, read_piped_stdin

    if prompt == "-":
        prompt = read_all_stdin()
    else:
        piped = read_piped_stdin()
        if piped.strip():
            prompt = f"{prompt}\n\n{piped}"
    if not prompt.strip():
        raise fail("the prompt is empty")
    return prompt


def _ci_settings(
    system_prompt_file: Path | None, append_system_prompt: str | None, no_persistence: bool
) -> dict[str, Any]:
    """The CI flags' settings (cli/ci_flags.py), for headless runs."""
    from kimicode.cli.ci_flags import FlagError, read_system_prompt

    settings: dict[str, Any] = {"persist": False} if no_persistence else {}
    if append_system_prompt:
        settings["append_system_prompt"] = append_system_prompt
    if system_prompt_file is not None:
        try:
            settings["system_prompt"] = read_system_prompt(system_prompt_file)
        except FlagError as exc:
            raise fail(str(exc)) from None
    return settings


def _open_agent(
    checked: AgentOptions,
    settings: dict[str, Any],
    workspace: Path,
    *,
    own_workspace: bool,
    target: str | None,
    fork: bool,
    fork_workspace: str,
    trust: bool,
    mcp_config: Path | None,
    budget: float | None,
) -> Agent:
    """The headless run's agent: a new one in `workspace`, or the session -c/-r names (in `workspace`, or in
    its own when `own_workspace`: no -C), refused when --max-budget-usd cannot be kept."""
    from kimicode.agent.core import Agent
    from kimicode.agent.options import AgentOptions
    from kimicode.cli.ci_flags import FlagError, check_budget, ci_settings
    from kimicode.config.endpoint import ConfigError, kimicode_home
    from kimicode.config.settings import load_settings

    def options_for(place: Path) -> AgentOptions:
        """The run's options in `place` (the session's own workspace when resuming without -C)."""
        config = checked.config if place.expanduser().resolve() == checked.workspace else None
        if config is None:  # another workspace (a resumed session's own): its files, read once too
            config = load_settings(place.expanduser().resolve(), kimicode_home(), trust=trust)
        return AgentOptions.from_workspace(
            place, headless=True, **settings, config=ci_settings(config, mcp_config=mcp_config)
        )

    try:
        if target is None:
            agent = Agent(options_for(workspace))
        else:
            where = {} if own_workspace else {"workspace": workspace}
            agent = Agent.resume(target, fork=fork, fork_workspace=fork_workspace, options=options_for, **where)
        check_budget(agent, budget)
    except (ConfigError, FlagError, ValueError, TypeError) as exc:  # held by `kimicode serve`: name `attach`
        from kimicode.config.serve_state import explain_refusal

        raise fail(explain_refusal(exc, Path(settings["home"]) if settings.get("home") else kimicode_home())) from None
    return agent


def _say_where(agent: Agent, *, forked_apart: bool, verbose: bool) -> None:
    """On stderr: what resuming warned of (--verbose shows it as a notice), and where a fork in its own tree
    works (its tree and branch)."""
    if agent.resume_warning and not verbose:
        typer.echo(f"kimicode: warning: {agent.resume_warning}", err=True)
    if forked_apart:
        from kimicode.ui.toolbar import GitBranch

        branch = GitBranch(agent.workspace).get()
        typer.echo(
            f"kimicode: forked into session {agent.session_id}, working in its own tree {agent.workspace}"
            + (f" on branch {branch}" if branch else ""),
            err=True,
        )


from kimicode.cli.checkpoints_cmd import checkpoints_app, undo_command  # noqa: E402 - also adds `sessions diff`
from kimicode.cli.completion_cmd import answering_completion, completion_command  # noqa: E402
from kimicode.cli.login_cmd import login_command  # noqa: E402

app.command("undo")(undo_command)
app.add_typer(sessions_app, name="sessions")
app.add_typer(checkpoints_app, name="checkpoints")
app.add_typer(config_app, name="config")
app.add_typer(mcp_app, name="mcp")
app.add_typer(plugin_app, name="plugin")
app.command("doctor")(doctor)
app.command("login")(login_command)
app.command("completion")(completion_command)
app.command("batch")(batch)
from kimicode.cli.branches_cmd import branches_app  # noqa: E402
from kimicode.cli.prompt_cmd import prompt_app  # noqa: E402

app.add_typer(branches_app, name="branches")
app.add_typer(prompt_app, name="prompt")
from kimicode.cli.acp_cmd import acp_command  # noqa: E402

app.command("acp")(acp_command)
PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}


@app.command("serve", context_settings=PASS_THROUGH)
def serve_entry(ctx: typer.Context) -> None:
    """Serve kimicode over HTTP: sessions, events, approvals (docs/serve.md; `kimicode serve --help`)."""
    from kimicode.cli.serve_cmd import run_serve  # entry.py routes `kimicode serve` here before this app loads

    run_serve(["serve", *ctx.args])


@app.command("web", context_settings=PASS_THROUGH)
def web_entry(ctx: typer.Context) -> None:
    """Open kimicode's page in a browser, on a running `kimicode serve` or a new one (docs/serve.md)."""
    from kimicode.cli.serve_cmd import run_serve

    run_serve(["web", *ctx.args])


@app.command("attach", context_settings=PASS_THROUGH)
def attach_entry(ctx: typer.Context) -> None:
    """Follow a session of the running `kimicode serve` in this terminal, beside the page (docs/serve.md)."""
    from kimicode.cli.attach_cmd import run_attach  # entry.py routes `kimicode attach` here before this app loads

    run_attach(list(ctx.args))


def _click_exceptions() -> Any:
    """The exceptions module of the click that typer runs on (recent typers vendor their own copy)."""
    try:
        from typer._click import exceptions
    except ImportError:  # typer before it vendored click
        from click import exceptions  # type: ignore[no-redef]
    return exceptions


def run_app() -> None:
    """Run the application: usage errors are one clean message (exit 2), Ctrl-C is exit 130."""
    from kimicode.cli.firstprompt import NotACommand, first_prompt_args, value_options, whole_short_helps
    from kimicode.cli.sessions import optional_resume_value

    errors = _click_exceptions()
    answering_completion()  # a completion script asking: click answers before parsing anything
    try:
        main_command = typer.main.get_command(app)
        takes_value = value_options(main_command)
        args = first_prompt_args(sys.argv[1:], main_command.commands, takes_value)  # type: ignore[attr-defined]
    except NotACommand as exc:
        sys.stderr.write(f"kimicode: {exc}\n")
        raise SystemExit(2) from None
    try:
        whole_short_helps(main_command)
        code = main_command(args=optional_resume_value(args, takes_value), prog_name="kimicode", standalone_mode=False)
    except errors.ClickException as exc:
        if isinstance(exc, errors.BadParameter):
            # typer validates choices with pydantic, whose message starts "Value error, "
            exc.message = exc.message.removeprefix("Value error, ")
        exc.show()
        raise SystemExit(exc.exit_code) from None
    except typer.Abort as exc:
        if isinstance(exc.__cause__, KeyboardInterrupt):
            sys.stderr.write("kimicode: interrupted\n")
            raise SystemExit(130) from None
        sys.stderr.write("kimicode: aborted\n")
        raise SystemExit(1) from None
    except KeyboardInterrupt:
        sys.stderr.write("kimicode: interrupted\n")
        raise SystemExit(130) from None
    raise SystemExit(code if isinstance(code, int) else 0)
