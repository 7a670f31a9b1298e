"""Claude protocol mode, part 5: the SDK's hook functions (`hooks=` of ClaudeAgentOptions) as kimicode hooks.

`initialize` names, per event, matchers and callback ids; each becomes a hook of kimicode's own hook engine
(kimicode/extensions) whose run is a `hook_callback` control request instead of a command. The engine judges
the answer as it judges a hook command's JSON (Claude Code's format: `decision`, `hookSpecificOutput` with
`permissionDecision`, `additionalContext`, `continue: false`, ...), so the SDK's hooks see and decide what
Claude Code's would, with the same payload.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from kimicode.cli.claude_control import Channel, ControlError
from kimicode.extensions.hooks import EVENTS, HookCall, HookConfigError, HookSet, HookSpec, compile_matcher

if TYPE_CHECKING:
    from kimicode.agent.core import Agent

SOURCE = "Claude Agent SDK"


def _caller(channel: Channel, callback_id: str) -> HookCall:
    async def call(stdin: bytes) -> tuple[int, str, str]:
        payload = json.loads(stdin)
        try:
            answer = await channel.request(
                {
                    "subtype": "hook_callback",
                    "callback_id": callback_id,
                    "input": payload,
                    "tool_use_id": payload.get("tool_use_id"),
                }
            )
        except ControlError as exc:
            return 1, "", str(exc)
        return 0, json.dumps(answer, ensure_ascii=False), ""

    return call


def install_hooks(agent: Agent, config: Mapping[str, Any], channel: Channel, warn: Callable[[str], None]) -> int:
    """Add the SDK's hooks of `config` (initialize's `hooks`) to `agent`; the number added. An event kimicode
    does not run, or a matcher that is not a regular expression, is said once and skipped."""
    from kimicode.extensions.hookrun import Hooks

    hooking = agent.extras.hooking
    if hooking.hooks is None:
        hooking.hooks = Hooks(HookSet(), agent.workspace, {})
    added = 0
    for event, matchers in config.items():
        if event not in EVENTS:
            warn(f"the SDK's {event} hooks do not run: kimicode runs hooks for {', '.join(EVENTS)}")
            continue
        for entry in matchers if isinstance(matchers, list) else ():
            if not isinstance(entry, dict):
                continue
            matcher = str(entry.get("matcher") or "")
            try:
                pattern = compile_matcher(matcher, f"the SDK's {event} hook")
            except HookConfigError as exc:
                warn(f"{exc}; skipped")
                continue
            timeout = entry.get("timeout")
            for callback_id in entry.get("hookCallbackIds") or ():
                hooking.hooks.set.add(
                    HookSpec(
                        event=event,
                        command=f"hook function {callback_id}",
                        matcher=matcher,
                        timeout=float(timeout) if isinstance(timeout, int | float) and timeout > 0 else 60.0,
                        source=SOURCE,
                        pattern=pattern,
                        call=_caller(channel, str(callback_id)),
                    )
                )
                added += 1
    return added
