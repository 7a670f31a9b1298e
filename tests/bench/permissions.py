"""Permission decision time, side by side with baselines: the whole `decide()` for a bash call (parse,
rules, program table, paths), the parser alone, the parser at the merge base with main (before issue 10)
and `shlex.split`. Typical lines, 1 MB lines of several shapes, and deeply nested lines.

    python tests/bench/permissions.py [N]

Prints the median over N runs (default 5) in milliseconds, with decide()'s verdict; "refused" means the
parser raised ShellParseError (the line asks); RecursionError is the old parser's crash; a cell that
takes longer than LIMIT seconds is killed.
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from kimicode.permissions.engine import decide
from kimicode.permissions.policy import Policy, load_rules
from kimicode.permissions.shellparse import parse
from kimicode.tools.base import ToolContext
from kimicode.tools.shell import BASH

BASELINE_COMMIT = "01360cf"
"""The branch's starting point (main before issue 10)."""
DECIDE_BASELINE_COMMIT = "2a4e278"
"""main before the policy's fixed directories were resolved once per Policy (issue 22's sandbox and
option parser landed, a decision took 2-17 ms)."""
DECIDE_LINES = [
    "git status",
    "git log | head",
    "cat a | grep b | wc -l",
    "sort x | head",
    "cd src && git log",
    "ls -la",
    "cat README.md | grep -n foo | sort | head -20",
    "git diff --stat HEAD~3 -- src/",
    " | ".join(["cat README.md", *["grep a"] * 19]),
]
"""Typical lines for the whole-decision comparison (the last one a pipeline of 20 commands)."""
_DECIDE_SCRIPT = """
import json, os, statistics, sys, tempfile, time
from pathlib import Path
from kimicode.permissions.engine import decide
from kimicode.permissions.policy import Policy, load_rules
from kimicode.tools.base import ToolContext
from kimicode.tools.shell import BASH
ws = Path(tempfile.mkdtemp()); (ws / "README.md").write_text("hi\\n"); (ws / "src").mkdir(); os.chdir(ws)
ctx = ToolContext(workspace=ws)
rules = load_rules((), allow=["bash(ls*)", "bash(cat*)", "bash(git diff*)", "bash(git status)"], deny=["bash(rm*)"])
policy = Policy(rules, kimicode_home=ws / ".kc", user_home=ws / ".home", workspace=ws)
out = {}
for line in json.loads(sys.argv[1]):
    verdict = decide(BASH, {"command": line}, "default", ctx, policy).verdict
    times = []
    for _ in range(int(sys.argv[2])):
        t = time.perf_counter(); decide(BASH, {"command": line}, "default", ctx, policy)
        times.append(time.perf_counter() - t)
    out[line] = f"{statistics.median(times) * 1000:.2f} {verdict}"
print(json.dumps(out))
"""


def _decide_table(runs: int) -> None:
    """decide() on DECIDE_LINES with kimicode at DECIDE_BASELINE_COMMIT and with this tree, each in a
    fresh interpreter (same machine, same lines, same policy)."""
    import json

    root = Path(__file__).resolve().parents[2]
    columns: list[dict[str, str]] = []
    with tempfile.TemporaryDirectory() as old_tree:
        try:
            archive = subprocess.run(
                ["git", "archive", DECIDE_BASELINE_COMMIT, "kimicode", "prompts"],
                cwd=root,
                capture_output=True,
                check=True,
            ).stdout
            subprocess.run(["tar", "-x", "-C", old_tree], input=archive, check=True)
        except (OSError, subprocess.CalledProcessError):
            print(f"(baseline {DECIDE_BASELINE_COMMIT} unavailable)")
            return
        for tree in (old_tree, str(root)):
            env = {**os.environ, "PYTHONPATH": tree}
            done = subprocess.run(
                [sys.executable, "-c", _DECIDE_SCRIPT, json.dumps(DECIDE_LINES), str(runs * 10)],
                env=env,
                stdout=subprocess.PIPE,
                text=True,
                check=True,
                cwd=tree,
            )
            columns.append(json.loads(done.stdout))
    head = f"{'line':<44}{f'decide() ms @{DECIDE_BASELINE_COMMIT}':>24}{'decide() ms now':>20}"
    print(head)
    print("-" * len(head))
    for line in DECIDE_LINES:
        shown = line if len(line) <= 42 else f"pipeline of {line.count('|') + 1}"
        print(f"{shown:<44}{columns[0][line]:>24}{columns[1][line]:>20}")
    print()


MB = 1 << 20
LIMIT = 10.0
"""Seconds one cell may take before it is killed and shown as "> 10000 (killed)"."""
LINES: list[tuple[str, str]] = [
    ("git status", "git status"),
    ("git diff --stat HEAD~3 -- src/", "git diff --stat HEAD~3 -- src/"),
    ("pipeline of 4", "cat README.md | grep -n foo | sort | head -20"),
    ("compound with subst", 'for f in a b; do echo "$(wc -l "$f")"; done && ls -la'),
    ("hostile: difftool -x", "git difftool -x 'rm -rf ~' HEAD"),
    ("read-only: git log", "git log --oneline -20 -- src"),
    ("read-only: grep -rn", "grep -rn --include=*.py foo src"),
    ("read-only: sort | head", "sort -rn -k2 README.md | head -5"),
    ("hostile: --open-files", "git grep --open-files=id x"),
    ("hostile: sort -rno", "sort -rno /tmp/x README.md"),
    ("cd sub && git log", "cd src && git log -p -1"),
    ("1 MB: many words", "ls " + "a " * (MB // 2)),
    ("1 MB: one quoted word", "cat '" + "x" * MB + "'"),
    ("1 MB: many commands", "ls;" * (MB // 3)),
    ("1 MB: '[' and no ']'", "ls " + "[" * MB),
    ("1 MB: '$' runs", "echo " + "$" * MB),
    ("1 MB: here-doc body", "cat <<EOF\n" + "line\n" * (MB // 5) + "EOF"),
    ("nested (( x 5000", "(" * 5000 + "ls" + ")" * 5000),
    ("nested $( x 5000", "echo " + "$(" * 5000 + "ls" + ")" * 5000),
    ("nested backticks x 30", "echo " + "`" * 30),
]


def _old_parser() -> ModuleType | None:
    """shellparse.py as it was at BASELINE_COMMIT, loaded under another name (None if unavailable)."""
    try:
        source = subprocess.run(
            ["git", "show", f"{BASELINE_COMMIT}:kimicode/permissions/shellparse.py"],
            cwd=Path(__file__).resolve().parents[2],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    path = Path(tempfile.mkdtemp()) / "old_shellparse.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("old_shellparse", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["old_shellparse"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _measure(fn: Callable[[], Any], runs: int, budget: float) -> str:
    times: list[float] = []
    outcome = ""
    spent = 0.0
    for _ in range(runs):
        start = time.perf_counter()
        try:
            value = fn()
            if isinstance(value, str):
                outcome = f" {value}"
        except RecursionError:
            return "RecursionError"
        except Exception as exc:  # ShellParseError, the old parser's own one, or a bug
            outcome = " refused" if type(exc).__name__ == "ShellParseError" else f" {type(exc).__name__}"
            if isinstance(exc, RecursionError):
                return "RecursionError"
        elapsed = time.perf_counter() - start
        times.append(elapsed)
        spent += elapsed
        if spent > budget:
            break
    return f"{statistics.median(times) * 1000:.2f}{outcome}"


def _time(fn: Callable[[], Any], runs: int, limit: float = LIMIT) -> str:
    """Median milliseconds of `fn` over `runs`, measured in a forked child that is killed after
    `limit` seconds (the old parser is quadratic on some lines), or what it raised."""
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)

    def target() -> None:
        child.send(_measure(fn, runs, limit / 2))

    proc = ctx.Process(target=target)
    proc.start()
    result = str(parent.recv()) if parent.poll(limit) else f"> {limit * 1000:.0f} (killed)"
    proc.kill()
    proc.join()
    return result


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    _decide_table(runs)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1000))
    old = _old_parser()
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp)
        (ws / "README.md").write_text("hi\n")
        ctx = ToolContext(workspace=ws)
        rules = load_rules(
            (), allow=["bash(ls*)", "bash(cat*)", "bash(git diff*)", "bash(git status)"], deny=["bash(rm*)"]
        )
        policy = Policy(rules, kimicode_home=ws / ".kc", user_home=ws / ".home", workspace=ws)
        os.chdir(ws)
        (ws / "src").mkdir()
        for _, line in LINES[:5]:  # warm the caches (compiled patterns, imports) outside the timings
            decide(BASH, {"command": line}, "default", ctx, policy)
        head = f"{'line':<24}{'decide() ms':>20}{'parse() ms':>20}{'old parse() ms':>20}{'shlex.split ms':>20}"
        print(head, flush=True)
        print("-" * len(head))
        for label, line in LINES:

            def new_decide(line: str = line) -> str:
                return decide(BASH, {"command": line}, "default", ctx, policy).verdict

            def new_parse(line: str = line) -> object:
                return parse(line)

            def old_parse(line: str = line) -> object:
                assert old is not None
                return old.parse(line)

            def split(line: str = line) -> object:
                return shlex.split(line)

            cols = [
                _time(new_decide, runs),
                _time(new_parse, runs),
                _time(old_parse, runs) if old is not None else "n/a",
                _time(split, runs),
            ]
            print(f"{label:<24}" + "".join(f"{c:>20}" for c in cols), flush=True)


if __name__ == "__main__":
    main()
