"""Tab completion for slash commands and `@path` mentions, and attaching mentioned files to a message.

The workspace's files are listed once, in a background thread, with ripgrep (`rg --files`, so
`.gitignore` is respected) or, when ripgrep is missing, a small walk applying `.gitignore` with pathspec;
the list is cached and refreshed after each turn. Matching a query against 100k paths is a substring
scan over pre-lowercased strings (a few milliseconds), with a subsequence match as a fallback, and runs
in prompt_toolkit's completion thread so typing never waits for it.

A mentioned image (`@shot.png`) is not inlined: it is returned as an `image` attachment, which the
session sends as an image part of the message.
"""

from __future__ import annotations

import heapq
import os
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document

MAX_FILES = 500_000
LIST_TIMEOUT = 30.0
FIRST_LISTING_WAIT = 5.0
"""How long an `@` completion waits for the workspace's first listing (in the completion thread)."""


def _list_with_ripgrep(root: str) -> list[str] | None:
    from kimicode.tools.search import find_ripgrep, in_git_repo  # imported when first listing, not at start-up

    rg = find_ripgrep()
    if not rg:
        return None
    args = [rg, "--files", "--no-config", "--no-messages", "--no-ignore-global", "--null"]
    if not in_git_repo(root):
        args.append("--no-require-git")
    try:
        out = subprocess.run(
            args,
            cwd=root,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            timeout=LIST_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode not in (0, 1):
        return None
    names = out.stdout.decode("utf-8", errors="surrogateescape").split("\0")
    return [n[2:] if n.startswith("./") else n for n in names if n][:MAX_FILES]


def _list_with_python(root: str) -> list[str]:
    """The fallback listing without ripgrep: hidden entries and a few heavy directories skipped, and each
    directory's `.gitignore`/`.ignore` applied to what lies below it (pathspec; no ripgrep precedence)."""
    import pathspec

    found: list[str] = []
    skip = {".git", "node_modules", "__pycache__", ".venv", "venv", ".mypy_cache", ".pytest_cache"}
    rules: list[tuple[str, pathspec.PathSpec[Any]]] = []  # (directory relative to root, its ignore rules)
    deadline = time.monotonic() + LIST_TIMEOUT

    def ignored(rel: str, is_dir: bool) -> bool:
        for base, spec in rules:
            if not base or rel.startswith(base + "/"):
                sub = rel[len(base) + 1 :] if base else rel
                if spec.match_file(sub + ("/" if is_dir else "")):
                    return True
        return False

    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        rel_dir = "" if rel_dir == "." else rel_dir.replace(os.sep, "/")
        for name in (".gitignore", ".ignore"):
            try:
                with open(os.path.join(dirpath, name), encoding="utf-8", errors="replace") as fh:
                    rules.append((rel_dir, pathspec.PathSpec.from_lines("gitignore", fh)))
            except (OSError, ValueError):
                pass
        prefix = rel_dir + "/" if rel_dir else ""
        dirnames[:] = sorted(
            d for d in dirnames if d not in skip and not d.startswith(".") and not ignored(prefix + d, True)
        )
        for name in filenames:
            if not name.startswith(".") and not ignored(prefix + name, False):
                found.append(prefix + name)
                if len(found) >= MAX_FILES:
                    return found
        if time.monotonic() > deadline:
            break
    return found


def list_files(root: Path) -> list[str]:
    """Files under `root` (relative, `/`-separated, sorted), ignore files respected."""
    real = os.path.realpath(root)
    files = _list_with_ripgrep(real)
    if files is None:
        files = _list_with_python(real)
    if os.sep != "/":
        files = [f.replace(os.sep, "/") for f in files]
    files.sort()
    return files


class FileIndex:
    """The workspace's file list, built in a background thread and searched by completion."""

    def __init__(self, root: Path, lister: Callable[[Path], list[str]] = list_files) -> None:
        self.root = root
        self._lister = lister
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._entries: list[str] = []
        self._lower: list[str] = []
        self._names: list[str] = []
        self._ready = threading.Event()
        self.listed_at = 0.0

    def refresh(self) -> None:
        """(Re)list the files in the background unless a listing is already running."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(target=self._build, name="kimicode-file-index", daemon=True)
            self._thread.start()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the first listing; True when it is available."""
        return self._ready.wait(timeout)

    def _build(self) -> None:
        try:
            files = self._lister(self.root)
        except Exception:
            files = []
        dirs: set[str] = set()
        for f in files:
            i = f.rfind("/")
            while i > 0:
                d = f[:i]
                if d in dirs:
                    break
                dirs.add(d)
                i = f.rfind("/", 0, i)
        entries = files + sorted(d + "/" for d in dirs)
        lower = [e.lower() for e in entries]
        names = [e.rstrip("/").rsplit("/", 1)[-1].lower() for e in entries]
        with self._lock:
            self._entries, self._lower, self._names = entries, lower, names
            self.listed_at = time.monotonic()
        self._ready.set()

    def __len__(self) -> int:
        return len(self._entries)

    def files_under(self, prefix: str) -> list[str]:
        """Listed files whose path starts with `prefix` (a directory ending with `/`, or "")."""
        with self._lock:
            entries = self._entries
        return [e for e in entries if e.startswith(prefix) and not e.endswith("/")]

    def search(self, query: str, limit: int = 50) -> list[str]:
        """Paths matching `query` best first: name prefix, path prefix, name substring, path substring, fuzzy."""
        with self._lock:
            entries, lower, names = self._entries, self._lower, self._names
        q = query.lower()
        if not q:
            top = [e for e in entries if "/" not in e.rstrip("/")]
            return sorted(top, key=lambda e: (e.endswith("/"), e))[:limit]
        scored: list[tuple[int, int, str]] = []
        for i, path in enumerate(lower):
            if q in path:
                name = names[i]
                rank = 0 if name.startswith(q) else 1 if path.startswith(q) else 2 if q in name else 3
                scored.append((rank, len(path), entries[i]))
        best = heapq.nsmallest(limit, scored)
        if len(best) < limit and len(q) >= 2:
            pattern = re.compile(".*?".join(re.escape(c) for c in q))
            have = {p for _, _, p in best}
            fuzzy: list[tuple[int, int, str]] = []
            for i, path in enumerate(lower):
                if entries[i] not in have:
                    m = pattern.search(path)
                    if m is not None:
                        fuzzy.append((4, m.end() - m.start(), entries[i]))
            best += heapq.nsmallest(limit - len(best), fuzzy)
        return [p for _, _, p in best]


Choice = str | tuple[str, str]
"""An argument choice: the text, or (text, a short description shown next to it)."""


@dataclass(frozen=True)
class CommandInfo:
    """What completion needs to know about a slash command."""

    name: str
    summary: str
    choices: Callable[[], Sequence[Choice]] | None = None


def quote_path(path: str) -> str:
    """`@path`, or `@"path with spaces"`."""
    return f'@"{path}"' if any(c.isspace() for c in path) else f"@{path}"


class PromptCompleter(Completer):
    """Completes `/command [argument]` at the start of the input and `@path` anywhere."""

    def __init__(self, commands: Callable[[], Mapping[str, CommandInfo]], index: FileIndex) -> None:
        self.commands = commands
        self.index = index

    def get_completions(self, document: Document, complete_event: CompleteEvent) -> Iterable[Completion]:
        before = document.text_before_cursor
        if before.startswith("/") and "\n" not in before:
            yield from self._commands(before)
            return
        match = re.search(r'(?:^|\s)(@"[^"]*|@\S*)$', before)
        if match is None:
            return
        word = match.group(1)
        query = word[2:] if word.startswith('@"') else word[1:]
        # This runs in the completion thread: wait (briefly) for the first listing, or a mention typed
        # right after start-up (or pasted in one burst) finds nothing and nothing asks again.
        self.index.wait(FIRST_LISTING_WAIT)
        for path in self.index.search(query, 50):
            yield Completion(quote_path(path), start_position=-len(word), display=path)

    def _commands(self, before: str) -> Iterable[Completion]:
        commands = self.commands()
        name, sep, arg = before[1:].partition(" ")
        if not sep:
            for cmd in sorted(commands.values(), key=lambda c: c.name):
                if cmd.name.startswith(name):
                    yield Completion("/" + cmd.name, start_position=-len(before), display_meta=cmd.summary)
            return
        target = commands.get(name)
        if target is None or target.choices is None or " " in arg:
            return
        for choice in target.choices():
            value, meta = (choice, "") if isinstance(choice, str) else choice
            if value.startswith(arg):
                yield Completion(value, start_position=-len(arg), display_meta=meta or None)


# -- attaching mentioned files ------------------------------------------------------------------------

MENTION = re.compile(r'(?<![\w@])@(?:"([^"\n]+)"|([^\s"]+))')
_TRAILING = ",.;:!?)]}'\""


@dataclass(frozen=True)
class Attachment:
    """A mentioned path: a file or directory listing appended to the message, or an image to send."""

    path: str
    chars: int
    lines: int
    note: str = ""
    kind: Literal["file", "directory", "image"] = "file"
    resolved: Path | None = None
    """The path on disk (images are read from it when the message is sent)."""


def is_image_file(path: Path) -> bool:
    """An image the model can be sent (by its suffix: PNG, JPEG, GIF, WebP)."""
    from kimicode.tools.images import is_image_path

    return path.is_file() and is_image_path(path)


def _resolve_mention(raw: str, workspace: Path) -> tuple[str, Path] | None:
    candidates = [raw]
    stripped = raw.rstrip(_TRAILING)
    if stripped and stripped != raw:
        candidates.append(stripped)
    for cand in candidates:
        path = Path(os.path.expanduser(cand))
        if not path.is_absolute():
            path = workspace / path
        if path.exists():
            return cand, path
    return None


def expand_mentions(
    text: str, workspace: Path, cap: int, index: FileIndex | None = None
) -> tuple[str, list[Attachment]]:
    """Append the content of every `@file` mentioned in `text` (within `cap` characters in total).

    Directories are attached as a listing of their files. Images are not appended: they come back as
    attachments of kind `image` for the caller to send. Unknown paths are left as plain text.
    """
    blocks: list[str] = []
    attached: list[Attachment] = []
    seen: set[Path] = set()
    budget = cap
    for m in MENTION.finditer(text):
        found = _resolve_mention(m.group(1) or m.group(2), workspace)
        if found is None:
            continue
        shown, path = found
        real = path.resolve()
        if real in seen:
            continue
        seen.add(real)
        if is_image_file(path):
            attached.append(Attachment(shown, 0, 0, "image", "image", path))
            continue
        if path.is_dir():
            body, note = _listing(path, workspace, index)
        else:
            body, note = _file_body(path)
        if len(body) > budget:
            cut = len(body) - budget
            body = body[:budget] + (
                f"\n[… {cut} more characters not attached (the attachment limit is {cap} characters); "
                f"use read_file to see the rest]"
            )
            note = note or f"cut to {budget} characters"
        budget = max(0, budget - len(body))
        kind: Literal["file", "directory"] = "directory" if path.is_dir() else "file"
        blocks.append(f'<{kind} path="{shown.rstrip("/")}">\n{body}\n</{kind}>')
        attached.append(Attachment(shown, len(body), body.count("\n") + 1 if body else 0, note, kind, path))
    if not blocks:
        return text, attached
    return text + "\n\n" + "\n\n".join(blocks), attached


def _file_body(path: Path) -> tuple[str, str]:
    try:
        with open(path, "rb") as fh:
            data = fh.read(4 * 1024 * 1024 + 1)
    except OSError as exc:
        return f"[could not read this file: {exc.strerror or exc}]", "unreadable"
    if b"\x00" in data[:8192]:
        return "[binary file: not attached]", "binary, not attached"
    text = data.decode("utf-8", errors="replace")
    return text.rstrip("\n"), ""


def _listing(path: Path, workspace: Path, index: FileIndex | None) -> tuple[str, str]:
    try:
        rel = path.resolve().relative_to(workspace.resolve()).as_posix()
    except ValueError:
        rel = None
    if index is not None and rel is not None and len(index):
        names = index.files_under("" if rel == "." else rel + "/")
    else:
        names = sorted(p.name for p in path.iterdir())[:1000] if path.is_dir() else []
    more = f"\n[… {len(names) - 500} more]" if len(names) > 500 else ""
    return "\n".join(names[:500]) + more, "directory listing"
