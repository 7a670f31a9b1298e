"""Claude protocol mode, part 3: what kimicode asks the SDK's process over the control protocol.

kimicode writes `{"type": "control_request", "request_id": ..., "request": {...}}` and the SDK answers with a
`control_response` naming that id. Three requests: `can_use_tool` (the SDK's permission callback, for a call
kimicode would ask about), `mcp_message` (a JSON-RPC message for an MCP server that lives in the SDK's
process: `create_sdk_mcp_server` tools) and `hook_callback` (a hook function registered at `initialize`).
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from kimicode._version import __version__
from kimicode.agent.results import Approval, ApprovalRequest
from kimicode.tools.base import Tool, ToolContext, ToolError, ToolResult

if TYPE_CHECKING:
    from kimicode.agent.core import Agent

MCP_PROTOCOL = "2025-06-18"


class ControlError(Exception):
    """The SDK answered a control request with an error, or can no longer answer (its stdin closed)."""


class Channel:
    """kimicode's side of the control protocol: requests out, their responses matched back in."""

    def __init__(self, write: Callable[[dict[str, Any]], None]) -> None:
        self.write = write
        self.pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.counter = itertools.count(1)
        self.closed = False

    async def request(self, body: dict[str, Any]) -> dict[str, Any]:
        """Send `body` as a control request; the response's payload (ControlError when it failed)."""
        if self.closed:
            raise ControlError("the SDK's process closed kimicode's input; it cannot answer")
        request_id = f"kimicode_{next(self.counter)}"
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[request_id] = future
        self.write({"type": "control_request", "request_id": request_id, "request": body})
        try:
            return await future
        finally:
            self.pending.pop(request_id, None)

    def answered(self, message: Mapping[str, Any]) -> None:
        """A `control_response` line: resolve the request it answers (an unknown id is ignored)."""
        response = message.get("response")
        if not isinstance(response, dict):
            return
        future = self.pending.get(str(response.get("request_id")))
        if future is None or future.done():
            return
        if response.get("subtype") == "error":
            future.set_exception(ControlError(str(response.get("error") or "the SDK answered with an error")))
        else:
            payload = response.get("response")
            future.set_result(payload if isinstance(payload, dict) else {})

    def close(self) -> None:
        """stdin ended: every open request fails (a permission question refuses its call)."""
        self.closed = True
        for future in self.pending.values():
            if not future.done():
                future.set_exception(ControlError("the SDK's process closed kimicode's input"))


class SdkApprover:
    """The agent's `approve`: a call kimicode would ask about goes to the SDK's `can_use_tool` callback."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.agent: Agent | None = None

    async def __call__(self, request: ApprovalRequest) -> Approval:
        arguments = dict(request.arguments)
        try:
            answer = await self.channel.request(
                {
                    "subtype": "can_use_tool",
                    "tool_name": request.tool,
                    "input": arguments,
                    "permission_suggestions": [],
                    "blocked_path": request.path,
                    "tool_use_id": request.call_id,
                    "decision_reason": request.reason,
                    "title": f"kimicode wants to use {request.tool}",
                }
            )
        except ControlError as exc:
            return Approval(False, f"the permission callback failed: {exc}")
        if answer.get("interrupt") and self.agent is not None:
            asyncio.get_running_loop().call_soon(self.agent.interrupt)
        if answer.get("behavior") != "allow":
            return Approval(False, str(answer.get("message") or ""))
        updated = answer.get("updatedInput")
        if isinstance(updated, dict) and json.dumps(updated, sort_keys=True) != json.dumps(arguments, sort_keys=True):
            return Approval(
                False,
                "the permission callback changed the call's input (updatedInput), which kimicode "
                "does not apply; refuse the call with a message saying what to do instead",
            )
        return Approval(True)


class SdkServer:
    """An MCP server in the SDK's process, reached through `mcp_message` control requests."""

    def __init__(self, channel: Channel, name: str) -> None:
        self.channel = channel
        self.name = name
        self.ids = itertools.count(1)
        self.status = "pending"
        self.error = ""

    async def rpc(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": next(self.ids), "method": method}
        if params is not None:
            message["params"] = params
        answer = await self.channel.request({"subtype": "mcp_message", "server_name": self.name, "message": message})
        reply = answer.get("mcp_response")
        if not isinstance(reply, dict):
            raise ControlError(f"no MCP response from the SDK server {self.name!r}")
        if isinstance(reply.get("error"), dict):
            raise ControlError(str(reply["error"].get("message") or reply["error"]))
        result = reply.get("result")
        return result if isinstance(result, dict) else {}

    async def tools(self) -> list[Tool]:
        """Connect (initialize, initialized) and list the server's tools as kimicode tools."""
        from kimicode.mcp.config import tool_name

        await self.rpc(
            "initialize",
            {
                "protocolVersion": MCP_PROTOCOL,
                "capabilities": {},
                "clientInfo": {"name": "kimicode", "version": __version__},
            },
        )
        await self.channel.request(
            {
                "subtype": "mcp_message",
                "server_name": self.name,
                "message": {"jsonrpc": "2.0", "method": "notifications/initialized"},
            }
        )
        listed = await self.rpc("tools/list", {})
        out = []
        for entry in listed.get("tools") or ():
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                continue
            schema = entry.get("inputSchema")
            out.append(
                Tool(
                    name=tool_name(self.name, entry["name"]),
                    description=f"[{self.name}] {entry.get('description') or entry['name']}",
                    parameters=schema if isinstance(schema, dict) else {"type": "object", "properties": {}},
                    fn=self._caller(entry["name"]),
                    kind="execute",
                )
            )
        self.status = "connected"
        return out

    def _caller(self, tool: str) -> Callable[[dict[str, Any], ToolContext], Any]:
        async def call(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
            try:
                result = await self.rpc("tools/call", {"name": tool, "arguments": args})
            except ControlError as exc:
                raise ToolError(f"the SDK's MCP server {self.name!r} failed: {exc}") from None
            parts = []
            for part in result.get("content") or ():
                if isinstance(part, dict) and part.get("type") == "text":
                    parts.append(str(part.get("text") or ""))
                elif isinstance(part, dict):
                    parts.append(f"[{part.get('type')} content not shown]")
            return ToolResult("\n".join(parts), is_error=bool(result.get("isError")))

        return call


async def connect_servers(servers: list[SdkServer], agent: Agent, warn: Callable[[str], None]) -> None:
    """Add the tools of each SDK server to `agent` (a server that fails is said once and skipped)."""
    for server in servers:
        try:
            tools = await asyncio.wait_for(server.tools(), timeout=30)
        except (ControlError, TimeoutError) as exc:
            server.status, server.error = "failed", str(exc) or "timed out"
            warn(f"the SDK's MCP server {server.name!r} failed: {server.error}; its tools are not available")
            continue
        for tool in tools:
            agent.tools.add(tool)
