"""Shared fixtures: a fake OpenAI-compatible server, an isolated KIMICODE_HOME and workspace."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kimicode.testing import FakeServer


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test sees the developer's keys, endpoints or state."""
    for name in list(os.environ):
        if name.startswith(("KIMI_", "MOONSHOT_", "OPENAI_", "KIMICODE_")):
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KIMICODE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude-home"))  # never the developer's ~/.claude


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with FakeServer() as fake:
        yield fake


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.fixture
def make_agent(server: FakeServer, workspace: Path, tmp_path: Path) -> Callable[..., Any]:
    """Build an Agent pointed at the fake server, with fast retries, configured as the command line
    configures it (`AgentOptions.from_workspace`: the home's and the workspace's config files, AGENTS.md)."""
    from kimicode import Agent, AgentOptions

    def make(**kwargs: Any) -> Agent:
        opts: dict[str, Any] = {
            "base_url": server.base_url,
            "api_key": "sk-test-secret-key",
            "model": "kimi-k3",
            "workspace": workspace,
            "home": tmp_path / "home",
            "retry_base_delay": 0.01,
        }
        opts.update(kwargs)
        given = {k: opts.pop(k) for k in ("config",) if k in opts}
        options = AgentOptions.from_workspace(opts.pop("workspace"), home=opts.pop("home"), **given)
        return Agent(options, **opts)

    return make
