"""The OS sandbox for the bash tool on Linux, with bubblewrap (`bwrap`).

Two profiles. **read-only**: a command admitted by the read-only allowance (no rule, no approval)
sees the whole file system read-only, the workspace too. **workspace-write**: a command admitted by a
user's rule, or run unasked because of the mode (`--yolo`, `--sandbox workspace-write`), may write the
workspace (and git's history, not its configuration or hooks). Both: no network (unless
`--sandbox-network`), a private `/tmp` and home, no capabilities (a user namespace: root outside is
powerless inside), resource limits (`kimicode.tools.limits`), and outside the workspace only the places
of `kimicode.permissions.visibility` are visible (`kimicode.tools.sandbox_mounts`), so the host's
sockets (/run), other users' files, the home directory and KIMICODE_HOME are simply not there.

Three modes. `auto` (the default) changes no permission decision: every command that runs *without
asking* runs inside the sandbox, so a command the permission parser misjudged stays contained; a command
the user approved at a prompt runs unconfined, as approved. `workspace-write` additionally lets every
command run without asking in default and accept-edits modes, because the sandbox is then the boundary.
`off` never wraps. `--yolo` skips the questions, not the sandbox: its commands run in workspace-write
(`--yolo --sandbox off` is Codex's `--yolo`).

Whether it works is found out once per process by running `bwrap ... /bin/true`: bwrap may be
missing, or present but unable to create namespaces (containers, hardened kernels). Then `probe`
says why, and the caller tells the user once and falls back to the permission rules (and the read-only
allowance shrinks to `kimicode.permissions.programs`' short list of programs without risky options).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal

from kimicode.config.endpoint import kimicode_home as default_kimicode_home
from kimicode.permissions.visibility import CREDENTIAL_HOME_PATHS, HOME_CREDENTIAL_DIRS
from kimicode.tools.limits import DEFAULT_LIMITS, Cgroups, Limits, limits_from_settings, rlimit_prefix
from kimicode.tools.sandbox_guard import guarded
from kimicode.tools.sandbox_mounts import contains, file_system_args, placeholder_places
from kimicode.tools.sandbox_toolchains import home_toolchain_mounts, secret_masks, toolchain_args, toolchain_places

if TYPE_CHECKING:
    from kimicode.config.settings import Settings

__all__ = [
    "PROFILES",
    "SANDBOX_MODES",
    "Profile",
    "Sandbox",
    "SandboxStatus",
    "find_bwrap",
    "probe",
    "setup_sandbox",
    "shared_cgroups",
]

SandboxMode = Literal["off", "auto", "workspace-write"]
SANDBOX_MODES: Final[tuple[SandboxMode, ...]] = ("off", "auto", "workspace-write")
DEFAULT_MODE: Final[SandboxMode] = "auto"
STRICTNESS: Final[dict[str, int]] = {"off": 0, "auto": 1, "workspace-write": 2}
"""How much each mode confines: a project's configuration may only move up this scale."""

Profile = Literal["read-only", "workspace-write"]
PROFILES: Final[tuple[Profile, ...]] = ("read-only", "workspace-write")


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
        args = [bwrap, *_base_args(network=False), "--ro-bind", "/", "/", "--chdir", "/", "--", "/bin/true"]
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
                status = SandboxStatus(False, f"{bwrap} cannot create its namespaces here ({detail})", bwrap)
    _PROBES[bwrap] = status
    return status


def _base_args(*, network: bool) -> list[str]:
    args = [
        "--unshare-user-try",  # root outside is an unprivileged user inside: no remounting, no DAC override
        "--cap-drop",
        "ALL",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",  # no TIOCSTI into the terminal
        "--setenv",
        "TMPDIR",
        "/tmp",
    ]
    if not network:
        args.append("--unshare-net")
    return args


@dataclass(frozen=True)
class Sandbox:
    """How to wrap a command for the sandbox (see the module docstring)."""

    workspace: Path
    bwrap: str
    network: bool = False
    kimicode_home: Path | None = None
    user_home: Path = field(default_factory=Path.home)
    auto: bool = False
    """`--sandbox auto`: a command the user approved at a prompt runs unconfined."""
    session_dir: Path | None = None
    """The session's own spill directory: visible (read-only), since the model is told to read it."""
    limits: Limits = DEFAULT_LIMITS
    visible: tuple[Path, ...] = ()
    """Places shown besides the built-in list (the literal directories of `read(...)` allow rules)."""
    cgroups: Cgroups | None = None
    """Where per-command cgroups can be made (None: rlimits only)."""

    def placeholders(self, profile: Profile = "workspace-write") -> contextlib.AbstractContextManager[None]:
        """Around running a command wrapped for `profile`: the lock that lets the placeholders of what runs
        later be removed when the last command ends (`kimicode.tools.sandbox_guard`)."""
        if profile != "workspace-write":
            return contextlib.nullcontext()
        ws, home = os.path.realpath(self.workspace), os.path.realpath(self.user_home)
        kc_home = self.kimicode_home if self.kimicode_home is not None else default_kimicode_home()
        return guarded(os.path.join(kc_home, "run"), ws, lambda: placeholder_places(ws, home))

    def wrap(self, argv: Sequence[str], profile: Profile = "workspace-write") -> list[str]:
        """`argv` run inside the sandbox, in the workspace, under the resource limits."""
        ws = os.path.realpath(self.workspace)
        home = os.path.realpath(self.user_home)
        args = [self.bwrap, *_base_args(network=self.network)]
        tmp_bytes = self.limits.file_size_mb * 1024 * 1024 if self.limits.file_size_mb > 0 else 0
        spill = os.path.realpath(self.session_dir) if self.session_dir is not None else None
        kc_home = os.path.realpath(self.kimicode_home) if self.kimicode_home is not None else None
        args += file_system_args(
            ws,
            writable=profile == "workspace-write",
            home=home,
            tmp_bytes=tmp_bytes,
            extra=[*(os.path.realpath(p) for p in self.visible), *_own_programs()],
            spill=spill,
            kimicode_home=kc_home,
        )
        args += _toolchain_view(ws, home, kc_home)
        if self.network:
            args += [a for keep in _RESOLVER_DIRS if os.path.isdir(keep) for a in ("--ro-bind", keep, keep)]
        if contains(ws, home):  # the home directory is inside the workspace: hide its credential stores
            args += _home_credentials(home)
        args += _socket_masks(ws)
        args += ["--chdir", ws, "--", *rlimit_prefix(self.limits), *argv]
        return args


def _toolchain_view(ws: str, home: str, kc_home: str | None) -> list[str]:
    """The user's toolchain from the environment, read-only, and the secrets below every shown place of
    the home directory hidden (`kimicode.tools.sandbox_toolchains`)."""
    places = toolchain_places(ws, home, kc_home)
    args = toolchain_args(places)
    if not contains(ws, home):  # else `_home_credentials` hides the home's credential stores
        args += secret_masks(home, [*home_toolchain_mounts(home), *places])
    return args


def _own_programs() -> list[str]:
    """Programs kimicode ships beside its Python (the ripgrep wheel's `rg`), shown read-only at their own
    path: a command that runs `rg` with kimicode's environment on PATH finds it inside the sandbox too."""
    rg = os.path.join(os.path.dirname(sys.executable), "rg")
    return [rg] if os.path.isfile(rg) else []


def _home_credentials(home: str) -> list[str]:
    """Hide the credential stores of a home directory that the workspace holds."""
    args: list[str] = []
    for rel in (*HOME_CREDENTIAL_DIRS, *CREDENTIAL_HOME_PATHS):
        path = os.path.join(home, rel)
        if os.path.isdir(path) and not os.path.islink(path):
            args += ["--tmpfs", path]
        elif os.path.isfile(path):
            args += ["--ro-bind", "/dev/null", path]
    return args


_SOCKET_ENV: Final = ("SSH_AUTH_SOCK", "DOCKER_HOST", "DBUS_SESSION_BUS_ADDRESS", "DBUS_SYSTEM_BUS_ADDRESS")
_RESOLVER_DIRS: Final = ("/run/systemd/resolve", "/run/resolvconf", "/run/NetworkManager")
"""Shown (read-only) when the network is allowed: /etc/resolv.conf often links into them."""


def _socket_masks(ws: str) -> list[str]:
    """Hide the sockets the environment names when they are visible (in the workspace or a visible
    place): a read-only mount does not stop connect(2), and an ssh-agent would sign with the user's keys.
    /run, where services keep theirs, is not visible at all."""
    args: list[str] = []
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
            if is_socket and not any(contains(d, real) for d in ("/run", "/var/run", "/tmp")):
                args += ["--ro-bind", "/dev/null", real]
    return args


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
    table = settings.config.sandbox.model_dump() if settings is not None else {}
    return Sandbox(
        workspace,
        status.bwrap,
        network,
        kimicode_home,
        auto=mode == "auto",
        session_dir=session_dir,
        limits=limits_from_settings(table),
        cgroups=shared_cgroups(),
    ), None


_CGROUPS: list[Cgroups] = []


def shared_cgroups() -> Cgroups | None:
    """The process's cgroup finder (looked for once); None when no cgroup can be made here."""
    if not _CGROUPS:
        _CGROUPS.append(Cgroups())
    return _CGROUPS[0] or None
