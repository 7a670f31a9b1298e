"""The structure CI keeps (issue 24): no import cycle inside a package, no underscore name imported across
modules, no function above cyclomatic complexity 25, the 600-line rule for tests too.

Each check demands zero offenders, and each scanner is tested on a planted tree that breaks its rule (a scanner
that saw nothing would pass vacuously)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from helpers import ROOT

PACKAGE = ROOT / "kimicode"
MAX_LINES = 600
MAX_COMPLEXITY = 25



def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, root: Path = ROOT) -> list[tuple[str, str | None, int]]:
    """(module, name, line) of every import of `path`, inside functions too; `if TYPE_CHECKING:` blocks
    are left out (they never run)."""
    me = module_name(path, root)
    package = me if path.name == "__init__.py" else me.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text(), str(path))
    typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                   and "TYPE_CHECKING" in ast.unparse(block.test) for s in block.body for n in ast.walk(s)}
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


def package_cycles(root: Path = ROOT) -> dict[str, list[list[str]]]:
    """Rings of imports between the modules of one package (strongly connected components) of the tree
    `root`/kimicode."""
    modules = {module_name(p, root): p for p in (root / "kimicode").rglob("*.py")}
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        for base, item, _ in imports_of(path, root):
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


def test_no_import_cycle_inside_a_package() -> None:
    cycles = package_cycles()
    assert not cycles, (
        f"import rings inside a package: {cycles}; break the ring by moving what both sides need below them "
        "(a small shared module, or pass a function or protocol in), not by hiding an import"
    )


def underscore_imports(root: Path = ROOT) -> set[tuple[str, str]]:
    """(importing module, name) for every `_name` one kimicode module imports from another."""
    found = set()
    for path in sorted((root / "kimicode").rglob("*.py")):
        for base, item, _ in imports_of(path, root):
            if item and item.startswith("_") and not item.startswith("__") and base.startswith("kimicode"):
                found.add((module_name(path, root), item))
    return found


def test_no_underscore_name_is_imported_across_modules() -> None:
    found = underscore_imports()
    assert not found, (
        f"{sorted(found)}: a name used by another module is public (drop its underscore), or the code belongs in "
        "one module"
    )


def complex_functions(root: Path = ROOT) -> set[str]:
    """`path:function` for every function of `root`/kimicode above MAX_COMPLEXITY by ruff's count."""
    out = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "kimicode", "--select", "C901", "--output-format", "json",
         "--config", f"lint.mccabe.max-complexity={MAX_COMPLEXITY}", "--no-cache", "--exit-zero"],
        cwd=root, capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return {f"{Path(item['filename']).relative_to(root)}:{item['message'].split('`')[1]}"
            for item in json.loads(out.stdout)}


def test_no_function_is_more_complex_than_the_limit() -> None:
    found = complex_functions()
    assert not found, f"{sorted(found)}: split into named steps that read better (see kimicode/cli/app.py's main)"


def test_the_complexity_check_finds_a_function_over_the_limit(tmp_path: Path) -> None:
    def function(name: str, complexity: int) -> str:  # one path, and one more for each `if`
        return f"def {name}(x):\n" + "".join(f"    if x == {i}:\n        return {i}\n" for i in range(complexity - 1))

    root = plant(tmp_path, {"sub/m.py": function("at_limit", MAX_COMPLEXITY) + function("over", MAX_COMPLEXITY + 1)})
    assert complex_functions(root) == {"kimicode/sub/m.py:over"}


def test_no_test_file_is_longer_than_the_limit() -> None:
    found = {str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("*.py")
             if len(p.read_text().splitlines()) > MAX_LINES and "fixtures" not in p.parts}
    assert not found, f"{sorted(found)}: split by topic, shared helpers in a tests/*_helpers.py module"


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
    root = plant(tmp_path, {
        "sub/a.py": "from kimicode.sub.b import B\n",
        "sub/b.py": "def f():\n    from kimicode.sub import c\n    return c\nB = 1\n",  # inside a function
        "sub/c.py": "from . import a\n",  # relative
        "other/d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from kimicode.other import e\n",
        "other/e.py": "from kimicode.other import d\n",
    })
    assert package_cycles(root) == {"sub": [["kimicode.sub.a", "kimicode.sub.b", "kimicode.sub.c"]]}


def test_the_underscore_check_finds_a_private_import(tmp_path: Path) -> None:
    root = plant(tmp_path, {
        "sub/a.py": "def _helper(): ...\n",
        "sub/b.py": "from kimicode.sub.a import _helper\nfrom os import _exit\nfrom kimicode import __version__\n",
    })
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
    names = {a.arg for f in ast.walk(tree) if isinstance(f, functions)
             for a in (*f.args.args, *f.args.kwonlyargs, *f.args.posonlyargs, f.args.vararg, f.args.kwarg) if a}
    binders = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor, ast.With, ast.AsyncWith,
               ast.comprehension, ast.NamedExpr)
    names |= {t.id for n in ast.walk(tree) if isinstance(n, binders)
              for t in ast.walk(n) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)}
    return names


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
