"""Which branch to keep: the rule, and the optional judge model.

The default rule (`auto`): verified branches first, then fewer changed lines, then lower cost, then the
one that finished first. With a verify command, a branch that did not pass it is never chosen; without
one, every branch whose turn succeeded is a candidate. `--pick` replaces the rule: `first-verified` (the
first to pass), `smallest`, `cheapest`, or `ask` (no automatic choice: the terminal opens a picker, the
headless run leaves the choice to `kimicode branches apply`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from kimicode.branches.record import Branch

PICKS = ("auto", "first-verified", "smallest", "cheapest", "ask")


def candidates(branches: Sequence[Branch], verify: str | None) -> list[Branch]:
    """The branches that may be chosen: verified ones when there is a verify command, else finished ones."""
    if verify:
        return [b for b in branches if b.verified]
    return [b for b in branches if b.status == "done" and b.turn_status == "success"]


def _cost(b: Branch) -> float:
    return b.cost_usd if b.cost_usd is not None else 0.0


def _finish(b: Branch) -> float:
    return b.finished_at or float("inf")


def choose(branches: Sequence[Branch], verify: str | None, pick: str = "auto") -> tuple[Branch | None, str]:
    """The chosen branch (None when none qualifies or `pick` is `ask`) and why, in a few words."""
    if pick not in PICKS:
        raise ValueError(f"pick must be one of {', '.join(PICKS)} (got {pick!r})")
    pool = candidates(branches, verify)
    if not pool:
        return None, "no branch passed the verify command" if verify else "no branch finished its turn"
    if pick == "ask":
        return None, "left to you (--pick ask)"
    what = "verified" if verify else "finished"
    if pick == "first-verified":
        best = min(pool, key=_finish)
        return best, f"the first branch {what}"
    if pick == "cheapest":
        best = min(pool, key=lambda b: (_cost(b), b.changed_lines, _finish(b)))
        return best, f"the cheapest {what} branch (${_cost(best):.4f})"
    best = min(pool, key=lambda b: (b.changed_lines, _cost(b), _finish(b)))
    if pick == "smallest" or len(pool) == 1:
        which = "only" if len(pool) == 1 else "smallest"
        return best, f"the {which} {what} branch ({best.changed_lines} changed lines)"
    return best, f"{what}, fewest changed lines ({best.changed_lines}), then lowest cost"


JUDGE_PROMPT = """Several attempts were made at the last request, each in its own copy of the workspace. \
{what} Compare their changes below and choose the one a careful reviewer would merge: correct, complete, \
minimal, readable. Do not call tools. Answer with one JSON object on the last line: \
{{"branch": "<id>", "reason": "<one sentence>"}}.

{diffs}"""

DIFF_LIMIT = 12000
"""Characters of each branch's diff shown to the judge (the rest is cut, and the cut is said)."""


def judge_prompt(pool: Sequence[Branch], diffs: dict[str, str], verify: str | None) -> str:
    what = f"All of these passed `{verify}`." if verify else "All of these finished their turn."
    parts = []
    for b in pool:
        diff = diffs.get(b.id, "")
        if len(diff) > DIFF_LIMIT:
            diff = diff[:DIFF_LIMIT] + f"\n[… {len(diff) - DIFF_LIMIT} more characters of this diff not shown]"
        parts.append(f"### branch {b.id} ({b.changed_lines} changed lines)\n```diff\n{diff or '(no changes)'}\n```")
    return JUDGE_PROMPT.format(what=what, diffs="\n\n".join(parts))


def parse_verdict(text: str, pool: Sequence[Branch]) -> tuple[Branch | None, str]:
    """The branch the judge named and its reason; (None, why) when its answer names none of them."""
    ids = {b.id: b for b in pool}
    for match in reversed(list(re.finditer(r"\{[^{}]*\}", text or ""))):
        try:
            data: Any = json.loads(match.group(0))
        except ValueError:
            continue
        if isinstance(data, dict) and str(data.get("branch")) in ids:
            return ids[str(data["branch"])], str(data.get("reason") or "").strip()[:500]
    named = [b for bid, b in ids.items() if bid in (text or "")]
    if len(named) == 1:
        return named[0], "named by the judge (no JSON verdict)"
    return None, "the judge's answer named no branch"
