"""Connections to MCP servers with the official `mcp` SDK, and their tools as kimicode tools.

Each server gets one task that owns its connection (the SDK's context managers must be entered and left
in the same task) and waits until the manager closes. Servers start concurrently; one that fails or
does not answer within its startup timeout is reported and skipped, never holding up the others. Tool
calls from the agent's turn go through the connection's session; their results become text (and image
parts for models that see images). A server's stderr goes to `KIMICODE_HOME/logs/mcp-NAME.log`, never to
the terminal, and its last lines are quoted when it fails to start.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from kimicode._version import __version__
from kimicode.mcp.config import DEFAULT_TOOL_TIMEOUT, ServerConfig, tool_name
from kimicode.safeio import private_dirs, private_open
from kimicode.tools.base import Tool, ToolContext, ToolError, ToolResult

Status = Literal["pending", "starting", "ready", "failed", "timeout", "closed"]
MAX_DESCRIPTION = 4_000


@dataclass
class ServerState:
    """What is known about one server."""

    config: ServerConfig
    status: Status = "pending"
    error: str = ""
    tools: list[Any] = field(default_factory=list)
    """The SDK's tool definitions (name, description, input_schema)."""
    startup_seconds: float = 0.0
    client: Any = None
    task: asyncio.Task[None] | None = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    stop: asyncio.Event = field(default_factory=asyncio.Event)


class McpManager:
    """The MCP servers of one agent."""

    def __init__(
        self,
        configs: Sequence[ServerConfig],
        workspace: Path,
        log_dir: Path | None = None,
        tool_timeout: float = DEFAULT_TOOL_TIMEOUT,
        supports_images: Callable[[], bool] = lambda: False,
    ) -> None:
        self.servers = [ServerState(c) for c in configs]
        self.workspace = workspace
        self.log_dir = log_dir
        self.tool_timeout = tool_timeout
        self.supports_images = supports_images
        self._started: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- lifecycle --------------------------------------------------------------------------------

    def begin(self) -> asyncio.Task[None]:
        """Start every server now (in the background) and return the task that waits for them.

        Idempotent within one event loop; call from a running loop (for example when a session opens,
        so the servers start while the user types).
        """
        loop = asyncio.get_running_loop()
        if self._started is None or self._loop is not loop:  # first start, after aclose, or in a new loop
            for state in self.servers:
                state.status, state.error, state.client, state.task = "pending", "", None, None
                state.ready, state.stop = asyncio.Event(), asyncio.Event()
            self._loop = loop
            self._started = loop.create_task(self._start_all())
        return self._started

    async def start(self) -> None:
        """Start the servers (if not already) and wait until each is ready, failed or timed out."""
        await asyncio.shield(self.begin())

    async def _start_all(self) -> None:
        await asyncio.gather(*(self._start_one(state) for state in self.servers))

    async def _start_one(self, state: ServerState) -> None:
        state.status = "starting"
        started = time.monotonic()
        state.task = asyncio.get_running_loop().create_task(self._own(state), name=f"mcp:{state.config.name}")
        try:
            await asyncio.wait_for(state.ready.wait(), state.config.startup_timeout)
        except TimeoutError:
            state.status = "timeout"
            state.error = f"did not start within {state.config.startup_timeout:g} s"
            tail = self._stderr_tail(state.config.name)
            if tail:
                state.error += f" (stderr: {tail})"
            state.task.cancel()  # its cleanup (terminating the process) finishes in the background
        state.startup_seconds = time.monotonic() - started

    def _stderr_path(self, name: str) -> Path | None:
        if self.log_dir is None:
            return None
        return self.log_dir / f"mcp-{name}.log"

    def _stderr_tail(self, name: str) -> str:
        path = self._stderr_path(name)
        if path is None:
            return ""
        try:
            lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            return ""
        return " | ".join(lines[-3:])[:400]

    async def _own(self, state: ServerState) -> None:
        """Open the connection, list the tools, then hold the connection until `stop` is set."""
        cfg = state.config
        errlog: Any = None
        try:
            from mcp import Client
            from mcp.types import Implementation

            transport: Any
            if cfg.transport == "stdio":
                from mcp import StdioServerParameters
                from mcp.client.stdio import stdio_client

                errlog, cwd = self._stdio_setup(cfg)
                params = StdioServerParameters(command=cfg.command, args=list(cfg.args), env=dict(cfg.env), cwd=cwd)
                transport = stdio_client(params, errlog=errlog)
            else:
                import httpx2
                from mcp.client.streamable_http import streamable_http_client

                http = httpx2.AsyncClient(headers=dict(cfg.headers), timeout=httpx2.Timeout(30.0, read=300.0))
                transport = streamable_http_client(cfg.url, http_client=http)
            info = Implementation(name="kimicode", version=__version__)
            async with Client(transport, client_info=info, read_timeout_seconds=self.tool_timeout) as client:
                tools: list[Any] = []
                cursor: str | None = None
                while True:
                    page = await client.list_tools(cursor=cursor)
                    tools.extend(page.tools)
                    cursor = page.next_cursor
                    if not cursor:
                        break
                state.tools, state.client, state.status = tools, client, "ready"
                state.ready.set()
                await state.stop.wait()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # the SDK raises groups and assorted types for dead servers
            if state.status in ("starting", "pending"):
                state.status = "failed"
                state.error = _describe(exc) + (f" (stderr: {tail})" if (tail := self._stderr_tail(cfg.name)) else "")
            elif state.status == "ready":
                state.status = "closed"
                state.error = f"the connection ended: {_describe(exc)}"
            state.ready.set()
            if not isinstance(exc, Exception):
                raise
        finally:
            state.client = None
            if state.status == "ready":
                state.status = "closed"
            if errlog is not None:
                errlog.close()

    def _stdio_setup(self, cfg: ServerConfig) -> tuple[Any, Path]:
        """The file that receives the server's stderr (closed by the caller), and its working directory."""
        import os

        path = self._stderr_path(cfg.name)
        if path is not None:
            private_dirs(path.parent)
            errlog = private_open(path, "w")  # 0600; closed by _own
        else:
            errlog = open(os.devnull, "w")  # noqa: SIM115 - closed by _own
        cwd = Path(cfg.cwd).expanduser() if cfg.cwd else self.workspace
        return errlog, cwd if cwd.is_absolute() else self.workspace / cwd

    async def aclose(self) -> None:
        """Close every connection (stdio servers are terminated)."""
        try:
            same_loop = self._loop is asyncio.get_running_loop()
        except RuntimeError:
            same_loop = False
        tasks = [s.task for s in self.servers if s.task is not None and not s.task.done()] if same_loop else []
        for state in self.servers:
            state.stop.set()
        if self._started is not None and not self._started.done():
            self._started.cancel()
        if tasks:
            _, slow = await asyncio.wait(tasks, timeout=5)
            for task in slow:
                task.cancel()
            if slow:
                await asyncio.wait(slow, timeout=2)
        self._started = None  # a later start connects again

    # -- tools ------------------------------------------------------------------------------------

    def problems(self) -> list[str]:
        """One line per server that failed or timed out."""
        return [
            f"MCP server {s.config.name!r} {'timed out' if s.status == 'timeout' else 'failed'}: {s.error}; skipped"
            for s in self.servers
            if s.status in ("failed", "timeout")
        ]

    def tools(self) -> list[Tool]:
        """kimicode tools for every tool of every ready server (kind `execute`: they ask by default)."""
        out: list[Tool] = []
        seen: set[str] = set()
        for state in self.servers:
            if state.status != "ready":
                continue
            for t in state.tools:
                name = tool_name(state.config.name, t.name)
                if name in seen:
                    continue
                seen.add(name)
                out.append(McpTool(self, state, t.name).tool(name, t))
        return out

    async def call(self, state: ServerState, name: str, args: dict[str, Any]) -> ToolResult:
        client = state.client
        if client is None or state.status != "ready":
            raise ToolError(f"the MCP server {state.config.name!r} is not connected ({state.error or state.status})")
        try:
            result = await client.call_tool(name, args, read_timeout_seconds=self.tool_timeout)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise ToolError(f"MCP server {state.config.name!r}, tool {name!r}: {_describe(exc)}") from None
        return self._convert(state, name, result)

    def _convert(self, state: ServerState, name: str, result: Any) -> ToolResult:
        """Text for the model, image parts when the model sees images."""
        from kimicode.tools.images import ImageResult

        texts: list[str] = []
        images: list[dict[str, Any]] = []
        for block in getattr(result, "content", None) or ():
            kind = getattr(block, "type", "")
            if kind == "text":
                texts.append(str(block.text))
            elif kind == "image":
                mime = str(getattr(block, "mime_type", "") or "image/png")
                if self.supports_images():
                    images.append({"type": "image_url", "image_url": {"url": f"data:{mime};base64,{block.data}"}})
                    texts.append(f"[image ({mime}) attached below, after the tool results]")
                else:
                    size = len(base64.b64decode(str(block.data) + "==", validate=False))
                    texts.append(f"[an image ({mime}, {size:,} bytes) the current model cannot see]")
            elif kind == "resource":
                res = block.resource
                text = getattr(res, "text", None)
                texts.append(str(text) if text is not None else f"[binary resource {res.uri} ({res.mime_type})]")
            elif kind == "resource_link":
                texts.append(f"[resource: {block.uri}]")
            elif kind == "audio":
                texts.append(f"[audio ({getattr(block, 'mime_type', '')}) not shown]")
        structured = getattr(result, "structured_content", None)
        if not texts and structured is not None:
            texts.append(json.dumps(structured, ensure_ascii=False))
        content = "\n".join(texts) or "(no output)"
        is_error = bool(getattr(result, "is_error", False))
        summary = f"{state.config.name}.{name}" + (": error" if is_error else "")
        if is_error:
            content = f"Error from MCP tool {name}: {content}"
        if images:
            return ImageResult(content=content, is_error=is_error, summary=summary, images=tuple(images))
        return ToolResult(content=content, is_error=is_error, summary=summary)


class McpTool:
    """One MCP tool, bound to its server's connection."""

    def __init__(self, manager: McpManager, state: ServerState, name: str) -> None:
        self.manager = manager
        self.state = state
        self.name = name

    def tool(self, name: str, definition: Any) -> Tool:
        schema = getattr(definition, "input_schema", None)
        params = dict(schema) if isinstance(schema, dict) else {}
        params.setdefault("type", "object")
        params.setdefault("properties", {})
        params.pop("title", None)
        description = str(getattr(definition, "description", "") or "").strip()
        if len(description) > MAX_DESCRIPTION:
            description = description[:MAX_DESCRIPTION] + " …"
        prefix = f"[MCP server {self.state.config.name}, tool {self.name}] "
        return Tool(name=name, description=prefix + description, parameters=params, fn=self._call, kind="execute")

    async def _call(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return await self.manager.call(self.state, self.name, args)


def _describe(exc: BaseException) -> str:
    """A one-line reason, looking inside exception groups (the SDK's task groups wrap errors)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, FileNotFoundError):
        return f"command not found: {exc.filename or exc}"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
