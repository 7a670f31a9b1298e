"""The server's sessions: made, resumed and forked here, each its own Agent, workspace, mode and model.

Sessions are built as the command line builds them (`AgentOptions.from_workspace`: the home's and the
workspace's config files, trust rules, AGENTS.md) with the server's own flags as the base and the request's
`permission_mode` and `model` on top, so they are persisted as the CLI's are (`KIMICODE_HOME/sessions`,
`kimicode -r ID` continues one) with origin `serve`.

What a request may name is checked by construction: a workspace is an absolute path to an existing
directory, resolved (symbolic links followed) and, when the server was given `--root` directories, inside
one of them; never inside kimicode's own home. Session ids are matched against a fixed alphabet before
anything looks them up, and are only ever keys of the server's table or of the session store.
The server never widens a session's permissions: the mode is at most the server's `--max-permission-mode`
(a resumed session does not keep its recorded mode, as for `kimicode -r`), rules come only from the
configuration and the user's own answers, and the sandbox is the configured one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kimicode.serve.approvals import HttpApprover
from kimicode.serve.hub import PER_SUBSCRIBER, Hub
from kimicode.serve.session import ServeSession

if TYPE_CHECKING:
    from kimicode import Agent, AgentOptions

SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,79}")
MODES = ("plan", "default", "accept-edits", "yolo")
"""The permission modes, narrowest first."""
MAX_SESSIONS = 200
"""Live sessions in one server."""


class RequestProblem(Exception):
    """A request names something it may not (400), or something that does not exist (404 with `missing`)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class ServeConfig:
    """The server's own settings: the base options of every session and what requests may ask for."""

    settings: dict[str, Any] = field(default_factory=dict)
    """AgentOptions fields from the command line (`--model`, `--base-url`, `--sandbox`, ...)."""
    roots: tuple[Path, ...] = ()
    """Directories workspaces must be inside (empty: any directory outside kimicode's home)."""
    max_mode: str = "yolo"
    home: Path | None = None
    per_subscriber: int = PER_SUBSCRIBER
    """Events queued for one event stream before a reader that fell behind is cut off."""


def check_session_id(session_id: str) -> str:
    if not SESSION_ID.fullmatch(session_id):
        raise RequestProblem(f"not a session id: {session_id[:100]!r}", 404)
    return session_id


def wider(mode: str, than: str) -> bool:
    return MODES.index(mode) > MODES.index(than)


class Sessions:
    """The live sessions of one server, by id."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.live: dict[str, ServeSession] = {}

    def home(self) -> Path:
        if self.config.home is not None:
            return self.config.home
        from kimicode.config.endpoint import kimicode_home

        return kimicode_home()

    def get(self, session_id: str) -> ServeSession:
        session = self.live.get(check_session_id(session_id))
        if session is None:
            raise RequestProblem(f'no live session {session_id}; resume it with POST /sessions {{"resume": ID}}', 404)
        return session

    def workspace(self, given: Any) -> Path:
        """The directory a request named, checked (see the module's docstring)."""
        if not isinstance(given, str) or not given or "\x00" in given:
            raise RequestProblem("workspace must be an absolute path to a directory")
        path = Path(given)
        if not path.is_absolute():
            raise RequestProblem(f"workspace must be an absolute path (got {given[:200]!r})")
        try:
            real = path.resolve(strict=True)
        except (OSError, RuntimeError):
            raise RequestProblem(f"workspace does not exist: {given[:200]}") from None
        if not real.is_dir():
            raise RequestProblem(f"workspace is not a directory: {given[:200]}")
        home = self.home().resolve()
        if real == home or home in real.parents:
            raise RequestProblem("a workspace cannot be inside kimicode's home (its sessions and keys)")
        roots = [r.resolve() for r in self.config.roots]
        if roots and not any(real == r or r in real.parents for r in roots):
            raise RequestProblem(f"workspace {real} is outside the server's --root directories")
        return real

    def mode(self, given: Any) -> str:
        mode = given if given is not None else self.config.settings.get("permission_mode", "default")
        if mode not in MODES:
            raise RequestProblem(f"permission_mode must be one of {', '.join(MODES)} (got {str(mode)[:40]!r})")
        if wider(mode, self.config.max_mode):
            raise RequestProblem(
                f"permission_mode {mode} is wider than this server allows "
                f"(--max-permission-mode {self.config.max_mode})",
                403,
            )
        return str(mode)

    def _options(self, workspace: Path, **overrides: Any) -> AgentOptions:
        from kimicode import AgentOptions

        settings = {**self.config.settings, **{k: v for k, v in overrides.items() if v is not None}}
        if self.config.home is not None:
            settings["home"] = self.config.home
        return AgentOptions.from_workspace(workspace, origin="serve", **settings)

    def _add(self, agent: Agent, approver: HttpApprover, hub: Hub) -> ServeSession:
        session = ServeSession(agent, approver, hub)
        self.live[session.id] = session
        return session

    def _room(self) -> None:
        if len(self.live) >= MAX_SESSIONS:
            raise RequestProblem(f"this server already runs {MAX_SESSIONS} sessions; close one first", 429)

    def create(self, workspace: Any, permission_mode: Any = None, model: Any = None) -> ServeSession:
        """A new session (POST /sessions)."""
        from kimicode import Agent

        self._room()
        where = self.workspace(workspace)
        mode = self.mode(permission_mode)
        if model is not None and (not isinstance(model, str) or not model.strip() or len(model) > 200):
            raise RequestProblem("model must be a model name")
        hub = Hub(per_subscriber=self.config.per_subscriber)
        approver = HttpApprover(hub.publish)
        agent = Agent(self._options(where, permission_mode=mode, model=model), approve=approver)
        return self._add(agent, approver, hub)

    def resume(
        self, session_id: Any, permission_mode: Any = None, model: Any = None, fork: bool = False
    ) -> ServeSession:
        """A saved session continued (or forked) in this server, as `kimicode -r ID` (POST /sessions with
        `resume`). Its workspace is the one recorded, which a user named when the session began."""
        from kimicode import Agent

        self._room()
        if not isinstance(session_id, str):
            raise RequestProblem("resume must be a session id")
        check_session_id(session_id)
        if session_id in self.live and not fork:
            return self.live[session_id]
        mode = self.mode(permission_mode)
        hub = Hub(per_subscriber=self.config.per_subscriber)
        approver = HttpApprover(hub.publish)

        def options(ws: Path) -> AgentOptions:
            return self._options(self.workspace(str(ws)), permission_mode=mode, model=model)

        agent = Agent.resume(session_id, fork=fork, options=options, approve=approver)
        return self._add(agent, approver, hub)

    def fork(self, session: ServeSession, workspace: str = "shared") -> ServeSession:
        """A copy of a live session's conversation, continuing on its own (POST /sessions/{id}/fork)."""
        if workspace not in ("shared", "worktree", "copy"):
            raise RequestProblem("workspace must be shared, worktree or copy")
        self._room()
        hub = Hub(per_subscriber=self.config.per_subscriber)
        approver = HttpApprover(hub.publish)
        agent = session.agent.fork(workspace=workspace, approve=approver)
        return self._add(agent, approver, hub)

    async def close(self, session_id: str) -> None:
        session = self.live.pop(check_session_id(session_id), None)
        if session is None:
            raise RequestProblem(f"no live session {session_id}", 404)
        await session.close()

    async def close_all(self) -> None:
        for session_id in list(self.live):
            session = self.live.pop(session_id)
            try:
                await session.close()
            except Exception:  # closing the others matters more at shutdown
                continue
