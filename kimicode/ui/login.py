"""Checking a pasted API key with the endpoint at once (as `kimicode doctor` does), and `/login`: paste a new
key in the middle of a session (after a 401, say), checked, stored in `KIMICODE_HOME/config.toml` (mode
0600, see config/keystore.py) and used from the next request on, without a restart.

The key is read hidden and never shown, logged or written anywhere but the config file.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from kimicode.config.endpoint import KEY_VARIABLES, ConfigError
from kimicode.config.keystore import check_key, store_key
from kimicode.ui.console import endpoint_host

if TYPE_CHECKING:
    from kimicode.ui.app import Session

CHECK_TIMEOUT = 10.0
"""Seconds to wait for the endpoint's `GET /models` when checking a key."""


def check_with_server(base_url: str, key: str, timeout: float = CHECK_TIMEOUT) -> tuple[bool, str]:
    """Ask the endpoint (`GET /models` with the key) whether it takes `key`: (accepted, what to say).
    Only a 401 or 403 refuses it; an endpoint that cannot be reached or lists no models leaves it unchecked."""
    from kimicode.llm.discovery import fetch_models

    host = endpoint_host(base_url) or base_url
    status, _, error = fetch_models(base_url, key, timeout)
    if status in (401, 403):
        return False, f"{host} refused that key (HTTP {status})."
    if status is None:
        return True, f"Could not reach {host} to check the key ({error}); `kimicode doctor` checks it later."
    if status >= 400:
        return True, f"{host} could not check the key (GET /models: HTTP {status})."
    return True, f"{host} accepted the key."


def key_verifier(
    workspace: Path, home: Path, model: str | None, base_url: str | None
) -> Callable[[str], tuple[bool, str]]:
    """A check of a pasted key against the endpoint the session would use (first run, `kimicode login`)."""

    def verify(key: str) -> tuple[bool, str]:
        from kimicode.config.settings import load_settings, resolve_model

        try:
            endpoint, _ = resolve_model(
                load_settings(workspace.expanduser().resolve(), home), model=model, base_url=base_url, api_key=key
            )
        except (ConfigError, ValueError, OSError) as exc:
            return True, f"The key was not checked: {exc}"
        return check_with_server(endpoint.base_url, key)

    return verify


def env_key_note() -> str | None:
    """Why a stored key will not be used at the next start: a key variable is set (it wins)."""
    names = [name for name in KEY_VARIABLES if os.environ.get(name)]
    if not names:
        return None
    return (
        f"{names[0]} is set in your environment and wins over the stored key when kimicode starts: "
        f"unset it (or put the new key there)."
    )


async def read_secret(question: str) -> str:
    """One line read without echo (prompt_toolkit's password input); Ctrl-C / Ctrl-D give ""."""
    from prompt_toolkit import PromptSession

    try:
        answer: str = await PromptSession[str]().prompt_async(question, is_password=True)
    except (EOFError, KeyboardInterrupt):
        return ""
    return answer


async def cmd_login(session: Session, arg: str) -> None:
    """/login: paste an API key (hidden), checked with the endpoint, stored and used from now on."""
    if arg.strip():
        session.say("/login takes no argument: the key is asked for hidden, never typed on the command line.", "yellow")
        return
    agent = session.agent
    for _ in range(3):
        key = (await read_secret("API key (input hidden, Enter to cancel): ")).strip()
        if not key:
            session.say("No key stored.", "dim")
            return
        problem = check_key(key)
        if problem:
            session.say(f"That does not look like an API key: {problem}. Try again.", "yellow")
            continue
        accepted, said = await asyncio.to_thread(check_with_server, agent.endpoint.base_url, key)
        if not accepted:
            session.say(f"{said} Try again.", "yellow")
            continue
        try:
            path = await asyncio.to_thread(store_key, session.home, key, replace=True)
        except (ConfigError, OSError) as exc:
            session.say(f"{said} Not stored: {exc}. Using it for this session only.", "yellow")
        else:
            session.say(f"{said} Stored in {path} (mode 0600); used from the next request on.", "green")
        agent.set_api_key(key)
        if note := env_key_note():
            session.say(note, "yellow")
        return
    session.say("No key stored.", "dim")
