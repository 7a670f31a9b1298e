"""Helpers for the branches tests: a fake-server script routed by branch, a small git project."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from helpers import git

from kimicode.testing import FakeServer, Reply, ToolCall
from kimicode.testing.replies import RecordedRequest

BUGGY = "def add(a, b):\n    return a - b\n"
GOOD = "def add(a, b):\n    return a + b\n"
GOOD_BIG = "def add(a, b):\n    # the sum of a and b\n    total = a + b\n    return total\n"
WRONG = "def add(a, b):\n    return a * b\n"
VERIFY = "python3 -c 'import app; assert app.add(2, 3) == 5'"


def git_project(ws: Path) -> None:
    """A repository with one commit holding a buggy app.py, an ignored file, and an uncommitted note."""
    git(ws, "init", "-q", "-b", "main")
    (ws / "app.py").write_text(BUGGY)
    (ws / ".gitignore").write_text("__pycache__/\n*.env\n")
    git(ws, "add", "-A")
    git(ws, "commit", "-qm", "init")
    (ws / "notes.txt").write_text("uncommitted\n")
    (ws / "secret.env").write_text("TOKEN=1\n")


def dot_git_state(ws: Path) -> dict[str, str]:
    """What a user sees of their repository: branches (without kimicode's), HEAD, index, status, stash."""
    return {
        "head": git(ws, "rev-parse", "HEAD"),
        "branch": git(ws, "rev-parse", "--abbrev-ref", "HEAD"),
        "branches": "\n".join(
            b for b in git(ws, "branch", "--list", "--format=%(refname)").split("\n") if "kimicode/" not in b
        ),
        "index": (ws / ".git" / "index").read_bytes().hex(),
        "stash": git(ws, "stash", "list"),
        "config": (ws / ".git" / "config").read_text(),
    }


def write_turn(content: str, answer: str = "done", path: str = "app.py") -> list[Reply]:
    return [Reply(tool_calls=[ToolCall("write_file", {"path": path, "content": content})]), Reply(content=answer)]


class Router:
    """A script per branch (by the `x-kimicode-branch` header; `parent` for the session's own requests)."""

    def __init__(self, server: FakeServer, scripts: dict[str, Sequence[Reply | Callable[[RecordedRequest], Any]]]):
        self.queues = {k: list(v) for k, v in scripts.items()}
        self.lock = threading.Lock()
        self.by_branch: dict[str, list[RecordedRequest]] = {}
        server.add(*[self.reply for _ in range(sum(len(v) for v in self.queues.values()))])

    def reply(self, request: RecordedRequest) -> Any:
        key = request.headers.get("x-kimicode-branch", "parent")
        with self.lock:
            self.by_branch.setdefault(key, []).append(request)
            item = self.queues[key].pop(0)
        return item(request) if callable(item) else item


def bash(command: str) -> Reply:
    """The model runs `command` with the bash tool."""
    return Reply(tool_calls=[ToolCall("bash", {"command": command})])


async def explore_and_close(parent: Any, **kw: Any) -> Any:
    """`parent.explore("fix add", ...)`, then the parent closed whatever happened."""
    try:
        return await parent.explore("fix add", **kw)
    finally:
        await parent.aclose()
