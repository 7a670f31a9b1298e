"""`Agent.explore`: the agent's method, defined here so the agent's module stays small (Agent inherits it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kimicode.branches.exploration import Exploration


class Explorer:
    """Gives `Agent` its `explore` method (kimicode/branches/explore.py does the work)."""

    async def explore(self, prompt: str, *, n: int = 2, verify: str | None = None, **options: Any) -> Exploration:
        """Run `prompt` in `n` branches of this session at once, each a fork in its own workspace; run `verify`
        (a shell command, exit 0 = verified) in each, in the sandbox; choose one and apply it as one
        checkpointed change, the session continuing from its history. Options: `pick`, `models`, `thinking`,
        `judge_model`, `apply`, `verify_timeout`, `timeout`, `workspace`, `engine`, `on_update`: see
        docs/branches.md. Returns the `Exploration` (its `branches`, `chosen`, `apply`)."""
        from kimicode.branches.explore import explore

        return await explore(self, prompt, n=n, verify=verify, **options)
