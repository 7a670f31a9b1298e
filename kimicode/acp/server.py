"""`kimicode acp`: the ACP agent over stdio (the official SDK, `agent-client-protocol`).

The process's stdout carries nothing but protocol: the real stdout is kept for the JSON-RPC stream and
file descriptor 1 is pointed at stderr before anything else runs, so a stray print, a warning or a child
process can never corrupt the stream (editors show the agent's stderr in their logs).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, Literal, cast

import acp
from acp import PROTOCOL_VERSION, RequestError, run_agent
from acp.schema import (
    AgentCapabilities,
    AuthenticateResponse,
    CloseSessionResponse,
    HttpMcpServer,
    Implementation,
    InitializeResponse,
    ListSessionsResponse,
    LoadSessionResponse,
    McpCapabilities,
    McpServerStdio,
    NewSessionResponse,
    PromptCapabilities,
    PromptResponse,
    ResumeSessionResponse,
    SessionCapabilities,
    SessionCloseCapabilities,
    SessionInfo,
    SessionListCapabilities,
    SessionResumeCapabilities,
    SetSessionModeResponse,
)

from kimicode.acp.approve import Approver
from kimicode.acp.client_tools import ClientFiles, ClientTerminals
from kimicode.acp.session import AcpSession, Block, modes

STDIO_LIMIT = 50 * 1024 * 1024
"""Longest JSON-RPC line read (images and embedded files travel inside prompts)."""

LIST_PAGE = 50
"""Sessions in one `session/list` answer."""

log = logging.getLogger("kimicode.acp")


def mcp_entries(servers: list[Any] | None) -> dict[str, dict[str, Any]]:
    """The client's MCP servers as `[mcp_servers.NAME]` entries (stdio and streamable HTTP)."""
    out: dict[str, dict[str, Any]] = {}
    for server in servers or ():
        if isinstance(server, McpServerStdio):
            out[server.name] = {
                "command": server.command,
                "args": list(server.args),
                "env": {e.name: e.value for e in server.env},
            }
        elif isinstance(server, HttpMcpServer):
            out[server.name] = {"url": server.url, "headers": {h.name: h.value for h in server.headers}}
        else:
            log.warning("MCP server %s: transport not supported (stdio and http are)", getattr(server, "name", "?"))
    return out


def warm_up() -> None:
    """Import the HTTP stack and load the TLS context (a second or more on a busy machine) before the first
    prompt needs them: an editor opens the session and the user types in the meantime."""
    try:
        from kimicode.llm.client import shared_ssl_context

        shared_ssl_context()
    except Exception as exc:  # only a head start: the first prompt does it again and reports a real failure
        log.warning("warming up the model client: %s", exc)


def recorded_settings(session_id: str) -> dict[str, Any]:
    """The permission mode a session last ran in, from its log, as a setting (a session loaded by an editor
    keeps the mode chosen in it; the model and effort come back with `Agent.resume` itself)."""
    from kimicode.config.choices import PERMISSION_MODES
    from kimicode.config.endpoint import kimicode_home
    from kimicode.session.store import load_session

    mode = load_session(kimicode_home(), session_id).settings.get("permission_mode")
    return {"permission_mode": mode} if mode in PERMISSION_MODES else {}


class KimicodeAcp:
    """The ACP `Agent`: sessions are kimicode Agents, built like the terminal's from `settings` (the flags
    of `kimicode acp`, AgentOptions field names) and the session's working directory."""

    def __init__(self, settings: dict[str, Any] | None = None) -> None:
        self.settings = dict(settings or {})
        self.sessions: dict[str, AcpSession] = {}
        self.conn: Any = None
        self.caps: Any = None
        self.warming: asyncio.Future[None] | None = None

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def initialize(
        self, protocol_version: int, client_capabilities: Any = None, client_info: Any = None, **kwargs: Any
    ) -> InitializeResponse:
        from kimicode._version import __version__

        self.caps = client_capabilities
        if self.warming is None:  # the model client's imports and TLS context, while the editor opens a session
            self.warming = asyncio.ensure_future(asyncio.to_thread(warm_up))
        return InitializeResponse(
            protocol_version=min(protocol_version, PROTOCOL_VERSION),
            agent_capabilities=AgentCapabilities(
                load_session=True,
                prompt_capabilities=PromptCapabilities(image=True, audio=False, embedded_context=True),
                mcp_capabilities=McpCapabilities(http=True, sse=False),
                session_capabilities=SessionCapabilities(
                    list=SessionListCapabilities(), resume=SessionResumeCapabilities(), close=SessionCloseCapabilities()
                ),
            ),
            agent_info=Implementation(name="kimicode", title="kimicode", version=__version__),
            auth_methods=[],
        )

    async def authenticate(self, method_id: str, **kwargs: Any) -> AuthenticateResponse | None:
        raise RequestError.invalid_params(
            {
                "details": "kimicode has no ACP authentication methods: set KIMI_API_KEY "
                "(or run `kimicode` once in a terminal to store a key)"
            }
        )

    def _build(self, cwd: str, mcp_servers: list[Any] | None, resume: str | None = None) -> AcpSession:
        from kimicode.agent.core import Agent
        from kimicode.agent.options import AgentOptions
        from kimicode.config.endpoint import ConfigError, kimicode_home
        from kimicode.config.settings import load_settings
        from kimicode.session.lock import SessionBusyError
        from kimicode.session.store import SessionError

        workspace = Path(cwd)
        if not workspace.is_absolute() or not workspace.is_dir():
            raise RequestError.invalid_params({"details": f"cwd must be an absolute path to a directory: {cwd!r}"})
        session: AcpSession | None = None

        async def ask(tool_call: Any, options: Any) -> Any:
            assert session is not None
            await session.announced(tool_call.tool_call_id)
            return await self.conn.request_permission(session_id=session.id, tool_call=tool_call, options=options)

        def options_for(where: Path) -> AgentOptions:
            settings = load_settings(where.resolve(), kimicode_home())
            extra = mcp_entries(mcp_servers)
            if extra:  # the editor's servers, like --mcp-config: the user configured them
                settings.update({"mcp_servers": extra})
            return AgentOptions.from_workspace(where, config=settings, origin="acp", **{**self.settings, **kept})

        kept: dict[str, Any] = {}
        try:
            if resume is not None:  # the mode the editor chose stays with the session (acpx reconnects each prompt)
                kept = recorded_settings(resume)
            approver = Approver(ask, workspace)
            if resume is None:
                agent = Agent(options_for(workspace), approve=approver)
                if agent.log is not None:  # loadable by another process before its first prompt
                    agent.log.save()
            else:
                agent = Agent.resume(resume, options=options_for, approve=approver, workspace=workspace)
        except SessionBusyError as exc:  # open in a terminal or another editor: say so, do not take it over
            raise RequestError(-32603, str(exc), {"kind": "session_busy", "sessionId": resume}) from None
        except SessionError as exc:
            raise RequestError(-32002, str(exc), {"sessionId": resume}) from None  # ACP's "resource not found"
        except (ConfigError, ValueError, TypeError) as exc:
            raise RequestError(-32602, str(exc), {"kind": "config"}) from None
        session = AcpSession(agent, lambda update: self.conn.session_update(session_id=agent.session_id, update=update))
        self._use_client(session)
        self.sessions[agent.session_id] = session
        return session

    def _use_client(self, session: AcpSession) -> None:
        """Route file reads/writes and commands through the editor when it offers them."""
        caps, agent = self.caps, session.agent
        fs = getattr(caps, "fs", None)
        if fs is not None and fs.read_text_file and fs.write_text_file:
            agent.ctx.files = ClientFiles(self.conn, agent.session_id, asyncio.get_running_loop())
        if caps is not None and caps.terminal:
            agent.ctx.commands = ClientTerminals(self.conn, agent.session_id, agent.masker.mask, session.send)
            # the editor's terminal is not kimicode's OS sandbox: no decision may count on it
            agent.policy = dataclasses.replace(agent.policy, sandboxed=False, read_only_sandbox=False)
            agent.notify(*_terminal_notice(agent.sandbox is not None))

    def _session(self, session_id: str) -> AcpSession:
        session = self.sessions.get(session_id)
        if session is None:
            raise RequestError.invalid_params({"details": f"unknown session: {session_id}"})
        return session

    def _announce(self, session: AcpSession) -> None:
        """The slash commands, sent once the session's response is on its way."""
        asyncio.get_running_loop().create_task(session.send(session.available_commands()))

    async def new_session(self, cwd: str, mcp_servers: list[Any] | None = None, **kwargs: Any) -> NewSessionResponse:
        session = self._build(cwd, mcp_servers)
        self._announce(session)
        return NewSessionResponse(session_id=session.id, modes=modes(session.agent.permission_mode))

    async def load_session(
        self, cwd: str, session_id: str, mcp_servers: list[Any] | None = None, **kwargs: Any
    ) -> LoadSessionResponse:
        old = self.sessions.pop(session_id, None)
        if old is not None:
            await old.agent.aclose()
        session = self._build(cwd, mcp_servers, resume=session_id)
        await session.replay()  # the history streams before the response, as the protocol says
        self._announce(session)
        return LoadSessionResponse(modes=modes(session.agent.permission_mode))

    async def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None, **kwargs: Any
    ) -> ListSessionsResponse:
        """`session/list`: the saved sessions (of `cwd` when given), most recent first, LIST_PAGE at a time;
        the cursor is the position of the next page. Sessions never prompted are listed too (loadable)."""
        from kimicode.config.endpoint import kimicode_home
        from kimicode.session.store import list_sessions

        start = int(cursor) if cursor and cursor.isdigit() else 0
        if cursor and not cursor.isdigit():
            raise RequestError.invalid_params({"details": f"not a cursor from session/list: {cursor!r}"})
        found = list_sessions(kimicode_home(), cwd, include_empty=True)
        page = found[start : start + LIST_PAGE]
        infos = [
            SessionInfo(
                session_id=i.id,
                cwd=i.workspace,
                title=i.first_prompt[:120] or None,
                updated_at=i.updated.isoformat().replace("+00:00", "Z"),
            )
            for i in page
        ]
        more = start + LIST_PAGE < len(found)
        return ListSessionsResponse(sessions=infos, next_cursor=str(start + LIST_PAGE) if more else None)

    async def resume_session(
        self, session_id: str, cwd: str, mcp_servers: list[Any] | None = None, **kwargs: Any
    ) -> ResumeSessionResponse:
        """`session/resume`: continue a saved session without streaming its history back (`session/load`
        does); a session already open in this process is answered as it is."""
        session = self.sessions.get(session_id)
        if session is None:
            session = self._build(cwd, mcp_servers, resume=session_id)
            self._announce(session)
        return ResumeSessionResponse(modes=modes(session.agent.permission_mode))

    async def close_session(self, session_id: str, **kwargs: Any) -> CloseSessionResponse:
        """`session/close`: stop its turn if one runs and release it (another process may then load it)."""
        session = self.sessions.pop(session_id, None)
        if session is None:
            raise RequestError.invalid_params({"details": f"unknown session: {session_id}"})
        session.cancel()
        if not session.idle.is_set():  # the cancelled prompt answers first
            await asyncio.wait([asyncio.ensure_future(session.idle.wait())], timeout=30)
        await session.agent.aclose()
        return CloseSessionResponse()

    async def set_session_mode(self, mode_id: str, session_id: str, **kwargs: Any) -> SetSessionModeResponse:
        self._session(session_id).set_mode(mode_id)
        return SetSessionModeResponse()

    async def prompt(self, prompt: list[Block], session_id: str, **kwargs: Any) -> PromptResponse:
        return await self._session(session_id).prompt(prompt)

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        session = self.sessions.get(session_id)
        if session is not None:
            session.cancel()

    async def aclose(self) -> None:
        if self.warming is not None:
            await asyncio.wait([self.warming])
        for session in list(self.sessions.values()):
            try:
                await session.agent.aclose()
            except Exception as exc:  # closing one must not keep the others open
                log.warning("closing session %s: %s", session.id, exc)
        self.sessions.clear()


class _Pipe(asyncio.streams.FlowControlMixin):
    """The write side of the protocol pipe (drain waits while the editor is not reading)."""


def line_answer(line: bytes) -> bytes | None:
    """How to treat one line from the editor: None to pass it on (a JSON object: the SDK's to handle), b""
    to skip it (blank), else the JSON-RPC error to answer it with (not JSON: -32700; JSON that is not an
    object, such as `42` or a batch: -32600), so that a bad line never reaches the SDK's receive loop, which
    would end on it and take every session of the process along."""
    text = line.strip()
    if not text:
        return b""
    try:
        value = json.loads(text)
    except ValueError as exc:
        return _error_line(-32700, "Parse error", f"the line is not JSON: {exc}")
    if isinstance(value, dict):
        return None
    what = "a batch (kimicode takes one message per line)" if isinstance(value, list) else type(value).__name__
    return _error_line(-32600, "Invalid Request", f"a JSON-RPC message is a JSON object, not {what}")


def _error_line(code: int, message: str, details: str) -> bytes:
    error = {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message, "data": {"details": details}}}
    return (json.dumps(error) + "\n").encode()


async def _read_line(reader: asyncio.StreamReader) -> bytes:
    """One line, however long (b"" at the end of input)."""
    chunks: list[bytes] = []
    while True:
        try:
            chunks.append(await reader.readuntil(b"\n"))
            return b"".join(chunks)
        except asyncio.LimitOverrunError as exc:
            chunks.append(await reader.readexactly(exc.consumed))
        except asyncio.IncompleteReadError as exc:
            chunks.append(exc.partial)
            return b"".join(chunks)


async def checked_lines(raw: asyncio.StreamReader, inner: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Pass the editor's JSON objects from `raw` on to `inner` (the SDK reads it); answer the other lines."""
    try:
        while line := await _read_line(raw):
            answer = line_answer(line)
            if answer is None:
                inner.feed_data(line if line.endswith(b"\n") else line + b"\n")
            elif answer:
                log.warning("answered a bad line: %s", answer.decode().strip())
                writer.write(answer)
                await writer.drain()
    finally:
        inner.feed_eof()


async def protocol_streams() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Streams on stdin and on a private copy of stdout; fd 1 then points at stderr."""
    loop = asyncio.get_running_loop()
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb", buffering=0)
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    raw = asyncio.StreamReader(limit=STDIO_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(raw), sys.stdin)
    transport, protocol = await loop.connect_write_pipe(_Pipe, out)
    return raw, asyncio.StreamWriter(transport, protocol, None, loop)


async def serve(settings: dict[str, Any] | None = None) -> int:
    """Serve ACP on stdin/stdout until the editor closes stdin; returns the exit code."""
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="kimicode acp: %(levelname)s %(message)s")
    raw, writer = await protocol_streams()
    reader = asyncio.StreamReader(limit=STDIO_LIMIT)  # what the SDK reads: the JSON objects of `raw`
    checking = asyncio.ensure_future(checked_lines(raw, reader, writer))
    agent = KimicodeAcp(settings)
    try:
        # implements the methods kimicode serves; session/resume and session/close are "unstable" in the SDK
        await run_agent(cast(acp.Agent, agent), writer, reader, use_unstable_protocol=True)
    finally:
        checking.cancel()
        await agent.aclose()
    return 0


def _terminal_notice(sandboxed: bool) -> tuple[str, Literal["info", "warning"]]:
    """Which boundary commands in the editor's terminal have (said once per session)."""
    if sandboxed:
        return (
            "Commands run in the editor's terminal inside kimicode's sandbox (bubblewrap), as they would "
            "in kimicode's own shell: what runs without asking (yolo included) is confined; what you approve "
            "runs as approved",
            "info",
        )
    return (
        "Commands run in the editor's terminal without kimicode's sandbox (it is off or unavailable here): "
        "in yolo mode nothing confines them",
        "warning",
    )
