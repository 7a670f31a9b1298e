"""What a session costs: configured prices, else Moonshot's published list prices for its own endpoint.

The built-in table is Moonshot's public price list for the international platform (USD per million tokens,
as `input` = cache miss, `cached_input` = cache hit, `output`), gathered on 2026-12-01:

- kimi-k3 (released 2026-07-16): Moonshot's page https://platform.kimi.ai/docs/pricing/chat-k3, as quoted
  in getagentseal/codeburn PR #709 and matching the list prices resellers publish (docs.apiyi.com,
  novita.ai): $3 / $0.30 / $15. The official page itself could not be read from here.
- kimi-k2.6: https://platform.kimi.ai/docs/pricing/chat-k26 (the same figures in Cloudflare's model docs).
- kimi-k2.5: https://platform.moonshot.ai/docs/pricing/chat (an archived copy of 2026-03-26).

The prices apply only when the endpoint is Moonshot's international API (`api.moonshot.ai`, the default):
the same model served by a local vLLM, a reseller, or the China platform (billed in CNY) costs something
else, and a wrong figure is worse than none. `[models.NAME] prices` in config.toml always wins.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

PRICES_CHECKED = "2026-12-01"
PRICE_SOURCE = "Moonshot's price list (platform.kimi.ai/docs/pricing)"
MOONSHOT_HOSTS = frozenset({"api.moonshot.ai"})
"""Endpoints billed at the list prices below (USD)."""

MOONSHOT_PRICES: dict[str, dict[str, float]] = {
    "kimi-k3": {"input": 3.00, "cached_input": 0.30, "output": 15.00},
    "kimi-k2.6": {"input": 0.95, "cached_input": 0.16, "output": 4.00},
    "kimi-k2.5": {"input": 0.60, "cached_input": 0.10, "output": 3.00},
}
"""USD per million tokens; see the module docstring for the source and date."""


def builtin_prices(model: str, base_url: str) -> Mapping[str, float]:
    """Moonshot's list prices for `model` when `base_url` is Moonshot's international API, else empty."""
    try:
        host = (urlsplit(base_url).hostname or "").lower()
    except ValueError:
        return {}
    if host not in MOONSHOT_HOSTS:
        return {}
    return MOONSHOT_PRICES.get(model.strip().lower(), {})


def model_prices(configured: Mapping[str, float], model: str, base_url: str) -> tuple[Mapping[str, float], str]:
    """The prices to use and where they come from: `config`, `builtin`, or `` (unknown, empty prices)."""
    if "input" in configured or "output" in configured:
        return configured, "config"
    found = builtin_prices(model, base_url)
    return (found, "builtin") if found else ({}, "")


def unknown_price_hint(model_name: str, home: Path) -> str:
    """How to give a model a price, naming the user config file."""
    return (
        f"no price is known for {model_name}; to see costs add to {home / 'config.toml'}:\n"
        f"  [models.{json.dumps(model_name)}]\n"
        "  prices = { input = 3.0, cached_input = 0.3, output = 15.0 }   # USD per million tokens"
    )


def describe_prices(prices: Mapping[str, float], source: str) -> str:
    """`input $3, cached input $0.3, output $15; Moonshot's price list, checked 2026-12-01` (per million)."""
    labels = (("input", "input"), ("cached_input", "cached input"), ("output", "output"))
    rates = ", ".join(f"{label} ${prices[key]:g}" for key, label in labels if key in prices)
    origin = f"{PRICE_SOURCE}, checked {PRICES_CHECKED}" if source == "builtin" else "from config.toml"
    return f"{rates}; {origin}"
