"""Issue 23, defect 2: a pasted key is checked with the endpoint at once and asked for again when refused
(first run and `kimicode login`); `/login` replaces a refused key in the middle of a session, no restart;
the 401 says so. The fake server refuses any key but its own, as a real one does."""

from __future__ import annotations

import asyncio
import io
import os
import stat
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
from helpers import kimicode_command
from rich.console import Console

from kimicode.cli.firstrun import first_run
from kimicode.config.keystore import store_key
from kimicode.testing import FakeServer, Reply
from kimicode.ui.login import key_verifier

GOOD = "sk-good-key-0123456789"
BAD = "sk-wrong-key-0123456789"


def test_first_run_checks_the_pasted_key_and_asks_again(server: FakeServer, tmp_path: Path, workspace: Path) -> None:
    server.api_keys = {GOOD}
    home = tmp_path / "home"
    out = io.StringIO()
    replies = iter([BAD, GOOD])
    verify = key_verifier(workspace, home, None, server.base_url)
    assert first_run(home, out=out, ask=lambda _q: next(replies), verify=verify)
    text = out.getvalue()
    assert "refused that key (HTTP 401). Try again." in text and "Key stored in" in text
    assert BAD not in text and GOOD not in text
    assert tomllib.loads((home / "config.toml").read_text())["auth"]["api_key"] == GOOD


def test_a_stored_key_is_replaced_keeping_the_rest_of_the_file(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(
        '[defaults]\nmodel = "kimi-k3"\n\n[auth]\napi_key = "sk-old-0123456789"\n'
        "# a comment\n\n[ui]\nshow_reasoning = true\n"
    )
    store_key(home, GOOD, replace=True)
    data = tomllib.loads((home / "config.toml").read_text())
    assert data == {"defaults": {"model": "kimi-k3"}, "auth": {"api_key": GOOD}, "ui": {"show_reasoning": True}}
    assert "# a comment" in (home / "config.toml").read_text()
    assert stat.S_IMODE((home / "config.toml").stat().st_mode) == 0o600


@pytest.mark.prepush
def test_kimicode_login_from_the_shell(server: FakeServer, tmp_path: Path) -> None:
    server.api_keys = {GOOD}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI_", "MOONSHOT_", "OPENAI_"))}
    env.update(KIMICODE_HOME=str(tmp_path / "home"), KIMI_BASE_URL=server.base_url)
    done = subprocess.run(
        [*kimicode_command(), "login"],
        input=f"{BAD}\n{GOOD}\n",
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        start_new_session=True,
    )  # no terminal: getpass reads stdin
    assert done.returncode == 0, done.stderr
    assert "refused that key" in done.stderr and "Key stored in" in done.stderr and GOOD not in done.stderr
    assert tomllib.loads((tmp_path / "home" / "config.toml").read_text())["auth"]["api_key"] == GOOD


def test_slash_login_replaces_a_refused_key_without_a_restart(
    server: FakeServer, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kimicode.ui import commands, login
    from kimicode.ui.app import Session, SessionOptions

    server.api_keys = {GOOD}
    monkeypatch.setenv("KIMI_API_KEY", BAD)
    monkeypatch.setenv("KIMI_BASE_URL", server.base_url)
    console = Console(file=io.StringIO(), width=120, color_system=None, force_terminal=False)
    session = Session(SessionOptions(workspace=workspace, retry_base_delay=0.01, max_retries=0), console, plain=True)

    def said() -> str:
        value: str = console.file.getvalue()  # type: ignore[attr-defined]
        console.file.seek(0)  # type: ignore[attr-defined]
        console.file.truncate()  # type: ignore[attr-defined]
        return value

    asyncio.run(session.run_turn("hello"))
    assert "/login" in said()
    keys = iter(["sh ort", BAD, GOOD])  # a pasting mistake is refused here; a short key goes to the server

    async def secret(_q: str) -> str:
        return next(keys)

    monkeypatch.setattr(login, "read_secret", secret)
    asyncio.run(commands.dispatch(session, "/login"))
    text = said()
    assert "does not look like an API key" in text and "refused that key" in text and "Stored in" in text
    assert "KIMI_API_KEY is set in your environment" in text and GOOD not in text
    server.add(Reply(content="welcome back"))
    finished: Any = asyncio.run(session.run_turn("hello again"))
    assert finished is not None and finished.status == "success", said()
    assert server.requests[-1].headers["authorization"] == f"Bearer {GOOD}"
    assert tomllib.loads((tmp_path / "home" / "config.toml").read_text())["auth"]["api_key"] == GOOD
    asyncio.run(session.agent.aclose())
