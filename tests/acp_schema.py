"""The ACP JSON Schema, as the SDK ships it (its `acp.schema` models are generated from the protocol's
schema.json; `acp/meta.py` names the schema release), and a checker for a recorded exchange.

Each JSON-RPC message is checked with `jsonschema` (not pydantic) against the schema of its method's
params, or, for a response, of the result of the request it answers.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import jsonschema
from acp import schema as s
from pydantic import BaseModel, TypeAdapter

PARAMS: dict[str, Any] = {
    "initialize": s.InitializeRequest,
    "session/new": s.NewSessionRequest,
    "session/load": s.LoadSessionRequest,
    "session/prompt": s.PromptRequest,
    "session/cancel": s.CancelNotification,
    "session/set_mode": s.SetSessionModeRequest,
    "session/update": s.SessionNotification,
    "session/request_permission": s.RequestPermissionRequest,
    "fs/read_text_file": s.ReadTextFileRequest,
    "fs/write_text_file": s.WriteTextFileRequest,
    "terminal/create": s.CreateTerminalRequest,
    "terminal/output": s.TerminalOutputRequest,
    "terminal/wait_for_exit": s.WaitForTerminalExitRequest,
    "terminal/kill": s.KillTerminalRequest,
    "terminal/release": s.ReleaseTerminalRequest,
}
RESULTS: dict[str, Any] = {
    "initialize": s.InitializeResponse,
    "session/new": s.NewSessionResponse,
    "session/load": s.LoadSessionResponse | None,
    "session/prompt": s.PromptResponse,
    "session/set_mode": s.SetSessionModeResponse | None,
    "session/request_permission": s.RequestPermissionResponse,
    "fs/read_text_file": s.ReadTextFileResponse,
    "fs/write_text_file": s.WriteTextFileResponse | None,
    "terminal/create": s.CreateTerminalResponse,
    "terminal/output": s.TerminalOutputResponse,
    "terminal/wait_for_exit": s.WaitForTerminalExitResponse,
    "terminal/kill": s.KillTerminalResponse | None,
    "terminal/release": s.ReleaseTerminalResponse | None,
}
ERROR = {
    "type": "object",
    "required": ["code", "message"],
    "properties": {"code": {"type": "integer"}, "message": {"type": "string"}},
}


@cache
def validator_of(model: Any) -> Any:
    """A validator for the JSON Schema (wire names: camelCase aliases) of a schema model or union; the
    schema itself is checked once."""
    if isinstance(model, type) and issubclass(model, BaseModel):
        schema = model.model_json_schema(by_alias=True)
    else:
        schema = TypeAdapter(model).json_schema(by_alias=True)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def check(instance: Any, model: Any, where: str) -> None:
    validator = jsonschema.Draft202012Validator(model) if isinstance(model, dict) else validator_of(model)
    error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
    if error is not None:
        raise AssertionError(f"{where}: {error.message} at {list(error.absolute_path)}\n{instance}")


def check_exchange(messages: list[dict[str, Any]]) -> None:
    """Every message of `messages` ({"direction", "message"} as recorded on the client side) is a valid
    JSON-RPC 2.0 message whose params or result match the protocol's schema; every method is known."""
    asked: dict[tuple[str, Any], str] = {}  # (who asked, id) -> method
    for i, record in enumerate(messages):
        msg, direction = record["message"], record["direction"]
        where = f"message {i} ({direction})"
        assert msg.get("jsonrpc") == "2.0", where
        method = msg.get("method")
        if method is not None:
            assert method in PARAMS, f"{where}: a method the schema does not have: {method}"
            check(msg.get("params"), PARAMS[method], f"{where} {method}")
            if "id" in msg:
                asked[(direction, msg["id"])] = method
            continue
        asker = "outgoing" if direction == "incoming" else "incoming"
        method = asked.pop((asker, msg.get("id")), None)
        assert method is not None, f"{where}: a response to no request: {msg}"
        if "error" in msg:
            check(msg["error"], ERROR, f"{where} error of {method}")
        else:
            check(msg.get("result"), RESULTS[method], f"{where} result of {method}")
