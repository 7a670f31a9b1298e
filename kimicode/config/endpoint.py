"""Settings from flags and the environment (flags win), with errors that name what to set."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from kimicode.errors import ConfigError as _ConfigError

DEFAULT_BASE_URL = "https://api.moonshot.ai/v1"
DEFAULT_MODEL = "kimi-k3"
OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"
KEY_VARIABLES = ("KIMI_API_KEY", "MOONSHOT_API_KEY", "OPENAI_API_KEY")


class ConfigError(_ConfigError):
    """A usage or configuration problem: reported in one line, exit code 2."""


class MissingKeyError(ConfigError):
    """No API key anywhere: the terminal offers to store one (`kimicode.cli.firstrun`)."""


def retry_base_delay(env: Mapping[str, str] | None = None) -> float | None:
    """KIMICODE_RETRY_BASE_DELAY: seconds before the first retry (tests make retries quick with it); None when
    unset. Read here only, for the terminal, headless and batch runs alike."""
    raw = (os.environ if env is None else env).get("KIMICODE_RETRY_BASE_DELAY")
    try:
        return float(raw) if raw is not None else None
    except ValueError:
        raise ConfigError("KIMICODE_RETRY_BASE_DELAY must be a number of seconds") from None


@dataclass(frozen=True)
class Endpoint:
    """Where to send requests. `api_key` lives only in memory: never logged or written."""

    base_url: str
    api_key: str
    model: str
    key_source: str
    url_source: str = "default"
    """Where the base URL came from (`--base-url`, an environment variable, a config file, `default`)."""

    def __repr__(self) -> str:  # keep the key out of tracebacks and logs
        return f"Endpoint(base_url={self.base_url!r}, model={self.model!r}, key_source={self.key_source!r})"


def kimicode_home(env: Mapping[str, str] | None = None) -> Path:
    """`KIMICODE_HOME`, default `~/.kimicode`: all of kimicode's state lives there."""
    env = os.environ if env is None else env
    home = env.get("KIMICODE_HOME")
    return Path(home).expanduser() if home else Path.home() / ".kimicode"


def resolve_endpoint(
    *,
    model: str | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
    env: Mapping[str, str] | None = None,
    base_url_source: str = "--base-url",
) -> Endpoint:
    """Pick key, base URL and model: flags, then KIMI_*/MOONSHOT_*, then OPENAI_*."""
    env = os.environ if env is None else env
    key_source = "argument"
    env_model = env.get("KIMI_MODEL") or None

    def first(*names: str) -> tuple[str | None, str]:
        for name in names:
            if env.get(name):
                return env[name], name
        return None, "default"

    if not api_key:
        for name in ("KIMI_API_KEY", "MOONSHOT_API_KEY"):
            if env.get(name):
                api_key, key_source = env[name], name
                env_base, url_source = first("KIMI_BASE_URL", "MOONSHOT_BASE_URL")
                break
        else:
            env_base, url_source = None, "default"
            if env.get("OPENAI_API_KEY"):
                api_key, key_source = env["OPENAI_API_KEY"], "OPENAI_API_KEY"
                env_base, url_source = first("OPENAI_BASE_URL", "KIMI_BASE_URL")
                env_base = env_base or OPENAI_DEFAULT_BASE_URL
    else:
        env_base, url_source = first("KIMI_BASE_URL", "OPENAI_BASE_URL")
    if not api_key:
        raise MissingKeyError(
            "no API key: set KIMI_API_KEY (or MOONSHOT_API_KEY) for Moonshot's kimi-k3, "
            "or OPENAI_API_KEY with OPENAI_BASE_URL for another OpenAI-compatible endpoint; or run kimicode in "
            "a terminal once to store a key in KIMICODE_HOME/config.toml"
        )
    if base_url:
        url_source = base_url_source
    url = check_base_url((base_url or env_base or DEFAULT_BASE_URL).strip().rstrip("/"), url_source)
    return Endpoint(url, api_key, model or env_model or DEFAULT_MODEL, key_source, url_source)


def check_model(name: str, source: str) -> str:
    """The model id, or a ConfigError naming where it came from when it is empty or has spaces."""
    if not name.strip() or any(c.isspace() or ord(c) < 32 for c in name):
        raise ConfigError(
            f"the model id from {source} is not valid ({name!r}): give an id without spaces, "
            "e.g. kimi-k3 (see the server's /v1/models for its ids)"
        )
    return name


def check_base_url(url: str, source: str) -> str:
    """The base URL, or a ConfigError that names where it came from and what is wrong with it."""
    from urllib.parse import urlsplit

    where = "the default" if source == "default" else source

    def bad(why: str) -> ConfigError:
        return ConfigError(
            f"the base URL from {where} is not valid ({url!r}): {why}; "
            "expected something like https://api.moonshot.ai/v1 or http://localhost:8000/v1"
        )

    if any(c.isspace() or ord(c) < 32 for c in url):
        raise bad("it contains spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise bad(str(exc)) from None
    if parts.scheme not in ("http", "https"):
        raise bad("it must start with http:// or https://")
    if not parts.hostname:
        raise bad("it has no host name")
    if port == 0:
        raise bad("port 0 cannot be connected to")
    if parts.query or parts.fragment:
        raise bad("it must not have a query (?…) or fragment (#…)")
    return url
