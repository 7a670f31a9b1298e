"""Claude Code's `statusLine` in the terminal's toolbar: its command runs with Claude Code's JSON on stdin
(`session_id`, `transcript_path`, `cwd`, `model`, `workspace`, `version`, `cost`), and the first line it
prints is shown under the toolbar. It is read from the user's `~/.claude/settings.json` (and, in a trusted
workspace, the project's `.claude/settings*.json`, a later file winning), and runs before each prompt,
bounded by a timeout; a failure is said once and leaves the line empty.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import TYPE_CHECKING, Any

from kimicode.config.claude import claude_settings_files, read_settings_json
from kimicode.termsafe import sanitize

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["StatusLine", "refresh_for", "status_line_for"]

TIMEOUT = 3.0
MAX_CHARS = 200


class StatusLine:
    """One configured `statusLine` command and the last line it printed."""

    def __init__(self, command: str, source: str) -> None:
        self.command = command
        self.source = source
        self.text = ""
        self.problem = ""
        """Why the last run gave no line (said once by the caller), or empty."""

    async def refresh(self, payload: dict[str, Any], cwd: Path) -> None:
        """Run the command with `payload` on stdin; keep the first line it prints (terminal-safe)."""
        try:
            proc = await asyncio.create_subprocess_shell(
                self.command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
                cwd=str(cwd),
                start_new_session=True,
            )
            out, _ = await asyncio.wait_for(proc.communicate(json.dumps(payload).encode()), TIMEOUT)
        except (OSError, TimeoutError) as exc:
            self.text, self.problem = (
                "",
                f"statusLine command `{self.command}` ({self.source}) failed: "
                + (f"no answer in {TIMEOUT:.0f} s" if isinstance(exc, TimeoutError) else str(exc)),
            )
            _kill(locals().get("proc"))
            return
        lines = [ln for ln in out.decode("utf-8", "replace").splitlines() if ln.strip()]
        text = " ".join(sanitize(lines[0], sequences="strip").split()) if lines else ""
        self.text = text[:MAX_CHARS]
        self.problem = (
            ""
            if proc.returncode == 0
            else (f"statusLine command `{self.command}` ({self.source}) exited with {proc.returncode}")
        )


def _kill(proc: Any) -> None:
    if proc is not None and proc.returncode is None:
        try:
            os.killpg(proc.pid, 9)
        except OSError:
            pass


def status_line_for(workspace: Path, *, trusted: bool) -> StatusLine | None:
    """The configured `statusLine` (`{"type": "command", "command": ...}`), or None."""
    found: StatusLine | None = None
    for path, _scope in claude_settings_files(workspace, project=trusted):
        data, _ = read_settings_json(path)
        entry = (data or {}).get("statusLine")
        command = entry.get("command") if isinstance(entry, dict) else None
        if isinstance(entry, dict) and entry.get("type", "command") == "command" and isinstance(command, str):
            found = StatusLine(os.path.expanduser(command) if command.startswith("~") else command, str(path))
    return found


def payload(
    session_id: str, transcript: str, workspace: Path, model: str, version: str, cost: float | None
) -> dict[str, Any]:
    """Claude Code's statusLine input, with kimicode's values."""
    return {
        "hook_event_name": "Status",
        "session_id": session_id,
        "transcript_path": transcript,
        "cwd": str(workspace),
        "model": {"id": model, "display_name": model},
        "workspace": {"current_dir": str(workspace), "project_dir": str(workspace)},
        "version": version,
        "output_style": {"name": "default"},
        "cost": {"total_cost_usd": cost or 0.0},
    }


async def refresh_for(session: Any) -> None:
    """Before a prompt: run the session's statusLine command (if any) with the session's values; a failure
    is said once."""
    from kimicode._version import __version__

    line: StatusLine | None = getattr(session, "status_line", None)
    if line is None:
        return
    agent = session.agent
    log = agent.log
    transcript = str(log.transcript or "") if log is not None else ""
    await line.refresh(
        payload(agent.session_id, transcript, session.workspace, agent.endpoint.model, __version__, session.cost()),
        session.workspace,
    )
    said: set[str] = session.__dict__.setdefault("status_line_said", set())
    if line.problem and line.problem not in said:
        said.add(line.problem)
        session.say(line.problem, "yellow")
