"""The shape of the package, checked: the import-linter contracts, where HTTP may be spoken (size is budgeted per
function, not per module: tests/project/test_structure.py)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT

PACKAGE = ROOT / "kimicode"
HTTP_MODULES = ("urllib.request", "http.client")
HTTP_PLACES = ("kimicode/llm/", "kimicode/tools/web", "kimicode/mcp/", "kimicode/testing/", "kimicode/serve/")
"""Where a raw HTTP client may be imported (the model client, web_fetch, MCP, the fake server, `kimicode serve`)."""


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


@pytest.mark.prepush
def test_the_import_contracts_hold() -> None:
    lint = Path(sys.executable).parent / "lint-imports"
    assert lint.exists(), f"import-linter is not installed next to {sys.executable}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "broken" in out.stdout and " 0 broken" in out.stdout


def http_imports(path: Path) -> list[str]:
    """The raw HTTP modules `path` imports (`import urllib.request`, `from http.client import ...`)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name in HTTP_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module in HTTP_MODULES:
                found.append(node.module)
            elif node.module in ("urllib", "http"):
                found += [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in HTTP_MODULES]
    return found


@pytest.mark.prepush
def test_raw_http_is_imported_only_where_http_belongs() -> None:
    outside = {
        rel: names
        for p in modules()
        if (names := http_imports(p)) and not (rel := str(p.relative_to(ROOT))).startswith(HTTP_PLACES)
    }
    assert outside == {}


def test_the_http_scan_finds_what_it_looks_for(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text(
        "import urllib.request\nfrom http import client\nfrom http.client import HTTPConnection\n"
        "import json\nfrom urllib.parse import urlsplit\n"
    )
    assert http_imports(sample) == ["urllib.request", "http.client", "http.client"]


def test_the_http_contract_covers_every_tool_module_but_web() -> None:
    """A new module under tools/ must be listed as a source of the "HTTP only in ..." contract, or it could
    import an HTTP client unchecked (the contract lists modules, so a forgotten one is silently free)."""
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (http,) = [c for c in contracts if c["name"].startswith("HTTP only")]
    tools = {f"kimicode.tools.{p.stem}" for p in (PACKAGE / "tools").glob("*.py") if p.stem not in ("__init__", "web")}
    assert tools - set(http["source_modules"]) == set()
