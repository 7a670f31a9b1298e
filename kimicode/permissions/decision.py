"""A permission decision and the rule look-ups both deciders share: the file-tool decider in `engine` and
the bash decider in `bashcheck` (which `engine` calls), so neither imports the other's internals."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from kimicode.permissions.policy import Rule
from kimicode.permissions.subjects import Place

__all__ = ["Decision", "path_rule_hit", "rule_text", "shown_path", "specific_allow"]


@dataclass(frozen=True)
class Decision:
    """`allow` runs, `ask` needs the user's (or the approval callback's) yes, `deny` never runs."""

    verdict: Literal["allow", "ask", "deny"]
    reason: str = ""
    suggestion: str = ""
    """A rule that would allow this call (`bash(npm test)`), offered in headless denials; one per line when
    several parts of a command line need one (`npm ci && npm test`)."""
    by_rule: bool = False
    """True when a user's rule (not the mode) decided."""
    firm: bool = False
    """An ask that nothing but the user answers: no hook's allow turns it into a yes (a write to a place
    that runs later, `kimicode.permissions.runslater`)."""
    profile: Literal["read-only", "workspace-write"] = "workspace-write"
    """For an allowed bash call: the sandbox it runs in. `read-only` when the read-only allowance alone
    admits it (no rule, no mode, no write redirection); see kimicode.tools.sandbox."""


def shown_path(path: Path, ctx: Place) -> str:
    """A path for messages and suggested rules: workspace-relative inside it, else absolute."""
    root = Path(os.path.realpath(ctx.workspace))
    if path != root and root in path.parents:
        return str(path.relative_to(root))
    return str(path)


def rule_text(rule: Rule) -> str:
    """A rule as a message names it: its text and where it came from."""
    return f"`{rule.raw}`" + (f" ({rule.source})" if rule.source else "")


def path_rule_hit(rules: Sequence[Rule], paths: Sequence[Path], ctx: Place) -> Rule | None:
    """The first rule matching any of `paths` (a rule without a pattern matches everything)."""
    for rule in rules:
        if rule.pattern is None or any(rule.matches_path(p, ctx.workspace) for p in paths):
            return rule
    return None


def specific_allow(rules: Sequence[Rule], path: Path, ctx: Place) -> bool:
    """True when an allow rule *with a path pattern* names `path` (a bare tool name is not enough for
    secrets, `.git` or places outside the workspace)."""
    return any(r.pattern is not None and r.matches_path(path, ctx.workspace) for r in rules)
