"""A headless run reads each configuration file once (issue 24: "read once per run").

The count is taken in the real `kimicode -p` process: a `sitecustomize` module on its PYTHONPATH wraps
`tomllib.loads` and writes, at exit, how many times a text carrying each file's marker comment was
parsed. Before the fix the CLI read both files twice and the permission rules read them a third time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kimicode.testing import FakeServer
from kimicode.testing.replies import Reply

COUNTER = """
import atexit, json, os, tomllib
_loads = tomllib.loads
_seen = {"user": 0, "project": 0}
def loads(text, **kw):
    for name in _seen:
        if f"# marker:{name}" in text:
            _seen[name] += 1
    return _loads(text, **kw)
tomllib.loads = loads
atexit.register(lambda: open(os.environ["COUNT_FILE"], "w").write(json.dumps(_seen)))
"""


def run(
    tmp_path: Path, server: FakeServer, *args: str, extra: str = ""
) -> tuple[subprocess.CompletedProcess[str], dict[str, int]]:
    hooks = tmp_path / "hooks"
    hooks.mkdir(exist_ok=True)
    (hooks / "sitecustomize.py").write_text(COUNTER)
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text(
        '# marker:user\n[context]\nmax_tokens = 1000\n[permissions]\ndeny = ["bash(rm *)"]\n' + extra
    )
    ws = tmp_path / "ws"
    (ws / ".kimicode").mkdir(parents=True, exist_ok=True)
    (ws / ".kimicode" / "config.toml").write_text(
        '# marker:project\n[agent]\nscope = "normal"\n[permissions]\nask = ["bash(curl *)"]\n' + extra
    )
    count = tmp_path / "count.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI", "OPENAI", "MOONSHOT"))}
    env.update(
        KIMICODE_HOME=str(home),
        OPENAI_BASE_URL=server.base_url,
        OPENAI_API_KEY="sk-test",
        KIMICODE_MODEL="m",
        COUNT_FILE=str(count),
        PYTHONPATH=os.pathsep.join([str(hooks), *filter(None, [env.get("PYTHONPATH")])]),
    )
    proc = subprocess.run(
        [sys.executable, "-m", "kimicode", "-p", "hi", *args],
        cwd=ws,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc, json.loads(count.read_text())


@pytest.mark.prepush
@pytest.mark.parametrize("args", [(), ("--trust-workspace",), ("--mcp-config", "MCP"), ("--trust-workspace", "HOOKS")])
def test_a_headless_run_parses_each_config_file_once(tmp_path: Path, args: tuple[str, ...]) -> None:
    """With hooks in both files too: the hooks come from the one reading (they were read again)."""
    if "MCP" in args:
        mcp = tmp_path / "mcp.json"
        mcp.write_text(json.dumps({"mcpServers": {}}))
        args = ("--mcp-config", str(mcp))
    extra = '[[hooks]]\nevent = "Stop"\ncommand = "true"\n' if "HOOKS" in args else ""
    with FakeServer(script=[Reply(content="hello")]) as server:
        proc, seen = run(tmp_path, server, *(a for a in args if a != "HOOKS"), extra=extra)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "hello"
    assert seen == {"user": 1, "project": 1}


def test_rules_from_both_files_still_apply_when_read_once(tmp_path: Path) -> None:
    """The permission rules come from the one reading: the user's deny and the project's ask both hold."""
    from kimicode.agent.options import AgentOptions
    from kimicode.config.settings import Settings
    from kimicode.permissions.sources import session_rules

    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text('[permissions]\ndeny = ["bash(rm *)"]\n')
    ws = tmp_path / "ws"
    (ws / ".kimicode").mkdir(parents=True)
    project = ws / ".kimicode" / "config.toml"
    project.write_text('[permissions]\nask = ["bash(curl *)"]\nallow = ["bash(make *)"]\n')
    settings = AgentOptions.from_workspace(ws, home=home).config
    assert isinstance(settings, Settings)
    assert set(settings.parsed) == {home / "config.toml", project}
    ignored: list[str] = []
    rules = session_rules(settings, project_file=project, ignored=ignored)
    assert [r.raw for r in rules.deny] == ["bash(rm *)"]
    assert [r.raw for r in rules.ask] == ["bash(curl *)"]
    assert rules.allow == ()  # an untrusted project cannot allow
    assert any("permissions.allow ignored" in text for text in ignored)
