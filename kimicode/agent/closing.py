"""Closing an agent at the end of `run_sync`, where nobody is there to handle a failure to close.

`run_sync` closes the agent after its turn (its connections belong to the event loop `asyncio.run` made).
When that fails (a caller's own client whose `aclose` raises, an MCP server that will not stop), the turn's
`RunResult` is still returned and the failure becomes a `RuntimeWarning`: raising it instead would lose the
result of a turn that happened, files changed and all. `await agent.aclose()` called directly still raises,
after releasing everything else (the session log is closed and unlocked whatever fails before it).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kimicode.agent.core import Agent


async def close_after_run(agent: Agent) -> None:
    """`agent.aclose()`, a failure of which is warned about instead of raised."""
    try:
        await agent.aclose()
    except Exception as exc:
        what = agent.masker.mask(f"{type(exc).__name__}: {exc}")  # an error may quote a key
        warnings.warn(f"kimicode: closing the agent after run_sync failed: {what}", RuntimeWarning, stacklevel=2)
