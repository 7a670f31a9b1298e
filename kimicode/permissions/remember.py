"""The rule a "don't ask again" answer adds to the session, written once for every face.

The terminal's approval menu and the ACP face's `session/request_permission` both turn an approval that
should be remembered into a rule of the permission engine, in the language of `--allow`: `bash(CMD)` for
an exact simple command (a literal rule: it matches only that whole command line), `bash(PREFIX:*)` for a
prefix, `edit(PATH)` for a file. Later calls are then decided by the same engine as configured rules.
"""

from __future__ import annotations

from kimicode.permissions.policy import Rule, parse_rule

__all__ = ["remembered_rule"]


def remembered_rule(answer: str, *, command: str | None, path: str | None, prefix: str | None = None) -> Rule | None:
    """The rule for `answer` (`command`, `prefix` or `file`), or None when that answer has no rule here.

    `command` is the shell command of an execute call, `path` the resolved file of an edit call; a path
    holding glob characters gets no rule (it would match other files)."""
    if answer == "prefix" and prefix and prefix.strip():
        return parse_rule(f"bash({prefix.strip()}:*)", "session")
    if answer == "command" and command is not None:
        return Rule("bash", command, f"bash({command})", "session", literal=True)
    if answer == "file" and path is not None and not any(c in path for c in "*?()"):
        return parse_rule(f"edit({path})", "session")
    return None
