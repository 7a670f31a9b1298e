"""Keeping secrets out of child processes, tool results, logs and outputs.

Two defences, both on by default for the CLI and the library `Agent`:

- `harden_process()`: on Linux the process makes itself non-dumpable (`prctl(PR_SET_DUMPABLE, 0)`),
  so a command the model runs cannot read kimicode's environment (the API key) under
  `/proc/<ppid>/environ` or attach to it with ptrace, and becomes a child subreaper
  (`PR_SET_CHILD_SUBREAPER`) so that `setsid … &` grandchildren of the bash tool are re-parented to
  kimicode, not to init, and can be found and killed when the session ends (`reap_children`).
- `Masker`: every secret value kimicode knows (the key in use, values of `*_API_KEY`, `*_TOKEN`,
  `*_SECRET`, `*_PASSWORD` variables, configured provider keys and headers, MCP server headers and
  env) is replaced by `***` in tool results before they enter the history, and so in the session log,
  exports, stream-json/json/text outputs and notices: the way CI systems mask secrets. `StreamMasker`
  does the same for text arriving in chunks, where a secret may be split across two chunks.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import re
import signal
import sys
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
    "harden_process",
    "is_dumpable",
    "known_secrets",
    "reap_children",
]

MASK: Final = "***"
MIN_SECRET_LEN: Final = 8
"""Shorter values (`1`, `true`, a port) are not masked: they would blot out ordinary text."""
SECRET_SUFFIXES: Final = ("_API_KEY", "_TOKEN", "_SECRET", "_PASSWORD", "_APIKEY", "_ACCESS_KEY")

_PR_SET_DUMPABLE: Final = 4
_PR_GET_DUMPABLE: Final = 3
_PR_SET_CHILD_SUBREAPER: Final = 36

_hardened: dict[str, bool] = {}


def _prctl(option: int, arg: int) -> int | None:
    """prctl(2) through libc; None where it cannot be called (not Linux, no libc)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        result: int = libc.prctl(option, ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0),
                                 ctypes.c_ulong(0))
    except (OSError, AttributeError):
        return None
    return result


def harden_process(*, subreaper: bool = False) -> dict[str, bool]:
    """Make this process non-dumpable and, with `subreaper` (the CLI, which owns its whole process), a
    child subreaper (Linux; a no-op elsewhere). Idempotent.

    The library `Agent` does not set the subreaper flag: orphans re-parented to an application's
    process would be that application's to reap. Returns what took effect.
    """
    if "dumpable_off" not in _hardened:
        _hardened["dumpable_off"] = _prctl(_PR_SET_DUMPABLE, 0) == 0
    if subreaper and not _hardened.get("subreaper"):
        _hardened["subreaper"] = _prctl(_PR_SET_CHILD_SUBREAPER, 1) == 0
    return dict(_hardened)


def is_dumpable() -> bool | None:
    """Whether this process is dumpable (None where it cannot be asked)."""
    result = _prctl(_PR_GET_DUMPABLE, 0)
    return None if result is None or result < 0 else bool(result)


def reap_children(grace: float = 0.5) -> int:
    """Kill every process still descending from this one (bash-tool leftovers such as `setsid x &`),
    and reap them. Returns how many were signalled. Linux only (reads /proc); elsewhere 0.

    Processes re-parented here thanks to the subreaper flag are found too. Called at exit.
    """
    import time

    me = os.getpid()
    victims = _descendants(me)
    if not victims:
        return 0
    for pid in victims:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _descendants(me):
        _reap(victims)
        time.sleep(0.02)
    for pid in _descendants(me):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    _reap(victims)
    return len(victims)


def _reap(pids: Iterable[int]) -> None:
    """Collect the exit status of those of `pids` that are (now) our children; never waitpid(-1),
    which would steal statuses other code waits for."""
    for pid in pids:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)


def _descendants(root: int) -> list[int]:
    """Live (non-zombie) descendants of `root`, from /proc."""
    from kimicode.procs import live_processes

    parent = {pid: ppid for pid, (ppid, _) in live_processes().items()}
    out: list[int] = []
    frontier = {root}
    while frontier:
        nxt = {pid for pid, pp in parent.items() if pp in frontier and pid not in out}
        out.extend(sorted(nxt))
        frontier = nxt
    return out


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
        pattern = self._masker._pattern
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
