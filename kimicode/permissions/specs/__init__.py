"""The program specifications, by program name (see `kimicode.permissions.optparse` for the format and
docs/permissions.md for what each field means). `SPECS` is built once, at import."""

from __future__ import annotations

from kimicode.permissions.optparse import Spec
from kimicode.permissions.specs import basic, git, search, tools, wrappers

__all__ = ["SPECS", "spec_for"]

SPECS: dict[str, Spec] = {}
for _spec in (*basic.SPECS, *search.SPECS, git.GIT, *tools.SPECS, *wrappers.SPECS):
    if _spec.name in SPECS:
        raise ValueError(f"two specifications for {_spec.name!r}")
    SPECS[_spec.name] = _spec


def spec_for(name: str) -> Spec | None:
    """The specification of the program called `name` (a base name), or None when none is kept."""
    return SPECS.get(name)
