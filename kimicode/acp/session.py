"""One ACP session: a kimicode Agent, its prompts, its mode, and the updates its turns stream to the editor.

A `session/prompt` runs one turn (`Agent.stream`) and answers with the stop reason once it ends; the
turn's events become `session/update` notifications as they happen (kimicode/acp/updates.py). A failed
turn is a JSON-RPC error carrying kimicode's message. `session/cancel` interrupts the turn: the history
stays valid and the prompt answers `cancelled`.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acp import RequestError, update_agent_message_text
from acp.schema import (
    AvailableCommand,
    AvailableCommandInput,
    AvailableCommandsUpdate,
    EmbeddedResourceContentBlock,
    ImageContentBlock,
    PromptResponse,
    ResourceContentBlock,
    SessionMode,
    SessionModeState,
    TextContentBlock,
    TextResourceContents,
    ToolCallStart,
    UnstructuredCommandInput,
    Usage,
)

from kimicode.acp.updates import Translator
from kimicode.commands import load_custom_commands
from kimicode.config.choices import PERMISSION_MODES
from kimicode.events import MessageCommitted, TurnFinished

if TYPE_CHECKING:
    from kimicode.agent.core import Agent

MODE_NAMES = {
    "default": ("Default", "Reads run; edits and commands ask first"),
    "accept-edits": ("Accept edits", "Edits inside the workspace run; commands ask first"),
    "plan": ("Plan", "Reads only: nothing is changed"),
    "yolo": ("Yolo", "Everything runs without asking (deny rules still apply)"),
}

STOP_REASONS = {
    "success": "end_turn",
    "interrupted": "cancelled",
    "max_turns": "max_turn_requests",
    "repeat_limit": "max_turn_requests",
}

ERROR_CODES = {"auth": -32000}
"""JSON-RPC codes for turn errors: `auth` is ACP's "authentication required"; the rest are internal errors
(-32603) whose message is kimicode's and whose data names the kind."""

CONTENT_FILTERED = re.compile(r"HTTP 4\d\d content_filter\b")
"""A request the server refused as content (Moonshot and Azure OpenAI: HTTP 400, error type `content_filter`)."""

COMMAND_NAME = re.compile(r"[A-Za-z][\w:-]*")
"""What a slash command's name looks like (a path's first segment with a `/` in it does not)."""

BUILTIN_COMMANDS = {"compact": "Summarise the older history now, to free context (optional: what to keep)"}

Block = TextContentBlock | ImageContentBlock | ResourceContentBlock | EmbeddedResourceContentBlock | Any


def modes(current: str) -> SessionModeState:
    """The permission modes as ACP session modes."""
    return SessionModeState(
        current_mode_id=current,
        available_modes=[
            SessionMode(id=m, name=MODE_NAMES.get(m, (m, ""))[0], description=MODE_NAMES.get(m, ("", ""))[1])
            for m in PERMISSION_MODES
        ],
    )


def stop_reason(finished: TurnFinished) -> PromptResponse:
    """The answer to `session/prompt` for how the turn ended; a failed turn raises its JSON-RPC error."""
    if finished.error_kind == "content_filter" or (
        finished.error_kind == "bad_request" and CONTENT_FILTERED.match(finished.error or "")
    ):
        return PromptResponse(stop_reason="refusal")  # a streamed refusal, or the server's 400 `content_filter`
    reason = STOP_REASONS.get(finished.status)
    if reason is None:
        kind = finished.error_kind or finished.status
        raise RequestError(
            ERROR_CODES.get(kind, -32603),
            finished.error or f"the turn ended with {finished.status}",
            {"kind": kind, "status": finished.status},
        )
    return PromptResponse(stop_reason=reason)  # type: ignore[arg-type]


class AcpSession:
    """An Agent served over ACP. `send` delivers one session update to the editor."""

    def __init__(self, agent: Agent, send: Any) -> None:
        self.agent = agent
        self.send = send
        self.translator = Translator(agent.workspace, self._kind)
        self.commands = load_custom_commands(agent.workspace, agent.home)
        self.idle = asyncio.Event()
        self.idle.set()
        """Set while no prompt runs in this session."""
        self.cancelling = False
        """`session/cancel` came while a prompt ran: the next prompt waits for it instead of being refused."""
        self.coming: set[str] = set()
        """Tool calls committed by the running turn whose `tool_call` the editor has not been sent yet."""
        self.shown = asyncio.Event()
        previous = agent.on_event

        def on_event(event: Any) -> None:  # in the turn, as it happens (the updates follow a little later)
            if previous is not None:
                previous(event)
            if isinstance(event, MessageCommitted) and event.message.get("role") == "assistant":
                self.coming.update(str(c.get("id") or "") for c in event.message.get("tool_calls") or ())

        agent.on_event = on_event

    @property
    def id(self) -> str:
        return self.agent.session_id

    def _kind(self, name: str) -> str:
        tool = self.agent.tools.get(name)
        return tool.kind if tool is not None else "other"

    def available_commands(self) -> AvailableCommandsUpdate:
        """The slash commands a prompt may start with: /compact and the custom commands."""
        listed = [
            AvailableCommand(name=n, description=d, input=_hint("what to keep")) for n, d in BUILTIN_COMMANDS.items()
        ]
        for name, cmd in self.commands.items():
            hint = _hint(cmd.argument_hint) if cmd.argument_hint else None
            listed.append(AvailableCommand(name=name, description=cmd.description or name, input=hint))
        return AvailableCommandsUpdate(session_update="available_commands_update", available_commands=listed)

    def set_mode(self, mode_id: str) -> None:
        if mode_id not in PERMISSION_MODES:
            raise RequestError.invalid_params({"modeId": mode_id, "expected": list(PERMISSION_MODES)})
        self.agent.set_permission_mode(mode_id)

    async def announced(self, call_id: str) -> None:
        """Wait until the editor has been sent the `tool_call` of `call_id`, so that a permission question
        never comes before the call it is about (the turn runs ahead of the updates it streams)."""
        while call_id in self.coming and self.agent.busy:
            self.shown.clear()
            try:
                await asyncio.wait_for(self.shown.wait(), timeout=5)
            except TimeoutError:
                return

    def cancel(self) -> None:
        if self.agent.busy:
            self.cancelling = True
        self.agent.interrupt()

    async def replay(self) -> None:
        """Stream the saved history to the editor (`session/load`)."""
        for update in self.translator.replay(m for m in self.agent.messages if m.get("role") != "system"):
            await self.send(update)

    async def prompt(self, blocks: Sequence[Block]) -> PromptResponse:
        """Run one turn for the prompt's content blocks. A prompt sent right after `session/cancel` waits for
        the cancelled turn to end, then runs (clients send the next question without waiting)."""
        if self.agent.busy and self.cancelling:
            await self.idle.wait()
        if self.agent.busy or not self.idle.is_set():
            raise RequestError.invalid_request({"details": "a turn is already running in this session"})
        self.idle.clear()
        try:
            return await self._prompt(blocks)
        finally:
            self.cancelling = False
            self.idle.set()

    async def _prompt(self, blocks: Sequence[Block]) -> PromptResponse:
        text = self._prompt_text(blocks)
        name, _, rest = text[1:].partition(" ") if text.startswith("/") else ("", "", "")
        if name == "compact":
            await self._compact(rest.strip() or None)
            return PromptResponse(stop_reason="end_turn")
        if name in self.commands:
            text = self.commands[name].render(rest)
        elif COMMAND_NAME.fullmatch(name):  # `/usr/bin/env is broken` is a prompt, `/frobnicate` a command
            known = ", ".join(f"/{n}" for n in [*BUILTIN_COMMANDS, *self.commands])
            await self.send(update_agent_message_text(f"Unknown command /{name}. Commands here: {known}."))
            return PromptResponse(stop_reason="end_turn")
        before = dict(self.agent.usage)
        finished: TurnFinished | None = None
        async with self.agent.stream(text) as events:
            async for event in events:
                for update in self.translator.updates(event):
                    await self.send(update)
                    if isinstance(update, ToolCallStart):
                        self.coming.discard(update.tool_call_id)
                        self.shown.set()
                if isinstance(event, TurnFinished):
                    finished = event
        assert finished is not None
        response = stop_reason(finished)
        response.usage = self._usage(before)
        return response

    async def _compact(self, instructions: str | None) -> None:
        """`/compact`: the compaction's events, then one line saying what it did (or that there was nothing
        to do yet)."""
        async with self.agent.compact(instructions) as events:
            async for event in events:
                for update in self.translator.updates(event):
                    await self.send(update)
            outcome = await events
        if outcome is None:
            said = "Nothing to compact yet: the conversation is still short."
        else:
            said = (
                f"Compacted {outcome.summarized} messages into a summary: ~{outcome.tokens_before} → "
                f"~{outcome.tokens_after} tokens."
            )
            if outcome.fallback:
                said += f" (The summary request failed: {outcome.error or 'no details'}; a simpler summary was kept.)"
        await self.send(update_agent_message_text(said))

    def _usage(self, before: dict[str, int]) -> Usage:
        now = self.agent.usage
        prompt = now.get("prompt_tokens", 0) - before.get("prompt_tokens", 0)
        completion = now.get("completion_tokens", 0) - before.get("completion_tokens", 0)
        cached = now.get("cached_tokens", 0) - before.get("cached_tokens", 0)
        return Usage(
            total_tokens=max(0, prompt + completion),
            input_tokens=max(0, prompt),
            output_tokens=max(0, completion),
            cached_read_tokens=max(0, cached) or None,
        )

    def _prompt_text(self, blocks: Sequence[Block]) -> str:
        """The prompt's text: text blocks, embedded resources as quoted context, links as references;
        images are attached to the turn's user message."""
        parts: list[str] = []
        for block in blocks:
            if isinstance(block, TextContentBlock):
                parts.append(block.text)
            elif isinstance(block, ImageContentBlock):
                self._attach_image(block)
            elif isinstance(block, EmbeddedResourceContentBlock):
                res = block.resource
                if isinstance(res, TextResourceContents):
                    parts.append(f'\n<context uri="{res.uri}">\n{res.text}\n</context>\n')
                else:
                    parts.append(
                        f"\n[attached binary resource {res.uri} ({res.mime_type or 'unknown type'}): not "
                        "readable as text]\n"
                    )
            elif isinstance(block, ResourceContentBlock):
                parts.append(f" {_link_path(block.uri)} ")
            else:
                raise RequestError.invalid_params({"details": f"unsupported prompt content: {type(block).__name__}"})
        text = "".join(parts).strip()
        if not text and not self.agent.extras.pending_images:
            raise RequestError.invalid_params({"details": "the prompt is empty"})
        return text

    def _attach_image(self, block: ImageContentBlock) -> None:
        if not self.agent.profile.supports_images:
            raise RequestError.invalid_params(
                {"details": f"the current model ({self.agent.endpoint.model}) cannot see images"}
            )
        try:
            base64.b64decode(block.data, validate=True)
        except (binascii.Error, ValueError):
            raise RequestError.invalid_params({"details": "the image data is not valid base64"}) from None
        url = f"data:{block.mime_type};base64,{block.data}"
        self.agent.extras.pending_images.append({"type": "image_url", "image_url": {"url": url}})


def _hint(text: str) -> AvailableCommandInput:
    return AvailableCommandInput(root=UnstructuredCommandInput(hint=text))


def _link_path(uri: str) -> str:
    """A resource link as the model should see it: a local path for `file://` links, else the URI."""
    if uri.startswith("file://"):
        from urllib.parse import unquote, urlparse

        return str(Path(unquote(urlparse(uri).path)))
    return uri
