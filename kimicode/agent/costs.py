"""What an agent's session has cost so far, at its current model's prices (`kimicode.config.pricing`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kimicode.agent.core import Agent


def agent_prices(agent: Agent) -> tuple[Mapping[str, float], str]:
    """The agent's `prices=` option, else `model_prices` for its current model and endpoint."""
    return agent.parts.resolved.prices(agent.options)


def session_cost(agent: Agent) -> float | None:
    """Dollars spent so far in the agent's session (cached tokens at the cached price); None when unpriced, or
    when the model answered but the server reported no usage (unknown, not free). A priced session the model
    has not answered yet has spent 0.0 (the toolbar and /cost show $0 from the start)."""
    cost = agent.parts.resolved.cost(agent.options, agent.usage)
    answered = any(m.get("role") == "assistant" for m in agent.messages)
    if not answered:
        return 0.0 if cost is None and agent_prices(agent)[0] else cost
    if not any(agent.usage.get(k) for k in ("prompt_tokens", "completion_tokens")):
        return None  # answered, but the server never said what it used
    return cost
