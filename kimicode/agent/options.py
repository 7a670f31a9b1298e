"""`AgentOptions`: every setting of an Agent, its type and its default, in one frozen value.

`Agent(options, tools=..., approve=..., on_event=...)` takes the settings from here and only stores the
collaborators. The library default is hermetic: `AgentOptions()` reads the key and endpoint from the
environment and nothing else (no config file, no AGENTS.md). `AgentOptions.from_workspace(path)` is what
the command line uses: the user's and the (trusted) project's config files and the AGENTS.md files.

Precedence, highest first: explicit settings (flags, keyword arguments), environment variables
(`KIMI_MODEL`, the key and base URL variables), then the configuration files (see kimicode/config).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast

from kimicode.config.choices import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_MAX_TURNS,
    DEFAULT_PERMISSION_MODE,
    DEFAULT_PRUNE_KEEP_TOKENS,
    DEFAULT_REPEAT_LIMIT,
    DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_RETRY_BASE_DELAY,
    EFFORTS,
    ORIGINS,
    PERMISSION_MODES,
    SANDBOX_MODES,
    SCOPES,
    SWITCH_POLICIES,
    Effort,
    Origin,
    PermissionMode,
    SandboxMode,
    Scope,
    SwitchPolicy,
    check_choice,
)
from kimicode.config.endpoint import ConfigError, kimicode_home
from kimicode.config.settings import Settings, load_settings
from kimicode.context.output import DEFAULT_CAP_CHARS
from kimicode.permissions.policy import Rules

if TYPE_CHECKING:
    from kimicode.agent.core import Agent

CONFIG_DEFAULTS = ("permission_mode", "max_turns", "max_retries", "request_timeout")
"""Options `[defaults]` in a config file may set (`model` and `thinking` are resolved with the endpoint,
so that `KIMI_MODEL` and a model's own `reasoning_effort` take their places in the precedence)."""


@dataclass(frozen=True)
class AgentOptions:
    """Every setting of an Agent. Build one, keep it, derive variants with `replace(**changes)`."""

    model: str | None = None
    """The model name (a `[models.NAME]` of the config, or the id sent); None: `KIMI_MODEL`, the config's
    `defaults.model`, else kimi-k3."""
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    workspace: Path = Path(".")
    home: Path | None = None
    """KIMICODE_HOME: where sessions (and, with `from_workspace`, the user's config) live."""
    permission_mode: PermissionMode = DEFAULT_PERMISSION_MODE
    thinking: Effort | None = None
    system_prompt: str | None = None
    """Replaces kimicode's system prompt entirely (no AGENTS.md is added to it)."""
    append_system_prompt: str | None = None
    """Added to the end of the system prompt."""
    project_instructions: bool = False
    """Add the AGENTS.md / CLAUDE.md files (home, repository root down to the workspace) to the prompt."""
    config: Settings | None = field(default=None, repr=False, hash=False)
    """The resolved configuration files; None: none (hermetic)."""
    context_window: int | None = None
    max_completion_tokens: int | None = None
    max_turns: int = DEFAULT_MAX_TURNS
    repeat_limit: int | None = DEFAULT_REPEAT_LIMIT
    """Identical consecutive tool calls that end the turn (status `repeat_limit`); None: no limit."""
    tool_timeout: float | None = None
    """Seconds any tool call may run (a tool's own `timeout` wins); None: no limit."""
    max_retries: int = DEFAULT_MAX_RETRIES
    tool_choice: str | None = None
    """`auto`, `none`, `required` (a tool call every step), or a tool's name (that tool); None: not sent (the
    server's default, `auto`), or the model's `tool_choice` in the config."""
    retry_base_delay: float = DEFAULT_RETRY_BASE_DELAY
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    tool_output_cap: int = DEFAULT_CAP_CHARS
    tool_output_tokens: int | None = None
    prune_threshold: float | None = None
    compact_threshold: float | None = None
    prune_keep_tokens: int = DEFAULT_PRUNE_KEEP_TOKENS
    tokenizer_path: Path | str | None = None
    persist: bool = True
    """Write a session log (needed to resume)."""
    session_id: str | None = None
    headless: bool = False
    origin: Origin | None = None
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    ask: tuple[str, ...] = ()
    rules: Rules | None = field(default=None, repr=False)
    """The permission rules, already resolved (instead of config files plus allow/deny/ask)."""
    sandbox: SandboxMode | None = None
    sandbox_network: bool | None = None
    prices: Mapping[str, float] | None = field(default=None, hash=False)
    """USD per million tokens (`input`, `cached_input`, `output`) for `RunResult.cost`; they win over the
    model's configured prices and Moonshot's list prices. None: those (or no cost when unknown)."""
    scope: Scope | None = None
    """`strict` adds direct limits to the system prompt (do only what was asked); None: the config's
    `[agent] scope`, else `normal` (docs/models.md)."""
    on_switch: SwitchPolicy | None = None
    """What a change of model does to earlier assistant messages (`keep`, `strip`, `compact`); None: the
    model's `on_switch`, else `[model] on_switch`, else the model profile's default (docs/models.md)."""
    add_dirs: tuple[Path, ...] = ()
    """More directories the tools may work in besides the workspace (`--add-dir`): reads, and writes by the
    permission mode as in the workspace; the sandbox shows them read-only (docs/terminal.md)."""
    response_format: Mapping[str, Any] | None = field(default=None, hash=False)
    """Sent as each request's `response_format` (`{"type": "json_schema", ...}`); structured output sets it
    where the server honours it (agent/structured.py, docs/servers.md)."""

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        for name in ("workspace", "home"):
            value = getattr(self, name)
            if value is None and name == "home":
                continue
            if not isinstance(value, str | os.PathLike):
                raise TypeError(f"{name} must be a path (str or Path) (got {value!r})")
            set_(self, name, Path(value))
        for name in ("model", "base_url", "api_key", "system_prompt", "append_system_prompt", "session_id"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{name} must be a string or None (got {type(value).__name__} {value!r})")
        for name in ("persist", "headless", "project_instructions"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False (got {getattr(self, name)!r})")
        for name in ("context_window", "max_completion_tokens", "tool_output_tokens"):
            if getattr(self, name) is not None:
                _check_int(name, getattr(self, name), 1)
        _check_int("tool_output_cap", self.tool_output_cap, 1)
        if not _positive(self.retry_base_delay) and self.retry_base_delay != 0:
            raise ValueError(
                f"retry_base_delay must be a non-negative number of seconds (got {self.retry_base_delay!r})"
            )
        for name in ("allow", "deny", "ask"):
            value = getattr(self, name)
            if value is None or isinstance(value, str):
                set_(self, name, () if value is None else (value,))
            elif isinstance(value, Iterable):
                set_(self, name, tuple(value))
            if not isinstance(getattr(self, name), tuple) or not all(isinstance(r, str) for r in getattr(self, name)):
                raise TypeError(f"{name} must be rules as strings, e.g. ('bash(git diff*)',) (got {value!r})")
        for name, kind in (("config", Settings), ("rules", Rules)):
            value = getattr(self, name)
            if value is not None and not isinstance(value, kind):
                raise TypeError(
                    f"{name} must be a {kind.__module__}.{kind.__name__} or None (got {type(value).__name__})"
                )
        dirs = (self.add_dirs,) if isinstance(self.add_dirs, str | os.PathLike) else self.add_dirs
        found = tuple(Path(d).expanduser().resolve() for d in dirs or ())
        if missing := [str(d) for d in found if not d.is_dir()]:
            raise ValueError(f"add_dirs: not a directory: {', '.join(missing)}")
        set_(self, "add_dirs", found)
        if self.response_format is not None and not isinstance(self.response_format, Mapping):
            raise TypeError(f"response_format must be a dict or None (got {type(self.response_format).__name__})")
        if self.prices is not None:
            set_(self, "prices", _checked_prices(self.prices))
        check_choice("permission_mode", self.permission_mode, PERMISSION_MODES)
        if self.thinking is not None and self.thinking not in EFFORTS:
            raise ValueError(f"thinking must be low, high or max (got {self.thinking!r})")
        if self.origin is not None and self.origin not in ORIGINS:
            raise ValueError(f"origin must be interactive, headless or library (got {self.origin!r})")
        check_choice("sandbox", self.sandbox, SANDBOX_MODES, optional=True)
        check_choice("scope", self.scope, SCOPES, optional=True)
        check_choice("on_switch", self.on_switch, SWITCH_POLICIES, optional=True)
        _check_int("max_turns", self.max_turns, 1)
        _check_int("max_retries", self.max_retries, 0)
        check_tool_choice(self.tool_choice)
        if self.repeat_limit is not None and (not isinstance(self.repeat_limit, int) or self.repeat_limit < 2):
            raise ValueError(f"repeat_limit must be at least 2, or None for no limit (got {self.repeat_limit!r})")
        if self.tool_timeout is not None and not _positive(self.tool_timeout):
            raise ValueError(f"tool_timeout must be a positive number of seconds (got {self.tool_timeout!r})")
        if not _positive(self.request_timeout):
            raise ValueError(f"request_timeout must be a positive number of seconds (got {self.request_timeout!r})")

    def replace(self, **changes: Any) -> AgentOptions:
        """A copy with `changes` applied (validated like the constructor); an unknown name is a TypeError."""
        check_names(changes, "AgentOptions.replace()")
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_workspace(
        cls, workspace: str | Path = ".", *, home: str | Path | None = None, trust: bool = False, **overrides: Any
    ) -> AgentOptions:
        """The options the command line uses in `workspace`: its config files and AGENTS.md files.

        Reads `KIMICODE_HOME/config.toml` and the workspace's `.kimicode/config.toml` (whose riskier
        settings apply only in a trusted workspace; `trust=True` trusts it for this run), fills the
        options `[defaults]` sets, and adds the AGENTS.md files to the prompt. `overrides` (any option)
        win over all of it. A broken config file raises ConfigError naming the file, line and key.
        """
        check_names(overrides, "AgentOptions.from_workspace()")
        where = Path(workspace).expanduser().resolve()
        if not where.is_dir():
            raise ConfigError(f"workspace is not a directory: {where}")
        root = Path(home).expanduser() if home is not None else kimicode_home()
        settings = overrides.get("config")
        if settings is None:
            settings = load_settings(where, root, trust=trust)
        defaults = settings.config.defaults
        values: dict[str, Any] = {k: getattr(defaults, k) for k in CONFIG_DEFAULTS if getattr(defaults, k) is not None}
        values.update(workspace=where, home=root, config=settings, project_instructions=True)
        values.update(overrides)
        return cls(**values)


FIELDS = frozenset(f.name for f in dataclasses.fields(AgentOptions))
_dataclass_init = AgentOptions.__init__


@functools.cache
def option_names() -> frozenset[str]:
    """AgentOptions' field names: the words a library caller can change (agent/outgoing.py's renaming)."""
    return frozenset(f.name for f in dataclasses.fields(AgentOptions))


@functools.wraps(_dataclass_init)
def _checked_init(self: AgentOptions, *args: Any, **kwargs: Any) -> None:
    """The dataclass constructor, with an unknown setting named together with the nearest real one."""
    check_names(kwargs, "AgentOptions()")
    _dataclass_init(self, *args, **kwargs)


setattr(AgentOptions, "__init__", _checked_init)  # noqa: B010 - mypy refuses assigning to a method


def check_names(names: Any, where: str) -> None:
    """Raise TypeError naming each unknown setting (with the nearest known one) in `names`."""
    unknown = [n for n in names if n not in FIELDS]
    if not unknown:
        return
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(name, sorted(FIELDS), n=1)
        hints.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    raise TypeError(f"{where} got unknown setting(s) {', '.join(hints)}; the settings are the fields of AgentOptions")


def _check_int(name: str, value: Any, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an integer of at least {minimum} (got {value!r})")


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


V = TypeVar("V")


class HasOptions(Protocol):
    """What an `OptionAttribute` needs of its owner (the Agent)."""

    options: AgentOptions

    def reset_client(self) -> None: ...


class OptionAttribute(Generic[V]):
    """An attribute of the agent that is one of its options (`agent.max_turns`); assigning it replaces the
    option (validated) for the following requests and turns."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, agent: HasOptions | None, owner: type) -> V:
        return cast(V, getattr(agent.options, self.name)) if agent is not None else cast(V, self)

    def __set__(self, agent: HasOptions, value: V) -> None:
        agent.options = agent.options.replace(**{self.name: value})
        agent.reset_client()  # retries and timeouts are the client's


PRICE_KEYS = ("input", "cached_input", "output")


def _checked_prices(prices: Any) -> dict[str, float]:
    """`prices=` as a plain dict, or a clear error: a mapping of the known keys to non-negative numbers."""
    if not isinstance(prices, Mapping):
        raise TypeError(f"prices must be a mapping such as {{'input': 3.0, 'output': 15.0}} (got {prices!r})")
    unknown = [k for k in prices if k not in PRICE_KEYS]
    if unknown:
        raise ValueError(
            f"prices has unknown key(s) {unknown}; the keys are {', '.join(PRICE_KEYS)} (USD per million tokens)"
        )
    for key, value in prices.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise ValueError(f"prices[{key!r}] must be a non-negative number of USD per million tokens (got {value!r})")
    if "input" not in prices and "output" not in prices:
        raise ValueError("prices needs at least 'input' or 'output' (USD per million tokens)")
    return {k: float(v) for k, v in prices.items()}


_TOOL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,127}")


def check_tool_choice(value: object) -> None:
    """`tool_choice` is None, `auto`, `none`, `required`, or a tool's name; anything else is a ValueError."""
    if value is None or value in ("auto", "none", "required"):
        return
    if not isinstance(value, str) or not _TOOL_NAME.fullmatch(value):
        raise ValueError(f"tool_choice must be auto, none, required or a tool's name (got {value!r})")


def derived_options(agent: Agent, **changes: Any) -> AgentOptions:
    """The settings of an agent made from `agent` (a fork, a subagent): its options with what it resolved
    at run time frozen in (the model and endpoint it uses now, its effort, window and answer limit,
    workspace and home), no system prompt of its own (a fork's history carries it) and a new session id;
    then `changes`. Forks and subagents derive their settings only here."""
    carried: dict[str, Any] = {
        "model": agent.model_config.name,
        "base_url": agent.endpoint.base_url,
        "api_key": agent.endpoint.api_key,
        "workspace": agent.workspace,
        "thinking": agent.thinking,
        "context_window": agent.context_window,
        "max_completion_tokens": agent.max_completion_tokens,
        "home": agent.home,
        "system_prompt": None,
        "append_system_prompt": None,
        "session_id": None,
    }
    return agent.options.replace(**{**carried, **changes})
