"""The running `kimicode serve`'s address, token and process id, as it wrote them to `KIMICODE_HOME/serve.json`.

Read by `kimicode web` and `kimicode attach` (to reach the server) and by `kimicode -r ID` / `-c` (to say that
a session it cannot open is held by that server, and how to follow it there). Plain file reading: no HTTP.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def state_path(home: Path) -> Path:
    return home / "serve.json"


def read_state(home: Path) -> dict[str, Any] | None:
    """The running server's URL and token as `serve` wrote them, or None."""
    try:
        data = json.loads(state_path(home).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and {"url", "token"} <= data.keys() else None


def held_by_serve(home: Path, holder: int | None, session_id: str) -> str | None:
    """When the process `holder` that holds `session_id` is the running `kimicode serve`, what to do instead
    of waiting for it: follow the session from this terminal with `kimicode attach` (or open the page)."""
    state = read_state(home)
    if holder is None or state is None or state.get("pid") != holder:
        return None
    return (
        f"session {session_id} is open in `kimicode serve` ({state['url']}, process {holder}), which writes "
        f"it: follow it from this terminal with `kimicode attach {session_id}` (or in the page: `kimicode web`), "
        "or continue a copy here with --fork"
    )


def explain_refusal(exc: BaseException, home: Path) -> str:
    """The message of an error opening a session: for one the running server holds (a SessionBusyError
    naming it as `holder`), where to follow it instead; else the error's own message."""
    holder, session_id = getattr(exc, "holder", None), getattr(exc, "session_id", "")
    hint = held_by_serve(home, holder, session_id) if isinstance(holder, int) and session_id else None
    return hint or str(exc)
