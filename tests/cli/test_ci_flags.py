"""The CI flags of `kimicode -p`: --max-budget-usd (status budget, exit 4), system prompts, no persistence,
--trust-workspace and --mcp-config (servers started in an untrusted checkout because the user named them)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import MCP_DEMO, run_app

from kimicode.testing import FakeServer, RecordedRequest, Reply, ToolCall

DEMO = str(MCP_DEMO)


def spender(req: RecordedRequest) -> Reply:
    return Reply(
        tool_calls=[ToolCall("read_file", {"path": "a.txt"})],
        usage={"prompt_tokens": 1000, "completion_tokens": 10, "total_tokens": 1010},
    )


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeServer]:
    with FakeServer() as fake:
        monkeypatch.setenv("KIMI_API_KEY", "sk-test")
        monkeypatch.setenv("KIMI_BASE_URL", fake.base_url)
        monkeypatch.chdir(tmp_path)
        (tmp_path / "a.txt").write_text("x")
        yield fake


def priced(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text('[models."kimi-k3"]\nprices = { input = 1000.0, output = 1000.0 }\n')


def test_budget_stops_the_run_with_its_own_status_and_exit_code(
    server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    priced(tmp_path)
    server.add(*[spender] * 10)
    code, out, _ = run_app(["-p", "loop", "--output-format", "json", "--max-budget-usd", "2.5"], capsys)
    result = json.loads(out)
    assert code == 4 and result["status"] == "budget"
    assert result["cost_usd"] > 2.5 and "--max-budget-usd 2.5" in result["error"]
    assert len(server.requests) == 3  # $1.01 a step: stopped right after the third


def test_budget_without_a_price_refuses_to_start(server: FakeServer, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_app(["-p", "x", "--max-budget-usd", "1"], capsys)
    assert code == 2 and "needs the model's price" in err and "prices =" in err
    assert server.requests == []


@pytest.mark.prepush
def test_system_prompt_flags_and_no_persistence(
    server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server.add(Reply(content="a"), Reply(content="b"))
    code, _, _ = run_app(["-p", "x", "--append-system-prompt", "ALWAYS ANSWER IN HAIKU"], capsys)
    system = server.requests[0].body["messages"][0]["content"]
    assert code == 0 and system.endswith("ALWAYS ANSWER IN HAIKU") and len(system) > 200
    sessions = tmp_path / "home" / "sessions"
    before = len(list(sessions.glob("*.jsonl"))) if sessions.exists() else 0
    assert before == 1
    (tmp_path / "sp.md").write_text("You are a reviewer.")
    code, _, _ = run_app(["-p", "x", "--system-prompt-file", "sp.md", "--no-session-persistence"], capsys)
    assert code == 0 and server.requests[1].body["messages"][0]["content"].startswith("You are a reviewer.")
    assert len(list(sessions.glob("*.jsonl"))) == before  # nothing written
    for bad, why in (("missing.md", "no such file"), ("empty.md", "is empty")):
        (tmp_path / "empty.md").write_text("  \n")
        code, _, err = run_app(["-p", "x", "--system-prompt-file", bad], capsys)
        assert code == 2 and why in err
    code, _, err = run_app(["--max-budget-usd", "1"], capsys)
    assert code == 2 and "apply to headless runs" in err


@pytest.mark.prepush
def test_trust_workspace_lets_the_checkout_config_apply(
    server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / ".kimicode").mkdir()
    (tmp_path / ".kimicode" / "config.toml").write_text('[defaults]\npermission_mode = "accept-edits"\n')
    server.add(Reply(content="a"), Reply(content="b"))
    code, _, err = run_app(["-p", "x"], capsys)
    assert code == 0 and "not trusted" in err
    code, _, err = run_app(["-p", "x", "--trust-workspace"], capsys)
    assert code == 0 and "not trusted" not in err


@pytest.mark.prepush
def test_mcp_config_servers_start_in_an_untrusted_checkout(
    server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "ci-mcp.json"
    cfg.write_text(json.dumps({"mcpServers": {"demo": {"command": sys.executable, "args": [DEMO]}}}))
    server.add(Reply(content="done"))
    code, out, err = run_app(["-p", "x", "--mcp-config", str(cfg), "--output-format", "stream-json"], capsys)
    init = json.loads(out.splitlines()[0])
    assert code == 0 and any(t.startswith("mcp__demo__") for t in init["tools"]), (init, err)
    tools = {t["function"]["name"] for t in server.requests[0].body["tools"]}
    assert any(t.startswith("mcp__demo__") for t in tools)
    for text, why in (
        ("{", "invalid JSON"),
        ('{"servers": {}}', "mcpServers"),
        ('{"mcpServers": {"a": 1}}', "must be an object"),
    ):
        cfg.write_text(text)
        code, _, err = run_app(["-p", "x", "--mcp-config", str(cfg)], capsys)
        assert code == 2 and why in err and "--mcp-config" in err
    code, _, err = run_app(["-p", "x", "--mcp-config", "nope.json"], capsys)
    assert code == 2 and "no such file" in err
