"""What the model is told (issue 28): the exact system prompt per profile, scope and face, a prefix that is the
same in every workspace, strict scope in that cached prefix, and `kimicode prompt show` byte for byte."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import FIXTURES

from kimicode import Agent, AgentOptions
from kimicode.agent.sysprompt import ENVIRONMENT_HEADING, stable_prefix
from kimicode.testing import FakeServer, Reply

SNAPSHOTS = FIXTURES / "prompts"
CASES = [
    (model, scope, face)
    for model in ("kimi-k3", "kimi-k2-thinking", "deepseek-reasoner")
    for scope in ("normal", "strict")
    for face in ("interactive", "headless")
]


def system_of(agent: Agent) -> str:
    return str(agent.messages[0]["content"])


def make(workspace: Path, **settings: Any) -> Agent:
    return Agent(base_url="http://127.0.0.1:9/v1", api_key="k", workspace=workspace, **settings)


@pytest.mark.parametrize(("model", "scope", "face"), CASES)
def test_the_stable_prompt_is_exactly_the_snapshot(model: str, scope: str, face: str, tmp_path: Path) -> None:
    """Regenerate with UPDATE_PROMPT_SNAPSHOTS=1 after changing prompts/ on purpose, and read the diff."""
    agent = make(tmp_path, model=model, scope=scope, headless=face == "headless")
    text = stable_prefix(system_of(agent))
    path = SNAPSHOTS / f"{model}-{scope}-{face}.md"
    if os.environ.get("UPDATE_PROMPT_SNAPSHOTS"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n", encoding="utf-8")
    assert text + "\n" == path.read_text(encoding="utf-8")
    assert str(tmp_path) not in text  # nothing per workspace before the environment section
    assert ("# Working as Kimi K3" in text) == (model == "kimi-k3")
    assert ("# Scope: strict" in text) == (scope == "strict")
    if scope == "strict":
        assert ("stop without changing anything" in text) == (face == "headless")
        assert ("ask one short question" in text) == (face == "interactive")
    else:
        assert "narrowest reasonable reading" in text  # normal scope still says how to treat vague requests


def test_the_prefix_is_the_same_in_every_workspace_and_per_workspace_text_comes_after(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    for ws, rule in ((one, "Use tabs."), (two, "Never touch migrations/.")):
        ws.mkdir()
        (ws / "AGENTS.md").write_text(rule)
    a = Agent(AgentOptions.from_workspace(one, home=tmp_path / "h", base_url="http://127.0.0.1:9/v1", api_key="k"))
    b = Agent(AgentOptions.from_workspace(two, home=tmp_path / "h", base_url="http://127.0.0.1:9/v1", api_key="k"))
    pa, pb = system_of(a), system_of(b)
    assert pa != pb and stable_prefix(pa) == stable_prefix(pb)
    shared = next(i for i, (x, y) in enumerate(zip(pa, pb, strict=False)) if x != y)
    assert shared >= len(stable_prefix(pa))  # the texts part only after the stable prefix
    env_at = pa.index(ENVIRONMENT_HEADING)
    assert pa.index(str(one)) > env_at and pa.index("Use tabs.") > env_at  # workspace and AGENTS.md after it


def test_a_custom_prompt_keeps_an_explicit_strict_scope(tmp_path: Path) -> None:
    agent = make(tmp_path, system_prompt="You are a reviewer in {workspace}.", scope="strict")
    text = system_of(agent)
    assert text.startswith(f"You are a reviewer in {tmp_path.resolve()}.")
    assert "# Scope: strict" in text and "# How you work" not in text
    assert "# Scope" not in system_of(make(tmp_path, system_prompt="Just this."))


def test_scope_from_config_and_project_and_bad_values(tmp_path: Path) -> None:
    home, ws = tmp_path / "home", tmp_path / "ws"
    (ws / ".kimicode").mkdir(parents=True)
    home.mkdir()
    (ws / ".kimicode" / "config.toml").write_text('[agent]\nscope = "strict"\n')  # a project can tighten
    agent = Agent(AgentOptions.from_workspace(ws, home=home, base_url="http://127.0.0.1:9/v1", api_key="k"))
    assert agent.scope == "strict" and "# Scope: strict" in system_of(agent)
    loose = Agent(
        AgentOptions.from_workspace(ws, home=home, base_url="http://127.0.0.1:9/v1", api_key="k", scope="normal")
    )
    assert loose.scope == "normal"  # the option wins
    with pytest.raises(ValueError, match="scope must be one of normal, strict"):
        AgentOptions(scope="lenient")  # type: ignore[arg-type]


def test_strict_scope_is_in_the_cached_prefix_of_every_request(
    server: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    server.add(Reply(content="one"), Reply(content="two"))
    agent = Agent(
        base_url=server.base_url,
        api_key="k",
        model="kimi-k3",
        workspace=workspace,
        scope="strict",
        home=tmp_path / "home",
        headless=True,
    )
    agent.run_sync("first")
    agent.run_sync("second")
    first, second = (r.body for r in server.requests)
    system = first["messages"][0]["content"]
    assert second["messages"][0]["content"] == system
    assert system.index("# Scope: strict") < system.index(ENVIRONMENT_HEADING)
    assert "stop without changing anything" in system
    assert second["messages"][: len(first["messages"])] == first["messages"]  # the whole prefix is reused


def run_cli(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kimicode", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=60
    )


@pytest.mark.prepush
@pytest.mark.parametrize("scope", ["normal", "strict"])
def test_prompt_show_matches_the_first_request_byte_for_byte(
    server: FakeServer, workspace: Path, tmp_path: Path, scope: str
) -> None:
    (workspace / "AGENTS.md").write_text("Run `make check` before you finish.\n")
    env = {
        "KIMICODE_HOME": str(tmp_path / "home"),
        "KIMI_API_KEY": "k",
        "KIMI_BASE_URL": server.base_url,
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
    }
    shown = run_cli(["prompt", "show", "--json", "--headless", "--scope", scope], env, workspace)
    assert shown.returncode == 0, shown.stderr
    report = json.loads(shown.stdout)
    server.add(Reply(content="done"))
    ran = run_cli(["-p", "hi", "--scope", scope], env, workspace)
    assert ran.returncode == 0, ran.stderr
    body = server.requests[0].body
    assert body["messages"][0] == {"role": "system", "content": report["system"]}
    assert body["tools"] == report["tools"]
    assert report["tokens"]["system"] > report["tokens"]["stable_prefix"] > 0
    assert sum(report["tokens"]["per_tool"].values()) == report["tokens"]["tools"]
    text = run_cli(["prompt", "show", "--headless", "--scope", scope], env, workspace)
    assert text.returncode == 0 and report["system"] in text.stdout
    assert all(t["function"]["name"] in text.stdout for t in report["tools"])


@pytest.mark.prepush
def test_prompt_show_with_a_broken_config_is_a_clean_error(workspace: Path, tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "config.toml").write_text("[agent]\nscope = 3\n")
    env = {
        "KIMICODE_HOME": str(tmp_path / "home"),
        "KIMI_API_KEY": "k",
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
    }
    out = run_cli(["prompt", "show"], env, workspace)
    assert out.returncode == 2 and "Traceback" not in out.stderr and "scope" in out.stderr
