"""The README's Python examples run as written (against the fake server)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from helpers import ROOT

README = ROOT / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_readme_has_examples() -> None:
    assert any("FakeServer" in block for block in python_blocks())


def test_readme_test_examples_pass(tmp_path: Path) -> None:
    ran = 0
    for i, block in enumerate(python_blocks()):
        code = compile(block, f"README.md[python block {i}]", "exec")  # every block is valid Python
        if "FakeServer" not in block:
            continue  # examples that would talk to a real endpoint are only compiled
        namespace: dict[str, Any] = {"__name__": f"readme_block_{i}"}
        exec(code, namespace)
        for name, fn in list(namespace.items()):
            if name.startswith("test_") and callable(fn):
                case = tmp_path / f"{i}-{name}"
                case.mkdir()
                fn(case)
                ran += 1
    assert ran >= 1
