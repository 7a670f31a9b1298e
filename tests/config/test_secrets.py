"""Secrets: the process is non-dumpable (children cannot read its environment) and every secret kimicode
knows is masked in tool results, the session log, stream-json and the next request to the model."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import command_env, kimicode_command
from hypothesis import given, settings
from hypothesis import strategies as st

from kimicode.config.redact import MASK, Masker, StreamMasker, known_secrets
from kimicode.config.settings import Settings
from kimicode.procs import harden_process, is_dumpable
from kimicode.testing import ErrorReply, FakeServer, Reply, ToolCall

MakeAgent = Callable[..., Any]
KEY = "sk-test-secret-key"  # the make_agent fixture's key

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl and /proc are Linux-only")


# -- hostile cases first ---------------------------------------------------------------------------------


def test_a_command_printing_the_key_from_a_planted_file_reaches_neither_log_nor_model(
    server: FakeServer, make_agent: MakeAgent, workspace: Path, tmp_path: Path
) -> None:
    (workspace / "notes.txt").write_text(f"key={KEY}\n")
    cmd = "cat notes.txt; printf 'sk-test-'; sleep 0.05; printf 'secret-key\\n'; echo done"
    server.add(
        Reply(tool_calls=[ToolCall("bash", {"command": cmd}), ToolCall("read_file", {"path": "notes.txt"})]),
        Reply(content="ok"),
    )
    agent = make_agent(permission_mode="yolo", sandbox="off")
    result = agent.run_sync("show me")
    tool_texts = [m["content"] for m in server.requests[-1].body["messages"] if m["role"] == "tool"]
    assert all(KEY not in t for t in tool_texts)
    assert f"key={MASK}" in tool_texts[0] and f"{MASK}\ndone" in tool_texts[0]
    assert f"key={MASK}" in tool_texts[1]
    assert KEY not in json.dumps(result.messages)
    log_path = tmp_path / "home" / "sessions" / f"{agent.session_id}.jsonl"
    log = log_path.read_text()
    assert KEY not in log and MASK in log
    from kimicode.session.export import to_json, to_markdown
    from kimicode.session.log import load

    loaded = load(log_path)
    assert KEY not in to_markdown(loaded) and KEY not in json.dumps(to_json(loaded))


def test_other_known_secrets_are_masked_too(
    server: FakeServer, make_agent: MakeAgent, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_abcdefghijklmnop")
    monkeypatch.setenv("DB_PASSWORD", "hunter2-hunter2")
    monkeypatch.setenv("MCP_AUTH", "mcp-header-value-123")
    home = tmp_path / "home"
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        '[mcp_servers.x]\nurl = "http://127.0.0.1:1/mcp"\nenabled = false\n'
        '[mcp_servers.x.headers]\nAuthorization = "Bearer ${MCP_AUTH}"\n'
    )
    (workspace / "leak.txt").write_text("ghp_abcdefghijklmnop hunter2-hunter2 mcp-header-value-123 short=abc\n")
    server.add(Reply(tool_calls=[ToolCall("read_file", {"path": "leak.txt"})]), Reply(content="ok"))
    make_agent().run_sync("x")
    (text,) = [m["content"] for m in server.requests[-1].body["messages"] if m["role"] == "tool"]
    for secret in ("ghp_abcdefghijklmnop", "hunter2-hunter2", "mcp-header-value-123"):
        assert secret not in text
    assert "short=abc" in text  # short values are not secrets worth blotting out text for


def test_a_server_error_quoting_the_key_is_masked(server: FakeServer, make_agent: MakeAgent) -> None:
    server.add(ErrorReply(401, f"Incorrect API key provided: {KEY}"))
    result = make_agent(max_retries=0).run_sync("x")
    assert result.status == "error" and result.error and KEY not in result.error


_PROBE = (
    "import subprocess, sys\n"
    "if sys.argv[1] == 'harden':\n"
    "    from kimicode.procs import harden_process\n"
    "    assert harden_process()['dumpable_off']\n"
    "r = subprocess.run(['/bin/sh', '-c', 'cat /proc/$PPID/environ'], capture_output=True)\n"
    "print('LEAK' if b'sk-very-secret-parent-key' in r.stdout else 'SAFE')\n"
)


def _probe(harden: bool) -> str:
    """Run a parent that holds the key and a child that reads /proc/<ppid>/environ, both as one ordinary
    user (root could read any process's environment whatever the dumpable flag: CAP_SYS_PTRACE)."""
    argv = [sys.executable, "-c", _PROBE, "harden" if harden else "plain"]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: cannot test as an ordinary user")
        argv = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", *argv]
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=30,
        cwd="/",
        env={**os.environ, "KIMI_API_KEY": "sk-very-secret-parent-key"},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@linux
def test_a_child_cannot_read_the_parent_environment() -> None:
    """Non-dumpable: /proc/<ppid>/environ is closed to the commands the agent runs (and without it, it is
    open: the control shows the test can fail)."""
    assert _probe(harden=False) == "LEAK"
    assert _probe(harden=True) == "SAFE"


@linux
def test_the_library_agent_hardens_its_process(make_agent: MakeAgent) -> None:
    make_agent()
    assert is_dumpable() is False
    assert harden_process()["dumpable_off"]


@pytest.mark.slow
@linux
def test_headless_stream_json_and_log_never_show_the_key(server: FakeServer, workspace: Path, tmp_path: Path) -> None:
    key = "sk-cli-secret-0123456789"
    (workspace / "k").write_text(key)
    server.add(
        Reply(tool_calls=[ToolCall("bash", {"command": "cat k; cat /proc/$PPID/environ | tr '\\0' '\\n'"})]),
        Reply(content="done"),
    )
    env = command_env(tmp_path / "home", server, key=key)
    done = subprocess.run(
        [*kimicode_command(), "-p", "x", "--output-format", "stream-json", "--yolo", "--sandbox", "off"],
        env=env,
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    assert key not in done.stdout and key not in done.stderr and MASK in done.stdout
    (log,) = (tmp_path / "home" / "sessions").glob("*.jsonl")
    assert key not in log.read_text()
    assert key not in json.dumps(server.requests[-1].body)


# -- the masker ------------------------------------------------------------------------------------------


def test_masker_prefers_the_longest_secret_and_ignores_short_values() -> None:
    m = Masker(["abcdefgh", "abcdefgh-longer", "x", ""])
    assert m.mask("abcdefgh-longer and abcdefgh and x") == f"{MASK} and {MASK} and x"
    assert m.mask_data({"k": ["abcdefgh"], "abcdefgh": 1}) == {"k": [MASK], MASK: 1}
    assert not Masker(["short"])


def test_known_secrets_covers_env_names_provider_keys_and_headers() -> None:
    env = {
        "FOO_API_KEY": "value-foo-api",
        "X_TOKEN": "value-x-token",
        "GROQ": "value-groq-key",
        "PLAIN": "value-not-secret",
        "HDR": "header-secret",
    }
    cfg = Settings(
        data={
            "providers": {"g": {"api_key_env": "GROQ", "headers": {"X-Auth": "Bearer ${HDR}"}}},
            "auth": {"api_key": "stored-key-1234"},
        }
    )
    found = known_secrets(env, api_key="sk-in-use-123", settings=cfg)
    assert {
        "value-foo-api",
        "value-x-token",
        "value-groq-key",
        "header-secret",
        "stored-key-1234",
        "sk-in-use-123",
    } <= found
    assert "value-not-secret" not in found


@pytest.mark.prepush
@settings(max_examples=150, deadline=None)
@given(st.text(alphabet="ab-sk\n", max_size=60), st.lists(st.integers(min_value=0, max_value=60), max_size=8))
def test_stream_masker_masks_secrets_split_across_chunks(text: str, cuts: list[int]) -> None:
    secret = "sk-abab-baba"
    full = text[: len(text) // 2] + secret + text[len(text) // 2 :]
    m = Masker([secret])
    sm = StreamMasker(m)
    points = sorted({c for c in cuts if c < len(full)})
    pieces = [full[a:b] for a, b in zip([0, *points], [*points, len(full)], strict=True)]
    out = "".join(sm.feed(p) for p in pieces) + sm.flush()
    assert out == m.mask(full)
    assert secret not in out


def test_a_key_cut_by_the_output_elision_leaks_no_part_of_it(server: FakeServer, make_agent: MakeAgent) -> None:
    """The head/tail buffer keeps the first 20 000 bytes: a key straddling that edge would show in part
    if masking came after the buffer; it is masked as the output is read instead."""
    cmd = f"head -c 19990 /dev/zero | tr '\\0' x; printf '{KEY}'; head -c 100000 /dev/zero | tr '\\0' y"
    server.add(Reply(tool_calls=[ToolCall("bash", {"command": cmd})]), Reply(content="ok"))
    make_agent(permission_mode="yolo", sandbox="off").run_sync("x")
    (text,) = [m["content"] for m in server.requests[-1].body["messages"] if m["role"] == "tool"]
    assert "elided" in text
    assert KEY[:8] not in text


@pytest.mark.prepush
@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=60), st.lists(st.integers(min_value=0, max_value=80), max_size=8))
def test_byte_stream_masker_masks_secrets_split_across_reads(noise: bytes, cuts: list[int]) -> None:
    secret = "sk-ключ-1234"  # not ASCII: masked as its UTF-8 bytes
    full = noise[: len(noise) // 2] + secret.encode() + noise[len(noise) // 2 :]
    sm = Masker([secret]).byte_stream()
    points = sorted({c for c in cuts if c < len(full)})
    pieces = [full[a:b] for a, b in zip([0, *points], [*points, len(full)], strict=True)]
    out = b"".join(sm.feed(p) for p in pieces) + sm.flush()
    assert secret.encode() not in out and MASK.encode() in out
    assert out == full.replace(secret.encode(), MASK.encode()) or secret.encode() in noise
