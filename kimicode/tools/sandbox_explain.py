"""Saying why a sandboxed command failed: which path the sandbox blocked, and why.

A command that fails inside the sandbox usually fails with the kernel's words ("Read-only file system",
"No such file or directory" for a path that is not visible, "Network is unreachable"). Those are true
but do not say that the sandbox, not the project, is the cause, and a model (or a user reading `-p`
output) then tries workarounds or concludes the repository is broken. `explain_blocked` reads the
output for such failures and returns a note for the model naming the path and the rule, and one line
for the user (the agent shows it as a warning Notice, on stderr in headless runs).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from kimicode.permissions.runslater import runs_later_reason
from kimicode.tools.sandbox_mounts import GIT_PROTECTED, contains

if TYPE_CHECKING:
    from kimicode.tools.sandbox import Sandbox

__all__ = ["Blocked", "explain_blocked"]

_EROFS: Final = re.compile(r"(?P<line>[^\n]*(?:Read-only file system|Device or resource busy)[^\n]*)")
_ENOENT: Final = re.compile(r"(?P<line>[^\n]*(?:No such file or directory|Permission denied|: not found)[^\n]*)")
_NET: Final = re.compile(
    r"Network is unreachable|Temporary failure in name resolution|Could not resolve host|"
    r"Name or service not known|getaddrinfo|nodename nor servname"
)
_QUOTED: Final = re.compile(r"""['"‘`]([^'"’`\n]+)['"’`]""")
_BARE: Final = re.compile(
    r"""(?:^|\s)(/?[^\s:'"]+):\s*"""
    r"""(?:Read-only file system|Device or resource busy|No such file|Permission denied|not found)"""
)
_ABSOLUTE: Final = re.compile(r"(?<![\w.~-])(/[^\s:'\"`’,;()]+)")


@dataclass(frozen=True)
class Blocked:
    """What the model is told (appended to the result) and the one line the user sees."""

    for_model: str
    notice: str


def _candidates(line: str) -> list[str]:
    """Paths a failure line names: quoted ones, the word before `: <error>`, then absolute ones."""
    found = [m.group(1) for m in _QUOTED.finditer(line)]
    found += [m.group(1) for m in _BARE.finditer(line)]
    found += [m.group(1) for m in _ABSOLUTE.finditer(line)]
    return [f for f in found if f and f not in ("/bin/bash", "/bin/sh")]


def _resolve(text: str, workspace: str) -> str:
    return os.path.normpath(os.path.join(workspace, os.path.expanduser(text)))


def _why_read_only(path: str, workspace: str, profile: str) -> str:
    """Why `path` could not be written in the sandbox."""
    if contains(workspace, path) and profile == "read-only":
        return (
            "this command was admitted without asking as read-only, so it ran where nothing can be "
            "written, not even the workspace; if it has to write, it needs an allow rule or the user's approval"
        )
    if "/.git/" in path + "/":
        rest = (path + "/").split("/.git/", 1)[1].split("/", 1)[0]
        if rest in GIT_PROTECTED:
            return (
                f".git/{rest} stays read-only in the sandbox (git's configuration and hooks run code "
                "outside it); the user can run this command, or approve it at a prompt"
            )
        return ".git stays read-only in the sandbox here (it has no config file, or shares its configuration)"
    if "/.kimicode" in path:
        return "kimicode's configuration (.kimicode) stays read-only in the sandbox"
    later = runs_later_reason(Path(path), workspace=Path(workspace), user_home=Path(workspace), kimicode_home=None)
    if later is not None:  # the workspace's own places (its home's too, when it holds the home directory)
        return (
            f"{later}; it stays read-only in the sandbox, whether or not it exists; the user can write it, "
            "or approve the command at a prompt"
        )
    if not contains(workspace, path):
        return "only the workspace is writable in the sandbox"
    return "the sandbox keeps this path read-only"


_LIMIT_SIGNALS: Final = {137: "SIGKILL", -9: "SIGKILL", 152: "SIGXCPU", -24: "SIGXCPU", 153: "SIGXFSZ", -25: "SIGXFSZ"}
_LIMIT_TEXT: Final = re.compile(
    r"fork: (?:retry: )?Resource temporarily unavailable|File too large|"
    r"No space left on device|Cannot allocate memory|MemoryError"
)


def explain_blocked(
    output: str, workspace: Path, profile: str, sandbox: Sandbox | None, returncode: int | None = None
) -> Blocked | None:
    """The sandbox's part in a failed command's output (see the module docstring), or None."""
    if sandbox is None:
        return None
    limit = _limit_note(output, returncode, sandbox)
    if limit is not None:
        return limit
    ws = os.path.realpath(workspace)
    for match in _EROFS.finditer(output):
        for text in _candidates(match.group("line")):
            path = _resolve(text, ws)
            real = os.path.realpath(path)
            why = _why_read_only(real, ws, profile)
            shown = path if real == path else f"{path} (a link to {real})"
            return _blocked(f"writing {shown} failed: {why}", profile)
    hidden = _hidden_path(output, ws, sandbox)
    if hidden is not None:
        return _blocked(hidden, profile)
    missing = _hidden_command(output, returncode, sandbox)
    if missing is not None:
        return _blocked(missing, profile)
    if not sandbox.network and _NET.search(output):
        return _blocked("the network is off in the sandbox (the user can allow it with --sandbox-network)", profile)
    return None


def _hidden_path(output: str, ws: str, sandbox: Sandbox) -> str | None:
    """A path outside the workspace that a failure line names and the sandbox does not show (or a visible
    script whose interpreter it does not show), said with the setting that shows it."""
    home = os.path.realpath(sandbox.user_home)
    for match in _ENOENT.finditer(output):
        for text in _candidates(match.group("line")):
            path = _resolve(text, ws)
            if not path.startswith("/") or contains(ws, path):
                continue
            if _visible(path, sandbox):
                path = _hidden_interpreter(path, sandbox) or ""
                if not path:
                    continue
            if not os.path.lexists(path):
                continue
            if contains(home, path):
                return (
                    f"{path} is not visible in the sandbox: of the home directory only toolchains and "
                    'git\'s configuration are (docs/permissions.md, "What is visible"); '
                    f"{_setting_for(path, home)}"
                )
            if contains("/tmp", path):
                return f"{path} is not visible in the sandbox: its /tmp is private (empty at start)"
            return (
                f"{path} is not visible in the sandbox: outside the workspace only system directories, "
                'toolchains and git\'s configuration are (docs/permissions.md, "What is visible"); '
                f"{_setting_for(path, home)}"
            )
    return None


def _hidden_interpreter(path: str, sandbox: Sandbox) -> str | None:
    """The interpreter named by the `#!` line of the visible script `path` (or where a visible link
    points), when the sandbox does not show it."""
    real = os.path.realpath(path)
    if not _visible(real, sandbox):
        return real
    try:
        with open(real, "rb") as fh:
            first = fh.readline(512)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].split(maxsplit=1)
    interpreter = words[0].decode("utf-8", "replace") if words else ""
    if not interpreter.startswith("/") or not os.path.lexists(interpreter):
        return None
    return next((c for c in (interpreter, os.path.realpath(interpreter)) if not _visible(c, sandbox)), None)


_NOT_FOUND: Final = re.compile(
    r"(?:^|\n)(?:[^\n:]*: )?(?:(?:line )?\d+: )?(?P<name>[^\s:/'\"]+): (?:command )?not found"
)


def _hidden_command(output: str, returncode: int | None, sandbox: Sandbox) -> str | None:
    """A command that was "not found" (exit 127) inside the sandbox although the host has it, in a place
    the sandbox does not show: say where it is and the setting that shows it."""
    if returncode not in (126, 127):
        return None
    import shutil

    for match in _NOT_FOUND.finditer(output):
        name = match.group("name")
        found = shutil.which(name, path=os.environ.get("PATH", os.defpath))
        if found is None:
            continue
        real = os.path.realpath(found)
        hidden = next((p for p in (os.path.abspath(found), real) if not _visible(p, sandbox)), None)
        if hidden is not None:
            home = os.path.realpath(sandbox.user_home)
            return (
                f"`{name}` is {found} on the host, but {hidden} is not visible in the sandbox "
                f'(docs/permissions.md, "What is visible"); {_setting_for(hidden, home)}'
            )
    return None


def _setting_for(path: str, home: str) -> str:
    """The setting that shows `path` in the sandbox: a read(...) allow rule for its directory (a
    virtualenv's top for its programs), or activating the environment / putting it on PATH."""
    place = os.path.dirname(path) if not os.path.isdir(path) else path
    if contains(place, home):
        return (
            "the home directory itself is never shown: the user can move the program to a directory such as "
            "~/.local/bin (shown when it exists) or another directory on PATH"
        )
    if os.path.basename(place) in ("bin", "Scripts"):  # a virtualenv's or an installation's programs
        place = os.path.dirname(place)
    return (
        f"the user can show it with the allow rule read({place}/**) (--allow, or [permissions] allow in "
        "config.toml); activating its environment or putting its bin directory on PATH before starting "
        "kimicode shows it too"
    )


def _limit_note(output: str, returncode: int | None, sandbox: Sandbox) -> Blocked | None:
    """A command stopped by (or failing on) the sandbox's resource limits."""
    signal = _LIMIT_SIGNALS.get(returncode) if returncode is not None else None
    text = _LIMIT_TEXT.search(output)
    if signal is None and text is None:
        return None
    lim = sandbox.limits
    what = f"killed by {signal}" if signal is not None else f'failed with "{text.group() if text else ""}"'
    return Blocked(
        for_model=(
            f"[sandbox: the command was {what}, which is what hitting the sandbox's limits looks like "
            f"(per command: {lim.processes} processes, {lim.memory_mb} MB memory, {lim.file_size_mb} MB "
            f"per file and for /tmp, {lim.cpu_seconds} s CPU); the user can raise them in [sandbox] of "
            "config.toml]"
        ),
        notice=f"sandbox limit: the command was {what}",
    )


def _visible(path: str, sandbox: Sandbox) -> bool:
    from kimicode.permissions.visibility import is_visible, visible_roots

    roots = visible_roots(sandbox.user_home, sandbox.visible, sandbox.kimicode_home)
    return is_visible(Path(path), roots) or contains("/proc", path) or contains("/dev", path)


def _blocked(what: str, profile: str) -> Blocked:
    return Blocked(
        for_model=f"[sandbox ({profile}): {what}]",
        notice=f"sandbox blocked: {what}",
    )
