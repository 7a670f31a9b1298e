"""How the terminal session opens (`SessionOptions`): read by the `Session` (kimicode/ui/app.py) and made by
`run_interactive` (kimicode/ui/launch.py), so it sits below both."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["SessionOptions"]


class SessionOptions:
    """How the terminal session opens: its workspace, the session to resume, and the Agent settings the
    command line gave (names of `AgentOptions` fields; the rest come from `AgentOptions.from_workspace`).

    `workspace=None` means the current directory for a new session and the session's own workspace
    when resuming. `resume` is a session id (or unique prefix), `LATEST`, or None for a new session.
    """

    def __init__(
        self,
        *,
        workspace: str | Path | None = None,
        resume: str | None = None,
        fork: bool = False,
        fork_workspace: str = "shared",
        first_prompt: str | None = None,
        **settings: Any,
    ) -> None:
        from kimicode.agent.options import check_names

        check_names(settings, "SessionOptions()")
        self.workspace = Path(workspace) if workspace is not None else None
        self.resume = resume
        self.fork = fork
        self.fork_workspace = fork_workspace
        """`worktree`: the fork gets its own working tree (`--fork --worktree`)."""
        self.first_prompt = first_prompt
        """Sent as the first message once the session is open (`kimicode "PROMPT"`)."""
        self.settings: dict[str, Any] = dict(settings)
