"""The structure CI keeps (issues 24 and 38): no import ring inside a package (none at run time; with the
`TYPE_CHECKING` imports counted, no ring beyond the recorded ones), no underscore name imported across modules,
no reach-in to another object's private state (`obj._x`, `getattr(obj, "_x")`), per-function budgets instead of a
file-length cap (radon complexity, `and`/`or` counted: nothing above 25, new code at most 15; at most 40
statements), and ruff's layout (`ruff format --check`).

Each check demands zero offenders, and each scanner is tested on a planted tree that breaks its rule (a scanner
that saw nothing would pass vacuously). The functions over budget and the type-level rings that existed when the
budgets came in are listed in structure_baseline.json: that list may only shrink (an entry may not grow, a new
offender may not join, and an entry that is back within budget must be deleted)."""

from __future__ import annotations

import ast
import functools
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from helpers import ROOT

PACKAGE = ROOT / "kimicode"
MAX_COMPLEXITY = 25
"""No function above this, by radon's count (one per branch, loop, `except`, `and`/`or`, comprehension `if`)."""
COMPLEXITY_BUDGET = 15
"""New code stays at or under this (the existing worst cases are in structure_baseline.json)."""
LENGTH_BUDGET = 40
"""Statements in a function, nested ones included, its docstring not (the median function has 6). Statements, not
lines: the figure does not change when `ruff format` re-wraps the code."""
BASELINE_FILE = Path(__file__).with_name("structure_baseline.json")


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, root: Path = ROOT, typing: bool = False) -> list[tuple[str, str | None, int]]:
    """(module, name, line) of every import of `path`, inside functions too; `if TYPE_CHECKING:` blocks
    are left out (they never run) unless `typing`."""
    me = module_name(path, root)
    package = me if path.name == "__init__.py" else me.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text(), str(path))
    typing_only = (
        set()
        if typing
        else {
            id(n)
            for block in ast.walk(tree)
            if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
            for s in block.body
            for n in ast.walk(s)
        }
    )
    found: list[tuple[str, str | None, int]] = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, node.module] if node.module else up)
            found.extend((base, a.name, node.lineno) for a in node.names)
        elif isinstance(node, ast.Import):
            found.extend((a.name, None, node.lineno) for a in node.names)
    return found


def package_cycles(root: Path = ROOT, typing: bool = False) -> dict[str, list[list[str]]]:
    """Rings of imports between the modules of one package (strongly connected components) of the tree
    `root`/kimicode; with `typing`, the imports under `if TYPE_CHECKING:` count too."""
    modules = {module_name(p, root): p for p in (root / "kimicode").rglob("*.py")}
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        for base, item, _ in imports_of(path, root, typing):
            target = f"{base}.{item}" if item and f"{base}.{item}" in modules else base
            same_package = target.split(".")[:2] == name.split(".")[:2] and len(name.split(".")) > 2
            if target in modules and target != name and same_package:
                graph[name].add(target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: dict[str, list[list[str]]] = defaultdict(list)
    counter = [0]

    def connect(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            ring = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                ring.append(w)
                if w == v:
                    break
            if len(ring) > 1:
                out[v.split(".")[1]].append(sorted(ring))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return dict(out)


@pytest.mark.prepush
def test_no_import_cycle_inside_a_package() -> None:
    cycles = package_cycles()
    assert not cycles, (
        f"import rings inside a package: {cycles}; break the ring by moving what both sides need below them "
        "(a small shared module, or pass a function or protocol in), not by hiding an import"
    )


def baseline() -> dict[str, dict[str, object]]:
    loaded: dict[str, dict[str, object]] = json.loads(BASELINE_FILE.read_text())
    return loaded


def new_type_rings(found: dict[str, list[list[str]]], recorded: dict[str, object]) -> dict[str, list[str]]:
    """Modules in a type-level ring that the recorded rings of their package do not hold."""
    out = {}
    for package, rings in found.items():
        allowed = recorded.get(package, [])
        assert isinstance(allowed, list)
        if extra := sorted({m for ring in rings for m in ring} - set(allowed)):
            out[package] = extra
    return out


@pytest.mark.prepush  # a scan of the whole tree
def test_no_new_type_level_ring_inside_a_package() -> None:
    """Counting the imports under `if TYPE_CHECKING:` (a type-level dependency is a dependency for the reader):
    no ring but the recorded ones, which may only shrink."""
    found = package_cycles(typing=True)
    recorded = baseline()["type_rings"]
    assert new_type_rings(found, recorded) == {}, (
        "a new type-level import ring: name what one side needs of the other as a protocol in a lower module"
    )
    in_rings = {package: sorted({m for ring in rings for m in ring}) for package, rings in found.items()}
    gone = {
        package: sorted(set(mods) - set(in_rings.get(package, [])))
        for package, mods in recorded.items()
        if isinstance(mods, list) and set(mods) - set(in_rings.get(package, []))
    }
    assert gone == {}, f"{gone}: no longer in a ring; delete them from {BASELINE_FILE.name} (it only shrinks)"


def test_the_type_ring_finder_counts_typing_imports(tmp_path: Path) -> None:
    root = plant(
        tmp_path,
        {
            "other/d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from kimicode.other import e\n",
            "other/e.py": "from kimicode.other import d\n",
            "other/f.py": "from kimicode.other import e\n",
        },
    )
    found = package_cycles(root, typing=True)
    assert found == {"other": [["kimicode.other.d", "kimicode.other.e"]]}
    assert new_type_rings(found, {"other": ["kimicode.other.d"]}) == {"other": ["kimicode.other.e"]}
    assert new_type_rings(found, {"other": ["kimicode.other.d", "kimicode.other.e"]}) == {}


def underscore_imports(root: Path = ROOT) -> set[tuple[str, str]]:
    """(importing module, name) for every `_name` one kimicode module imports from another."""
    found = set()
    for path in sorted((root / "kimicode").rglob("*.py")):
        for base, item, _ in imports_of(path, root):
            if item and item.startswith("_") and not item.startswith("__") and base.startswith("kimicode"):
                found.add((module_name(path, root), item))
    return found


@pytest.mark.prepush
def test_no_underscore_name_is_imported_across_modules() -> None:
    found = underscore_imports()
    assert not found, (
        f"{sorted(found)}: a name used by another module is public (drop its underscore), or the code belongs in "
        "one module"
    )


@functools.cache  # three checks read it
def function_measures(root: Path = ROOT) -> dict[str, tuple[int, int]]:
    """`path:Class.function` -> (radon complexity, statements) for every function, method and nested function of
    `root`/kimicode. Radon counts `and`/`or` (ruff's mccabe does not)."""
    from radon.visitors import ComplexityVisitor

    out: dict[str, tuple[int, int]] = {}
    for path in sorted((root / "kimicode").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        source = path.read_text()
        lengths = statement_counts(ast.parse(source, str(path)))
        pending = [(block, "") for block in ComplexityVisitor.from_code(source).functions]
        pending += [(method, "") for cls in ComplexityVisitor.from_code(source).classes for method in cls.methods]
        while pending:
            block, outer = pending.pop()
            name = f"{outer}{block.fullname}"
            pending += [(inner, f"{name}.") for inner in block.closures]
            key = f"{rel}:{name}"
            before = out.get(key, (0, 0))  # a redefinition (a property's setter): the larger
            measure = (block.complexity, lengths.get(block.lineno, 0))
            out[key] = (max(before[0], measure[0]), max(before[1], measure[1]))
    return out


def statement_counts(tree: ast.Module) -> dict[int, int]:
    """Line of each `def` (radon's key) -> the statements inside it, nested ones included, its docstring not."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and len(body) > 1:
                body = body[1:]
            out[node.lineno] = sum(isinstance(n, ast.stmt) for statement in body for n in ast.walk(statement))
    return out


def over_budget(
    measures: dict[str, tuple[int, int]], recorded: dict[str, object], index: int, limit: int
) -> dict[str, int]:
    """Functions whose measure `index` (0 complexity, 1 length) is above `limit` and above its recorded figure."""
    found = {}
    for key, values in measures.items():
        allowed = recorded.get(key, limit)
        assert isinstance(allowed, int)
        if values[index] > max(limit, allowed):
            found[key] = values[index]
    return found


@pytest.mark.prepush  # a scan of the whole tree
def test_no_function_is_more_complex_than_25() -> None:
    found = over_budget(function_measures(), baseline()["complexity"], 0, MAX_COMPLEXITY)
    assert not found, f"{found}: split into named steps that read better (see kimicode/cli/app.py's main)"


@pytest.mark.prepush  # a scan of the whole tree
def test_new_functions_stay_within_the_complexity_and_length_budgets() -> None:
    measures = function_measures()
    recorded = baseline()
    complex_ = over_budget(measures, recorded["complexity"], 0, COMPLEXITY_BUDGET)
    long_ = over_budget(measures, recorded["length"], 1, LENGTH_BUDGET)
    assert not complex_, f"{complex_}: radon complexity over {COMPLEXITY_BUDGET} (and/or count): split it"
    assert not long_, f"{long_}: more than {LENGTH_BUDGET} statements: split it into named steps"


@pytest.mark.prepush  # a scan of the whole tree
def test_the_budget_baseline_only_shrinks() -> None:
    """A recorded offender that is gone or back within budget leaves the list, so it cannot grow back."""
    measures = function_measures()
    recorded = baseline()
    stale = {
        key: figure
        for index, (kind, limit) in enumerate((("complexity", COMPLEXITY_BUDGET), ("length", LENGTH_BUDGET)))
        for key, figure in recorded[kind].items()
        if key not in measures or measures[key][index] <= limit
    }
    assert not stale, f"{sorted(stale)}: within budget now; delete them from {BASELINE_FILE.name}"


def test_the_budget_checks_find_functions_over_them(tmp_path: Path) -> None:
    def function(name: str, complexity: int) -> str:  # one path, and one more for each `and` (radon's count)
        return f"def {name}(x):\n    return x" + " and x" * (complexity - 1) + "\n"

    long_body = 'def long(x):\n    """Docstring."""\n    if x:\n' + "        x += 1\n" * LENGTH_BUDGET
    nested = "class C:\n    def m(self):\n        def inner(x):\n            return x or x or x\n        return inner\n"
    root = plant(
        tmp_path,
        {
            "sub/m.py": function("at_limit", MAX_COMPLEXITY)
            + function("over", MAX_COMPLEXITY + 1)
            + function("small", 3)
            + long_body
            + nested
        },
    )
    measures = function_measures(root)
    assert measures["kimicode/sub/m.py:over"][0] == MAX_COMPLEXITY + 1
    assert measures["kimicode/sub/m.py:C.m.inner"][0] == 3
    assert over_budget(measures, {}, 0, MAX_COMPLEXITY) == {"kimicode/sub/m.py:over": MAX_COMPLEXITY + 1}
    assert over_budget(measures, {"kimicode/sub/m.py:over": 26}, 0, MAX_COMPLEXITY) == {}  # recorded
    assert over_budget(measures, {"kimicode/sub/m.py:over": 20}, 0, MAX_COMPLEXITY) != {}  # grown
    assert over_budget(measures, {}, 1, LENGTH_BUDGET) == {"kimicode/sub/m.py:long": LENGTH_BUDGET + 1}


def private_getattrs(path: Path) -> list[str]:
    """`getattr(obj, "_x")` (and has/set/delattr) with a private, non-dunder name: a reach-in by another name."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr", "setattr", "delattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and node.args[1].value.startswith("_")
            and not node.args[1].value.startswith("__")
        ):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


@pytest.mark.prepush  # a scan of the whole tree
def test_no_private_name_is_read_by_getattr() -> None:
    found = {str(p.relative_to(ROOT)): hits for p in sorted(PACKAGE.rglob("*.py")) if (hits := private_getattrs(p))}
    assert not found, f"{found}: make the name public (or give its owner a method) and use it directly"


def test_the_getattr_check_finds_one(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text(
        "def f(search, o):\n    getattr(search, '_in_git_repo', None)\n    hasattr(o, '__len__')\n"
        "    setattr(o, '_x', 1)\n    getattr(o, 'public')\n"
    )
    assert private_getattrs(path) == ["2: getattr(search, '_in_git_repo', None)", "4: setattr(o, '_x', 1)"]


def unformatted(root: Path, *paths: str) -> list[str]:
    """Files `ruff format --check` would change (the settings of `root`/pyproject.toml, if any)."""
    out = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "--no-cache", "--output-format", "json", *paths],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode in (0, 1), out.stderr
    return sorted({Path(item["filename"]).relative_to(root).as_posix() for item in json.loads(out.stdout or "[]")})


@pytest.mark.prepush  # a scan of the whole tree
def test_the_code_is_in_ruff_format() -> None:
    found = unformatted(ROOT, "kimicode", "tests")
    assert not found, f"{len(found)} files, e.g. {found[:5]}: run `ruff format kimicode tests`"


def test_the_format_check_finds_a_file_out_of_format(tmp_path: Path) -> None:
    root = plant(tmp_path, {"sub/ok.py": 'X = {"a": 1}\n', "sub/bad.py": "X = { 'a' :1 }\n"})
    assert unformatted(root, "kimicode") == ["kimicode/sub/bad.py"]


CROSS_CUTTING = {"adversarial", "bench", "fixtures", "project", "real_server"}
"""Test directories that mirror no package: attacks across layers, benchmarks, third-party files, the
project as a whole (README, docs, structure), the real llama.cpp server tier."""


def test_the_tests_mirror_the_packages() -> None:
    """Every test file sits in `tests/<package>/` (or a cross-cutting directory), every package has its
    directory, and `tests/` itself holds only shared helpers: a newcomer finds a module's tests by its name."""
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    tests = ROOT / "tests"
    at_top = sorted(p.name for p in tests.glob("test_*.py"))
    assert not at_top, f"{at_top}: move into tests/<package>/"
    dirs = {p.name for p in tests.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert dirs - packages <= CROSS_CUTTING, f"{sorted(dirs - packages - CROSS_CUTTING)}: not a kimicode package"
    assert packages <= dirs, f"{sorted(packages - dirs)}: packages without tests/<package>/"
    assert len(list(tests.glob("*/test_*.py"))) > 100  # the glob sees the real tree


def plant(root: Path, files: dict[str, str]) -> Path:
    """A small kimicode tree under `root` with the given modules (`sub/a.py`: source)."""
    for name, text in files.items():
        path = root / "kimicode" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.parent / "__init__.py").touch()
        path.write_text(text)
    return root


def test_the_scanners_see_the_real_imports() -> None:
    """The checks above would pass vacuously if the scanner saw no imports: it does see them."""
    agent = imports_of(PACKAGE / "agent" / "core.py")
    assert any(base == "kimicode.agent.builder" for base, _, _ in agent)
    assert any(base == "kimicode.agent.resume" for base, _, _ in agent)  # an import inside a method


def test_the_cycle_finder_finds_a_ring_and_leaves_typing_imports_out(tmp_path: Path) -> None:
    root = plant(
        tmp_path,
        {
            "sub/a.py": "from kimicode.sub.b import B\n",
            "sub/b.py": "def f():\n    from kimicode.sub import c\n    return c\nB = 1\n",  # inside a function
            "sub/c.py": "from . import a\n",  # relative
            "other/d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from kimicode.other import e\n",
            "other/e.py": "from kimicode.other import d\n",
        },
    )
    assert package_cycles(root) == {"sub": [["kimicode.sub.a", "kimicode.sub.b", "kimicode.sub.c"]]}


def test_the_underscore_check_finds_a_private_import(tmp_path: Path) -> None:
    root = plant(
        tmp_path,
        {
            "sub/a.py": "def _helper(): ...\n",
            "sub/b.py": "from kimicode.sub.a import _helper\nfrom os import _exit\nfrom kimicode import __version__\n",
        },
    )
    assert underscore_imports(root) == {("kimicode.sub.b", "_helper")}


def reach_ins(path: Path) -> list[str]:
    """`obj._name` (not `self`/`cls`, not a dunder) in functions and code outside any class."""
    tree = ast.parse(path.read_text(), str(path))
    in_class = {id(n) for c in ast.walk(tree) if isinstance(c, ast.ClassDef) for n in ast.walk(c)}
    bound = bound_names(tree)
    found = []
    for node in ast.walk(tree):
        if id(node) in in_class or not isinstance(node, ast.Attribute):
            continue
        name, owner = node.attr, node.value
        if not name.startswith("_") or name.startswith("__"):
            continue
        if isinstance(owner, ast.Name) and (owner.id in ("self", "cls") or owner.id not in bound):
            continue  # a module's private name (os._exit, sys._getframe): not an object's state
        found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def bound_names(tree: ast.Module) -> set[str]:
    """Names bound by assignment or as parameters anywhere in the module (objects, not imported modules)."""
    functions = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
    names = {
        a.arg
        for f in ast.walk(tree)
        if isinstance(f, functions)
        for a in (*f.args.args, *f.args.kwonlyargs, *f.args.posonlyargs, f.args.vararg, f.args.kwarg)
        if a
    }
    binders = (
        ast.Assign,
        ast.AnnAssign,
        ast.AugAssign,
        ast.For,
        ast.AsyncFor,
        ast.With,
        ast.AsyncWith,
        ast.comprehension,
        ast.NamedExpr,
    )
    names |= {
        t.id
        for n in ast.walk(tree)
        if isinstance(n, binders)
        for t in ast.walk(n)
        if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)
    }
    return names


@pytest.mark.prepush
def test_no_function_outside_a_class_reads_another_objects_private_state() -> None:
    found = {str(p.relative_to(ROOT)): hits for p in sorted(PACKAGE.rglob("*.py")) if (hits := reach_ins(p))}
    assert not found, f"{found}: give the object a method (or the attribute a public name)"


def test_the_reach_in_check_finds_one(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text(
        "import os\n"
        "class Session:\n    def own(self, other):\n        return self._x, other._y\n"  # a class's own business
        "def helper(session):\n    os._exit\n    return session._estimate\n"
        "async def later(session):\n    return session.__class__, [s._queue for s in (session,)]\n"
        "pick = lambda agent: agent._client\n"
    )
    assert set(reach_ins(path)) == {"7: session._estimate", "9: s._queue", "10: agent._client"}
