"""Project instructions: AGENTS.md files added to the system prompt.

Read, lowest precedence first: Claude Code's user memory `~/.claude/CLAUDE.md` (`CLAUDE_CONFIG_DIR`), then
`KIMICODE_HOME/AGENTS.md` (the user's own conventions), then one file per
directory from the repository root (the nearest ancestor holding `.git`, else the workspace itself) down
to the workspace. In each directory `AGENTS.md` is read, or `CLAUDE.md` when there is no AGENTS.md, so
projects set up for Claude Code work unchanged. Each file is shown to the model with its path.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

NAMES = ("AGENTS.md", "CLAUDE.md")
"""File names looked for in each directory, the first found wins."""
MAX_FILE_CHARS = 40_000
"""A longer file is cut (with a note) so a runaway file cannot fill the context window."""


@dataclass(frozen=True)
class InstructionFile:
    """One instruction file and its text (cut to MAX_FILE_CHARS)."""

    path: Path
    text: str
    truncated: bool = False


def repo_root(workspace: Path) -> Path:
    """The nearest directory at or above `workspace` that holds `.git` (a directory or a worktree file)."""
    for directory in (workspace, *workspace.parents):
        if (directory / ".git").exists():
            return directory
    return workspace


def _read(directory: Path, names: tuple[str, ...] = NAMES) -> InstructionFile | None:
    for name in names:
        path = directory / name
        if not path.is_file():
            continue
        try:
            data = path.read_bytes()
        except OSError:
            return None  # unreadable: skipped rather than failing the session
        text = data.decode("utf-8", errors="replace").strip()
        if not text:
            return None
        cut = len(text) > MAX_FILE_CHARS
        return InstructionFile(path, text[:MAX_FILE_CHARS] if cut else text, cut)
    return None


def instruction_files(workspace: Path, home: Path | None) -> list[InstructionFile]:
    """The instruction files that apply to `workspace`, general ones first."""
    workspace = Path(os.path.realpath(workspace))
    dirs: list[Path] = []
    out: list[InstructionFile] = []
    seen: set[Path] = set()
    if home is not None:  # the user's own files (a hermetic agent, home None, reads none)
        from kimicode.config.claude import claude_home

        claude = _read(Path(os.path.realpath(claude_home())), ("CLAUDE.md",))
        if claude is not None:
            seen.add(claude.path)
            out.append(claude)
        dirs.append(Path(os.path.realpath(home)))
    root = repo_root(workspace)
    chain = [workspace]
    if root != workspace:  # root is an ancestor: every directory from the workspace up to it
        for parent in workspace.parents:
            chain.append(parent)
            if parent == root:
                break
    dirs.extend(reversed(chain))
    for directory in dirs:
        found = _read(directory)
        if found is not None and found.path not in seen:
            seen.add(found.path)
            out.append(found)
    return out


def instructions_prompt(files: list[InstructionFile]) -> str:
    """The system-prompt section for `files` (empty when there are none)."""
    if not files:
        return ""
    parts = [
        "# Project instructions\n\n"
        "The user and the project maintainers left these instructions. Follow them. When they conflict, "
        "a file deeper in the directory tree (closer to the working directory) wins over a more general one."
    ]
    for f in files:
        note = f"\n\n[… cut: the file is longer than {MAX_FILE_CHARS:,} characters]" if f.truncated else ""
        parts.append(f"## {f.path}\n\n{f.text}{note}")
    return "\n\n".join(parts)


def project_instructions(workspace: Path, home: Path | None) -> str:
    """The system-prompt section for the workspace (see the module docstring)."""
    return instructions_prompt(instruction_files(workspace, home))
