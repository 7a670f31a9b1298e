"""Keeping secrets out of child processes, tool results, logs and outputs.

Two defences, both on by default for the CLI and the library `Agent`: the process hardening in
`kimicode.procs` (`harden_process`: children cannot read kimicode's environment), and

- `Masker`: every secret value kimicode knows (the key in use, values of `*_API_KEY`, `*_TOKEN`,
  `*_SECRET`, `*_PASSWORD` variables, configured provider keys and headers, MCP server headers and
  env) is replaced by `***` in tool results before they enter the history, and so in the session log,
  exports, stream-json/json/text outputs and notices: the way CI systems mask secrets. `StreamMasker`
  does the same for text arriving in chunks, where a secret may be split across two chunks.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from kimicode.config.settings import Settings

__all__ = [
    "MASK",
    "MIN_SECRET_LEN",
    "ByteStreamMasker",
    "Masker",
    "StreamMasker",
    "known_secrets",
]

MASK: Final = "***"
MIN_SECRET_LEN: Final = 8
"""Shorter values (`1`, `true`, a port) are not masked: they would blot out ordinary text."""
SECRET_SUFFIXES: Final = ("_API_KEY", "_TOKEN", "_SECRET", "_PASSWORD", "_APIKEY", "_ACCESS_KEY")


def _is_secret_name(name: str) -> bool:
    return name.upper().endswith(SECRET_SUFFIXES)


def known_secrets(
    env: Mapping[str, str],
    *,
    api_key: str | None = None,
    settings: Settings | None = None,
    extra: Iterable[str] = (),
) -> set[str]:
    """Every secret value kimicode knows of: the key in use, secret-named variables, each configured
    provider's key variable and headers, MCP servers' headers and env, `[auth] api_key`."""
    found: set[str] = set(extra)
    if api_key:
        found.add(api_key)
    for name, value in env.items():
        if _is_secret_name(name):
            found.add(value)
    if settings is not None:
        for provider in settings.table("providers").values():
            if not isinstance(provider, dict):
                continue
            var = provider.get("api_key_env")
            if isinstance(var, str) and env.get(var):
                found.add(env[var])
            found.update(_expanded(provider.get("headers"), env))
        for server in settings.table("mcp_servers").values():
            if isinstance(server, dict):
                found.update(_expanded(server.get("headers"), env))
                found.update(_expanded(server.get("env"), env))
        stored = settings.get("auth.api_key")
        if isinstance(stored, str):
            found.add(stored)
    return {s for s in found if isinstance(s, str) and len(s.strip()) >= MIN_SECRET_LEN}


def _expanded(table: Any, env: Mapping[str, str]) -> list[str]:
    from kimicode.config.settings import expand_env

    if not isinstance(table, dict):
        return []
    out: list[str] = []
    for value in table.values():
        if isinstance(value, str):
            with contextlib.suppress(KeyError):
                value = expand_env(value, env)
            out.append(value)
            # `Bearer sk-…`: the credential is the last word; mask it alone too
            last = value.split()[-1] if value.split() else ""
            out.append(last)
    return out


class Masker:
    """Replaces each known secret in text with `***` (longest first, so no fragment is left behind)."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self.add(secrets)

    @property
    def pattern(self) -> re.Pattern[str] | None:
        """The compiled alternation of the known secrets (None when there are none)."""
        return self._pattern

    def add(self, secrets: Iterable[str]) -> None:
        """Mask these values too (values shorter than MIN_SECRET_LEN are ignored)."""
        new = {s for s in secrets if isinstance(s, str) and len(s.strip()) >= MIN_SECRET_LEN}
        if new - self._secrets:
            self._secrets |= new
            ordered = sorted(self._secrets, key=len, reverse=True)
            self._pattern = re.compile("|".join(re.escape(s) for s in ordered))

    @property
    def longest(self) -> int:
        return max((len(s) for s in self._secrets), default=0)

    def __bool__(self) -> bool:
        return bool(self._secrets)

    def mask(self, text: str) -> str:
        """`text` with every secret replaced by `***`."""
        if self._pattern is None or not text:
            return text
        return self._pattern.sub(MASK, text)

    def mask_data(self, value: Any) -> Any:
        """A copy of a JSON-like value with every string masked (dict keys included)."""
        if self._pattern is None:
            return value
        if isinstance(value, str):
            return self.mask(value)
        if isinstance(value, dict):
            return {self.mask(k) if isinstance(k, str) else k: self.mask_data(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.mask_data(v) for v in value]
        if isinstance(value, tuple):
            return tuple(self.mask_data(v) for v in value)
        return value

    def stream(self) -> StreamMasker:
        return StreamMasker(self)

    def byte_stream(self) -> ByteStreamMasker:
        """A masker for raw bytes arriving in chunks (command output before decoding)."""
        return ByteStreamMasker(self._secrets)


class StreamMasker:
    """Masks text that arrives in pieces: holds back the last `longest - 1` characters of each piece
    (they might be the start of a secret finished by the next piece) until more text or `flush`."""

    def __init__(self, masker: Masker) -> None:
        self._masker = masker
        self._pending = ""

    def feed(self, text: str) -> str:
        """The masked text that is safe to release now."""
        data = self._pending + text
        keep = self._masker.longest - 1
        if keep <= 0:
            self._pending = ""
            return data
        if len(data) <= keep:
            self._pending = data
            return ""
        # a secret not yet complete starts within the last `keep` characters: release the rest
        cut = len(data) - keep
        head, tail = data[:cut], data[cut:]
        # a secret straddling the cut: release it whole (masked)
        pattern = self._masker.pattern
        if pattern is not None:
            for m in pattern.finditer(data):
                if m.start() < cut < m.end():
                    head, tail = data[: m.end()], data[m.end() :]
                    break
        self._pending = tail
        return self._masker.mask(head)

    def flush(self) -> str:
        """Whatever is held back, masked."""
        out, self._pending = self._masker.mask(self._pending), ""
        return out


class ByteStreamMasker:
    """`StreamMasker` for bytes: masks the UTF-8 form of each secret in output read from a pipe, before
    it is buffered (so a secret split across reads, or cut by the output's head/tail elision, never
    shows even in part)."""

    def __init__(self, secrets: Iterable[str]) -> None:
        encoded = sorted({s.encode("utf-8", "surrogateescape") for s in secrets}, key=len, reverse=True)
        self._pattern = re.compile(b"|".join(re.escape(s) for s in encoded)) if encoded else None
        self._secrets = encoded
        self._keep = max((len(s) for s in encoded), default=0) - 1
        self._pending = b""
        self._mask = MASK.encode()

    def _hold_from(self, data: bytes) -> int:
        """Where the part that could begin a secret starts: only such a tail is held back, so output
        that cannot be the start of a secret is released at once (a live view is not delayed)."""
        for i in range(max(0, len(data) - self._keep), len(data)):
            tail = data[i:]
            if any(s.startswith(tail) for s in self._secrets):
                return i
        return len(data)

    def feed(self, data: bytes) -> bytes:
        """The masked bytes that are safe to release now."""
        if self._pattern is None:
            return data
        data = self._pending + data
        cut = self._hold_from(data)
        for m in self._pattern.finditer(data):
            if m.start() < cut < m.end():
                cut = m.end()
                break
        head, self._pending = data[:cut], data[cut:]
        return self._pattern.sub(self._mask, head)

    def flush(self) -> bytes:
        out, self._pending = self._pending, b""
        return self._pattern.sub(self._mask, out) if self._pattern is not None else out
