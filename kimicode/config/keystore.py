"""The API key kept in the user's `KIMICODE_HOME/config.toml` (`[auth] api_key`, file mode 0600): checking
that a pasted string can be a key, and storing it (first run, `kimicode login`, `/login`).

The key is never echoed, printed, logged or written anywhere else; error messages never contain it. The
config file is rewritten atomically (a private temporary file renamed over it), keeping everything that
was in it; a file kimicode cannot safely change (invalid TOML, an `[auth]` table it cannot edit line by
line, a symbolic link into a dotfiles repository) is left untouched with a message saying what to do.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tomllib
from pathlib import Path
from typing import Any

from kimicode.config.endpoint import ConfigError


def check_key(key: str) -> str | None:
    """Why `key` cannot be an API key (None when it may be one). The message never includes the key. Its
    length is the server's to judge (a local server's key may be short), so only pasting mistakes are
    refused here."""
    if not key:
        return "it is empty"
    if any(c.isspace() for c in key):
        return "it contains spaces (paste only the key)"
    if not all(33 <= ord(c) < 127 for c in key):
        return "it contains characters an API key does not have"
    return None


def store_key(home: Path, key: str, *, replace: bool = False) -> Path:
    """Add `[auth] api_key` to `home/config.toml` (created if missing) with mode 0600; return its path.
    `replace`: a key already stored there is replaced (`kimicode login`, `/login`).

    Raises ConfigError, naming the file and what to do, when the file cannot be changed safely.
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
        if "auth" in data and not replace:
            raise ConfigError(f'{path} already has an [auth] table: put api_key = "..." in it yourself')
    else:
        data = {}
    if "auth" in data:
        text = _replaced_key(old, key, path, data)
    else:
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


def _replaced_key(old: str, key: str, path: Path, data: dict[str, Any]) -> str:
    """`old` with the `api_key` line of its `[auth]` table replaced (or added right under `[auth]`); the
    result must parse to the same settings but the key, else the file is left for the user to edit."""
    lines = old.splitlines(keepends=True)
    header = next((i for i, line in enumerate(lines) if re.fullmatch(r"\[\s*auth\s*\](\s*#.*)?", line.strip())), None)
    if header is None:
        raise ConfigError(f"{path}: cannot find the [auth] table to change: set api_key there yourself")
    new = f"api_key = {json.dumps(key)}\n"
    end = next((i for i in range(header + 1, len(lines)) if lines[i].lstrip().startswith("[")), len(lines))
    at = next((i for i in range(header + 1, end) if re.match(r"\s*api_key\s*=", lines[i])), None)
    if at is None:
        lines.insert(header + 1, new)
    else:
        lines[at] = new
    text = "".join(lines)
    wanted = {**data, "auth": {**data["auth"], "api_key": key}}
    try:
        ok = tomllib.loads(text) == wanted
    except tomllib.TOMLDecodeError:
        ok = False
    if not ok:
        raise ConfigError(f"{path}: the stored key could not be replaced line by line: set api_key there yourself")
    return text
