"""Configuration files: merge order and errors that name the file, the line and the key."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import write

from kimicode.config.endpoint import ConfigError
from kimicode.config.settings import load_settings


def test_project_overrides_user(tmp_path: Path) -> None:
    home, ws = tmp_path / "home", tmp_path / "ws"
    write(home / "config.toml", '[defaults]\nmodel = "kimi-k3"\nmax_turns = 50\n[permissions]\nallow = ["bash(ls*)"]\n')
    write(ws / ".kimicode" / "config.toml", "[defaults]\nmax_turns = 10\n")
    s = load_settings(ws, home)
    assert s.get("defaults.model") == "kimi-k3"
    assert s.get("defaults.max_turns") == 10
    assert s.get("permissions.allow") == ["bash(ls*)"]
    assert s.sources == [home / "config.toml", ws / ".kimicode" / "config.toml"]
    assert s.get("models.none.context_window", 7) == 7


def test_no_files_is_empty(tmp_path: Path) -> None:
    assert load_settings(tmp_path, tmp_path / "home").data == {}


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[defaults]\nmodel = 'x'\nmax_turn = 5\n", ":3: defaults.max_turn: unknown key"),
        ("[defaults]\n\nthinking = 'extreme'\n", ":3: defaults.thinking: must be one of low, high, max"),
        (
            "[models.mine]\nprovider = 'p'\ncontext_window = '1M'\n",
            ":3: models.mine.context_window: must be an integer",
        ),
        ("[defaults\nmodel = 1\n", "invalid TOML"),
    ],
)
def test_errors_name_file_line_and_key(tmp_path: Path, text: str, needle: str) -> None:
    write(tmp_path / "home" / "config.toml", text)
    with pytest.raises(ConfigError) as info:
        load_settings(tmp_path, tmp_path / "home")
    assert str(tmp_path / "home" / "config.toml") in str(info.value)
    assert needle in str(info.value)


def test_agent_takes_context_settings_from_config_and_arguments_win(tmp_path: Path) -> None:
    from kimicode import Agent, AgentOptions

    home, ws = tmp_path / "home", tmp_path / "ws"
    ws.mkdir()
    write(
        home / "config.toml",
        "[context]\ncompact_threshold = 0.5\nprune_threshold = 0.4\ntool_output_cap_tokens = 999\n",
    )
    agent = Agent(AgentOptions.from_workspace(ws, home=home), api_key="k", persist=False, prune_threshold=0.3)
    assert agent.context.settings.compact_threshold == 0.5
    assert agent.context.settings.prune_threshold == 0.3
    assert agent.context.settings.tool_output_tokens == 999
