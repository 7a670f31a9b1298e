"""What an agent needs of a place to keep its session, as a protocol a caller's own store can implement.

kimicode's own place is a JSONL file per session under `KIMICODE_HOME/sessions` (kimicode.session.log);
a library caller may pass `Agent(session_store=...)`: anything with `append` and `load` below (a dict in
memory, a database table, an object store).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class SessionStore(Protocol):
    """Keeps the records of sessions, in order, and gives them back.

    `append(session_id, record)` is called with every record of a session as it happens: a JSON-ready
    dict (`{"v": 1, "ts": ..., "type": "message", "message": {...}}`, `meta`, `settings`, `usage`,
    `turn_end`, ...) with every secret kimicode knows of already masked; a `message` record holds the
    message exactly as it is sent to the model. It is called on the event loop: keep it quick, and raise
    `OSError` when the record cannot be kept (the turn then ends with an error, the history valid). A new
    session's first records are held back until its first prompt, so a session never prompted leaves
    nothing. `load(session_id)` returns every record appended for that session, oldest first, or an empty
    list when it has none: `Agent.resume(session_id, session_store=store)` replays them into the history.
    """

    def append(self, session_id: str, record: dict[str, Any]) -> None: ...

    def load(self, session_id: str) -> list[dict[str, Any]]: ...
