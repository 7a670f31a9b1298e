"""The OS sandbox for the bash tool on Linux, with bubblewrap (`bwrap`).

Three modes. `auto` (the default) changes no permission decision: every command that runs *without
asking* (admitted by a rule or the read-only allowance, or run in accept-edits or yolo mode) runs inside
the sandbox, so a command the permission parser misjudged stays contained; a command the user approved
at a prompt runs unconfined, as approved. `workspace-write` additionally lets every command run without
asking in default and accept-edits modes, because the sandbox is then the boundary. `off` never wraps.

The sandbox runs each command in fresh namespaces where the workspace is writable
and the rest of the file system is read-only, `/tmp` is private and empty, the network is off (unless
`--sandbox-network`), the host's Unix sockets (/run, the agents the environment names) and
`KIMICODE_HOME` (every project's session logs; this session's spill directory excepted) are hidden,
the workspace's `.git` and `.kimicode` stay read-only (git hooks and kimicode's configuration run code
or change rules outside the sandbox), and the user's credential stores (`~/.ssh`, `~/.aws`, ...) and
kimicode's config file are hidden.

Whether it works is found out once per process by running `bwrap ... /bin/true`: bwrap may be
missing, or present but unable to create namespaces (containers, hardened kernels). Then `probe`
says why, and the caller tells the user once and falls back to the permission rules.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal

if TYPE_CHECKING:
    from kimicode.config.settings import Settings

__all__ = ["SANDBOX_MODES", "Sandbox", "SandboxStatus", "find_bwrap", "probe", "setup_sandbox"]

SandboxMode = Literal["off", "auto", "workspace-write"]
SANDBOX_MODES: Final[tuple[SandboxMode, ...]] = ("off", "auto", "workspace-write")
DEFAULT_MODE: Final[SandboxMode] = "auto"
STRICTNESS: Final[dict[str, int]] = {"off": 0, "auto": 1, "workspace-write": 2}
"""How much each mode confines: a project's configuration may only move up this scale."""

_HIDDEN_DIRS: Final = (".ssh", ".aws", ".azure", ".gnupg", ".kube", ".docker", ".config/gcloud", ".config/gh",
                       ".password-store", ".terraform.d")
_HIDDEN_FILES: Final = (".netrc", ".git-credentials", ".pgpass", ".npmrc", ".pypirc", ".vault-token",
                        ".cargo/credentials.toml", ".gem/credentials")
_READ_ONLY_IN_WORKSPACE: Final = (".git", ".kimicode")


@dataclass(frozen=True)
class SandboxStatus:
    """Whether the sandbox can be used here, and if not, why (for the one-time notice)."""

    available: bool
    reason: str = ""
    bwrap: str | None = None


def find_bwrap() -> str | None:
    """`KIMICODE_BWRAP` when set (empty: treat bwrap as absent), else `bwrap` on PATH."""
    override = os.environ.get("KIMICODE_BWRAP")
    if override is not None:
        return override if override and os.access(override, os.X_OK) else None
    return shutil.which("bwrap")


_PROBES: dict[str | None, SandboxStatus] = {}


def probe() -> SandboxStatus:
    """Try bwrap once (per binary, per process): missing, failing (and why), or working."""
    if not sys.platform.startswith("linux"):
        return SandboxStatus(False, "the sandbox needs Linux with bubblewrap")
    bwrap = find_bwrap()
    cached = _PROBES.get(bwrap)
    if cached is not None:
        return cached
    if bwrap is None:
        status = SandboxStatus(False, "bubblewrap (bwrap) is not installed; install it (e.g. apt install bubblewrap)")
    else:
        args = [bwrap, *_base_args(network=False), "--chdir", "/", "--", "/bin/true"]
        try:
            done = subprocess.run(args, capture_output=True, timeout=10, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            status = SandboxStatus(False, f"{bwrap} could not be run: {exc}", bwrap)
        else:
            if done.returncode == 0:
                status = SandboxStatus(True, "", bwrap)
            else:
                why = done.stderr.decode("utf-8", "replace").strip().splitlines()
                detail = why[-1] if why else f"exit code {done.returncode}"
                status = SandboxStatus(
                    False, f"{bwrap} cannot create its namespaces here ({detail})", bwrap
                )
    _PROBES[bwrap] = status
    return status


def _base_args(*, network: bool) -> list[str]:
    args = [
        "--ro-bind", "/", "/",
        "--dev", "/dev",
        "--proc", "/proc",
        "--tmpfs", "/tmp",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--die-with-parent",
    ]
    if not network:
        args.append("--unshare-net")
    return args


@dataclass(frozen=True)
class Sandbox:
    """How to wrap a command for the `workspace-write` sandbox."""

    workspace: Path
    bwrap: str
    network: bool = False
    kimicode_home: Path | None = None
    user_home: Path = field(default_factory=Path.home)
    auto: bool = False
    """`--sandbox auto`: a command the user approved at a prompt runs unconfined."""
    session_dir: Path | None = None
    """The session's own spill directory: the one part of `kimicode_home` left visible (read-only)."""

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """`argv` run inside the sandbox, in the workspace."""
        ws = os.path.realpath(self.workspace)
        args = [self.bwrap, *_base_args(network=self.network)]
        args += _socket_masks(ws, network=self.network)
        args += ["--bind", ws, ws]
        for name in _READ_ONLY_IN_WORKSPACE:
            inner = os.path.join(ws, name)
            if os.path.lexists(inner):
                real = os.path.realpath(inner)
                args += ["--ro-bind", real, real] if real != inner else ["--ro-bind", inner, inner]
        home = os.path.realpath(self.user_home)
        for rel in _HIDDEN_DIRS:
            path = os.path.join(home, rel)
            if os.path.isdir(path) and not _contains(path, ws):
                args += ["--tmpfs", path]
        hidden_files = [os.path.join(home, rel) for rel in _HIDDEN_FILES]
        if self.kimicode_home is not None:
            kc_home = os.path.realpath(self.kimicode_home)
            if os.path.isdir(kc_home) and not _contains(kc_home, ws):
                # other sessions' logs (every project's history) and the config: hidden; this session's
                # spilled outputs stay readable, since the model is told where they are
                args += ["--tmpfs", kc_home]
                spill = os.path.realpath(self.session_dir) if self.session_dir is not None else None
                if spill is not None and os.path.isdir(spill) and _contains(kc_home, spill):
                    args += ["--ro-bind", spill, spill]
            else:
                hidden_files.append(os.path.join(kc_home, "config.toml"))
        for path in hidden_files:
            if os.path.isfile(path):
                args += ["--ro-bind", "/dev/null", path]
        args += ["--chdir", ws, "--", *argv]
        return args


_SOCKET_DIRS: Final = ("/run", "/var/run")
"""Where services keep their Unix sockets (docker, podman, D-Bus, systemd, ssh/gpg agents under
/run/user, databases). A read-only mount does not stop connect(2) on a socket file, and a socket
reaches the service outside the sandbox (docker's is root), so these directories are replaced by an
empty tmpfs; /tmp (X11, ssh-agent, PostgreSQL) is private already."""
_SOCKET_ENV: Final = ("SSH_AUTH_SOCK", "DOCKER_HOST", "DBUS_SESSION_BUS_ADDRESS", "DBUS_SYSTEM_BUS_ADDRESS")
_RESOLVER_DIRS: Final = ("/run/systemd/resolve", "/run/resolvconf", "/run/NetworkManager")
"""Kept (read-only) when the network is allowed: /etc/resolv.conf often links into them."""


def _socket_masks(ws: str, *, network: bool) -> list[str]:
    """bwrap arguments hiding the host's Unix sockets (see _SOCKET_DIRS), and the sockets the
    environment names wherever they are."""
    args: list[str] = []
    for directory in _SOCKET_DIRS:
        if os.path.islink(directory) or not os.path.isdir(directory) or _contains(directory, ws):
            continue  # /var/run is usually a link to /run, hidden with it
        args += ["--tmpfs", directory]
        if network:
            for keep in _RESOLVER_DIRS:
                if _contains(directory, keep) and os.path.isdir(keep):
                    args += ["--ro-bind", keep, keep]
    for name in _SOCKET_ENV:
        value = os.environ.get(name, "")
        for part in value.replace(",", ";").split(";"):
            path = part.split("path=", 1)[-1] if "path=" in part else part.removeprefix("unix://")
            if not path.startswith("/"):
                continue
            try:
                is_socket = stat.S_ISSOCK(os.stat(path).st_mode)
            except OSError:
                continue
            real = os.path.realpath(path)
            if is_socket and not any(_contains(d, real) for d in (*_SOCKET_DIRS, "/tmp")):
                args += ["--ro-bind", "/dev/null", real]
    return args


def _contains(outer: str, inner: str) -> bool:
    return inner == outer or inner.startswith(outer.rstrip("/") + "/")


def setup_sandbox(
    mode: str | None,
    network: bool | None,
    settings: Settings | None,
    workspace: Path,
    kimicode_home: Path | None = None,
    *,
    project_file: Path | None = None,
    ignored: list[str] | None = None,
    session_dir: Path | None = None,
) -> tuple[Sandbox | None, str | None]:
    """The sandbox for a session, from the arguments or else the `[sandbox]` table; and a warning.

    Returns `(None, None)` when the sandbox is off, `(Sandbox, None)` when it works, and
    `(None, warning)` when it was asked for but cannot be used here (the warning says why, and that
    commands follow the permission rules instead). A project's configuration cannot loosen the mode or
    turn the network on (`load_settings` drops such values; for Settings built elsewhere an untrusted
    `project_file` is checked again here and said so in `ignored`). Raises ValueError for an unknown mode.
    """
    if mode is None:
        configured = settings.config.sandbox.mode if settings is not None else None
        mode = configured if configured is not None else DEFAULT_MODE
    if mode not in SANDBOX_MODES:
        raise ValueError(f"sandbox must be one of {', '.join(SANDBOX_MODES)} (got {mode!r})")
    if mode == "off":
        return None, None
    if network is None:
        network = bool(settings.config.sandbox.network) if settings is not None else False
        if network and settings is not None and not settings.trusted and project_file in settings.sources:
            from kimicode.config.settings import parse_file

            others = [p for p in settings.sources if p != project_file]
            if not any(parse_file(p).get("sandbox", {}).get("network") for p in others):
                network = False
                if ignored is not None:
                    ignored.append(f"{project_file}: sandbox.network ignored: this workspace is not trusted")
    status = probe()
    if not status.available or status.bwrap is None:
        if mode == "auto":
            return None, (
                f"the sandbox is not available: {status.reason}. Commands run unconfined; the permission "
                "rules are the only boundary (--sandbox off silences this notice)"
            )
        return None, (
            f"the sandbox is not available: {status.reason}. Commands run unconfined and follow the "
            "permission rules instead"
        )
    return Sandbox(workspace, status.bwrap, network, kimicode_home, auto=mode == "auto", session_dir=session_dir), None
