"""What travels over HTTP: the library's events as JSON objects, and the face's own few events.

Each event is `{"type": NAME, ...fields}` where NAME is the class name in `kimicode.events` (`ContentDelta`,
`ToolCallFinished`, `TurnFinished`, ...) and the fields are the dataclass's, unchanged. The server adds its
own events, named the same way: `PermissionRequested` (a call waits for an answer, with the `request_id`
to answer), `PermissionResolved`, `Queued` (a message waits for the running turn), `Steered`,
`TurnCost` (what a finished turn cost and where the context went), `ExplorationFinished`, `Rewound`,
`Overflow` (this subscriber fell too far behind and its stream ends; reconnect with `after=`),
`StatusChanged` (the session went `running` or `idle`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

SERVER_EVENTS = (
    "PermissionRequested",
    "PermissionResolved",
    "Queued",
    "Steered",
    "TurnCost",
    "ExplorationStarted",
    "ExplorationFinished",
    "Rewound",
    "Overflow",
    "SessionClosed",
    "StatusChanged",
)
"""The event types the server itself emits (the others are `kimicode.events` classes)."""


def plain(value: Any) -> Any:
    """`value` as JSON-ready data: mappings to dicts, sequences to lists, dataclasses to typed objects."""
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return event_dict(value)
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(v) for v in value]
    return str(value)


def event_dict(event: Any) -> dict[str, Any]:
    """One library event (a frozen dataclass of `kimicode.events`) as `{"type": ..., fields...}`."""
    out: dict[str, Any] = {"type": type(event).__name__}
    for f in dataclasses.fields(event):
        out[f.name] = plain(getattr(event, f.name))
    return out


def dumps(data: Any) -> str:
    """Compact JSON, non-ASCII kept (the page shows it as it is)."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))
