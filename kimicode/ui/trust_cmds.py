"""The "trust this folder?" question before the first interactive session in a workspace that brings
hooks, MCP servers, skills, subagents, commands or settings, and `/trust` to change the answer later.

Only the terminal asks: headless runs and the library never do (their workspace is untrusted unless the
user's `[trust] workspaces` lists it or `--trust-workspace` / `trust=True` says so).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from kimicode.config.endpoint import ConfigError
from kimicode.config.settings import is_trusted, parse_file
from kimicode.config.trustseen import seen_changes
from kimicode.extensions.trust import project_brings, set_trusted, was_declined
from kimicode.termsafe import sanitize

if TYPE_CHECKING:
    from kimicode.ui.app import Session

MAX_SHOWN = 15


def _user_data(home: Path) -> dict[str, object]:
    path = home / "config.toml"
    try:
        return parse_file(path) if path.is_file() else {}
    except ConfigError:
        return {}


def listing(items: list[str]) -> str:
    shown = [f"  - {sanitize(item, sequences='escape')}" for item in items[:MAX_SHOWN]]
    if len(items) > MAX_SHOWN:
        shown.append(f"  … and {len(items) - MAX_SHOWN} more")
    return "\n".join(shown)


def ask_trust(
    workspace: Path,
    home: Path,
    *,
    out: Callable[[str], None] | None = None,
    ask: Callable[[str], str] = input,
    interactive: bool | None = None,
) -> bool | None:
    """Before the session: when the workspace brings something, is not trusted and was not declined, list
    what would run and ask once; remember the answer. Returns the answer, or None when nothing was asked."""
    write = out or (lambda text: (sys.stdout.write(text), sys.stdout.flush()))
    if interactive is None:
        interactive = sys.stdin.isatty() and sys.stdout.isatty()
    where = workspace.expanduser().resolve()
    changed = _changed_since_trusted(home, where) if interactive else None
    if changed is None:
        return None
    items = project_brings(where)
    if not items and not changed:
        return None
    if changed:
        write(
            f"This folder ({where}) is trusted, but what it brings changed since you trusted it:\n{listing(changed)}\n"
        )
    write(
        f"This folder ({where}) brings its own configuration. If you trust it, kimicode will use:\n"
        f"{listing(items)}\n"
        "Only trust folders whose contents you know: hooks and MCP servers run commands on your machine.\n"
    )
    try:
        answer = ask("Trust this folder? [y/N] ").strip().lower()
    except (EOFError, KeyboardInterrupt):
        write("\n")
        answer = ""
    yes = answer in ("y", "yes")
    try:
        path = set_trusted(home, where, yes)
    except (ConfigError, OSError) as exc:
        write(f"kimicode: {exc}\n")
        return yes
    if yes:
        write(f"Trusted (added to [trust] workspaces in {path}). /trust off changes it.\n")
    else:
        write(
            "Not trusted: the project's hooks, MCP servers, skills, agents and commands are not used. "
            "/trust on changes it.\n"
        )
    return yes


def _changed_since_trusted(home: Path, where: Path) -> list[str] | None:
    """What to show before asking: for a listed workspace, what changed since it was trusted (None when
    nothing did: no question); for one not listed, nothing yet (None when it was declined before)."""
    if is_trusted(where, _user_data(home)):
        return seen_changes(home, where) or None
    return None if was_declined(home, where) else []


def _show_trust(session: Session, where: Path, trusted: bool) -> None:
    """/trust alone: whether `where` is trusted, what it brings, and how to change it."""
    items = project_brings(where)
    state = "trusted" if trusted else "not trusted"
    nothing = "It brings no hooks, MCP servers, skills, agents or commands."
    brings = f"It brings:\n{listing(items)}" if items else nothing
    session.say(f"This workspace ({where}) is {state}. {brings}\n/trust {'off' if trusted else 'on'} changes it.")


async def cmd_trust(session: Session, arg: str) -> None:
    """/trust [on|off]: show whether this workspace is trusted and what it brings, or change it."""
    where = session.workspace.expanduser().resolve()
    trusted = is_trusted(where, _user_data(session.home))
    word = arg.strip().lower()
    if word not in ("", "on", "yes", "off", "no"):
        session.say("Usage: /trust [on|off]", "yellow")
        return
    if not word:
        _show_trust(session, where, trusted)
        return
    want = word in ("on", "yes")
    if want == trusted and not (want and seen_changes(session.home, where)):
        session.say(f"This workspace is already {'trusted' if trusted else 'not trusted'}.")
        return
    try:
        set_trusted(session.home, where, want)
    except (ConfigError, OSError) as exc:
        session.say(f"Could not change the trust: {exc}", "red")
        return
    if not want and is_trusted(where, _user_data(session.home)):
        session.say(
            "A folder above this one is listed in [trust] workspaces, so it stays trusted; edit "
            f"{session.home / 'config.toml'} to change that.",
            "yellow",
        )
        return
    state = "trusted" if want else "not trusted"
    try:
        await session.agent.aclose()  # releases the session's lock, so it can be reopened with the new settings
        await session.resume_session(session.agent.session_id)  # the same conversation, settings read again
        session.say(
            f"This workspace is now {state}; the session was reopened with its project settings "
            + ("in effect." if want else "left out."),
            "green",
        )
    except Exception as exc:  # e.g. a session kept without a log (--no-session-persistence)
        await session.new_conversation()
        session.say(
            f"This workspace is now {state}; the conversation could not be reopened ({exc}), so a new "
            "session started with the new settings.",
            "yellow",
        )


async def cmd_skills(session: Session, arg: str) -> None:
    """/skills: the skills the model may activate (and `/NAME` starts)."""
    found = session.agent.extras.found
    skills = found.skills if found is not None else {}
    if not skills:
        session.say(
            "No skills. Put one in KIMICODE_HOME/skills/NAME/SKILL.md, ~/.claude/skills/, or (trusted "
            "workspaces) .kimicode/skills/ or .claude/skills/; plugins bring theirs."
        )
        return
    width = max(60, session.console.width - 1)
    lines = []
    for name, skill in skills.items():  # one line each, cut to the window (a wrapped list is hard to scan)
        shown = f"  /{name}" + (f" ({skill.display_name})" if skill.display_name else "") + "  "
        tail = f" ({skill.scope})"
        room = max(10, width - len(shown) - len(tail))
        text = " ".join(sanitize(skill.description, sequences="escape").split())
        lines.append(shown + (text if len(text) <= room else text[: room - 1] + "…") + tail)
    session.say("Skills (the model activates them by their description; /NAME starts one):\n" + "\n".join(lines))
