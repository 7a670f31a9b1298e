"""Cost out of the box: Moonshot's list prices on Moonshot's endpoint, configured prices everywhere, the
cached-input price for cached tokens, `cost_usd` in the json result, and a usable hint when no price is known."""

from __future__ import annotations

import asyncio
import io
import json
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kimicode import Agent
from kimicode.agent.costs import session_cost
from kimicode.cli.headless import Printer, result_object, run_headless
from kimicode.config.pricing import (
    MOONSHOT_PRICES,
    builtin_prices,
    describe_prices,
    model_prices,
    unknown_price_hint,
)
from kimicode.config.settings import parse_file
from kimicode.events import TurnFinished
from kimicode.testing import FakeServer, Reply

MOONSHOT = "https://api.moonshot.ai/v1"


def test_the_default_model_is_priced_on_moonshots_endpoint() -> None:
    assert builtin_prices("kimi-k3", MOONSHOT) == {"input": 3.0, "cached_input": 0.3, "output": 15.0}
    assert builtin_prices("KIMI-K3", "https://API.MOONSHOT.AI/v1/") == MOONSHOT_PRICES["kimi-k3"]
    for model in MOONSHOT_PRICES:  # every entry has all three prices, cache hits cheaper than misses
        prices = MOONSHOT_PRICES[model]
        assert set(prices) == {"input", "cached_input", "output"}
        assert 0 < prices["cached_input"] < prices["input"] < prices["output"]


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000/v1",  # a local vLLM serving the same model id
        "https://api.moonshot.cn/v1",  # the China platform bills in CNY at other rates
        "https://api.moonshot.ai.evil.example/v1",
        "https://api.moonshot.ai@evil.example/v1",
        "https://openrouter.ai/api/v1",
        "http://[::1",  # not even a URL
        "",
    ],
)
def test_list_prices_never_apply_to_another_endpoint(url: str) -> None:
    assert builtin_prices("kimi-k3", url) == {}
    assert model_prices({}, "kimi-k3", url) == ({}, "")


def test_unknown_models_and_configured_prices() -> None:
    assert builtin_prices("kimi-k9", MOONSHOT) == {}
    mine = {"input": 1.0, "output": 2.0}
    assert model_prices(mine, "kimi-k3", MOONSHOT) == (mine, "config")  # config.toml always wins
    # a table with only a cached price is not a price list: the built-in one is used
    assert model_prices({"cached_input": 0.1}, "kimi-k3", MOONSHOT)[1] == "builtin"
    assert describe_prices(MOONSHOT_PRICES["kimi-k3"], "builtin") == (
        "input $3, cached input $0.3, output $15; Moonshot's price list (platform.kimi.ai/docs/pricing), "
        "checked 2026-12-01"
    )


def make_moonshot_agent(tmp_path: Path, **kwargs: Any) -> Agent:
    ws = tmp_path / "ws2"
    ws.mkdir(exist_ok=True)
    return Agent(base_url=MOONSHOT, api_key="sk-x", workspace=ws, home=tmp_path / "home", persist=False, **kwargs)


def test_cached_tokens_are_charged_at_the_cached_price(tmp_path: Path) -> None:
    agent = make_moonshot_agent(tmp_path)
    assert session_cost(agent) == 0.0
    agent.usage.update(prompt_tokens=1_000_000, cached_tokens=800_000, completion_tokens=100_000)
    # 200k misses at $3 + 800k hits at $0.30 + 100k output at $15, per million
    assert session_cost(agent) == pytest.approx(0.6 + 0.24 + 1.5)
    agent.usage.update(prompt_tokens=10, cached_tokens=50, completion_tokens=0)  # a server over-reporting hits
    assert session_cost(agent) == pytest.approx(10 * 0.3 / 1e6)
    result = result_object(agent, TurnFinished("success", "ok", 1), 5)
    assert result["cost_usd"] == pytest.approx(3e-6)


def test_json_result_has_cost_usd(server: FakeServer, make_agent: Callable[..., Any], tmp_path: Path) -> None:
    usage = {"prompt_tokens": 100_000, "completion_tokens": 10_000, "total_tokens": 110_000, "cached_tokens": 50_000}
    home = tmp_path / "home"
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text("[models.kimi-k3]\nprices = { input = 1.0, cached_input = 0.5, output = 4.0 }\n")
    server.add(Reply(content="hi", usage=usage), Reply(content="again", usage=usage))
    out = io.StringIO()
    code = asyncio.run(run_headless(make_agent(headless=True), "q", Printer("json", out=out, err=io.StringIO())))
    assert code == 0
    assert json.loads(out.getvalue())["cost_usd"] == pytest.approx(0.115)
    # no price known (the fake server is not Moonshot's endpoint): null, not 0
    (home / "config.toml").unlink()
    out = io.StringIO()
    asyncio.run(run_headless(make_agent(headless=True), "q", Printer("json", out=out, err=io.StringIO())))
    assert json.loads(out.getvalue())["cost_usd"] is None


@pytest.mark.parametrize("name", ["kimi-k3", "my.local model", 'we"ird\\name', "ünï"])
def test_the_hint_is_config_that_kimicode_accepts(name: str, tmp_path: Path) -> None:
    hint = unknown_price_hint(name, tmp_path / "home")
    assert str(tmp_path / "home" / "config.toml") in hint
    snippet = "\n".join(line.strip() for line in hint.splitlines()[1:])
    config = tmp_path / "config.toml"
    config.write_text(snippet)
    data = parse_file(config)  # the schema accepts it as written
    assert data["models"][name]["prices"] == {"input": 3.0, "cached_input": 0.3, "output": 15.0}
    assert tomllib.loads(snippet)["models"][name]["prices"]["output"] == 15.0
