"""Parallel branches: one prompt in N forks of the session at once, verified by a command, the best kept.

`await agent.explore(prompt, n=4, verify="pytest -q")` returns an `Exploration` (its `branches`,
`chosen`, `apply`); `kimicode -p PROMPT --branches N --verify CMD` and `/branches N` use the same engine.
See docs/branches.md.
"""

from __future__ import annotations

from kimicode.branches.choose import PICKS
from kimicode.branches.exploration import Exploration
from kimicode.branches.record import Branch, ExplorationRecord, all_records, find, load_record

__all__ = ["PICKS", "Branch", "Exploration", "ExplorationRecord", "all_records", "find", "load_record"]
