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


@dataclass(frozen=True)
class Endpoint:
    """Where to send requests. `api_key` lives only in memory: never logged or written."""

    base_url: str
    api_key: str
    model: str
    key_source: str

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
) -> Endpoint:
    """Pick key, base URL and model: flags, then KIMI_*/MOONSHOT_*, then OPENAI_*."""
    env = os.environ if env is None else env
    key_source = "argument"
    env_base: str | None = None
    env_model = env.get("KIMI_MODEL") or None
    if not api_key:
        for name in ("KIMI_API_KEY", "MOONSHOT_API_KEY"):
            if env.get(name):
                api_key, key_source = env[name], name
                env_base = env.get("KIMI_BASE_URL") or env.get("MOONSHOT_BASE_URL") or None
                break
        else:
            if env.get("OPENAI_API_KEY"):
                api_key, key_source = env["OPENAI_API_KEY"], "OPENAI_API_KEY"
                env_base = env.get("OPENAI_BASE_URL") or env.get("KIMI_BASE_URL") or OPENAI_DEFAULT_BASE_URL
    else:
        env_base = env.get("KIMI_BASE_URL") or env.get("OPENAI_BASE_URL") or None
    if not api_key:
        raise ConfigError(
            "no API key: set KIMI_API_KEY (or MOONSHOT_API_KEY) for Moonshot's kimi-k3, "
            "or OPENAI_API_KEY with OPENAI_BASE_URL for another OpenAI-compatible endpoint"
        )
    url = (base_url or env_base or DEFAULT_BASE_URL).rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"the base URL must start with http:// or https:// (got {url!r})")
    return Endpoint(url, api_key, model or env_model or DEFAULT_MODEL, key_source)
