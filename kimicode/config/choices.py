"""The allowed values and defaults of kimicode's settings, written once.

`AgentOptions` (kimicode/agent/options.py), the command line's flags, `kimicode batch`, the config-file
schema and the permission engine all take their literals and defaults from here, so a new effort or a
new default turn limit is one edit.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

Effort = Literal["low", "high", "max"]
"""Reasoning effort (`--thinking`, `thinking=`, `defaults.thinking`, `models.NAME.reasoning_effort`)."""
EFFORTS: Final[tuple[Effort, ...]] = get_args(Effort)

PermissionMode = Literal["default", "accept-edits", "plan", "yolo"]
"""What may run without asking (`--permission-mode`, `permission_mode=`)."""
PERMISSION_MODES: Final[tuple[PermissionMode, ...]] = get_args(PermissionMode)

SandboxMode = Literal["off", "auto", "workspace-write"]
"""How bash is confined (`--sandbox`, `sandbox=`, `sandbox.mode`)."""
SANDBOX_MODES: Final[tuple[SandboxMode, ...]] = get_args(SandboxMode)

Origin = Literal["interactive", "headless", "library", "acp", "serve"]
"""Which face runs a session (recorded in its log, shown by listings)."""
ORIGINS: Final[tuple[Origin, ...]] = get_args(Origin)

SwitchPolicy = Literal["keep", "strip", "compact"]
"""What a change of model does to the earlier assistant messages (`--on-switch`, `[model] on_switch`,
`models.NAME.on_switch`, `on_switch=`): keep them whole; keep content and tool calls but leave out the
reasoning another model wrote; or compact the history into a summary first (docs/models.md)."""
SWITCH_POLICIES: Final[tuple[SwitchPolicy, ...]] = get_args(SwitchPolicy)

Scope = Literal["normal", "strict"]
"""How closely the model keeps to what was asked (`--scope`, `[agent] scope`, `scope=`): `strict` adds
direct limits to the system prompt (docs/models.md)."""
SCOPES: Final[tuple[Scope, ...]] = get_args(Scope)
DEFAULT_SCOPE: Final[Scope] = "normal"

DEFAULT_PERMISSION_MODE: Final[PermissionMode] = "default"
DEFAULT_MAX_TURNS: Final = 200
"""Model steps per turn (`--max-turns`)."""
DEFAULT_SUBAGENT_MAX_TURNS: Final = 50
"""Model steps of one subagent (`[subagents] max_turns`)."""
DEFAULT_REPEAT_LIMIT: Final = 5
"""Identical consecutive tool calls that end a turn (a warning comes 2 earlier)."""
DEFAULT_MAX_RETRIES: Final = 5
DEFAULT_RETRY_BASE_DELAY: Final = 1.0
DEFAULT_REQUEST_TIMEOUT: Final = 300.0
"""Seconds to wait for the server or its next chunk."""
DEFAULT_PRUNE_KEEP_TOKENS: Final = 100_000
DEFAULT_PRUNE_THRESHOLD: Final = 0.70
DEFAULT_COMPACT_THRESHOLD: Final = 0.85

# The defaults of config.toml's keys (kimicode/config/sections.py puts each beside its key; the modules that use
# them import them from here, which costs no pydantic import).
DEFAULT_TOOL_OUTPUT_CAP_TOKENS: Final = 25_000
DEFAULT_SPILL_MAX_BYTES: Final = 256 * 1024 * 1024
"""Disk a session's saved outputs may use ([context] spill_max_bytes); the oldest go first beyond it."""
DEFAULT_MCP_STARTUP_TIMEOUT: Final = 10.0
DEFAULT_MCP_TOOL_TIMEOUT: Final = 300.0
DEFAULT_IMAGE_MAX_SIDE: Final = 2048
DEFAULT_IMAGE_MAX_BYTES: Final = 4 * 1024 * 1024
DEFAULT_WEB_MAX_CHARS: Final = 40_000
DEFAULT_WEB_MAX_REDIRECTS: Final = 5
DEFAULT_WEB_TIMEOUT: Final = 20.0
DEFAULT_CHECKPOINT_MAX_FILE_MB: Final = 10.0
DEFAULT_CHECKPOINT_MAX_AGE_DAYS: Final = 30.0
DEFAULT_SUBAGENT_TOOLS: Final = ("read_file", "glob", "grep")
DEFAULT_SANDBOX_MAX_PROCESSES: Final = 1024
DEFAULT_SANDBOX_MAX_MEMORY_MB: Final = 8192
DEFAULT_SANDBOX_MAX_FILE_SIZE_MB: Final = 4096
DEFAULT_SANDBOX_MAX_CPU_SECONDS: Final = 1800


def check_choice(name: str, value: object, allowed: tuple[str, ...], *, optional: bool = False) -> None:
    """Raise ValueError naming the setting and the allowed values when `value` is not one of them."""
    if optional and value is None:
        return
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)} (got {value!r})")
