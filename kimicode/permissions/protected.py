"""Files that run later: writing them asks even in accept-edits (unless an `edit(...)` rule names them).

A file in this list is executed, loaded or obeyed by another program without anyone typing a command
naming it: git hooks and filters, direnv, editors' per-project autoload files and tasks, CI workflows,
dev containers, other agents' instructions and settings, Python's start-up hooks (`*.pth`,
`sitecustomize.py`, virtualenv activation scripts) and package managers' per-project configuration
(which can point an install at another index or run scripts). Build files (Makefile, package.json,
pyproject.toml, conftest.py) are not on the list: they run only when someone runs the build or tests.
`AUTORUN_FILES` is the one list (docs/permissions.md prints it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

__all__ = ["AUTORUN_FILES", "autorun_reason", "protected_reason"]

_DIRS: Final = (
    ".husky",
    ".githooks",
    ".devcontainer",
    ".vscode",
    ".idea",
    ".zed",
    ".helix",
    ".fleet",
    ".claude",
    ".codex",
    ".cursor",
    ".windsurf",
    ".gemini",
    ".kiro",
    ".continue",
    ".aider",
    ".clinerules",
    ".github/workflows",
    ".github/actions",
    ".mvn",
    ".cargo/config.toml",
    ".cargo/config",
    ".bundle/config",
    ".config/pip",
)
"""Directories (anywhere in the workspace) whose every file runs or steers something."""

_NAMES: Final = (
    # git, direnv, CI
    ".envrc",
    ".gitattributes",
    ".gitmodules",
    ".gitlab-ci.yml",
    ".pre-commit-config.yaml",
    # other agents' instructions (read and obeyed at their next start)
    "AGENTS.md",
    "AGENT.md",
    "CLAUDE.md",
    "CLAUDE.local.md",
    "GEMINI.md",
    ".cursorrules",
    ".windsurfrules",
    ".clinerules",
    "copilot-instructions.md",
    ".aider.conf.yml",
    # Python start-up and virtualenvs
    "sitecustomize.py",
    "usercustomize.py",
    "pyvenv.cfg",
    # package managers' per-project configuration
    ".npmrc",
    ".yarnrc",
    ".yarnrc.yml",
    ".pnpmfile.cjs",
    "pip.conf",
    "pip.ini",
    "uv.toml",
    "poetry.toml",
    "bunfig.toml",
    ".bunfig.toml",
    ".gemrc",
    ".condarc",
    "gradle.properties",
    ".tool-versions",
    "mise.toml",
    ".mise.toml",
    ".pypirc",
    # editors' per-project autoload files
    ".nvim.lua",
    ".nvimrc",
    ".exrc",
    ".vimrc",
    ".lvimrc",
    ".dir-locals.el",
    ".dir-locals-2.el",
)
"""File names (in any directory of the workspace)."""

_SUFFIXES: Final = (".pth",)
"""Python runs the import lines of every `*.pth` file in site-packages at start-up."""

AUTORUN_FILES: Final = (
    *(f"{d}/**" for d in _DIRS),
    *_NAMES,
    *(f"*{s}" for s in _SUFFIXES),
    "bin/activate*",
    "Scripts/activate*",
)
"""The documented list: `dir/**` is everything below such a directory, a name matches in any
directory, `*.pth` any file with that suffix, `bin/activate*` a virtualenv's activation scripts."""


def autorun_reason(path: Path) -> str | None:
    """Why `path` runs (or is obeyed) automatically once written (see AUTORUN_FILES), or None."""
    parts = path.parts
    for entry in _DIRS:
        top = tuple(entry.split("/"))
        for i in range(len(parts) - len(top) + 1):
            if parts[i : i + len(top)] == top:
                return f"{entry}/ holds files other programs run or obey automatically"
    name = path.name
    if name in _NAMES:
        return f"{name} is run, loaded or obeyed automatically by other programs"
    if name.lower().endswith(_SUFFIXES):
        return f"{name} is run by Python at every start (a .pth file's import lines execute)"
    if len(parts) >= 2 and parts[-2] in ("bin", "Scripts") and name.lower().startswith("activate"):
        return f"{name} is a virtualenv activation script (run by every shell that activates it)"
    return None


def protected_reason(path: Path) -> str | None:
    """Why writing `path` (resolved) needs approval even where edits are allowed, unless a rule names it:
    git's internals (`.git/config` and hooks run code on the next `git` command), anything inside a
    directory git takes for a bare repository and the `HEAD` file that makes one, and the files other
    programs run automatically (`AUTORUN_FILES`)."""
    if ".git" in path.parts:
        return "it is inside .git (git's configuration and hooks run code)"
    if path.name == "HEAD":
        return "a HEAD file makes its directory a git repository (whose config and hooks run code)"
    for parent in path.parents:
        if (parent / "HEAD").is_file() and (parent / "objects").is_dir() and (parent / "refs").is_dir():
            return f"it is inside the git repository {parent} (a bare one: its config and hooks run code)"
    return autorun_reason(path)
