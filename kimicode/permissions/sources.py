"""Where a session's permission rules come from: kimicode's configuration files (`[permissions]` of the
user's and the project's config.toml), the `--allow`/`--deny`/`--ask` flags, and Claude Code's settings
files (kimicode.permissions.claude). One `Rules` holds them all, each rule naming its file."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from kimicode.permissions.policy import Rules, load_rules, parse_rule

if TYPE_CHECKING:
    from kimicode.config.settings import Settings

__all__ = ["session_rules"]


def session_rules(
    settings: Settings,
    *,
    project_file: Path | None = None,
    allow: Iterable[str] = (),
    deny: Iterable[str] = (),
    ask: Iterable[str] = (),
    ignored: list[str] | None = None,
    claude_workspace: Path | None = None,
) -> Rules:
    """The rules for a new session: the configuration files `settings` was read from, plus the flags, plus
    (with `claude_workspace`) Claude Code's settings files for that workspace (kimicode.permissions.claude).

    A cloned repository must not grant itself permissions: unless the workspace is trusted
    (`settings.trusted`), the `allow` rules of `project_file` are ignored (and said so in `ignored`).
    Settings built in code (no files) contribute their own `[permissions]` table.
    """
    if settings.sources:
        untrusted = [project_file] if project_file is not None and not settings.trusted else []
        mine = load_rules(
            settings.sources,
            allow=allow,
            deny=deny,
            ask=ask,
            untrusted=untrusted,
            ignored=ignored,
            parsed=settings.parsed,
        )
    else:
        table = settings.config.permissions
        base = Rules(
            *(
                tuple(parse_rule(t, f"configuration: permissions.{action}") for t in getattr(table, action))
                for action in ("allow", "deny", "ask")
            )
        )
        flags = load_rules((), allow=allow, deny=deny, ask=ask)
        mine = Rules(base.allow + flags.allow, base.deny + flags.deny, base.ask + flags.ask)
    if claude_workspace is None:
        return mine
    from kimicode.permissions.claude import claude_rules

    theirs = claude_rules(claude_workspace, trusted=settings.trusted)
    if ignored is not None:
        ignored.extend(theirs.ignored)
    c = theirs.rules
    return Rules(mine.allow + c.allow, mine.deny + c.deny, mine.ask + c.ask)
