"""First run in a terminal without an API key: explain the options, ask for the key (hidden input) and store
it in the user's `KIMICODE_HOME/config.toml` (`[auth] api_key`, file mode 0600).

The key is never echoed, printed, logged or written anywhere else; error messages never contain it. The
config file is rewritten atomically (a private temporary file renamed over it), keeping everything that
was in it; a file kimicode cannot safely extend (invalid TOML, an `[auth]` table already there, a symbolic
link into a dotfiles repository) is left untouched with a message saying what to do instead.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import IO

from kimicode.config.endpoint import ConfigError

KEY_HELP_URL = "https://platform.kimi.ai/console/api-keys"


def check_key(key: str) -> str | None:
    """Why `key` cannot be an API key (None when it looks like one). The message never includes the key."""
    if len(key) < 8:
        return "it is shorter than any API key"
    if any(c.isspace() for c in key):
        return "it contains spaces (paste only the key)"
    if not all(33 <= ord(c) < 127 for c in key):
        return "it contains characters an API key does not have"
    return None


def store_key(home: Path, key: str) -> Path:
    """Add `[auth] api_key` to `home/config.toml` (created if missing) with mode 0600; return its path.

    Raises ConfigError, naming the file and what to do, when the file cannot be extended safely.
    """
    problem = check_key(key)
    if problem:
        raise ConfigError(f"not storing the key: {problem}")
    path = home / "config.toml"
    if path.is_symlink():
        raise ConfigError(
            f"{path} is a symbolic link (to {os.path.realpath(path)}); not writing a secret through it: "
            "set KIMI_API_KEY in your environment instead"
        )
    old = ""
    if path.exists():
        try:
            old = path.read_text(encoding="utf-8")
            data = tomllib.loads(old)
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"{path}: cannot add the key to this file ({exc}); fix it or set KIMI_API_KEY") from None
        if "auth" in data:
            raise ConfigError(f"{path} already has an [auth] table: put api_key = \"...\" in it yourself")
    text = old + ("\n" if old and not old.endswith("\n") else "")
    text += ("\n" if old.strip() else "") + f"[auth]\napi_key = {json.dumps(key)}\n"
    if tomllib.loads(text).get("auth", {}).get("api_key") != key:  # pragma: no cover - a bug, never the key
        raise ConfigError(f"{path}: the key could not be written as valid TOML")
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = home / f".config.toml.{os.getpid()}.tmp"
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o600)  # whatever the umask
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return path


def first_run(
    home: Path,
    *,
    out: IO[str],
    ask: Callable[[str], str] = getpass.getpass,
    attempts: int = 3,
) -> bool:
    """Explain how to give kimicode a key and offer to store one; True when a key was stored.

    `ask` reads a line without echoing it (getpass); Enter, Ctrl-D or Ctrl-C skip.
    """
    config = home / "config.toml"
    out.write(
        "kimicode needs an API key. Three ways to give it one:\n"
        f"  1. paste it below: it is stored in {config} (readable only by you, mode 0600)\n"
        "  2. set KIMI_API_KEY (or MOONSHOT_API_KEY) in your shell profile; it wins over the stored key\n"
        "  3. for another OpenAI-compatible server, set OPENAI_API_KEY and OPENAI_BASE_URL\n"
        "     (a local server without keys: OPENAI_API_KEY=none OPENAI_BASE_URL=http://localhost:8000/v1)\n"
        f"Moonshot keys: {KEY_HELP_URL}. `kimicode doctor` checks the setup afterwards.\n"
    )
    out.flush()
    for _ in range(attempts):
        try:
            key = ask("API key (input hidden, Enter to skip): ").strip()
        except (EOFError, KeyboardInterrupt):
            out.write("\n")
            key = ""
        if not key:
            out.write("No key stored. Set KIMI_API_KEY, or run kimicode again to paste one.\n")
            return False
        problem = check_key(key)
        if problem:
            out.write(f"That does not look like an API key: {problem}. Try again.\n")
            continue
        try:
            path = store_key(home, key)
        except (ConfigError, OSError) as exc:
            out.write(f"kimicode: {exc}\n")
            return False
        out.write(f"Key stored in {path} (mode 0600). Run `kimicode doctor` to check it works.\n")
        return True
    out.write("No key stored.\n")
    return False


def ensure_key(
    workspace: Path,
    home: Path,
    *,
    model: str | None,
    base_url: str | None,
    out: IO[str],
    ask: Callable[[str], str] = getpass.getpass,
) -> bool:
    """Before the interactive session: False when there is no API key and none was stored now.

    Any other configuration problem returns True: the session reports it in its usual way.
    """
    from kimicode.config.endpoint import MissingKeyError
    from kimicode.config.settings import load_settings, resolve_model

    try:
        resolve_model(load_settings(workspace.expanduser().resolve(), home), model=model, base_url=base_url)
    except MissingKeyError:
        return first_run(home, out=out, ask=ask)
    except (ConfigError, ValueError, OSError):
        return True
    return True
