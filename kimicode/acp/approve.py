"""Approvals over ACP: the permission engine's questions as `session/request_permission`.

The engine decides first (rules, mode); only what it would ask the terminal user about reaches the
editor. The options are the engine's answers: allow once, allow always (the very rule the terminal's
"don't ask again" writes, `kimicode.permissions.remember`: `bash(CMD)` for the exact command, `edit(PATH)`
for the file), and reject. A call with no such rule (an MCP tool, web_fetch) is remembered for this
exact call in the session, as the terminal does. A cancelled question refuses the call.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from acp import text_block, tool_content
from acp.schema import AllowedOutcome, PermissionOption, RequestPermissionResponse, ToolCallUpdate

from kimicode.acp.updates import acp_kind, diff_contents, tool_locations, tool_title
from kimicode.agent.results import Approval, ApprovalRequest
from kimicode.permissions.policy import Rule
from kimicode.permissions.remember import remembered_rule

Ask = Callable[[ToolCallUpdate, list[PermissionOption]], Awaitable[RequestPermissionResponse]]

ONCE, ALWAYS, REJECT = "allow_once", "allow_always", "reject_once"


def rule_for(request: ApprovalRequest) -> Rule | None:
    """The rule "always" would add for `request` (None: the call itself is remembered instead)."""
    command = request.arguments.get("command")
    if request.kind == "execute" and isinstance(command, str):
        return remembered_rule("command", command=command, path=None)
    if request.path is not None:
        return remembered_rule("file", command=None, path=request.path)
    return None


def options_for(request: ApprovalRequest, rule: Rule | None) -> list[PermissionOption]:
    """allow once, allow always (naming the rule), reject."""
    always = (
        f"Always allow `{rule.raw}` this session" if rule is not None else "Always allow this exact call this session"
    )
    return [
        PermissionOption(option_id=ONCE, name="Allow once", kind="allow_once"),
        PermissionOption(option_id=ALWAYS, name=always, kind="allow_always"),
        PermissionOption(option_id=REJECT, name="Reject", kind="reject_once"),
    ]


def question(request: ApprovalRequest, workspace: Path) -> ToolCallUpdate:
    """The tool call the question is about, with what it would do: the diff of an edit (computed by the
    tool itself), or the command."""
    content: list[Any] = []
    if request.preview:
        content.extend(diff_contents(request.preview, request.path or ""))
    elif request.preview_error:
        content.append(tool_content(text_block(f"as it stands, the call would fail: {request.preview_error}")))
    elif request.kind == "execute" and isinstance(request.arguments.get("command"), str):
        content.append(tool_content(text_block(str(request.arguments["command"]))))
    if request.reason:
        content.append(tool_content(text_block(f"kimicode asks because {request.reason}")))
    return ToolCallUpdate(
        tool_call_id=request.call_id,
        title=tool_title(request.tool, request.arguments),
        kind=acp_kind(request.tool, request.kind),
        status="pending",
        content=content or None,
        locations=tool_locations(request.arguments, workspace) or None,
        raw_input=dict(request.arguments),
    )


class Approver:
    """The agent's `approve` callback for one ACP session."""

    def __init__(self, ask: Ask, workspace: Path) -> None:
        self.ask = ask
        self.workspace = workspace
        self.calls: set[str] = set()
        """Exact calls allowed for the session (tools whose approvals have no engine rule)."""

    async def __call__(self, request: ApprovalRequest) -> Approval:
        key = request.tool + "\x00" + json.dumps(dict(request.arguments), sort_keys=True, ensure_ascii=False)
        if key in self.calls:
            return Approval(True)
        rule = rule_for(request)
        answer = await self.ask(question(request, self.workspace), options_for(request, rule))
        outcome = answer.outcome
        if not isinstance(outcome, AllowedOutcome):
            return Approval(False, "the user cancelled the question")
        if outcome.option_id == ONCE:
            return Approval(True)
        if outcome.option_id == ALWAYS:
            if rule is None:
                self.calls.add(key)
            return Approval(True, remember=rule)
        return Approval(False, "")
