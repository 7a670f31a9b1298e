"""Configuration wired into the agent and the command line: providers, models, precedence, `config show`."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
from helpers import write
from typer.testing import CliRunner

from kimicode.cli.app import app
from kimicode.config.endpoint import ConfigError
from kimicode.config.settings import (
    estimate_cost,
    load_settings,
    masked,
    model_config,
    prefers_apply_patch,
    resolve_model,
)
from kimicode.testing import FakeServer, Reply, ToolCall

USER_CONFIG = """
[defaults]
model = "or-k3"

[providers.router]
base_url = "{base_url}"
api_key_env = "ROUTER_KEY"
headers = {{ "X-Title" = "kimicode", "Authorization-Extra" = "${{ROUTER_EXTRA}}" }}
reasoning_field = "reasoning"

[models.or-k3]
provider = "router"
model = "moonshotai/kimi-k3"
context_window = 200000
max_completion_tokens = 4096
reasoning_effort = "low"
prices = {{ input = 2.0, cached_input = 0.5, output = 8.0 }}

[models.plain]
model = "kimi-k3-plain"
"""


@pytest.fixture
def configured(tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    write(home / "config.toml", USER_CONFIG.format(base_url=server.base_url))
    monkeypatch.setenv("ROUTER_KEY", "sk-router-secret")
    monkeypatch.setenv("ROUTER_EXTRA", "extra-secret-value")
    return home


def test_named_provider_and_model_reach_the_request(
    configured: Path, server: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    from kimicode import Agent, AgentOptions

    server.add(Reply(content="hi", reasoning_field="reasoning"))
    agent = Agent(AgentOptions.from_workspace(workspace, home=configured), retry_base_delay=0.01)
    assert agent.endpoint.model == "moonshotai/kimi-k3"
    assert agent.endpoint.key_source == "ROUTER_KEY"
    assert agent.context_window == 200_000
    assert agent.thinking == "low"
    result = agent.run_sync("hello")
    assert result.ok, result.error
    req = server.requests[0]
    assert req.body["model"] == "moonshotai/kimi-k3"
    assert req.body["max_completion_tokens"] == 4096
    assert req.body["reasoning_effort"] == "low"
    assert req.headers["authorization"] == "Bearer sk-router-secret"
    assert req.headers["x-title"] == "kimicode"
    assert req.headers["authorization-extra"] == "extra-secret-value"
    assert estimate_cost(agent.usage, agent.model_config.prices) is not None


def test_flags_and_environment_override_files(
    configured: Path, server: FakeServer, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kimicode import Agent, AgentOptions

    monkeypatch.setenv("KIMI_API_KEY", "sk-kimi")
    monkeypatch.setenv("KIMI_MODEL", "plain")
    agent = Agent(AgentOptions.from_workspace(workspace, home=configured), persist=False)
    assert agent.endpoint.model == "kimi-k3-plain"  # the environment beats defaults.model
    assert agent.endpoint.key_source == "KIMI_API_KEY"
    agent = Agent(
        AgentOptions.from_workspace(workspace, home=configured),
        persist=False,
        model="or-k3",
        base_url="http://127.0.0.1:9/v1",
        thinking="max",
        context_window=100_000,
    )
    assert agent.endpoint.base_url == "http://127.0.0.1:9/v1"  # the flag beats the provider
    assert agent.thinking == "max" and agent.context_window == 100_000


def test_project_file_overrides_user_file(configured: Path, workspace: Path) -> None:
    write(workspace / ".kimicode" / "config.toml", "[models.or-k3]\ncontext_window = 1234\n")
    s = load_settings(workspace, configured)
    mc = model_config(s, "or-k3")
    assert mc.context_window == 1234 and mc.model == "moonshotai/kimi-k3" and mc.provider == "router"


def test_recorded_model_id_finds_its_configured_name(configured: Path, workspace: Path) -> None:
    s = load_settings(workspace, configured)
    assert model_config(s, "moonshotai/kimi-k3").name == "or-k3"  # how a resumed session finds its provider
    assert model_config(s, "unknown-model").model == "unknown-model"


def test_set_model_moves_to_the_models_provider(
    configured: Path, server: FakeServer, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kimicode import Agent, AgentOptions

    monkeypatch.setenv("KIMI_API_KEY", "sk-kimi")
    agent = Agent(AgentOptions.from_workspace(workspace, home=configured), persist=False, model="plain")
    assert agent.endpoint.key_source == "KIMI_API_KEY"
    agent.set_model("or-k3")
    assert agent.endpoint.base_url == server.base_url and agent.endpoint.key_source == "ROUTER_KEY"
    assert agent.context_window == 200_000
    agent.set_model("some-other-model")  # not configured: same endpoint, new id
    assert agent.endpoint.base_url == server.base_url and agent.endpoint.model == "some-other-model"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('[models.x]\nprovider = "nope"\n', ":2: models.x.provider: unknown provider 'nope'"),
        ('[providers.p]\napi_key_env = "MISSING_KEY_VAR"\n[models.x]\nprovider = "p"\n', "MISSING_KEY_VAR"),
        (
            '[providers.p]\nheaders = { A = "${UNSET_VAR}" }\n[models.x]\nprovider = "p"\n',
            ":2: providers.p.headers.A: the environment variable UNSET_VAR is not set",
        ),
    ],
)
def test_errors_name_the_file_line_and_key(tmp_path: Path, workspace: Path, text: str, needle: str) -> None:
    home = tmp_path / "home"
    cfg = write(home / "config.toml", text)
    with pytest.raises(ConfigError) as info:
        resolve_model(load_settings(workspace, home), model="x", env={})
    assert needle in str(info.value)
    if ":2:" in needle:
        assert str(cfg) in str(info.value)


def test_edit_tool_preference() -> None:
    from kimicode.config.settings import ModelConfig

    assert prefers_apply_patch(ModelConfig("gpt-5", "gpt-5"))
    assert prefers_apply_patch(ModelConfig("o3", "openai/o3"))
    assert not prefers_apply_patch(ModelConfig("kimi-k3", "kimi-k3"))
    assert not prefers_apply_patch(ModelConfig("gpt-5", "gpt-5", edit_tool="edit_file"))
    assert prefers_apply_patch(ModelConfig("k", "kimi-k3", edit_tool="apply_patch"))


def test_cost_estimate() -> None:
    usage = {"prompt_tokens": 1_000_000, "cached_tokens": 500_000, "completion_tokens": 100_000}
    assert estimate_cost(usage, {"input": 2.0, "cached_input": 0.5, "output": 8.0}) == pytest.approx(2.05)
    assert estimate_cost(usage, {}) is None


def test_masking_keeps_env_references() -> None:
    data = {
        "providers": {"p": {"headers": {"X-Api-Key": "raw-secret", "Auth": "${TOKEN}"}, "base_url": "https://x"}},
        "mcp_servers": {"s": {"env": {"PLAIN": "value"}, "command": "run"}},
    }
    out = masked(data)
    assert out["providers"]["p"]["headers"] == {"X-Api-Key": "********", "Auth": "${TOKEN}"}
    assert out["mcp_servers"]["s"]["env"]["PLAIN"] == "********"
    assert out["providers"]["p"]["base_url"] == "https://x" and out["mcp_servers"]["s"]["command"] == "run"


def _invoke(args: list[str], cwd: Path) -> Any:
    return CliRunner().invoke(app, [*args, "-C", str(cwd)] if args[0] == "config" else args)


def test_config_show_masks_secrets(configured: Path, workspace: Path, server: FakeServer) -> None:
    write(
        configured / "config.toml",
        (configured / "config.toml").read_text()
        + '\n[mcp_servers.db]\ncommand = "db-mcp"\nenv = { DB_PASSWORD = "hunter2" }\n',
    )
    out = _invoke(["config", "show"], workspace)
    assert out.exit_code == 0, out.output
    assert str(configured / "config.toml") in out.output
    assert "(not found)" in out.output  # the project file does not exist
    assert "hunter2" not in out.output and "sk-router-secret" not in out.output
    assert "extra-secret-value" not in out.output
    assert '"${ROUTER_EXTRA}"' in out.output
    assert "model_id: moonshotai/kimi-k3" in out.output and "api_key_from: ROUTER_KEY" in out.output
    shown = tomllib.loads(out.output)  # the output is valid TOML (the notes are comments)
    assert shown["providers"]["router"]["api_key_env"] == "ROUTER_KEY"  # a variable name is no secret
    assert shown["models"]["or-k3"]["prices"]["output"] == 8.0
    js = _invoke(["config", "show", "--json"], workspace)
    data = json.loads(js.output)
    assert data["settings"]["mcp_servers"]["db"]["env"]["DB_PASSWORD"] == "********"
    assert data["resolved"]["provider"] == "router"


def test_config_show_error_is_one_line_exit_2(tmp_path: Path, workspace: Path) -> None:
    write(tmp_path / "home" / "config.toml", "[defaults]\nmax_turn = 3\n")
    out = _invoke(["config", "show"], workspace)
    assert out.exit_code == 2
    lines = [ln for ln in out.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "config.toml:2: defaults.max_turn: unknown key" in lines[0]


def test_cli_applies_defaults_from_the_file(
    server: FakeServer, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "home" / "config.toml", "[defaults]\nmax_turns = 1\n")
    monkeypatch.setenv("KIMI_API_KEY", "sk-x")
    monkeypatch.setenv("KIMI_BASE_URL", server.base_url)
    monkeypatch.setenv("KIMICODE_RETRY_BASE_DELAY", "0.01")
    server.add(Reply(tool_calls=[ToolCall("glob", {"pattern": "*"})]))
    out = _invoke(["-C", str(workspace), "-p", "go", "--output-format", "json"], workspace)
    assert json.loads(out.stdout)["status"] == "max_turns", out.output
    server.add(Reply(tool_calls=[ToolCall("glob", {"pattern": "*"})]), Reply(content="done"))
    out = _invoke(["-C", str(workspace), "-p", "go", "--max-turns", "5"], workspace)  # the flag wins
    assert out.exit_code == 0 and "done" in out.stdout


def test_cli_reports_config_errors_in_one_line(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "home" / "config.toml", '[models.x]\nprovider = "ghost"\n')
    monkeypatch.setenv("KIMI_API_KEY", "sk-x")
    out = _invoke(["-C", str(workspace), "-p", "go", "--model", "x"], workspace)
    assert out.exit_code == 2
    assert "unknown provider 'ghost'" in out.output and "Traceback" not in out.output


def test_the_retry_delay_variable_is_read_in_one_place_for_every_face(tmp_path: Path) -> None:
    """KIMICODE_RETRY_BASE_DELAY is parsed by config/endpoint.py alone (it was parsed twice, with two defaults):
    the headless run and `kimicode batch` refuse the same bad value with the same one line."""
    from kimicode.config.endpoint import retry_base_delay

    assert retry_base_delay({}) is None and retry_base_delay({"KIMICODE_RETRY_BASE_DELAY": "0.5"}) == 0.5
    with pytest.raises(ConfigError, match="must be a number of seconds"):
        retry_base_delay({"KIMICODE_RETRY_BASE_DELAY": "soon"})
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "a", "prompt": "p"}\n')
    env = {"KIMICODE_RETRY_BASE_DELAY": "soon", "KIMI_API_KEY": "sk-x"}
    for args in (["-p", "go"], ["batch", str(tasks), "-o", str(tmp_path / "out.jsonl")]):
        out = CliRunner().invoke(app, args, env=env)
        assert out.exit_code == 2 and "KIMICODE_RETRY_BASE_DELAY must be a number of seconds" in out.output, out.output
