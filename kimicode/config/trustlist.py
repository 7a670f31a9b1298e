"""The `[trust] workspaces` list of your own config.toml, rewritten in place, and a project's file as the
trust question reads it: the configuration files' TOML is read only in kimicode/config/.

The list is rewritten as text (comments, order and the rest of the file kept) and the result parsed back:
it must hold exactly the new list and every other table unchanged, else nothing is written.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kimicode.config.endpoint import ConfigError
from kimicode.safeio import read_small_text

__all__ = ["TrustList", "project_tables", "read_trust_list", "toml_string"]

MAX_CONFIG_BYTES = 1 << 20


@dataclass(frozen=True)
class TrustList:
    """Your config.toml as it stands: its text, its tables and the workspaces `[trust]` lists."""

    path: Path
    text: str
    data: dict[str, Any]
    listed: list[str]

    def rewritten(self, listed: list[str]) -> str:
        """The file's text with `[trust] workspaces` set to `listed`; ConfigError when that cannot be done
        without touching anything else."""
        try:
            new = _with_workspaces(self.text, listed)
            ok = tomllib.loads(new).get("trust", {}).get("workspaces") == listed
            rest_same = {k: v for k, v in tomllib.loads(new).items() if k != "trust"} == {
                k: v for k, v in self.data.items() if k != "trust"
            }
        except (ValueError, tomllib.TOMLDecodeError):
            ok = rest_same = False
        if not (ok and rest_same):
            raise ConfigError(
                f"{self.path}: could not change [trust] workspaces safely; edit it yourself "
                f"(workspaces = {json.dumps(listed)})"
            )
        return new


def read_trust_list(path: Path) -> TrustList:
    """`path` (your config.toml; absent: empty) and its `[trust] workspaces`; ConfigError for a file that is
    not TOML (fix it first)."""
    text = (read_small_text(path, MAX_CONFIG_BYTES) or "") if path.exists() else ""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML ({exc}); fix it first") from None
    trust = data.get("trust")
    current = trust.get("workspaces", []) if isinstance(trust, dict) else []
    return TrustList(path, text, data, [str(p) for p in current] if isinstance(current, list) else [])


def project_tables(workspace: Path) -> dict[str, Any]:
    """The tables of the workspace's `.kimicode/config.toml` as written, before anything is filtered or
    checked (the trust question lists what it would bring); empty when it is absent or not TOML."""
    text = read_small_text(workspace / ".kimicode" / "config.toml", MAX_CONFIG_BYTES)
    try:
        return tomllib.loads(text) if text is not None else {}
    except tomllib.TOMLDecodeError:
        return {}


_TRUST_HEADER = re.compile(r"^\s*\[\s*trust\s*\]\s*(#.*)?$", re.MULTILINE)
_ANY_HEADER = re.compile(r"^\s*\[", re.MULTILINE)
_WORKSPACES = re.compile(r"^\s*workspaces\s*=\s*\[", re.MULTILINE)


def _array_end(text: str, start: int) -> int:
    """The index just after the `]` closing the TOML array opening at `start` (strings and comments
    skipped); -1 when there is none."""
    depth, i, quote = 0, start, ""
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\" and quote == '"':
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch == "#":
            nl = text.find("\n", i)
            i = len(text) if nl < 0 else nl
            continue
        elif ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return -1


def toml_string(value: str) -> str:
    """A TOML basic string (quotes, backslashes and control characters escaped; the rest as it is)."""
    out = []
    for ch in value:
        if ch in '"\\':
            out.append("\\" + ch)
        elif (ord(ch) < 0x20 and ch != "\t") or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _with_workspaces(text: str, listed: list[str]) -> str:
    """`text` with `[trust] workspaces` set to `listed` (comments and the rest kept)."""
    value = "[" + ", ".join(toml_string(p) for p in listed) + "]"
    header = _TRUST_HEADER.search(text)
    if header is None:
        sep = "" if not text or text.endswith("\n") else "\n"
        return f"{text}{sep}{chr(10) if text.strip() else ''}[trust]\nworkspaces = {value}\n"
    nxt = _ANY_HEADER.search(text, header.end())
    end = nxt.start() if nxt is not None else len(text)
    found = _WORKSPACES.search(text, header.end(), end)
    if found is None:
        return text[: header.end()] + f"\nworkspaces = {value}" + text[header.end() :]
    open_at = text.index("[", found.start())
    close = _array_end(text, open_at)
    if close < 0:
        raise ValueError("unterminated array")
    return text[:open_at] + value + text[close:]
