"""First run in a terminal without an API key: explain the options, ask for the key (hidden input) and store
it in the user's `KIMICODE_HOME/config.toml` (`[auth] api_key`, file mode 0600).

The key is never echoed, printed, logged or written anywhere else; error messages never contain it. The
config file is rewritten atomically (a private temporary file renamed over it), keeping everything that
was in it; a file kimicode cannot safely extend (invalid TOML, an `[auth]` table already there, a symbolic
link into a dotfiles repository) is left untouched with a message saying what to do instead.
"""

from __future__ import annotations

import getpass
from collections.abc import Callable
from pathlib import Path
from typing import IO

from kimicode.config.endpoint import ConfigError
from kimicode.config.keystore import check_key, store_key

KEY_HELP_URL = "https://platform.kimi.ai/console/api-keys"

Verify = Callable[[str], tuple[bool, str]]
"""Asks the endpoint about a pasted key: (accepted, what to tell the user)."""


def first_run(
    home: Path,
    *,
    out: IO[str],
    ask: Callable[[str], str] = getpass.getpass,
    attempts: int = 3,
    verify: Verify | None = None,
) -> bool:
    """Explain how to give kimicode a key and offer to store one; True when a key was stored.

    `ask` reads a line without echoing it (getpass); Enter, Ctrl-D or Ctrl-C skip.
    """
    config = home / "config.toml"
    out.write(
        "kimicode needs an API key. Three ways to give it one:\n"
        f"  1. paste it below: it is stored in {config} (readable only by you, mode 0600)\n"
        "  2. set KIMI_API_KEY (or MOONSHOT_API_KEY) in your shell profile; it wins over the stored key\n"
        "  3. for another OpenAI-compatible server, set OPENAI_API_KEY and OPENAI_BASE_URL\n"
        "     (a local server without keys: OPENAI_API_KEY=none OPENAI_BASE_URL=http://localhost:8000/v1)\n"
        f"Moonshot keys: {KEY_HELP_URL}. `kimicode login` replaces it later.\n"
    )
    out.flush()
    return ask_and_store(home, out=out, ask=ask, attempts=attempts, verify=verify)


def ask_and_store(
    home: Path,
    *,
    out: IO[str],
    ask: Callable[[str], str] = getpass.getpass,
    attempts: int = 3,
    verify: Verify | None = None,
    replace: bool = False,
) -> bool:
    """Ask for a key (hidden), check it looks like one and that the endpoint accepts it (`verify`, as
    `kimicode doctor` does), ask again when not; store it. True when a key was stored."""
    for _ in range(attempts):
        try:
            key = ask("API key (input hidden, Enter to skip): ").strip()
        except (EOFError, KeyboardInterrupt):
            out.write("\n")
            key = ""
        if not key:
            out.write("No key stored. Set KIMI_API_KEY, or run `kimicode login` to paste one.\n")
            return False
        problem = check_key(key)
        if problem:
            out.write(f"That does not look like an API key: {problem}. Try again.\n")
            continue
        if verify is not None:
            accepted, said = verify(key)
            if not accepted:
                out.write(f"{said} Try again.\n")
                continue
            if said:
                out.write(said + "\n")
        try:
            path = store_key(home, key, replace=replace)
        except (ConfigError, OSError) as exc:
            out.write(f"kimicode: {exc}\n")
            return False
        out.write(f"Key stored in {path} (mode 0600).\n")
        return True
    out.write("No key stored.\n")
    return False


def ensure_key(
    workspace: Path,
    home: Path,
    *,
    model: str | None,
    base_url: str | None,
    out: IO[str],
    ask: Callable[[str], str] = getpass.getpass,
) -> bool:
    """Before the interactive session: False when there is no API key and none was stored now.

    Any other configuration problem returns True: the session reports it in its usual way.
    """
    from kimicode.config.endpoint import MissingKeyError
    from kimicode.config.settings import load_settings, resolve_model

    try:
        resolve_model(load_settings(workspace.expanduser().resolve(), home), model=model, base_url=base_url)
    except MissingKeyError:
        from kimicode.ui.login import key_verifier

        return first_run(home, out=out, ask=ask, verify=key_verifier(workspace, home, model, base_url))
    except (ConfigError, ValueError, OSError):
        return True
    return True
