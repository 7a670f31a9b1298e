"""Custom slash commands: Markdown files in `.kimicode/commands/` (project) and `KIMICODE_HOME/commands/`
(user) become `/NAME` commands whose text is sent as the prompt.

`review.md` is `/review`; `git/commit.md` is `/git:commit`. In the text, `$ARGUMENTS` is replaced by
everything typed after the command and `$1` … `$9` by its words (quotes group words); when the text
uses neither, the arguments are appended on a line of their own. An optional front matter sets the
description shown in completion and help:

    ---
    description: Review the staged changes
    argument-hint: [focus]
    ---
    Review the staged changes (git diff --cached). Focus on $ARGUMENTS.

A project command wins over a user command of the same name.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

COMMANDS_DIR = "commands"
MAX_FILE_BYTES = 256 * 1024
_NAME_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_POSITIONAL = re.compile(r"\$([1-9])")


@dataclass(frozen=True)
class CustomCommand:
    """One command file."""

    name: str
    description: str
    template: str
    path: Path
    scope: Literal["project", "user", "plugin", "skill"]
    argument_hint: str = ""
    allowed_tools: tuple[str, ...] = ()
    """Claude Code's `allowed-tools`: permission rules that hold while this command's turn runs."""
    model: str = ""
    """Claude Code's `model`: the model that answers this command's turn (the session's comes back after)."""

    def render(self, arguments: str) -> str:
        """The prompt for `/name arguments`."""
        arguments = arguments.strip()
        text = self.template
        if self.scope == "skill":  # a skill's text is sent as written (its `$1` is shell, not a placeholder)
            return f"{text.rstrip()}\n\n{arguments}".strip()
        uses_all = "$ARGUMENTS" in text
        uses_positional = bool(_POSITIONAL.search(text))
        if uses_positional:
            try:
                words = shlex.split(arguments)
            except ValueError:
                words = arguments.split()
            text = _POSITIONAL.sub(lambda m: words[int(m.group(1)) - 1] if int(m.group(1)) <= len(words) else "", text)
        if uses_all:
            text = text.replace("$ARGUMENTS", arguments)
        elif arguments and not uses_positional:
            text = f"{text.rstrip()}\n\n{arguments}"
        return text.strip()


def _front_matter(text: str) -> tuple[dict[str, str], str]:
    """Simple `key: value` front matter between `---` lines (no YAML dependency), and the body."""
    if not text.startswith("---"):
        return {}, text
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return {}, text
    meta: dict[str, str] = {}
    for i in range(1, len(lines)):
        line = lines[i]
        if line.strip() == "---":
            return meta, "\n".join(lines[i + 1 :])
        key, sep, value = line.partition(":")
        if sep and key.strip():
            meta[key.strip().lower()] = value.strip().strip("\"'")
    return {}, text  # no closing line: not front matter


def load_dir(
    root: Path, scope: Literal["project", "user", "plugin", "skill"], prefix: str = ""
) -> dict[str, CustomCommand]:
    """The commands of one folder (`prefix:` before each name, for a plugin's)."""
    out: dict[str, CustomCommand] = {}
    if not root.is_dir():
        return out
    for path in sorted(root.rglob("*.md")):
        rel = path.relative_to(root).with_suffix("")
        parts = rel.parts
        if not all(_NAME_OK.match(p) for p in parts) or not path.is_file():
            continue
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        meta, body = _front_matter(text)
        body = body.strip()
        if not body:
            continue
        first = next((ln.strip().lstrip("#").strip() for ln in body.splitlines() if ln.strip()), "")
        description = meta.get("description") or (first[:77] + "…" if len(first) > 80 else first)
        name = ":".join((prefix, *parts) if prefix else parts)
        allowed = tuple(t.strip() for t in _split_rules(meta.get("allowed-tools", "")) if t.strip())
        out[name] = CustomCommand(
            name, description, body, path, scope, meta.get("argument-hint", ""), allowed, meta.get("model", "")
        )
    return out


def _split_rules(text: str) -> list[str]:
    """`Bash(git add:*), Bash(git status:*), Read` (or `[...]`): commas inside parentheses stay."""
    text = text.strip().removeprefix("[").removesuffix("]")
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth <= 0:
            out.append(cur.strip().strip("\"'"))
            cur = ""
        else:
            cur += ch
    out.append(cur.strip().strip("\"'"))
    return out


def load_custom_commands(workspace: Path, home: Path) -> dict[str, CustomCommand]:
    """Every custom command by name (without the slash), sorted; project commands override user ones.
    (The terminal also reads Claude Code's folders, plugins and skills: kimicode.extensions.slash.)"""
    found = load_dir(home / COMMANDS_DIR, "user")
    found.update(load_dir(workspace / ".kimicode" / COMMANDS_DIR, "project"))
    return dict(sorted(found.items()))
