"""A repository's `.kimicode/config.toml` may only make kimicode stricter; it names no files unless
trusted; and nothing a repository plants (FIFO, device) hangs start-up or a tool."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kimicode.config.settings import load_settings
from kimicode.context.tokens import TokenizerError, load_bpe_file
from kimicode.safeio import NotRegularFileError, read_regular
from kimicode.testing import FakeServer, Reply, ToolCall

MakeAgent = Callable[..., Any]


def project(workspace: Path, text: str) -> None:
    (workspace / ".kimicode").mkdir(exist_ok=True)
    (workspace / ".kimicode" / "config.toml").write_text(text)


def user(home: Path, text: str) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(text)


def trust(home: Path, workspace: Path, extra: str = "") -> None:
    user(home, f"[trust]\nworkspaces = [{json.dumps(str(workspace))}]\n{extra}")


# -- hostile repositories ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key", "expected"),
    [
        ('[sandbox]\nmode = "off"\n', "sandbox.mode", None),
        ("[sandbox]\nnetwork = true\n", "sandbox.network", None),
        ('[defaults]\npermission_mode = "yolo"\n', "defaults.permission_mode", None),
        ('[defaults]\npermission_mode = "accept-edits"\n', "defaults.permission_mode", None),
        ('[context]\ntokenizer = "/dev/zero"\n', "context.tokenizer", None),
        # stricter confinement, but every command would then run without asking in default mode
        ('[sandbox]\nmode = "workspace-write"\n', "sandbox.mode", None),
    ],
)
def test_an_untrusted_project_cannot_loosen(
    workspace: Path, tmp_path: Path, text: str, key: str, expected: Any
) -> None:
    project(workspace, text)
    settings = load_settings(workspace, tmp_path / "home")
    assert settings.get(key) == expected
    (message,) = settings.ignored
    assert key in message and "ignored" in message and "not trusted" in message


@pytest.mark.parametrize(
    ("text", "key", "value"),
    [
        ("[sandbox]\nnetwork = false\n", "sandbox.network", False),
        ('[defaults]\npermission_mode = "plan"\n', "defaults.permission_mode", "plan"),
    ],
)
def test_an_untrusted_project_may_tighten(workspace: Path, tmp_path: Path, text: str, key: str, value: Any) -> None:
    project(workspace, text)
    settings = load_settings(workspace, tmp_path / "home")
    assert settings.get(key) == value and settings.ignored == []


def test_off_to_auto_is_tightening_and_workspace_write_needs_the_users_own(workspace: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    user(home, '[sandbox]\nmode = "workspace-write"\n')
    project(workspace, '[sandbox]\nmode = "workspace-write"\n')
    settings = load_settings(workspace, home)
    assert settings.get("sandbox.mode") == "workspace-write" and settings.ignored == []
    project(workspace, '[sandbox]\nmode = "auto"\n')  # auto leaves approved commands unconfined: looser
    settings = load_settings(workspace, home)
    assert settings.get("sandbox.mode") == "workspace-write" and "sandbox.mode = 'auto' ignored" in settings.ignored[0]


def test_looser_is_measured_against_the_users_own_settings(workspace: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    user(home, '[defaults]\npermission_mode = "yolo"\n[sandbox]\nmode = "off"\n')
    project(workspace, '[defaults]\npermission_mode = "accept-edits"\n[sandbox]\nmode = "auto"\n')
    settings = load_settings(workspace, home)
    assert settings.get("defaults.permission_mode") == "accept-edits"  # stricter than the user's yolo
    assert settings.get("sandbox.mode") == "auto" and settings.ignored == []


def test_a_trusted_project_applies_but_loosening_is_said(workspace: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    trust(home, workspace)
    project(workspace, '[sandbox]\nmode = "off"\n')
    settings = load_settings(workspace, home)
    assert settings.get("sandbox.mode") == "off"
    (message,) = settings.ignored
    assert "sandbox.mode = 'off' applies" in message and "trusted" in message


def test_the_agent_keeps_the_sandbox_a_repository_turns_off(
    server: FakeServer, make_agent: MakeAgent, workspace: Path
) -> None:
    project(workspace, '[sandbox]\nmode = "off"\nnetwork = true\n')
    agent = make_agent(permission_mode="yolo")
    from kimicode.tools.sandbox import probe

    if probe().available:
        assert agent.sandbox is not None and agent.sandbox.auto and not agent.sandbox.network
    server.add(Reply(content="ok"))
    events: list[Any] = []
    agent.on_event = events.append
    agent.run_sync("x")
    texts = [getattr(e, "text", "") for e in events]
    assert any("sandbox.mode = 'off' ignored" in t for t in texts)
    assert any("sandbox.network = true ignored" in t for t in texts)


def test_a_tokenizer_fifo_in_the_users_config_fails_at_once(make_agent: MakeAgent, tmp_path: Path) -> None:
    """Even the user's own (trusted) path: a FIFO is refused without waiting for a writer."""
    fifo = tmp_path / "tok.fifo"
    os.mkfifo(fifo)
    with pytest.raises(TokenizerError, match="FIFO"):
        _in_thread(lambda: load_bpe_file(fifo))
    with pytest.raises(TokenizerError, match="character device"):
        _in_thread(lambda: load_bpe_file("/dev/zero"))


def test_a_project_tokenizer_device_never_hangs_start_up(
    server: FakeServer, make_agent: MakeAgent, workspace: Path
) -> None:
    project(workspace, '[context]\ntokenizer = "/dev/zero"\n')
    agent = _in_thread(lambda: make_agent())
    assert any("context.tokenizer ignored" in text for text in agent.parts.warnings)  # the first turn's Notices


# -- reads that never block -------------------------------------------------------------------------------


def test_a_config_file_that_is_a_fifo_or_device_is_refused_at_once(tmp_path: Path) -> None:
    from kimicode.config.settings import ConfigError, parse_file

    fifo = tmp_path / "config.toml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="FIFO"):
        _in_thread(lambda: parse_file(fifo))
    with pytest.raises(ConfigError, match="character device"):
        _in_thread(lambda: parse_file(Path("/dev/zero")))


def test_a_project_config_linked_to_a_device_is_skipped(workspace: Path, tmp_path: Path) -> None:
    (workspace / ".kimicode").mkdir()
    (workspace / ".kimicode" / "config.toml").symlink_to("/dev/zero")
    settings = _in_thread(lambda: load_settings(workspace, tmp_path / "home"))
    assert settings.data == {}


def test_read_regular_refuses_fifos_devices_sockets_and_directories(tmp_path: Path) -> None:
    import socket

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    sock_path = tmp_path / "sock"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    try:
        for path, kind in ((fifo, "FIFO"), (Path("/dev/zero"), "character device"), (tmp_path, "directory")):
            with pytest.raises(NotRegularFileError, match=kind):
                _in_thread(lambda p=path: read_regular(p))
        with pytest.raises(OSError):  # a socket cannot even be opened; either way, no hang
            _in_thread(lambda: read_regular(sock_path))
    finally:
        sock.close()
    (tmp_path / "f").write_bytes(b"abc")
    assert read_regular(tmp_path / "f") == b"abc" and read_regular(tmp_path / "f", 2) == b"ab"


def test_read_tools_refuse_a_fifo_without_blocking(server: FakeServer, make_agent: MakeAgent, workspace: Path) -> None:
    os.mkfifo(workspace / "pipe")
    os.mkfifo(workspace / ".npmrc")  # the sensitive-file check reads it too
    (workspace / "a.txt").write_text("needle\n")
    server.add(
        Reply(
            tool_calls=[
                ToolCall("read_file", {"path": "pipe"}),
                ToolCall("read_file", {"path": ".npmrc"}),
                ToolCall("glob", {"pattern": "*.txt"}),
            ]
        ),
        Reply(content="ok"),
    )
    agent = make_agent(permission_mode="yolo")
    result = _in_thread(lambda: agent.run_sync("x"))
    assert result.status == "success"
    pipe, npmrc, glob = [m["content"] for m in server.requests[-1].body["messages"] if m["role"] == "tool"]
    assert "not a regular file" in pipe and "not a regular file" in npmrc
    assert "a.txt" in glob


def _in_thread(fn: Callable[[], Any], timeout: float = 20.0) -> Any:
    """Run `fn`, failing (instead of hanging the suite) if it blocks."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # re-raised in the caller
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "blocked on a special file"
    if "error" in box:
        raise box["error"]
    return box.get("value")
