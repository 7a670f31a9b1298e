"""What runs later: the one list of places a program outside the sandbox later executes or loads.

A file written here is persistence: the user's next `git status`, kimicode's next (trusted) session, the
user's next shell or plugin load runs it unconfined, however tightly the command that wrote it was
confined. So every write route treats these places alike (docs/permissions.md, "Persistence"):

- the permission engine asks before writing any of them, whatever the rules or the mode (`allow` rules
  and accept-edits included; yolo with the OS sandbox refuses, since nobody is asked there; only
  `--yolo --sandbox off` writes them unasked), for the edit tools, bash's arguments and redirections,
  applying a branch, the editor's `fs/write_text_file` and a hook's rewritten input alike;
- the OS sandbox (`kimicode.tools.sandbox_guard`) keeps each of them read-only **whether or not it
  exists**: an absent one is covered by an empty read-only placeholder for the command's lifetime.

`RUNS_LATER` is the data: where (`git`: inside any git directory; `workspace`: at the workspace's top;
`home`: in the user's home; `kimicode_home`: all of KIMICODE_HOME), the relative path (a trailing `/`
is a directory and everything below it), whether the sandbox covers it, and why it is on the list.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

__all__ = ["RUNS_LATER", "RunsLater", "config_reason", "git_relative", "runs_later_reason"]

Where = Literal["git", "workspace", "home", "kimicode_home"]


@dataclass(frozen=True)
class RunsLater:
    """One place of the list (see the module doc)."""

    where: Where
    path: str
    why: str
    sandbox: bool = True
    """The sandbox keeps it read-only (a placeholder when absent). False: the permission engine alone."""

    @property
    def is_dir(self) -> bool:
        return self.path.endswith("/") or self.path == ""

    @property
    def name(self) -> str:
        return self.path.rstrip("/")


def _git(path: str, why: str, sandbox: bool = True) -> RunsLater:
    return RunsLater("git", path, why, sandbox)


def _ws(path: str, why: str, sandbox: bool = True) -> RunsLater:
    return RunsLater("workspace", path, why, sandbox)


def _home(path: str, why: str) -> RunsLater:
    return RunsLater("home", path, why)


_SHELL = "a shell start-up file: every new shell of the user runs it"

RUNS_LATER: Final[tuple[RunsLater, ...]] = (
    # -- git: what makes the user's own git run a program or read configuration elsewhere ------------
    _git(
        "config",
        "git's configuration: core.fsmonitor, core.hooksPath, aliases, filters, the pager run "
        "programs on the user's next git command",
    ),
    _git("config.worktree", "per-worktree configuration (read when extensions.worktreeConfig is set)"),
    _git("commondir", "points git at another directory's config and hooks (a linked worktree's pointer)"),
    _git("hooks/", "scripts git runs on commit, checkout, merge and push"),
    _git("info/", "info/attributes names filters, info/exclude and sparse-checkout steer what git reads"),
    _git("modules/", "submodules' own git directories, with their config and hooks"),
    _git("worktrees/", "linked worktrees' git directories (their commondir, config.worktree)"),
    _git("rebase-merge/", "`git rebase --continue` runs the todo list's exec lines"),
    _git("rebase-apply/", "`git rebase --continue` and `git am --continue` resume from it"),
    _git("sequencer/", "`git cherry-pick --continue` resumes its todo; sequencer/opts is configuration"),
    _git("branches/", "legacy remote definitions: where the user's fetch and push go"),
    _git("remotes/", "legacy remote definitions: where the user's fetch and push go"),
    # -- the workspace's top: what the next session of an agent or the user's tools load --------------
    _ws(".git", "a repository made here (git init) would have its config and hooks run by the user's git"),
    _ws(".kimicode/", "kimicode's project configuration: hooks, MCP servers, rules, skills, agents"),
    _ws(
        ".claude/",
        "Claude Code's project folder (settings*.json hooks, agents, commands, skills), which "
        "kimicode and Claude Code load",
    ),
    _ws(".mcp.json", "MCP servers that kimicode's and Claude Code's next session start"),
    _ws(".claude-plugin/", "a plugin manifest: the folder loads as a plugin (hooks, MCP servers)"),
    _ws(".agents/", "skills (.agents/skills) that Kimi Code and kimicode load"),
    _ws(".codex/", "Codex's project configuration"),
    _ws(".kimi/", "Kimi Code's project configuration"),
    _ws(".envrc", "direnv runs it when the user's shell enters the folder"),
    _ws(".vscode/", "editor tasks (tasks.json runOn folderOpen) and settings that run programs"),
    _ws(
        "hooks/hooks.json",
        "a plugin's hooks, run in every workspace once the folder is added as a plugin",
        sandbox=False,
    ),
    # -- the user's home: start-up files, global configuration, agents' user folders -------------------
    _home(".bashrc", _SHELL),
    _home(".bash_profile", _SHELL),
    _home(".bash_login", _SHELL),
    _home(".bash_logout", _SHELL),
    _home(".profile", _SHELL),
    _home(".zshrc", _SHELL),
    _home(".zshenv", _SHELL),
    _home(".zprofile", _SHELL),
    _home(".zlogin", _SHELL),
    _home(".zlogout", _SHELL),
    _home(".config/fish/", _SHELL),
    _home(".inputrc", "readline's start-up file (key bindings run commands)"),
    _home(".gitconfig", "git's global configuration (fsmonitor, hooksPath, aliases run programs)"),
    _home(".config/git/", "git's global configuration and attributes"),
    _home(".ssh/config", "ssh's ProxyCommand and LocalCommand run programs"),
    _home(".claude/", "Claude Code's user folder: settings hooks, agents, plugins, skills"),
    _home(".claude.json", "Claude Code's user configuration (MCP servers)"),
    _home(".codex/", "Codex's user folder: config.toml (MCP servers, notify program)"),
    _home(".kimi/", "Kimi Code's user folder"),
    _home(".agents/", "user skills that agents load"),
    _home(".config/autostart/", "desktop sessions start these programs"),
    _home(".config/systemd/user/", "systemd user units run at login"),
    RunsLater(
        "kimicode_home",
        "",
        "kimicode's own configuration, plugins, hooks, skills and state: every later "
        "session in every workspace loads them",
    ),
)


def _within(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def _matches(entry: RunsLater, rel: str) -> bool:
    """True when `rel` (relative to the entry's place, `/`-separated) is the entry or below it."""
    if entry.path == "":
        return True
    return rel == entry.name or (entry.is_dir and rel.startswith(entry.name + "/"))


def git_relative(path: Path) -> str | None:
    """`path` relative to the git directory it lies in (`.git/...`, a submodule's or worktree's git
    directory, a bare repository), or None when it is in none."""
    parts = path.parts
    if ".git" in parts:
        i = len(parts) - 1 - parts[::-1].index(".git")
        return "/".join(parts[i + 1 :])
    for parent in path.parents:
        if (parent / "HEAD").is_file() and (parent / "objects").is_dir() and (parent / "refs").is_dir():
            return path.relative_to(parent).as_posix()
    return None


def runs_later_reason(path: Path, *, workspace: Path | None, user_home: Path, kimicode_home: Path | None) -> str | None:
    """Why `path` (resolved) is a place that runs later (see `RUNS_LATER`), or None. `kimicode_home`
    None: not checked (the caller knows `path` is a fork's own tree below it)."""
    text = str(path)
    tops: dict[Where, str | None] = {
        "kimicode_home": os.path.realpath(kimicode_home) if kimicode_home is not None else None,
        "workspace": os.path.realpath(workspace) if workspace is not None else None,
        "home": os.path.realpath(user_home),
    }
    in_git = git_relative(path)
    for entry in RUNS_LATER:
        if entry.where == "git":
            if in_git is not None and _matches(entry, in_git):
                return f"{entry.path} inside a git directory, which runs later: {entry.why}"
            continue
        top = tops[entry.where]
        if top is None or not _within(text, top):
            continue
        rel = text[len(top) :].lstrip("/")
        if _matches(entry, rel):
            return f"{_SHOWN[entry.where]}{entry.path}, which runs later: {entry.why}"
    return None


_SHOWN: Final[dict[Where, str]] = {"kimicode_home": "KIMICODE_HOME", "workspace": "", "home": "~/", "git": ".git/"}


def config_reason(
    path: Path, *, kimicode_home: Path, workspace: Path | None = None, user_home: Path | None = None
) -> str | None:
    """Why writing `path` (resolved) needs approval in every mode, whatever the rules: kimicode's own
    configuration or state, or another place on the list (a program outside any sandbox would run it).

    A fork's or branch's own working tree (`KIMICODE_HOME/worktrees/<name>/`, its `workspace`) is the
    session's workspace, not kimicode's state: files in it are judged like any workspace's."""
    kc_home = os.path.realpath(kimicode_home)
    own = _own_tree(str(path), kc_home, workspace)
    if _within(str(path), kc_home) and not own:
        return "it is kimicode's own configuration or state (KIMICODE_HOME), which every later session loads"
    if ".kimicode" in path.parts:
        return "it is kimicode's configuration (.kimicode), which the next session loads"
    home = user_home if user_home is not None else Path.home()
    why = runs_later_reason(path, workspace=workspace, user_home=home, kimicode_home=None if own else Path(kc_home))
    return f"it is {why}" if why is not None else None


def _own_tree(path: str, kc_home: str, workspace: Path | None) -> bool:
    """True when `path` is inside `workspace` and that is a tree under KIMICODE_HOME/worktrees."""
    if workspace is None:
        return False
    ws = os.path.realpath(workspace)
    return (
        _within(ws, os.path.join(kc_home, "worktrees"))
        and ws != os.path.join(kc_home, "worktrees")
        and _within(path, ws)
    )
