"""The bottom toolbar under the prompt: model and effort, context use, cache share, cost (when the model
has prices), MCP servers (when configured), permission mode, workspace, branch.

Redrawn on every keystroke, so it only formats numbers kept up to date by the turn's events; the git
branch is read from `.git/HEAD` and cached until that file changes (one `stat` per redraw, no process).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kimicode.events import ContextUpdated, Event, UsageUpdated
from kimicode.ui.format import money, one_line, tokens


class GitBranch:
    """The current branch of the repository containing `workspace` (or a short commit id when detached)."""

    def __init__(self, workspace: Path) -> None:
        self._head = self._find_head(workspace)
        self._stamp: tuple[int, int] | None = None
        self._branch: str | None = None

    @staticmethod
    def _find_head(workspace: Path) -> Path | None:
        d = workspace
        for _ in range(64):
            dot_git = d / ".git"
            if dot_git.is_dir():
                return dot_git / "HEAD"
            if dot_git.is_file():  # a worktree or submodule: "gitdir: <path>"
                try:
                    first = dot_git.read_text(encoding="utf-8", errors="replace").strip()
                except OSError:
                    return None
                if first.startswith("gitdir:"):
                    gitdir = Path(first[len("gitdir:") :].strip())
                    return (gitdir if gitdir.is_absolute() else d / gitdir) / "HEAD"
                return None
            if d.parent == d:
                return None
            d = d.parent
        return None

    def get(self) -> str | None:
        """The branch name, or None outside a repository."""
        if self._head is None:
            return None
        try:
            st = os.stat(self._head)
        except OSError:
            return None
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp != self._stamp:
            self._stamp = stamp
            try:
                text = self._head.read_text(encoding="utf-8", errors="replace").strip()
            except OSError:
                return None
            if text.startswith("ref:"):
                ref = text[4:].strip()
                self._branch = ref.removeprefix("refs/heads/")
            else:
                self._branch = text[:8] or None
        return self._branch


@dataclass
class Stats:
    """Numbers the toolbar shows, updated from `UsageUpdated` and `ContextUpdated` events."""

    context_used: int = 0
    context_window: int = 0
    context_estimated: bool = True
    last_prompt_tokens: int = 0
    last_cached_tokens: int = 0

    def update(self, ev: Event) -> None:
        """Take in a usage or context event (others are ignored)."""
        if isinstance(ev, ContextUpdated):
            self.context_used, self.context_window = ev.used, ev.window
            self.context_estimated = False
        elif isinstance(ev, UsageUpdated):
            self.last_prompt_tokens = ev.prompt_tokens
            self.last_cached_tokens = ev.cached_tokens

    def reset(self) -> None:
        """A new conversation."""
        self.context_used = self.last_prompt_tokens = self.last_cached_tokens = 0
        self.context_estimated = True


@dataclass(frozen=True)
class McpStatus:
    """How many MCP servers are ready and failed (failed or timed out) of the configured ones."""

    ready: int
    failed: int
    total: int

    @property
    def starting(self) -> bool:
        return self.ready + self.failed < self.total


def short_path(path: Path, width: int = 40) -> str:
    """`~/src/project`, or `…/deep/project` when longer than `width`."""
    text = str(path)
    home = str(Path.home())
    if text == home or text.startswith(home + os.sep):
        text = "~" + text[len(home) :]
    if len(text) > width:
        text = "…" + text[-(width - 1) :]
    return text


def toolbar_fragments(
    *,
    model: str,
    effort: str | None,
    stats: Stats,
    window: int,
    estimate: int,
    mode: str,
    workspace: Path,
    branch: str | None,
    cost: float | None = None,
    mcp: McpStatus | None = None,
    window_known: bool = True,
) -> list[tuple[str, str]]:
    """Formatted-text fragments (style, text) for prompt_toolkit's bottom toolbar.

    `cost` (dollars, None when the model has no prices) and `mcp` (None without servers) are shown only
    when known. `window_known` False: the window is a default guess (no flag, config, known model or server
    answer yet), so it is said to be unknown rather than shown as if it were the model's.
    """
    used = stats.context_used if not stats.context_estimated else estimate
    window = window or stats.context_window or 1
    pct = 100 * used / window
    prefix = "~" if stats.context_estimated else ""
    ctx_style = "class:toolbar.warn" if pct >= 80 else ""
    out: list[tuple[str, str]] = [
        ("class:toolbar.model", f" {model}"),
        ("", f" · {effort or 'default'}"),
        ("class:toolbar.sep", " │ "),
        (ctx_style, f"ctx {prefix}{tokens(used)}/{tokens(window)} ({pct:.0f}%)"),
    ]
    if not window_known:
        out[-1] = ("", f"ctx {prefix}{tokens(used)}")
        out.append(("class:toolbar.dim", " (window not known yet)"))
    if stats.last_prompt_tokens:
        share = 100 * stats.last_cached_tokens / stats.last_prompt_tokens
        out += [("class:toolbar.sep", " │ "), ("", f"cached {share:.0f}%")]
    if cost is not None:
        out += [("class:toolbar.sep", " │ "), ("", money(cost))]
    if mcp is not None and mcp.total:
        if mcp.starting:
            out += [("class:toolbar.sep", " │ "), ("class:toolbar.dim", f"mcp {mcp.ready}/{mcp.total}…")]
        else:
            style = "class:toolbar.warn" if mcp.failed else ""
            out += [("class:toolbar.sep", " │ "), (style, f"mcp {mcp.ready}/{mcp.total}")]
    mode_style = {
        "yolo": "class:toolbar.yolo",
        "accept-edits": "class:toolbar.edits",
        "plan": "class:toolbar.plan",
    }.get(mode, "")
    out += [
        ("class:toolbar.sep", " │ "),
        (mode_style, f"⏵ {mode}"),
        ("class:toolbar.dim", " (shift-tab)"),
        ("class:toolbar.sep", " │ "),
        ("", short_path(workspace)),
    ]
    if branch:
        out.append(("class:toolbar.dim", f" ⎇ {branch}"))
    out.append(("", " "))
    return out


def mcp_counts(manager: Any) -> McpStatus | None:
    """The toolbar's MCP counts from the agent's MCP manager (None when no server is configured)."""
    if manager is None:
        return None
    servers = manager.servers
    return McpStatus(
        ready=sum(1 for s in servers if s.status == "ready"),
        failed=sum(1 for s in servers if s.status in ("failed", "timeout")),
        total=len(servers),
    )


def mcp_failure_line(failed: Sequence[Any], home: Path) -> str:
    """One status line naming the MCP servers that failed or timed out, and where their logs are."""
    parts = [
        f"{s.config.name} {'timed out' if s.status == 'timeout' else 'failed'}"
        + (f" ({one_line(s.error, 80)})" if s.error else "")
        for s in failed
    ]
    return f"! MCP: {'; '.join(parts)}; skipped (logs: {short_path(home / 'logs', 30)})"
