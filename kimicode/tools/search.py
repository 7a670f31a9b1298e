"""Search tools: `glob` finds files by name, `grep` searches file contents.

Both prefer ripgrep (`rg`; the `ripgrep` wheel installs it next to the venv's python). Without it, or
with `KIMICODE_NO_RIPGREP=1`, a pure-Python engine takes over and prints the same results in the same
format and order, because the model should not have to care which engine ran. The Python engine
reproduces what the ripgrep 14 we ship does:

* File selection: `.rgignore`, `.ignore` and `.gitignore` files in the searched directories and in
  their ancestors, plus `.git/info/exclude`; the deepest file with a matching rule wins, and at equal
  depth `.rgignore` > `.ignore` > `.gitignore` > exclude. Git rules stop at the enclosing repository's
  root. Outside a git repository the git rules still apply (we pass `--no-require-git` there). Hidden
  entries are skipped, symlinks are not followed and an ignored directory is not entered. Git's global
  excludes file is not read by either engine.
* Glob syntax is ripgrep's globset: `*` `?` `[...]` `{a,b}` `**` and `\\` escapes; a glob without
  `/` matches the file name at any depth, one with `/` is anchored at the search root. Unlike a raw
  `rg --glob` (an override that beats ignore files, so `*` would list all of `.git`), our globs only
  narrow what the ignore rules let through; `!glob` excludes, pruning matching directories.
* Binary files: ripgrep reads 64 KB blocks and gives up on a file at the block holding its first NUL
  byte, still reporting matches from earlier blocks; we replay that block arithmetic exactly.
* Regexes: Python's `re` runs the pattern after translating the few Rust-only spellings (`\\z`,
  `(?<name>...)`, `[[:alpha:]]`); look-around and backreferences are rejected as ripgrep does.
"""

from __future__ import annotations

import asyncio
import bisect
import os
import re
import shutil
import stat
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from kimicode.prompts import load_prompt
from kimicode.safeio import read_regular
from kimicode.tools.base import Tool, ToolContext, ToolError, ToolResult

__all__ = ["GLOB", "GREP", "GlobError", "IgnoreRules", "find_ripgrep", "glob_to_regex", "walk_files"]

GLOB_MAX_RESULTS: Final = 1000
"""glob lists at most this many paths, then says how many matched in total."""
DEFAULT_HEAD_LIMIT: Final = {"content": 500, "files": 1000, "count": 1000}
MAX_HEAD_LIMIT: Final = 10_000
MAX_CONTEXT: Final = 20
MAX_LINE_CHARS: Final = 500
"""Characters of one matching line shown to the model; longer lines end with a marker."""
SEARCH_TIMEOUT: Final = 60.0
MAX_FALLBACK_FILE_BYTES: Final = 64 * 1024 * 1024
"""The Python engine skips larger files instead of loading them (ripgrep would search them)."""

_MAX_RECORD_BYTES = 16 * 1024  # bytes kept of one line of ripgrep output; we show 500 chars at most
_RG_BUFFER = 64 * 1024  # ripgrep's initial line-buffer capacity
_TRUNCATED = " […]"

OutputMode = Literal["files", "content", "count"]


# --------------------------------------------------------------------------------------------------
# globs (ripgrep's globset, with `literal_separator` as gitignore and --glob use it)


class GlobError(ValueError):
    """A glob that globset would reject."""


@dataclass(frozen=True)
class _Tok:
    kind: str  # lit any star rprefix rsuffix rzero class alt
    char: str = ""
    negated: bool = False
    ranges: tuple[tuple[str, str], ...] = ()
    alts: tuple[tuple[_Tok, ...], ...] = ()


class _GlobParser:
    """A port of globset's parser: the same tokens for the same input, the same errors."""

    def __init__(self, glob: str, *, allow_unclosed_class: bool) -> None:
        self.glob = glob
        self.pos = 0
        self.prev: str | None = None
        self.cur: str | None = None
        self.stack: list[list[_Tok]] = [[]]
        self.allow_unclosed_class = allow_unclosed_class

    def bump(self) -> str | None:
        self.prev = self.cur
        if self.pos < len(self.glob):
            self.cur = self.glob[self.pos]
            self.pos += 1
        else:
            self.cur = None
        return self.cur

    def peek(self) -> str | None:
        return self.glob[self.pos] if self.pos < len(self.glob) else None

    def push(self, tok: _Tok) -> None:
        self.stack[-1].append(tok)

    def parse(self) -> list[_Tok]:
        while (c := self.bump()) is not None:
            if c == "?":
                self.push(_Tok("any"))
            elif c == "*":
                self._star()
            elif c == "[":
                self._class()
            elif c == "{":
                if len(self.stack) > 1:
                    raise GlobError("nested alternate groups are not allowed")
                self.stack.append([])
            elif c == "}":  # a stray `}` makes an empty alternation, which matches nothing extra
                alts: list[tuple[_Tok, ...]] = []
                while len(self.stack) >= 2:
                    alts.append(tuple(self.stack.pop()))
                self.push(_Tok("alt", alts=tuple(alts)))
            elif c == ",":
                if len(self.stack) <= 1:
                    self.push(_Tok("lit", ","))
                else:
                    self.stack.append([])
            elif c == "\\":
                nxt = self.bump()
                if nxt is None:
                    raise GlobError("dangling '\\'")
                self.push(_Tok("lit", nxt))
            else:
                self.push(_Tok("lit", c))
        if len(self.stack) > 1:
            raise GlobError("unclosed alternate group; missing '}' (escape '{' as '[{]')")
        return self.stack[0]

    def _star(self) -> None:
        prev = self.prev
        if self.peek() != "*":
            self.push(_Tok("star"))
            return
        self.bump()
        if not self.stack[-1]:
            if self.peek() not in (None, "/"):
                self.push(_Tok("star"))
            else:
                self.push(_Tok("rprefix"))
                self.bump()
            return
        if prev != "/" and (len(self.stack) <= 1 or prev not in (",", "{")):
            self.push(_Tok("star"))
            return
        nxt = self.peek()
        if nxt is None or (nxt in (",", "}") and len(self.stack) >= 2):
            is_suffix = True
        elif nxt == "/":
            self.bump()
            is_suffix = False
        else:
            self.push(_Tok("star"))
            return
        last = self.stack[-1].pop()
        if last.kind in ("rprefix", "rsuffix"):
            self.push(last)
        else:
            self.push(_Tok("rsuffix" if is_suffix else "rzero"))

    def _class(self) -> None:
        saved = (self.pos, self.prev, self.cur)
        ranges: list[tuple[str, str]] = []
        negated = self.peek() in ("!", "^")
        if negated:
            self.bump()
        first = True
        in_range = False
        while True:
            c = self.bump()
            if c is None:
                if self.allow_unclosed_class:
                    self.pos, self.prev, self.cur = saved
                    self.push(_Tok("lit", "["))
                    return
                raise GlobError("unclosed character class; missing ']'")
            if c == "]" and not first:
                break
            if c == "-" and not first:
                if in_range:
                    self._extend_range(ranges, "-")
                    in_range = False
                else:
                    in_range = True
            elif in_range:
                self._extend_range(ranges, c)
                in_range = False
            else:
                ranges.append((c, c))
            first = False
        if in_range:
            ranges.append(("-", "-"))
        self.push(_Tok("class", negated=negated, ranges=tuple(ranges)))

    @staticmethod
    def _extend_range(ranges: list[tuple[str, str]], end: str) -> None:
        start = ranges[-1][0]
        if end < start:
            raise GlobError(f"invalid range; '{start}' > '{end}'")
        ranges[-1] = (start, end)


def _class_char(c: str) -> str:
    return c if c.isalnum() else "\\" + c


def _tokens_to_regex(tokens: tuple[_Tok, ...] | list[_Tok]) -> str:
    parts: list[str] = []
    for tok in tokens:
        if tok.kind == "lit":
            parts.append(re.escape(tok.char))
        elif tok.kind == "any":
            parts.append("[^/]")
        elif tok.kind == "star":
            parts.append("[^/]*")
        elif tok.kind == "rprefix":
            parts.append("(?:/?|.*/)")
        elif tok.kind == "rsuffix":
            parts.append("/.*")
        elif tok.kind == "rzero":
            parts.append("(?:/|/.*/)")
        elif tok.kind == "class":
            body = "".join(_class_char(a) if a == b else f"{_class_char(a)}-{_class_char(b)}" for a, b in tok.ranges)
            parts.append(f"[{'^' if tok.negated else ''}{body}]")
        else:  # alternation; empty branches are dropped like globset does
            branches = [r for r in (_tokens_to_regex(alt) for alt in tok.alts) if r]
            if branches:
                parts.append("(?:" + "|".join(branches) + ")")
    return "".join(parts)


def glob_to_regex(glob: str, *, allow_unclosed_class: bool = False) -> str:
    """The regex (for `re.fullmatch`) that globset builds for `glob`, `*` not crossing `/`."""
    tokens = _GlobParser(glob, allow_unclosed_class=allow_unclosed_class).parse()
    if len(tokens) == 1 and tokens[0].kind == "rprefix":
        return ".*"
    return _tokens_to_regex(tokens)


# --------------------------------------------------------------------------------------------------
# ignore rules


@dataclass(frozen=True)
class _Rule:
    regex: re.Pattern[str]
    whitelist: bool  # a `!pattern` line
    dir_only: bool  # a `pattern/` line


def _parse_rule(line: str, *, allow_unclosed_class: bool) -> _Rule | None:
    """One gitignore line as the `ignore` crate reads it; None for blanks and comments."""
    if line.startswith("#"):
        return None
    if not line.endswith("\\ "):
        line = line.rstrip()
    if not line:
        return None
    whitelist = False
    anchored = False
    if line.startswith(("\\!", "\\#")):
        line = line[1:]
    else:
        if line.startswith("!"):
            whitelist = True
            line = line[1:]
        if line.startswith("/"):
            line = line[1:]
            anchored = True
    dir_only = False
    if line.endswith("/"):
        dir_only = True
        line = line[:-1]
        if line.endswith("\\"):
            line = line[:-1]
    glob = line
    if not anchored and "/" not in line and not (glob.startswith("**/") or glob == "**"):
        glob = "**/" + glob
    if glob.endswith("/**"):
        glob += "/*"
    regex = glob_to_regex(glob, allow_unclosed_class=allow_unclosed_class)
    return _Rule(re.compile(regex), whitelist, dir_only)


class IgnoreRules:
    """The rules of one ignore file (or one override glob), matched against paths relative to `base`."""

    __slots__ = ("rules",)

    def __init__(self, rules: list[_Rule]) -> None:
        self.rules = rules

    @classmethod
    def from_lines(cls, lines: list[str]) -> IgnoreRules:
        """Parse gitignore lines; lines with invalid globs are skipped (ripgrep only warns)."""
        rules: list[_Rule] = []
        for line in lines:
            try:
                rule = _parse_rule(line, allow_unclosed_class=True)
            except (GlobError, re.error):
                continue
            if rule is not None:
                rules.append(rule)
        return cls(rules)

    @classmethod
    def from_file(cls, path: str) -> IgnoreRules | None:
        """Read a gitignore-syntax file; None when it is missing, unreadable or has no rules."""
        try:
            data = read_regular(path)  # a .gitignore FIFO must not hang the search
        except OSError:
            return None
        text = data.decode("utf-8", "replace").removeprefix("\ufeff")
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        rules = cls.from_lines([ln[:-1] if ln.endswith("\r") else ln for ln in lines])
        return rules if rules.rules else None

    def match(self, rel: str, is_dir: bool) -> bool | None:
        """True: ignored, False: whitelisted by a `!` rule, None: no rule applies. The last rule wins."""
        for rule in reversed(self.rules):
            if (is_dir or not rule.dir_only) and rule.regex.fullmatch(rel):
                return not rule.whitelist
        return None


class _Override:
    """A `--glob` override: ripgrep builds it from gitignore syntax with the meaning of `!` inverted."""

    def __init__(self, glob: str) -> None:
        rule = _parse_rule(glob, allow_unclosed_class=False)
        self.rule = rule
        self.has_whitelist = rule is not None and not rule.whitelist

    def match(self, rel: str, is_dir: bool) -> bool | None:
        """True: skip the entry, False: take it regardless of ignore files, None: undecided."""
        rule = self.rule
        if rule is None:
            return None
        if (is_dir or not rule.dir_only) and rule.regex.fullmatch(rel):
            return rule.whitelist
        if self.has_whitelist and not is_dir:
            return True
        return None


class _GlobFilter:
    """Applies a glob to paths already listed: the same selection `walk_files(root, glob)` makes."""

    def __init__(self, glob: str) -> None:
        self.override = _Override(glob)
        self._pruned: dict[str, bool] = {"": False}

    def _dir_pruned(self, rel_dir: str) -> bool:
        if rel_dir not in self._pruned:
            parent = rel_dir.rpartition("/")[0]
            self._pruned[rel_dir] = self._dir_pruned(parent) or bool(self.override.match(rel_dir, True))
        return self._pruned[rel_dir]

    def accepts(self, rel: str) -> bool:
        return not self._dir_pruned(rel.rpartition("/")[0]) and not self.override.match(rel, False)


def _normalize_glob(glob: str, root: str) -> str:
    """Make globs the model writes relative to the search root (`./x`, `/abs/root/x` → `x`)."""
    if glob.startswith(root.rstrip("/") + "/"):
        glob = glob[len(root.rstrip("/")) + 1 :]
    while glob.startswith("./"):
        glob = glob[2:]
    return glob


def _check_glob(glob: str) -> None:
    try:
        _Override(glob)
    except (GlobError, re.error) as exc:
        raise ToolError(f"invalid glob {glob!r}: {exc}") from None


@dataclass(frozen=True)
class _DirRules:
    """Ignore rules defined by one directory, and whether it is a git repository root."""

    dir: str
    rgignore: IgnoreRules | None
    ignore: IgnoreRules | None
    gitignore: IgnoreRules | None
    exclude: IgnoreRules | None
    has_git: bool


def _git_common_dir(dirpath: str, dot_git: str, git_is_file: bool) -> str | None:
    """Where `info/exclude` lives: `.git`, or for a linked worktree the main repository's git dir."""
    if not git_is_file:
        return dot_git
    try:
        with open(dot_git, encoding="utf-8", errors="replace") as f:
            first = f.readline().rstrip("\r\n")
        if not first.startswith("gitdir: "):
            return None
        real = os.path.join(dirpath, first[len("gitdir: ") :])
        with open(os.path.join(real, "commondir"), encoding="utf-8", errors="replace") as f:
            common = f.readline().rstrip("\r\n")
    except OSError:
        return None
    return os.path.join(real, common) if common.startswith(".") else common


def _load_dir_rules(dirpath: str, require_git: bool) -> _DirRules | None:
    """The ignore files of one directory, or None when it has none (and is not a repository root)."""
    dot_git = os.path.join(dirpath, ".git")
    git_is_file = False
    has_git = False
    if require_git:
        try:
            st = os.stat(dot_git)
            has_git = True
            git_is_file = stat.S_ISREG(st.st_mode)
        except OSError:
            pass
    common = _git_common_dir(dirpath, dot_git, git_is_file)
    rules = _DirRules(
        dir=dirpath,
        rgignore=IgnoreRules.from_file(os.path.join(dirpath, ".rgignore")),
        ignore=IgnoreRules.from_file(os.path.join(dirpath, ".ignore")),
        gitignore=IgnoreRules.from_file(os.path.join(dirpath, ".gitignore")),
        exclude=IgnoreRules.from_file(os.path.join(common, "info", "exclude")) if common else None,
        has_git=has_git,
    )
    if rules.rgignore or rules.ignore or rules.gitignore or rules.exclude or has_git:
        return rules
    return None


def _relative(path: str, base: str) -> str:
    if base == "/":
        return path[1:]
    return path[len(base) + 1 :]


def _ignored(chain: list[_DirRules], path: str, is_dir: bool) -> bool | None:
    """ripgrep's verdict from ignore files; `chain` runs from the entry's directory up to `/`."""
    m_rg: bool | None = None
    m_ig: bool | None = None
    m_git: bool | None = None
    m_ex: bool | None = None
    saw_git = False
    for rules in chain:
        rel = _relative(path, rules.dir)
        if m_rg is None and rules.rgignore is not None:
            m_rg = rules.rgignore.match(rel, is_dir)
        if m_ig is None and rules.ignore is not None:
            m_ig = rules.ignore.match(rel, is_dir)
        if not saw_git:
            if m_git is None and rules.gitignore is not None:
                m_git = rules.gitignore.match(rel, is_dir)
            if m_ex is None and rules.exclude is not None:
                m_ex = rules.exclude.match(rel, is_dir)
        saw_git = saw_git or rules.has_git
    for verdict in (m_rg, m_ig, m_git, m_ex):
        if verdict is not None:
            return verdict
    return None


def _in_git_repo(root: str) -> bool:
    """True when `root` or one of its ancestors has a `.git` (then ripgrep's default applies)."""
    d = root
    while True:
        if os.path.exists(os.path.join(d, ".git")):
            return True
        parent = os.path.dirname(d)
        if parent == d:
            return False
        d = parent


class SearchTimeout(Exception):
    """The Python engine ran past its deadline."""


def _root_chain(root: str, require_git: bool) -> list[_DirRules]:
    """The rules from the ancestors of `root`, deepest first (ripgrep reads those too)."""
    chain: list[_DirRules] = []
    d = os.path.dirname(root)
    while True:
        rules = _load_dir_rules(d, require_git)
        if rules is not None:
            chain.append(rules)
        parent = os.path.dirname(d)
        if parent == d:
            return chain
        d = parent


def _child_chain(dirpath: str, parent_chain: list[_DirRules], require_git: bool) -> list[_DirRules]:
    rules = _load_dir_rules(dirpath, require_git)
    return [rules, *parent_chain] if rules is not None else parent_chain


def _excluded(chain: list[_DirRules], path: str, name: str, is_dir: bool) -> bool:
    """Whether a plain ripgrep walk skips this entry: ignored, or hidden and not whitelisted."""
    verdict = _ignored(chain, path, is_dir)
    if verdict is None:
        return name.startswith(".")
    return verdict


def walk_files(root: str, glob: str | None = None, deadline: float | None = None) -> Iterator[str]:
    """Yield the files under directory `root` that ripgrep lists, relative to it and sorted by path.

    Without `glob` this is exactly `rg --files --sort path`. A `glob` (relative to `root`, gitignore
    syntax) narrows the walk: it selects files and a `!glob` prunes what it matches, but unlike a raw
    `rg --glob` override it never brings back ignored or hidden entries. `root` must be absolute and
    free of symlinks. Raises SearchTimeout once `time.monotonic()` passes `deadline`.
    """
    override = _Override(glob) if glob else None
    require_git = _in_git_repo(root)
    # An explicit stack of (directory, its relative path, its rule chain, sorted entries, index).
    stack: list[tuple[str, str, list[_DirRules], list[tuple[bytes, os.DirEntry[str]]], int]] = []

    def open_dir(dirpath: str, rel: str, parent_chain: list[_DirRules]) -> None:
        try:
            with os.scandir(dirpath) as it:
                entries = sorted(((os.fsencode(e.name), e) for e in it), key=lambda pair: pair[0])
        except OSError:
            return
        stack.append((dirpath, rel, _child_chain(dirpath, parent_chain, require_git), entries, 0))

    open_dir(root, "", _root_chain(root, require_git))
    seen = 0
    while stack:
        dirpath, rel_dir, dir_chain, entries, index = stack[-1]
        if index >= len(entries):
            stack.pop()
            continue
        stack[-1] = (dirpath, rel_dir, dir_chain, entries, index + 1)
        entry = entries[index][1]
        seen += 1
        if deadline is not None and seen % 256 == 0 and time.monotonic() > deadline:
            raise SearchTimeout
        try:
            if entry.is_symlink():
                continue
            is_dir = entry.is_dir(follow_symlinks=False)
            if not is_dir and not entry.is_file(follow_symlinks=False):
                continue
        except OSError:
            continue
        rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
        if override is not None and override.match(rel, is_dir):
            continue
        if _excluded(dir_chain, entry.path, entry.name, is_dir):
            continue
        if is_dir:
            open_dir(entry.path, rel, dir_chain)
        else:
            yield rel


class _Visibility:
    """Whether a plain ripgrep walk of `root` (no `--glob`) reaches a file.

    ripgrep lets a `--glob` override win over ignore files and hiding; we pass `--glob` to it for speed
    and then drop what only the override let through, so a glob narrows a search and never widens it.
    """

    def __init__(self, root: str) -> None:
        self.root = root
        self.require_git = _in_git_repo(root)
        self._dirs: dict[str, list[_DirRules] | None] = {
            "": _child_chain(root, _root_chain(root, self.require_git), self.require_git)
        }

    def _chain(self, rel_dir: str) -> list[_DirRules] | None:
        """The rule chain inside `rel_dir`, or None when the walk never enters it."""
        if rel_dir in self._dirs:
            return self._dirs[rel_dir]
        parent, _, name = rel_dir.rpartition("/")
        parent_chain = self._chain(parent)
        chain: list[_DirRules] | None = None
        if parent_chain is not None:
            path = os.path.join(self.root, rel_dir)
            if not _excluded(parent_chain, path, name, True):
                chain = _child_chain(path, parent_chain, self.require_git)
        self._dirs[rel_dir] = chain
        return chain

    def visible(self, rel: str) -> bool:
        parent, _, name = rel.rpartition("/")
        chain = self._chain(parent)
        return chain is not None and not _excluded(chain, os.path.join(self.root, rel), name, False)


# --------------------------------------------------------------------------------------------------
# ripgrep


def find_ripgrep() -> str | None:
    """The `rg` to use: next to this Python (the ripgrep wheel), else on PATH; None if disabled/absent."""
    if os.environ.get("KIMICODE_NO_RIPGREP", "").strip() not in ("", "0"):
        return None
    bundled = Path(sys.executable).parent / "rg"
    if bundled.is_file() and os.access(bundled, os.X_OK):
        return str(bundled)
    return shutil.which("rg")


def _rg_common_args(root_dir: str) -> list[str]:
    args = ["--no-config", "--color=never", "--sort=path", "--null", "--no-ignore-global", "--no-messages"]
    if not _in_git_repo(root_dir):
        args.append("--no-require-git")
    return args


async def _run_rg(rg: str, args: list[str], cwd: str, sep: bytes, on_record: Callable[[bytes], None]) -> str:
    """Run ripgrep; feed each stdout record (split on `sep`, capped in length) to `on_record`.

    Returns ripgrep's stderr when it failed (exit 2) and printed nothing, else "". Raises ToolError on
    timeout. Memory stays bounded whatever ripgrep prints.
    """
    try:
        proc = await asyncio.create_subprocess_exec(
            rg,
            *args,
            cwd=cwd,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except OSError as exc:
        raise ToolError(f"cannot run ripgrep ({rg}): {exc.strerror or exc}") from None
    assert proc.stdout is not None and proc.stderr is not None
    stdout, stderr = proc.stdout, proc.stderr
    printed = False
    errors = bytearray()

    async def read_stdout() -> None:
        nonlocal printed
        pending = bytearray()
        while chunk := await stdout.read(65536):
            printed = True
            start = 0
            while (i := chunk.find(sep, start)) >= 0:
                room = _MAX_RECORD_BYTES - len(pending)
                if room > 0:
                    pending += chunk[start : min(i, start + room)]
                on_record(bytes(pending))
                pending.clear()
                start = i + 1
            room = _MAX_RECORD_BYTES - len(pending)
            if room > 0:
                pending += chunk[start : start + room]
        if pending:
            on_record(bytes(pending))

    async def read_stderr() -> None:
        while chunk := await stderr.read(65536):
            if len(errors) < 8192:
                errors.extend(chunk[: 8192 - len(errors)])

    try:
        await asyncio.wait_for(asyncio.gather(read_stdout(), read_stderr(), proc.wait()), SEARCH_TIMEOUT)
    except TimeoutError:
        raise ToolError(f"search timed out after {SEARCH_TIMEOUT:g} s; narrow it with `path` or `glob`") from None
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    if proc.returncode == 2 and not printed:
        # With --no-messages, unreadable files fail silently; only real errors reach stderr.
        return errors.decode("utf-8", "replace").strip()
    return ""


def _rg_error(message: str) -> ToolError:
    text = re.sub(r"(?m)^rg: ", "", message).strip()
    if "regex parse error" in text:
        return ToolError(f"invalid regex: {text.removeprefix('regex parse error:').strip()}")
    return ToolError(f"search failed: {text}")


# --------------------------------------------------------------------------------------------------
# shared helpers


@dataclass(frozen=True)
class _Root:
    """The resolved search root: what to walk, and how to show result paths."""

    path: str  # absolute, symlinks resolved
    is_file: bool
    prefix: str  # prepended to root-relative paths for display ("" or "src/" or "/abs/dir/")

    @property
    def dir(self) -> str:
        return os.path.dirname(self.path) if self.is_file else self.path

    def show(self, rel: str) -> str:
        """A result path for the model: workspace-relative inside the workspace, else absolute."""
        text = self.prefix + rel
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _resolve_root(ctx: ToolContext, path: Any) -> _Root:
    raw = path if isinstance(path, str) and path.strip() else "."
    resolved = ctx.resolve(raw)
    try:
        st = os.stat(resolved)
    except FileNotFoundError:
        raise ToolError(f"path not found: {raw}") from None
    except OSError as exc:
        raise ToolError(f"cannot access {raw}: {exc.strerror or exc}") from None
    if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
        raise ToolError(f"not a regular file or directory: {raw}")
    is_file = stat.S_ISREG(st.st_mode)
    base = os.path.dirname(resolved) if is_file else str(resolved)
    workspace = os.path.realpath(ctx.workspace)
    if ctx.is_inside(Path(base)):
        rel = os.path.relpath(base, workspace)
        prefix = "" if rel == "." else rel + "/"
    else:
        prefix = base.rstrip("/") + "/"
    return _Root(str(resolved), is_file, prefix)


def _shown_root(root: _Root) -> str:
    if root.is_file:
        return root.show(os.path.basename(root.path))
    if not root.prefix:
        return "."
    return root.prefix.rstrip("/") or "/"


def _strip_dot(rel: bytes) -> str:
    text = os.fsdecode(rel)
    return text[2:] if text.startswith("./") else text


class _Collector:
    """Keeps the first `limit` output lines and counts all of them (bounded memory)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.lines: list[str] = []
        self.total = 0

    def add(self, line: str) -> None:
        self.total += 1
        if len(self.lines) < self.limit:
            self.lines.append(line)


def _clip(text: str) -> str:
    if text.endswith("\r"):
        text = text[:-1]
    if len(text) > MAX_LINE_CHARS:
        return text[:MAX_LINE_CHARS] + _TRUNCATED
    return text


def _check_int(args: dict[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = args.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ToolError(f"{name} must be an integer")
    if not low <= value <= high:
        raise ToolError(f"{name} must be between {low} and {high}, got {value}")
    return value


# --------------------------------------------------------------------------------------------------
# glob


async def _glob(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """List files matching a glob, honouring ignore files, sorted by path, capped."""
    pattern = args.get("pattern")
    if not isinstance(pattern, str) or not pattern.strip():
        raise ToolError("pattern must be a non-empty glob such as '**/*.py'")
    root = _resolve_root(ctx, args.get("path"))
    if root.is_file:
        raise ToolError(f"path must be a directory, not a file: {args.get('path')}")
    glob = _normalize_glob(pattern.strip(), root.path)
    _check_glob(glob)
    found = _Collector(GLOB_MAX_RESULTS)
    rg = find_ripgrep()
    if rg is not None:
        # No --glob here: ripgrep lets an override beat ignore files (`*` would list all of .git and
        # node_modules); it lists what ignore rules allow and the glob is applied to that.
        args_rg = ["--files", *_rg_common_args(root.path), "--", "."]
        selector = _GlobFilter(glob)

        def take(rec: bytes) -> None:
            rel = _strip_dot(rec)
            if rel and selector.accepts(rel):
                found.add(rel)

        failure = await _run_rg(rg, args_rg, root.path, b"\0", take)
        if failure:
            raise _rg_error(failure)
    else:
        deadline = time.monotonic() + SEARCH_TIMEOUT

        def run() -> None:
            for rel in walk_files(root.path, glob, deadline):
                found.add(rel)

        try:
            await asyncio.wait_for(asyncio.to_thread(run), SEARCH_TIMEOUT + 1)
        except (SearchTimeout, TimeoutError):
            raise ToolError(f"search timed out after {SEARCH_TIMEOUT:g} s; narrow it with `path`") from None
    where = _shown_root(root)
    if found.total == 0:
        return ToolResult(f"No files match {pattern!r} in {where}", summary=f"glob {pattern}: no files")
    lines = [root.show(rel) for rel in found.lines]
    if found.total > len(lines):
        lines.append(
            f"[capped: showing the first {len(lines)} of {found.total} matching files; "
            "use a more specific pattern or path]"
        )
    noun = "file" if found.total == 1 else "files"
    return ToolResult("\n".join(lines), summary=f"glob {pattern}: {found.total} {noun}")


GLOB = Tool(
    name="glob",
    description=load_prompt("tools/glob.md"),
    parameters={
        "type": "object",
        "properties": {
            "pattern": {
                "type": "string",
                "description": "Glob such as '**/*.py', 'src/*.ts' or '*.{md,txt}'; without '/' it "
                "matches file names at any depth.",
            },
            "path": {
                "type": "string",
                "description": "Directory to search (default: the workspace root). The pattern is relative to it.",
            },
        },
        "required": ["pattern"],
        "additionalProperties": False,
    },
    fn=_glob,
    kind="read",
)


# --------------------------------------------------------------------------------------------------
# grep: the Python engine


_POSIX_CLASSES = {
    "alnum": "0-9A-Za-z",
    "alpha": "A-Za-z",
    "ascii": "\\x00-\\x7f",
    "blank": "\\t ",
    "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9",
    "graph": "!-~",
    "lower": "a-z",
    "print": " -~",
    "punct": "!-/:-@\\[-`{-~",
    "space": "\\t\\n\\v\\f\\r ",
    "upper": "A-Z",
    "word": "0-9A-Za-z_",
    "xdigit": "0-9A-Fa-f",
}


def _unsupported(pattern: str, what: str) -> ToolError:
    return ToolError(f"invalid regex {pattern!r}: {what} not supported (ripgrep uses Rust regex syntax)")


def _rust_to_python_regex(pattern: str) -> str:
    """Translate the Rust-regex spellings Python's `re` lacks; reject what ripgrep would reject."""
    out: list[str] = []
    i = 0
    n = len(pattern)
    in_class = False
    while i < n:
        c = pattern[i]
        if c == "\\":
            nxt = pattern[i + 1 : i + 2]
            if nxt in ("p", "P"):
                raise _unsupported(pattern, "Unicode classes like \\p{L} are")
            if not in_class and nxt and nxt in "123456789":
                raise _unsupported(pattern, "backreferences are")
            out.append("\\Z" if nxt == "z" and not in_class else pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            if pattern.startswith("[:", i):
                end = pattern.find(":]", i + 2)
                name = pattern[i + 2 : end] if end > 0 else ""
                if name in _POSIX_CLASSES:
                    out.append(_POSIX_CLASSES[name])
                    i = end + 2
                    continue
            if c == "[":
                out.append("\\[")
            else:
                out.append(c)
                if c == "]":
                    in_class = False
            i += 1
            continue
        if c == "[":
            in_class = True
            out.append("[")
            i += 1
            if pattern.startswith("^", i):
                out.append("^")
                i += 1
            if pattern.startswith("]", i):
                out.append("\\]")
                i += 1
            continue
        if pattern.startswith(("(?=", "(?!", "(?<=", "(?<!"), i):
            raise _unsupported(pattern, "look-around is")
        if pattern.startswith("(?<", i):
            out.append("(?P<")
            i += 3
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _compile_regex(pattern: str, ignore_case: bool) -> re.Pattern[str]:
    try:
        return re.compile(_rust_to_python_regex(pattern), re.IGNORECASE if ignore_case else 0)
    except re.error as exc:
        raise ToolError(f"invalid regex {pattern!r}: {exc}") from None


class _RgReader:
    """Replays ripgrep's line-buffer arithmetic, to know how much of a file it searches.

    ripgrep reads through a line buffer of 64 KB, tripled whenever one line does not fit, and searches
    the complete lines of each fill. It abandons a file, unsearched part included, at the first fill
    containing a NUL byte, still reporting matches from earlier fills. Its BOM sniffer makes the very
    first read of each file return only 3 bytes. Between fills it keeps the partial last line and, when
    printing context, up to `context + 1` lines not printed yet, which shrinks the next read. The buffer
    is reused for the next file and never shrinks, so one long line changes how later files are read:
    one instance must see every file of a search, in order.
    """

    def __init__(self) -> None:
        self.capacity = _RG_BUFFER

    def searchable_end(
        self, data: bytes, *, peek_bom: bool, context: int, regex: re.Pattern[str], stop_at_match: bool
    ) -> int:
        """The length of the prefix of `data` ripgrep searches (all of it unless there is a NUL)."""
        nul = data.find(b"\0")
        if nul < 0 and len(data) < self.capacity:
            return len(data)  # one fill, no growth, nothing to replay
        limit = nul if nul >= 0 else len(data)
        starts = [0]  # line starts (only needed when matches decide what the buffer keeps)
        if context or stop_at_match:
            pos = data.find(b"\n", 0, limit)
            while pos >= 0:
                starts.append(pos + 1)
                pos = data.find(b"\n", pos + 1, limit)

        def matches(first: int, stop: int) -> int:
            """The last matching line among lines [first, stop), or -1."""
            found = -1
            for k in range(first, stop):
                if regex.search(data[starts[k] : starts[k + 1] - 1].decode("utf-8", "replace")):
                    found = k
                    if stop_at_match:
                        break
            return found

        end = 0  # bytes read so far
        searched = 0  # end of the complete lines already handed to the matcher
        keep = 0  # start of what the buffer carries from one fill to the next
        first_read = peek_bom
        last_match = -1
        while True:
            buffered = end - keep
            while True:
                if buffered >= self.capacity:
                    self.capacity *= 3
                want = self.capacity - buffered
                if first_read:
                    want = min(want, 3)
                    first_read = False
                start = end
                end = min(end + want, len(data))
                if end == start:
                    return len(data)  # end of file, no NUL byte
                if 0 <= nul < end:
                    return searched
                buffered += end - start
                newline = data.rfind(b"\n", start, end)
                if newline >= 0:
                    break
            filled = newline + 1
            if context or stop_at_match:
                first_new = bisect.bisect_left(starts, searched)
                stop = bisect.bisect_left(starts, filled)  # lines [first_new, stop) are searched now
                found = matches(first_new, stop)
                if found >= 0:
                    if stop_at_match:
                        return filled
                    last_match = found
                if context:
                    kept = bisect.bisect_left(starts, keep)
                    resume = max(stop - 1 - context, kept)
                    if last_match >= 0 and last_match + context >= kept:
                        resume = max(resume, min(last_match + context, stop - 1) + 1)
                    keep = starts[resume]
                else:
                    keep = filled
            else:
                keep = filled
            searched = filled

    def lines(
        self, data: bytes, *, context: int, regex: re.Pattern[str], stop_at_match: bool
    ) -> tuple[list[str], bool]:
        """The lines of a file ripgrep searches in a directory walk, and whether it saw a NUL byte."""
        peek = True
        if data.startswith((b"\xff\xfe", b"\xfe\xff")):
            data = data.decode("utf-16", "replace").encode("utf-8")
            peek = False
        elif data.startswith(b"\xef\xbb\xbf"):
            data = data[3:]
            peek = False
        end = self.searchable_end(data, peek_bom=peek, context=context, regex=regex, stop_at_match=stop_at_match)
        binary = b"\0" in data
        region = data[:end]
        if not region:
            return [], binary
        raw = region.split(b"\n")
        if raw[-1] == b"":
            raw.pop()
        return [line.decode("utf-8", "replace") for line in raw], binary


def _py_grep(
    root: _Root,
    regex: re.Pattern[str],
    glob: str | None,
    mode: OutputMode,
    context: int,
    emit: Callable[[str], None],
    deadline: float,
) -> None:
    """Search like `rg --sort path` and emit output lines in the same format as `_RgPrinter`."""
    if root.is_file:
        files: Iterator[str] = iter([os.path.basename(root.path)])
    else:
        files = walk_files(root.path, glob, deadline)
    reader = _RgReader()
    printed_before = False
    for rel in files:
        if time.monotonic() > deadline:
            raise SearchTimeout
        full = os.path.join(root.dir, rel)
        try:
            with open(full, "rb") as f:
                data = f.read(MAX_FALLBACK_FILE_BYTES + 1)
        except OSError:
            continue
        if len(data) > MAX_FALLBACK_FILE_BYTES:
            continue
        lines, binary = reader.lines(data, context=context, regex=regex, stop_at_match=mode == "files")
        shown = root.show(rel)
        if mode == "files":
            if any(regex.search(line) for line in lines):
                emit(shown)
            continue
        if mode == "count":
            count = sum(1 for line in lines if regex.search(line))
            if count and not binary:
                emit(f"{shown}:{count}")
            continue
        matches = [i for i, line in enumerate(lines) if regex.search(line)]
        if not matches:
            continue
        if context == 0:
            for i in matches:
                emit(f"{shown}:{i + 1}:{_clip(lines[i])}")
            continue
        wanted: set[int] = set()
        for i in matches:
            wanted.update(range(max(0, i - context), min(len(lines), i + context + 1)))
        matched = set(matches)
        last = -2
        for i in sorted(wanted):
            if (printed_before and last == -2) or (last != -2 and i != last + 1):
                emit("--")
            sep = ":" if i in matched else "-"
            emit(f"{shown}{sep}{i + 1}{sep}{_clip(lines[i])}")
            last = i
        printed_before = True


# --------------------------------------------------------------------------------------------------
# grep: ripgrep output


class _RgPrinter:
    """Turns `rg --null` output records into our output lines.

    Records of files that only a `--glob` override let in are dropped (see `_Visibility`), so context
    separators are recomputed from line numbers rather than copied from ripgrep.
    """

    def __init__(
        self,
        root: _Root,
        mode: OutputMode,
        context: int,
        emit: Callable[[str], None],
        visibility: _Visibility | None,
    ) -> None:
        self.root = root
        self.mode = mode
        self.context = context
        self.emit = emit
        self.visibility = visibility
        self._verdict: tuple[bytes, bool] = (b"", True)
        self._last: tuple[bytes, int] | None = None

    def _keep(self, path: bytes) -> bool:
        if self.visibility is None:
            return True
        if self._verdict[0] != path:
            self._verdict = (path, self.visibility.visible(_strip_dot(path)))
        return self._verdict[1]

    def record(self, rec: bytes) -> None:
        if self.mode == "files":
            if rec and self._keep(rec):
                self.emit(self.root.show(_strip_dot(rec)))
            return
        path, nul, rest = rec.partition(b"\0")
        if not nul or not self._keep(path):
            return  # a `--` separator, a warning such as "stopped searching binary file", or filtered
        shown = self.root.show(_strip_dot(path))
        text = rest.decode("utf-8", "replace")
        if self.mode == "count":
            self.emit(f"{shown}:{text}")
            return
        m = re.match(r"(\d+)([:-])", text)
        if m is None:
            return
        lineno = int(m.group(1))
        if self.context and self._last is not None and self._last != (path, lineno - 1):
            self.emit("--")
        self._last = (path, lineno)
        sep = m.group(2)
        self.emit(f"{shown}{sep}{lineno}{sep}{_clip(text[m.end() :])}")


def _binary(root: _Root) -> bool:
    """Whether a file given as the search path is skipped whole as binary (a NUL in ripgrep's first fill)."""
    if not root.is_file:
        return False
    try:
        with open(root.path, "rb") as f:
            return b"\0" in f.read(_RG_BUFFER)
    except OSError:
        return False


def _glob_escape(name: str) -> str:
    return "".join("\\" + c if c in "*?[]{}\\," else c for c in name)


async def _grep(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """Search file contents with a regex; output as file list, matching lines or counts."""
    pattern = args.get("pattern")
    if not isinstance(pattern, str):
        raise ToolError("pattern must be a string (a regular expression)")
    raw_mode = args.get("output_mode") or "files"
    modes: dict[Any, OutputMode] = {"files": "files", "content": "content", "count": "count"}
    if raw_mode not in modes:
        raise ToolError("output_mode must be one of 'files', 'content', 'count'")
    mode = modes[raw_mode]
    ignore_case = bool(args.get("ignore_case", False))
    context = _check_int(args, "context", 0, 0, MAX_CONTEXT) if mode == "content" else 0
    head_limit = _check_int(args, "head_limit", DEFAULT_HEAD_LIMIT[mode], 1, MAX_HEAD_LIMIT)
    root = _resolve_root(ctx, args.get("path"))
    raw_glob = args.get("glob")
    glob = _normalize_glob(raw_glob.strip(), root.path) if isinstance(raw_glob, str) and raw_glob.strip() else None
    if glob is not None:
        _check_glob(glob)
    if root.is_file:
        glob = None  # like ripgrep with an explicit file: the file is searched whatever the glob says

    out = _Collector(head_limit)
    rg = find_ripgrep()
    if rg is not None:
        rg_args = _rg_common_args(root.dir)
        if mode == "files":
            rg_args.append("--files-with-matches")
        elif mode == "count":
            rg_args += ["--count", "--with-filename"]
        else:
            rg_args += ["--line-number", "--with-filename", "--no-heading"]
            if context:
                rg_args.append(f"--context={context}")
        if ignore_case:
            rg_args.append("--ignore-case")
        if root.is_file:
            # Search the file through a one-level walk so binary handling matches directory searches.
            rg_args += ["--max-depth=1", f"--glob=/{_glob_escape(os.path.basename(root.path))}"]
        elif glob is not None:
            rg_args.append(f"--glob={glob}")
        rg_args += ["--regexp", pattern, "--", "."]
        visibility = _Visibility(root.path) if glob is not None else None
        printer = _RgPrinter(root, mode, context, out.add, visibility)
        failure = await _run_rg(rg, rg_args, root.dir, b"\0" if mode == "files" else b"\n", printer.record)
        if failure:
            raise _rg_error(failure)
    else:
        regex = _compile_regex(pattern, ignore_case)
        deadline = time.monotonic() + SEARCH_TIMEOUT
        try:
            # The thread checks the deadline between files; wait_for covers one slow regex on a huge
            # line (Python's `re` backtracks, Rust's regex does not), which a thread cannot interrupt.
            await asyncio.wait_for(
                asyncio.to_thread(_py_grep, root, regex, glob, mode, context, out.add, deadline),
                SEARCH_TIMEOUT + 1,
            )
        except (SearchTimeout, TimeoutError):
            raise ToolError(f"search timed out after {SEARCH_TIMEOUT:g} s; narrow it with `path` or `glob`") from None

    where = _shown_root(root)
    label = f"grep {pattern!r}"
    if out.total == 0:
        note = " (it is a binary file: it has NUL bytes, so it was not searched)" if _binary(root) else ""
        return ToolResult(f"No matches for {pattern!r} in {where}{note}", summary=f"{label}: no matches")
    lines = list(out.lines)
    if out.total > len(lines):
        lines.append(
            f"[capped at {len(lines)} of {out.total} lines; raise head_limit or narrow the search "
            "with path, glob or a more specific pattern]"
        )
    unit = {"files": "file", "count": "file", "content": "line"}[mode]
    plural = "" if out.total == 1 else "s"
    return ToolResult("\n".join(lines), summary=f"{label}: {out.total} {unit}{plural}")


GREP = Tool(
    name="grep",
    description=load_prompt("tools/grep.md"),
    parameters={
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "Regular expression (Rust/ripgrep syntax)."},
            "path": {
                "type": "string",
                "description": "File or directory to search (default: the workspace root).",
            },
            "glob": {
                "type": "string",
                "description": "Only search files matching this glob, e.g. '*.py', '*.{ts,tsx}', "
                "'src/**/*.rs'; a leading '!' excludes instead.",
            },
            "ignore_case": {"type": "boolean", "description": "Case-insensitive search (default false)."},
            "context": {
                "type": "integer",
                "minimum": 0,
                "maximum": MAX_CONTEXT,
                "description": "Lines of context before and after each match (content mode only).",
            },
            "output_mode": {
                "type": "string",
                "enum": ["files", "content", "count"],
                "description": "files: paths of matching files (default); content: matching lines as "
                "path:line:text; count: path:number of matching lines.",
            },
            "head_limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_HEAD_LIMIT,
                "description": "Maximum output lines (default 1000 for files/count, 500 for content).",
            },
        },
        "required": ["pattern"],
        "additionalProperties": False,
    },
    fn=_grep,
    kind="read",
)
