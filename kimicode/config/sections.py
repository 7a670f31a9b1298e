"""Every configuration key, typed, once: its type, default and bounds, and what an untrusted project may set.

`Config` is the whole of `config.toml` as pydantic models, one section per table (as kimi-cli keeps its
settings). The rest of kimicode reads the resolved sections (`settings.config.context.max_tokens`), never
the tables: a default or a bound is written here, beside its key, and nowhere else.

`untrusted=` beside a key is the direction in which a repository that is not trusted may change it (its
`.kimicode/config.toml`, see `kimicode.config.trust`):

- `lower` / `higher`: only to a value on that side of yours (a lower limit, a longer retention);
- `true` / `false`: only to that value (`checkpoints.enabled = true`, `sandbox.network = false`);
- `stricter`: only to a stricter choice on the key's scale (`STRICTNESS`);
- `any`: harmless, any valid value (how reasoning is shown);
- `rules`: permission rules, judged by the permission engine per file: a project's `deny` and `ask` rules
  add to yours, its `allow` rules need trust (kimicode.permissions.sources.session_rules).

A key without a direction is ignored from an untrusted project (with one notice naming every ignored key
and how to trust the workspace). The file-level validator (`schema_of`) is derived from these models, so
a key added here is known to `config.toml` at once.
"""

from __future__ import annotations

import types
import typing
from typing import Annotated, Any, Final, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field

from kimicode.config.choices import (
    DEFAULT_CHECKPOINT_MAX_AGE_DAYS,
    DEFAULT_CHECKPOINT_MAX_FILE_MB,
    DEFAULT_COMPACT_THRESHOLD,
    DEFAULT_IMAGE_MAX_BYTES,
    DEFAULT_IMAGE_MAX_SIDE,
    DEFAULT_MCP_STARTUP_TIMEOUT,
    DEFAULT_MCP_TOOL_TIMEOUT,
    DEFAULT_PRUNE_THRESHOLD,
    DEFAULT_SANDBOX_MAX_CPU_SECONDS,
    DEFAULT_SANDBOX_MAX_FILE_SIZE_MB,
    DEFAULT_SANDBOX_MAX_MEMORY_MB,
    DEFAULT_SANDBOX_MAX_PROCESSES,
    DEFAULT_SCOPE,
    DEFAULT_SPILL_MAX_BYTES,
    DEFAULT_SUBAGENT_MAX_TURNS,
    DEFAULT_TOOL_OUTPUT_CAP_TOKENS,
    DEFAULT_WEB_MAX_CHARS,
    DEFAULT_WEB_MAX_REDIRECTS,
    DEFAULT_WEB_TIMEOUT,
    Effort,
    PermissionMode,
    SandboxMode,
    Scope,
    SwitchPolicy,
)

Direction = Literal["lower", "higher", "true", "false", "stricter", "any", "rules"]

STRICTNESS: Final[dict[str, dict[str, int]]] = {
    "defaults.permission_mode": {"yolo": 0, "accept-edits": 1, "default": 2, "plan": 3},
    "sandbox.mode": {"off": 0, "auto": 1, "workspace-write": 2},
    "agent.scope": {"normal": 0, "strict": 1},
}
"""The scales of the `stricter` keys, loosest first."""


def key(default: Any = None, *, untrusted: Direction | None = None, schema: str | None = None, **bounds: Any) -> Any:
    """A field: its default, pydantic bounds (`ge`, `gt`, `le`), and the direction an untrusted project may
    move it in (None: not at all); `schema` names a file-validator type of its own (`hooks`)."""
    extra: dict[str, Any] = {}
    if untrusted is not None:
        extra["untrusted"] = str(untrusted)
    if schema is not None:
        extra["schema"] = schema
    return Field(default, json_schema_extra=extra or None, **bounds)


class Section(BaseModel):
    """A table of `config.toml`: unknown keys are errors, values are read-only once resolved."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Defaults(Section):
    model: str | None = key()
    thinking: Effort | None = key()
    permission_mode: PermissionMode | None = key(untrusted="stricter")
    max_turns: int | None = key(untrusted="lower", ge=1)
    max_retries: int | None = key(untrusted="lower", ge=0)
    request_timeout: float | None = key(untrusted="lower", gt=0)


class Provider(Section):
    base_url: str | None = key()
    api_key_env: str | None = key()
    headers: dict[str, str] = key({})
    reasoning_field: Literal["reasoning_content", "reasoning"] | None = key()


class Prices(Section):
    input: float | None = key(ge=0)
    cached_input: float | None = key(ge=0)
    output: float | None = key(ge=0)


class Model(Section):
    provider: str | None = key()
    model: str | None = key()
    context_window: int | None = key(untrusted="lower", ge=1)
    max_completion_tokens: int | None = key(untrusted="lower", ge=1)
    reasoning_effort: Effort | None = key()
    supports_images: bool | None = key()
    edit_tool: Literal["edit_file", "apply_patch"] | None = key(untrusted="any")
    tool_choice: str | None = key()
    on_switch: SwitchPolicy | None = key()
    prices: Prices | None = key()


class ModelSection(Section):
    on_switch: SwitchPolicy | None = key()


class AgentSection(Section):
    scope: Scope = key(DEFAULT_SCOPE, untrusted="stricter")


class Permissions(Section):
    """Rules; read by the permission engine from each file (a project's `allow` needs trust)."""

    allow: list[str] = key([], untrusted="rules")
    deny: list[str] = key([], untrusted="rules")
    ask: list[str] = key([], untrusted="rules")


class Context(Section):
    tool_output_cap_tokens: int = key(DEFAULT_TOOL_OUTPUT_CAP_TOKENS, untrusted="lower", ge=1)
    spill_max_bytes: int = key(DEFAULT_SPILL_MAX_BYTES, untrusted="lower", ge=0)
    prune_threshold: float = key(DEFAULT_PRUNE_THRESHOLD, untrusted="any", gt=0, le=1)
    compact_threshold: float = key(DEFAULT_COMPACT_THRESHOLD, untrusted="any", gt=0, le=1)
    tokenizer: str | None = key()
    """A path: a project may not name files for kimicode to read."""
    max_tokens: int | None = key(untrusted="lower", ge=1)
    """The answer's token limit (`--max-tokens` and a model's `max_completion_tokens` win); None: fitted."""


class Ui(Section):
    reasoning: Literal["show", "hide"] = key("show", untrusted="any")


class Sandbox(Section):
    mode: SandboxMode | None = key(untrusted="stricter")
    network: bool | None = key(untrusted="false")
    # per-command resource limits (kimicode/tools/limits.py); 0 or less turns one off
    max_processes: int = key(DEFAULT_SANDBOX_MAX_PROCESSES, untrusted="lower")
    max_memory_mb: int = key(DEFAULT_SANDBOX_MAX_MEMORY_MB, untrusted="lower")
    max_file_size_mb: int = key(DEFAULT_SANDBOX_MAX_FILE_SIZE_MB, untrusted="lower")
    max_cpu_seconds: int = key(DEFAULT_SANDBOX_MAX_CPU_SECONDS, untrusted="lower")


class Notify(Section):
    """When a turn ends or an approval waits (kimicode/ui/notify.py); only your own file may set it."""

    terminal: Literal["auto", "bell", "osc9", "off"] = key("auto")
    command: list[str] | None = key()
    after_seconds: float = key(10.0, ge=0)


class McpServer(Section):
    command: str | None = key()
    args: list[str] = key([])
    env: dict[str, str] = key({})
    url: str | None = key()
    headers: dict[str, str] = key({})
    type: Literal["stdio", "http", "streamable-http"] | None = key()
    enabled: bool = key(True)
    cwd: str | None = key()
    startup_timeout: float | None = key(gt=0)


class Mcp(Section):
    startup_timeout: float = key(DEFAULT_MCP_STARTUP_TIMEOUT, untrusted="lower", gt=0)
    tool_timeout: float = key(DEFAULT_MCP_TOOL_TIMEOUT, untrusted="lower", gt=0)


class Trust(Section):
    workspaces: list[str] = key([])


class Auth(Section):
    api_key: str | None = key()


class Images(Section):
    max_bytes: int = key(DEFAULT_IMAGE_MAX_BYTES, untrusted="lower", ge=1)
    max_side: int = key(DEFAULT_IMAGE_MAX_SIDE, untrusted="lower", ge=1)


class WebFetch(Section):
    max_chars: int = key(DEFAULT_WEB_MAX_CHARS, untrusted="lower", ge=1)
    max_redirects: int = key(DEFAULT_WEB_MAX_REDIRECTS, untrusted="lower", ge=0)
    timeout: float = key(DEFAULT_WEB_TIMEOUT, untrusted="lower", gt=0)


class WebSearch(Section):
    """The `web_search` tool's provider (kimicode/tools/websearch.py): never from an untrusted project (it
    decides where what the model searches for is sent)."""

    provider: Literal["auto", "moonshot", "searxng", "brave", "tavily", "off"] = key("auto")
    url: str | None = key()
    api_key_env: str | None = key()
    max_results: int | None = key(ge=1)
    price_per_search: float | None = key(ge=0)


class Subagents(Section):
    max_turns: int = key(DEFAULT_SUBAGENT_MAX_TURNS, untrusted="lower", ge=1)
    tools: list[str] | None = key()
    """None: read_file, glob and grep (`DEFAULT_SUBAGENT_TOOLS`)."""


class Checkpoints(Section):
    enabled: bool = key(True, untrusted="true")
    warm_at_open: bool = key(True, untrusted="any")
    max_file_mb: float = key(DEFAULT_CHECKPOINT_MAX_FILE_MB, untrusted="higher")
    """Files larger than this are not snapshotted (0 or less: no file is)."""
    max_age_days: float | None = key(DEFAULT_CHECKPOINT_MAX_AGE_DAYS, untrusted="higher")
    """0 or less: checkpoints never expire."""
    max_store_mb: float | None = key(untrusted="higher")
    """None, 0 or less: no size limit."""
    auto_prune: bool | None = key(untrusted="false")
    """None: on when the configuration was read from files (the command line), off for the hermetic library."""


class Config(Section):
    """The whole configuration, resolved: every section with its defaults filled in."""

    defaults: Defaults = Defaults()
    providers: dict[str, Provider] = {}
    models: dict[str, Model] = {}
    model: ModelSection = ModelSection()
    agent: AgentSection = AgentSection()
    permissions: Permissions = Permissions()
    context: Context = Context()
    ui: Ui = Ui()
    notify: Notify = Notify()
    sandbox: Sandbox = Sandbox()
    mcp_servers: dict[str, McpServer] = {}
    mcp: Mcp = Mcp()
    trust: Trust = Trust()
    hooks: Any = key(None, schema="hooks")
    """Claude Code's or Kimi Code's structure (a table of events or a list of hooks), checked by
    kimicode/extensions/hooks.py."""
    auth: Auth = Auth()
    images: Images = Images()
    web_fetch: WebFetch = WebFetch()
    web_search: WebSearch = WebSearch()
    subagents: Subagents = Subagents()
    checkpoints: Checkpoints = Checkpoints()


# -- what the file validator and the untrusted filter read off the models ------------------------------------


def schema_of(model: type[BaseModel]) -> dict[str, Any]:
    """The file validator's schema (kimicode.config.settings.validate): a dict per table, a type name or a
    tuple of literals per key, `"*"` for a table of named tables."""
    out: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        extra = field.json_schema_extra
        own = extra.get("schema") if isinstance(extra, dict) else None
        out[name] = own if own is not None else _schema_of_type(field.annotation)
    return out


def _schema_of_type(annotation: Any) -> Any:
    origin = get_origin(annotation)
    if origin is Annotated:
        return _schema_of_type(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        inner = [a for a in get_args(annotation) if a is not type(None)]
        return _schema_of_type(inner[0]) if len(inner) == 1 else "any"
    if origin is Literal:
        return tuple(get_args(annotation))
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return schema_of(annotation)
    if origin is dict:
        return {"*": _schema_of_type(get_args(annotation)[1])}
    if origin is list:
        (item,) = get_args(annotation)
        return "list[str]" if item is str else "list"
    return {str: "str", int: "int", float: "number", bool: "bool"}.get(annotation, "any")


def direction(keypath: tuple[str, ...]) -> Direction | None:
    """The direction an untrusted project may move the key at `keypath` in (None: ignored). In a table of
    named tables (`models.NAME`) the name is skipped."""
    node: Any = Config
    parts = list(keypath)
    while parts:
        node = _unwrap(node)
        if get_origin(node) is dict:
            node = get_args(node)[1]
            parts.pop(0)
            continue
        field = node.model_fields.get(parts[0]) if isinstance(node, type) and issubclass(node, BaseModel) else None
        if field is None:
            return None
        parts.pop(0)
        if not parts:
            extra = field.json_schema_extra
            value = extra.get("untrusted") if isinstance(extra, dict) else None
            return typing.cast(Direction | None, value)
        node = field.annotation
    return None


def has_directions(keypath: tuple[str, ...]) -> bool:
    """Whether any key under `keypath` (a section or the entries of a named table) has a direction."""
    node: Any = Config
    for part in keypath:
        node = _unwrap(node)
        if get_origin(node) is dict:
            node = get_args(node)[1]
            continue
        node = node.model_fields[part].annotation if isinstance(node, type) and issubclass(node, BaseModel) else None
    node = _unwrap(node)
    if get_origin(node) is dict:
        node = _unwrap(get_args(node)[1])
    if not (isinstance(node, type) and issubclass(node, BaseModel)):
        return False
    return any(
        isinstance(f.json_schema_extra, dict) and "untrusted" in f.json_schema_extra for f in node.model_fields.values()
    )


def _unwrap(annotation: Any) -> Any:
    """`X | None` as `X`."""
    if get_origin(annotation) in (Union, types.UnionType):
        inner = [a for a in get_args(annotation) if a is not type(None)]
        return inner[0] if len(inner) == 1 else annotation
    return annotation


def default_of(keypath: tuple[str, ...]) -> Any:
    """The default of the key at `keypath` (for comparing a project's value with the user's)."""
    node: Any = Config()
    for part in keypath:
        node = getattr(node, part, None)
    return node


def reference() -> list[tuple[str, str, str, str]]:
    """(key, type and bounds, default, what an untrusted project may do) for every key: the table in
    docs/configuration.md, which a test keeps equal to this."""
    rows: list[tuple[str, str, str, str]] = []

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, field in model.model_fields.items():
            dotted = f"{prefix}{name}"
            annotation = _unwrap(field.annotation)
            if get_origin(annotation) is dict:
                item = _unwrap(get_args(annotation)[1])
                if isinstance(item, type) and issubclass(item, BaseModel):
                    walk(item, f"{dotted}.NAME.")
                    continue
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                walk(annotation, f"{dotted}.")
                continue
            extra = field.json_schema_extra
            way = extra.get("untrusted") if isinstance(extra, dict) else None
            bounds = " ".join(
                f"{type(m).__name__.lower()} {getattr(m, type(m).__name__.lower())}"
                for m in field.metadata
                if type(m).__name__ in ("Ge", "Gt", "Le", "Lt")
            )
            kind = _type_text(field.annotation) + (f" ({bounds})" if bounds else "")
            default = _toml_text(field.default)
            rows.append((dotted, kind, default, str(way) if way else "ignored"))

    walk(Config, "")
    return rows


def _type_text(annotation: Any) -> str:
    schema = _schema_of_type(annotation)
    if isinstance(schema, tuple):
        return " \\| ".join(f'"{v}"' for v in schema)
    if isinstance(schema, dict):
        return "table"
    return str(schema)


def _toml_text(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value).replace("'", '"')
