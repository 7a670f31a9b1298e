"""Approvals over HTTP: the permission engine's questions as `PermissionRequested` events, answered by
`POST /sessions/{id}/permissions/{request_id}`.

This is the agent's `approve` callback, so it is asked exactly what the terminal, ACP and a library
caller are asked: the engine decides first (rules, mode) and only what it would ask about reaches a
client. The call waits until a client answers (or the turn is interrupted, which refuses it). The
answers are the terminal's: `allow` (once), `allow_always` (the rule the terminal's "don't ask again"
writes, `kimicode.permissions.remember`: `bash(CMD)` for the exact command, `edit(PATH)` for the file,
added to the session's rules by the engine; a call with no such rule is remembered as this exact call)
and `deny`. An answer never widens anything else: the rule is computed here from the request, never
taken from the client.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from kimicode import Approval, ApprovalRequest
from kimicode.permissions.policy import Rule
from kimicode.permissions.remember import remembered_rule

Decision = Literal["allow", "allow_always", "deny"]
DECISIONS: tuple[Decision, ...] = ("allow", "allow_always", "deny")


def rule_for(request: ApprovalRequest) -> Rule | None:
    """The rule "always" adds for `request` (None: the exact call is remembered instead)."""
    command = request.arguments.get("command")
    if request.kind == "execute" and isinstance(command, str):
        return remembered_rule("command", command=command, path=None)
    if request.path is not None:
        return remembered_rule("file", command=None, path=request.path)
    return None


@dataclass
class Pending:
    """A question waiting for its answer."""

    id: str
    request: ApprovalRequest
    rule: Rule | None
    answer: asyncio.Future[tuple[Decision, str]] = field(repr=False)

    def as_event(self) -> dict[str, Any]:
        r = self.request
        return {
            "type": "PermissionRequested",
            "request_id": self.id,
            "call_id": r.call_id,
            "tool": r.tool,
            "kind": r.kind,
            "arguments": dict(r.arguments),
            "reason": r.reason,
            "path": r.path,
            "preview": r.preview,
            "preview_error": r.preview_error,
            "always_rule": self.rule.raw if self.rule is not None else None,
        }


class HttpApprover:
    """The `approve` callback of one served session; `publish` sends an event to its subscribers."""

    def __init__(self, publish: Callable[[dict[str, Any]], int]) -> None:
        self.publish = publish
        self.pending: dict[str, Pending] = {}
        self.calls: set[str] = set()
        """Exact calls allowed for the session by `allow_always` (tools whose approvals have no rule)."""

    async def __call__(self, request: ApprovalRequest) -> Approval:
        key = (
            request.tool + "\x00" + json.dumps(dict(request.arguments), sort_keys=True, ensure_ascii=False, default=str)
        )
        if key in self.calls:
            return Approval(True)
        rule = rule_for(request)
        pending = Pending(secrets.token_hex(8), request, rule, asyncio.get_running_loop().create_future())
        self.pending[pending.id] = pending
        self.publish(pending.as_event())
        try:
            decision, reason = await pending.answer
        finally:
            self.pending.pop(pending.id, None)
        self.publish(
            {"type": "PermissionResolved", "request_id": pending.id, "call_id": request.call_id, "decision": decision}
        )
        if decision == "allow":
            return Approval(True)
        if decision == "allow_always":
            if rule is None:
                self.calls.add(key)
            return Approval(True, remember=rule)
        return Approval(False, reason)

    def answer(self, request_id: str, decision: Decision, reason: str = "") -> bool:
        """Answer a pending question; False when there is none by that id (answered, or never asked)."""
        pending = self.pending.get(request_id)
        if pending is None or pending.answer.done():
            return False
        pending.answer.set_result((decision, reason))
        return True

    def refuse_all(self, reason: str) -> None:
        """Refuse every pending question (the turn is being interrupted or the session closed)."""
        for pending in list(self.pending.values()):
            if not pending.answer.done():
                pending.answer.set_result(("deny", reason))
