"""Configuration files: `KIMICODE_HOME/config.toml` and the workspace's `.kimicode/config.toml`.

Project settings override user settings; flags and the environment override both (the caller applies
those). Every key is declared in `SCHEMA`, so a typo or a wrong type is reported with the file, the line
and the key instead of being silently ignored.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kimicode.config.choices import SwitchPolicy
from kimicode.config.endpoint import (
    DEFAULT_MODEL,
    KEY_VARIABLES,
    ConfigError,
    Endpoint,
    check_base_url,
    check_model,
    resolve_endpoint,
)
from kimicode.config.sections import Config, schema_of

SCHEMA: dict[str, Any] = schema_of(Config)
"""What the file validator checks, derived from the typed sections (kimicode/config/sections.py)."""


@dataclass
class Settings:
    """The merged configuration, with the files it came from."""

    data: dict[str, Any] = field(default_factory=dict)
    sources: list[Path] = field(default_factory=list)
    trusted: bool = False
    """Whether the workspace's own config applies whole (else only what kimicode/config/trust.py allows)."""
    ignored: list[str] = field(default_factory=list)
    """Notices about the project's settings: what was ignored (the workspace is not trusted), what loosens."""
    parsed: dict[Path, dict[str, Any]] = field(default_factory=dict, repr=False, compare=False)
    """Each source file's own tables as read (before merging): the permission rules join the files' lists
    instead of replacing them, and take them from here rather than reading the files again."""
    _resolved: Config | None = field(default=None, repr=False, compare=False)

    @property
    def config(self) -> Config:
        """Every section typed, with its defaults and bounds (kimicode/config/sections.py), resolved once."""
        if self._resolved is None:
            self._resolved = resolve(self.data, self)
        return self._resolved

    def masked(self) -> dict[str, Any]:
        """The merged tables with secrets masked, for showing (`kimicode config show`)."""
        return masked(self.data)  # type: ignore[no-any-return]

    def update(self, changes: Mapping[str, Any]) -> None:
        """Merge `changes` (tables of settings) into these settings, e.g. `{"checkpoints": {"enabled": False}}`."""
        self.data = merge(self.data, changes)
        self._resolved = None

    def with_changes(self, changes: Mapping[str, Any]) -> Settings:
        """A copy of these settings with `changes` merged in (these stay as they are)."""
        copy = replace(self, _resolved=None)
        copy.update(changes)
        return copy

    def get(self, dotted: str, default: Any = None) -> Any:
        """`settings.get("models.kimi-k3.context_window")`; dots separate tables."""
        node: Any = self.data
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node

    def table(self, dotted: str) -> dict[str, Any]:
        """A table (empty when absent)."""
        value = self.get(dotted, {})
        return value if isinstance(value, dict) else {}


def config_paths(workspace: Path, home: Path) -> list[Path]:
    """The files read, lowest precedence first."""
    return [home / "config.toml", workspace / ".kimicode" / "config.toml"]


def is_trusted(workspace: Path, user_data: Mapping[str, Any]) -> bool:
    """True when `workspace` is (inside) a path listed in the user config's `[trust] workspaces`."""
    trust = user_data.get("trust")
    listed = trust.get("workspaces", []) if isinstance(trust, dict) else []
    here = workspace.expanduser().resolve()
    for entry in listed:
        try:
            root = Path(entry).expanduser().resolve()
        except (RuntimeError, OSError, ValueError):  # `~nosuchuser/x`, a NUL byte: names nothing
            continue
        if here == root or root in here.parents:
            return True
    return False


def load_settings(workspace: Path, home: Path, *, trust: bool = False, project: bool = True) -> Settings:
    """Read and merge both files (only the user's with `project=False`); raise ConfigError naming the file,
    line and key on any problem.

    A project file that is not trusted applies only the keys `kimicode.config.sections` lets it set, in the
    direction that tightens them (kimicode.config.trust); the rest is named in one notice in
    `Settings.ignored`. `trust` (`--trust-workspace`) trusts the workspace for this run as if it were
    listed in `[trust] workspaces`.
    """
    from kimicode.config.trust import filter_project

    settings = Settings()
    user_path, project_path = config_paths(workspace, home)
    if user_path.is_file():
        settings.data = parse_file(user_path)
        settings.sources.append(user_path)
        settings.parsed[user_path] = settings.data
    settings.trusted = trust or is_trusted(workspace, settings.data)
    if settings.trusted and project:  # a trust decision covers what it saw (kimicode.config.trustseen)
        from kimicode.config.trustseen import review

        settings.trusted, notice = review(home, workspace, flag=trust)
        if notice is not None:
            settings.ignored.append(notice)
    if project and project_path.is_file():
        data = parse_file(project_path)
        settings.parsed[project_path] = dict(data)
        data.pop("trust", None)  # a project cannot trust itself
        if data.pop("auth", None) is not None:  # keys belong in the user's own file (mode 0600), never a repo
            settings.ignored.append(f"{project_path}: [auth] ignored: an API key is only read from {user_path}")
        kept, notices = filter_project(
            data, settings.data, trusted=settings.trusted, project_path=project_path, user_path=user_path
        )
        settings.ignored.extend(notices)
        settings.data = merge(settings.data, kept)
        settings.sources.append(project_path)
    return settings


def resolve(
    data: Mapping[str, Any], settings: Settings | None = None, path: Path | None = None, text: str | None = None
) -> Config:
    """`data` as typed sections; ConfigError naming the file, line and key for a value out of its bounds."""
    import pydantic

    try:
        return Config.model_validate(data)
    except pydantic.ValidationError as exc:
        err = exc.errors()[0]
        keypath = tuple(str(p) for p in err["loc"])
        if path is not None and text is not None:
            line = find_line(text, keypath)
            at = f"{path}:{line}" if line else str(path)
        else:
            at = where(settings, keypath) if settings is not None else "configuration"
        message = str(err["msg"])
        message = message[0].lower() + message[1:]
        raise ConfigError(f"{at}: {'.'.join(keypath)}: {message} (got {err.get('input')!r})") from None


def parse_file(path: Path) -> dict[str, Any]:
    """Parse and validate one TOML file."""
    from kimicode.safeio import read_regular

    try:
        text = read_regular(path).decode("utf-8")  # a config.toml swapped for a FIFO must not hang start-up
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the file ({exc})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    problems = validate(data, SCHEMA, ())
    if problems:
        keypath, message = problems[0]
        line = find_line(text, keypath)
        where = f"{path}:{line}" if line else str(path)
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        raise ConfigError(f"{where}: {'.'.join(keypath)}: {message}{more}")
    resolve(data, path=path, text=text)  # bounds (a turn limit of 0, a negative timeout), said at once
    return data


def merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge tables; any other value in `over` replaces the one in `base`."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def validate(data: Any, schema: Any, path: tuple[str, ...]) -> list[tuple[tuple[str, ...], str]]:
    """Problems as (key path, message)."""
    problems: list[tuple[tuple[str, ...], str]] = []
    if isinstance(schema, dict):
        if not isinstance(data, dict):
            return [(path, f"must be a table, got {_type_name(data)}")]
        for key, value in data.items():
            sub = schema.get(key, schema.get("*"))
            if sub is None:
                known = ", ".join(k for k in schema if k != "*")
                problems.append(((*path, key), f"unknown key (known keys here: {known})"))
                continue
            problems.extend(validate(value, sub, (*path, key)))
        return problems
    if isinstance(schema, tuple):
        if data not in schema:
            return [(path, f"must be one of {', '.join(map(str, schema))}, got {data!r}")]
        return []
    ok = {
        "str": isinstance(data, str),
        "int": isinstance(data, int) and not isinstance(data, bool),
        "number": isinstance(data, (int, float)) and not isinstance(data, bool),
        "bool": isinstance(data, bool),
        "list[str]": isinstance(data, list) and all(isinstance(x, str) for x in data),
        "list": isinstance(data, list),
        "any": True,
        "hooks": isinstance(data, dict | list),
    }[schema]
    if not ok:
        want = {
            "str": "a string",
            "int": "an integer",
            "number": "a number",
            "bool": "true or false",
            "list[str]": "a list of strings",
            "list": "a list",
            "hooks": "a table of events ([[hooks.PreToolUse]]) or a list of hooks ([[hooks]])",
        }[schema]
        return [(path, f"must be {want}, got {_type_name(data)} {data!r}")]
    return []


def _type_name(value: Any) -> str:
    return {
        dict: "a table",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "an integer",
        float: "a number",
    }.get(type(value), type(value).__name__)


def find_line(text: str, keypath: tuple[str, ...]) -> int | None:
    """Best-effort line number of a key: inside its table header if there is one, else anywhere."""
    lines = text.splitlines()
    key = keypath[-1] if keypath else ""
    table = keypath[:-1]
    start = 0
    if table:
        header = re.compile(r"^\s*\[+\s*" + r"\s*\.\s*".join(_key_re(p) for p in table) + r"\s*\]+\s*(#.*)?$")
        for i, line in enumerate(lines):
            if header.match(line):
                start = i + 1
                break
    key_re = re.compile(r"^\s*(?:[\w\-\"'.]+\.)?" + _key_re(key) + r"\s*=")
    for i in range(start, len(lines)):
        if key_re.match(lines[i]):
            return i + 1
    for i, line in enumerate(lines):  # dotted keys or inline tables
        if re.search(r"(^|[\s.{,])" + _key_re(key) + r"\s*=", line):
            return i + 1
    return None


def _key_re(key: str) -> str:
    escaped = re.escape(key)
    return rf"(?:{escaped}|\"{escaped}\"|'{escaped}')"


# -- models and providers ---------------------------------------------------------------------------

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
SECRET_MASK = "********"
STORED_KEY_SOURCE = "config.toml"
"""`Endpoint.key_source` of a key read from `[auth] api_key` in the user's config.toml."""


@dataclass(frozen=True)
class ModelConfig:
    """A model as configured: its `[models.NAME]` table joined with its `[providers.P]` table.

    Every field but `name` and `model` may be None (not configured): the model profile's default applies.
    """

    name: str
    """The name the user selects (`--model NAME`, `defaults.model`)."""
    model: str
    """The model id sent to the API."""
    provider: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    reasoning_field: str | None = None
    context_window: int | None = None
    max_completion_tokens: int | None = None
    reasoning_effort: str | None = None
    supports_images: bool | None = None
    edit_tool: str | None = None
    tool_choice: str | None = None
    """`auto`, `none`, `required` or a tool's name, sent with each request that has tools (servers that honour it)."""
    on_switch: SwitchPolicy | None = None
    """What switching onto this model does to earlier assistant messages (`models.NAME.on_switch`)."""
    prices: Mapping[str, float] = field(default_factory=dict)
    """USD per million tokens: `input`, `cached_input`, `output`."""


def where(settings: Settings, keypath: tuple[str, ...]) -> str:
    """`file:line` (or `file`) of the highest-precedence file that sets `keypath`, for error messages."""
    for path in reversed(settings.sources):
        try:
            text = path.read_text(encoding="utf-8")
            data = tomllib.loads(text)
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            continue
        node: Any = data
        for part in keypath:
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None:
            line = find_line(text, keypath)
            return f"{path}:{line}" if line else str(path)
    return "configuration"


def expand_env(value: str, env: Mapping[str, str]) -> str:
    """Replace `${VAR}` and `${VAR:-default}` with environment values; raise KeyError(VAR) if unset."""

    def sub(m: re.Match[str]) -> str:
        name, default = m.group(1), m.group(2)
        if env.get(name):
            return env[name]
        if default is not None:
            return default
        raise KeyError(name)

    return _ENV_REF.sub(sub, value)


def _expand_table(
    settings: Settings, table: Mapping[str, str], keypath: tuple[str, ...], env: Mapping[str, str]
) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in table.items():
        try:
            out[key] = expand_env(value, env)
        except KeyError as exc:
            where_ = where(settings, (*keypath, key))
            raise ConfigError(
                f"{where_}: {'.'.join((*keypath, key))}: the environment variable {exc.args[0]} is not set"
            ) from None
    return out


def model_config(settings: Settings, name: str, env: Mapping[str, str] | None = None) -> ModelConfig:
    """The configuration of model `name`: its table, else the one table whose `model` id is `name`.

    A name with no table is used as the model id as it is. Raises ConfigError for an unknown provider.
    """
    env = os.environ if env is None else env
    models = settings.table("models")
    key = name
    entry = models.get(name)
    if entry is None:  # e.g. a resumed session records the API id, not the configured name
        matches = [k for k, v in models.items() if isinstance(v, dict) and v.get("model") == name]
        if len(matches) == 1:
            key = matches[0]
            entry = models[key]
    if not isinstance(entry, dict):
        return ModelConfig(name=name, model=name)
    provider = entry.get("provider")
    ptable: dict[str, Any] = {}
    if provider is not None:
        providers = settings.table("providers")
        if provider not in providers:
            known = ", ".join(sorted(providers)) or "none"
            raise ConfigError(
                f"{where(settings, ('models', key, 'provider'))}: models.{key}.provider: unknown provider "
                f"{provider!r} (providers defined: {known})"
                + "".join(f"; note: {text}" for text in settings.ignored if "[providers]" in text)
            )
        ptable = providers[provider]
    headers = _expand_table(settings, ptable.get("headers", {}), ("providers", str(provider), "headers"), env)
    return ModelConfig(
        name=key,
        model=entry.get("model", key),
        provider=provider,
        base_url=ptable.get("base_url"),
        api_key_env=ptable.get("api_key_env"),
        headers=headers,
        reasoning_field=ptable.get("reasoning_field"),
        context_window=entry.get("context_window"),
        max_completion_tokens=entry.get("max_completion_tokens"),
        reasoning_effort=entry.get("reasoning_effort"),
        supports_images=entry.get("supports_images"),
        edit_tool=entry.get("edit_tool"),
        tool_choice=entry.get("tool_choice"),
        on_switch=entry.get("on_switch"),
        prices=dict(entry.get("prices", {})),
    )


def resolve_model(
    settings: Settings,
    *,
    model: str | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[Endpoint, ModelConfig]:
    """Pick the model and its endpoint: flags, then the environment, then the configuration files.

    The model name is `model`, else `KIMI_MODEL`, else `defaults.model`, else kimi-k3. A model whose
    provider sets `base_url` / `api_key_env` talks to that provider (a `--base-url` flag still wins);
    any other model uses the KIMI_* / OPENAI_* variables as `config.resolve_endpoint` describes.
    """
    env = os.environ if env is None else env
    default = settings.get("defaults.model")
    name = model or env.get("KIMI_MODEL") or (default if isinstance(default, str) and default else DEFAULT_MODEL)
    source = "--model" if model else "KIMI_MODEL" if env.get("KIMI_MODEL") else "defaults.model in config.toml"
    check_model(name, source)
    mc = model_config(settings, name, env)
    if mc.base_url is None and mc.api_key_env is None:
        stored = settings.get("auth.api_key")
        if not api_key and isinstance(stored, str) and stored and not any(env.get(v) for v in KEY_VARIABLES):
            # the key the first run stored in the user's config.toml; a key variable still wins
            endpoint = resolve_endpoint(model=mc.model, base_url=base_url, api_key=stored, env=env)
            return replace(endpoint, key_source=STORED_KEY_SOURCE), mc
        return resolve_endpoint(model=mc.model, base_url=base_url, api_key=api_key, env=env), mc
    key, source = api_key, "argument"
    if not key and mc.api_key_env:
        key, source = env.get(mc.api_key_env) or "", mc.api_key_env
        if not key:
            raise ConfigError(
                f"no API key for model {mc.name!r}: its provider {mc.provider!r} reads the key from the "
                f"environment variable {mc.api_key_env}, which is not set"
            )
    url = base_url or mc.base_url
    if not key or not url:
        generic = resolve_endpoint(model=mc.model, base_url=url, api_key=key or None, env=env)
        key, source, url = generic.api_key, (source if key else generic.key_source), generic.base_url
    url_source = "--base-url" if base_url else f"[providers.{mc.provider}] base_url in config.toml"
    url = check_base_url(url.strip().rstrip("/"), url_source)
    return Endpoint(url, key, mc.model, source, url_source), mc


def switch_model(settings: Settings, current: Endpoint, name: str) -> tuple[Endpoint, ModelConfig]:
    """The endpoint after `/model NAME`: a model with its own provider moves there, any other keeps the
    current base URL and key and changes only the model id."""
    mc = model_config(settings, name)
    if mc.base_url is None and mc.api_key_env is None:
        return replace(current, model=mc.model), mc
    return resolve_model(settings, model=name)


def prefers_apply_patch(mc: ModelConfig) -> bool:
    """Whether the model edits with apply_patch: its `edit_tool`, else True for GPT and o-series models."""
    if mc.edit_tool is not None:
        return mc.edit_tool == "apply_patch"
    model = mc.model.lower().rsplit("/", 1)[-1]
    return model.startswith(("gpt-", "codex")) or re.match(r"o\d", model) is not None


def estimate_cost(usage: Mapping[str, int], prices: Mapping[str, float]) -> float | None:
    """Dollars spent for `usage` (prompt/completion/cached tokens) at `prices` per million; None if unpriced."""
    if "input" not in prices and "output" not in prices:
        return None
    prompt = int(usage.get("prompt_tokens", 0))
    cached = min(int(usage.get("cached_tokens", 0)), prompt)
    inp = float(prices.get("input", 0.0))
    cached_price = float(prices.get("cached_input", inp))
    out = float(prices.get("output", 0.0))
    return ((prompt - cached) * inp + cached * cached_price + int(usage.get("completion_tokens", 0)) * out) / 1e6


def is_secret_key(key: str) -> bool:
    """Keys whose values are masked when shown: headers and environment entries that carry credentials."""
    k = key.lower()
    if k.endswith("_env"):  # the name of a variable (api_key_env), not its value
        return False
    return any(word in k for word in ("key", "token", "secret", "auth", "password", "passwd", "credential", "cookie"))


def masked(data: Any, keypath: tuple[str, ...] = ()) -> Any:
    """A copy of the settings with secrets replaced by a mask (`${VAR}` references are shown as they are).

    Every value under a `headers` or `env` table is masked, and any value whose key looks like a secret.
    """
    if isinstance(data, dict):
        return {k: masked(v, (*keypath, str(k))) for k, v in data.items()}
    if isinstance(data, list):
        return [masked(v, keypath) for v in data]
    if isinstance(data, str) and keypath:
        under = len(keypath) >= 2 and keypath[-2] in ("headers", "env")
        if (under or is_secret_key(keypath[-1])) and not _ENV_REF.fullmatch(data.strip()):
            return SECRET_MASK
    return data
