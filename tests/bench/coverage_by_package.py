"""Line coverage of kimicode by package, beside the whole project's figure, from one run of the tests.

    python tests/bench/coverage_by_package.py [PYTEST ARGS...]     # default: -m 'not slow'
    python tests/bench/coverage_by_package.py --report-only         # read the last run's .coverage again

Runs pytest under `coverage run --source=kimicode` (the `coverage` package from the dev extra), then prints
one row per package (kimicode/agent/, kimicode/tools/, ...; the top-level modules as `kimicode/*.py`):
statements, statements never run, and the share run, with the total last. Child processes count too
(`kimicode -p` end to end, the branches' process, the ACP agent), except those a test starts with an
environment of its own making (the variable that tells coverage to measure is not there). No test mocks
what it measures: a line counts only when a real test ran it. `python tests/bench/coverage_by_package.py
tests` measures the whole suite (slow tier and the real llama.cpp server included).
"""

from __future__ import annotations

import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / ".coverage"


RC = """\
[run]
source = kimicode
parallel = true
sigterm = true
patch = subprocess, _exit, execv
"""
"""Child processes are measured too (`patch = subprocess`: `kimicode -p` end to end, the branches' process,
the ACP agent), and so is a process that ends with `os._exit` (the branches' process does)."""


def run_tests(args: list[str]) -> int:
    """pytest under coverage, then every process's data combined; pytest's exit code (a failing test still
    leaves figures worth printing)."""
    import tempfile

    for old in ROOT.glob(".coverage*"):
        old.unlink()
    with tempfile.NamedTemporaryFile("w", suffix=".coveragerc", delete=False) as rc:
        rc.write(RC)
    try:
        cmd = [
            sys.executable,
            "-m",
            "coverage",
            "run",
            f"--rcfile={rc.name}",
            f"--data-file={DATA}",
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            *(args or ["-m", "not slow"]),
        ]
        code = subprocess.call(cmd, cwd=ROOT)
        subprocess.call(
            [sys.executable, "-m", "coverage", "combine", f"--rcfile={rc.name}", f"--data-file={DATA}", "-q"], cwd=ROOT
        )
    finally:
        Path(rc.name).unlink()
    return code


def by_package() -> dict[str, tuple[int, int]]:
    """`{package: (statements, missed)}` from the coverage data file."""
    import coverage

    cov = coverage.Coverage(data_file=str(DATA))
    cov.load()
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for path in sorted((ROOT / "kimicode").rglob("*.py")):
        rel = path.relative_to(ROOT / "kimicode")
        key = f"kimicode/{rel.parts[0]}/" if len(rel.parts) > 1 else "kimicode/*.py"
        _, statements, _, missing, _ = cov.analysis2(str(path))  # a module never imported: all missed
        totals[key][0] += len(statements)
        totals[key][1] += len(missing)
    return {k: (v[0], v[1]) for k, v in totals.items()}


def report(table: dict[str, tuple[int, int]]) -> None:
    """The table: one row per package, the total last."""
    width = max(len(k) for k in table) + 2
    print(f"{'package':<{width}}{'statements':>11}{'missed':>8}{'covered':>9}")
    for name, (stmts, missed) in sorted(table.items(), key=lambda kv: kv[0]):
        print(f"{name:<{width}}{stmts:>11}{missed:>8}{_pct(stmts, missed):>9}")
    stmts = sum(s for s, _ in table.values())
    missed = sum(m for _, m in table.values())
    print(f"{'total':<{width}}{stmts:>11}{missed:>8}{_pct(stmts, missed):>9}")


def _pct(stmts: int, missed: int) -> str:
    return f"{100 * (stmts - missed) / stmts:.1f}%" if stmts else "-"


def main(argv: list[str]) -> int:
    code = 0
    if argv[:1] != ["--report-only"]:
        code = run_tests(argv)
    if not DATA.exists():
        print(f"no coverage data at {DATA}", file=sys.stderr)
        return 1
    report(by_package())
    if code:
        print(f"(pytest exited {code}: the figures cover the tests that ran)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
