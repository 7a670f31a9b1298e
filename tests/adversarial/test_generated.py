"""The hostile cases generated from the program specifications (generated.py), through the whole
permission decision in a workspace holding a secret and other repositories: each line asks or is
refused under the rules that admit its harmless form (and so with fewer rules); each harmless form runs.
One test per program keeps the thousands of lines cheap; a failure lists every line that got through."""

from __future__ import annotations

import subprocess
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
from generated import HOSTILE_CASES, REPOSITORIES, Case

from kimicode.permissions.engine import decide
from kimicode.permissions.policy import Policy, load_rules
from kimicode.tools.base import ToolContext
from kimicode.tools.shell import BASH


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A workspace repository with a secret, a nested repository, a bare one, a `.git` file, and a
    bare repository written as ordinary files (as the model could in accept-edits)."""
    root = tmp_path_factory.mktemp("generated")
    ws, home = root / "ws", root / "home"
    (ws / "src").mkdir(parents=True)
    home.mkdir()
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    (ws / "README.md").write_text("hello\n")
    (ws / ".env").write_text("API_KEY=sk-secret\n")
    subprocess.run(["git", "init", "-q", str(ws / "nested")], check=True)
    (ws / "nested" / "deep").mkdir()
    subprocess.run(["git", "init", "-q", "--bare", str(ws / "bare")], check=True)
    (ws / "gitfile").mkdir()
    (ws / "gitfile" / ".git").write_text("gitdir: ../bare\n")
    written = ws / "written"
    for directory in ("objects", "refs"):
        (written / directory).mkdir(parents=True)
    (written / "HEAD").write_text("ref: refs/heads/main\n")
    (written / "config").write_text("[diff]\n\texternal = touch pwned\n")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(home))
        mp.chdir(ws)
        yield {"ws": ws, "home": home, "ctx": ToolContext(workspace=ws)}


def verdict(world: dict[str, Any], line: str, rules: tuple[str, ...], mode: str = "default") -> str:
    policy = Policy(
        load_rules((), allow=list(rules)),
        kimicode_home=world["ws"] / ".kc",
        user_home=world["home"],
        workspace=world["ws"],
    )
    return decide(BASH, {"command": line}, mode, world["ctx"], policy).verdict


def _by_program() -> dict[str, list[Case]]:
    groups: dict[str, list[Case]] = defaultdict(list)
    for case in HOSTILE_CASES:
        groups[" ".join(case[1].split()[:2]) if case[1].startswith("git ") else case[1].split()[0]].append(case)
    return dict(groups)


GROUPS = _by_program()


def test_enough_cases_are_generated() -> None:
    assert len(HOSTILE_CASES) >= 300
    assert len({line for line, _, _ in HOSTILE_CASES}) > 1000


@pytest.mark.prepush
@pytest.mark.parametrize("program", sorted(GROUPS))
def test_generated_hostile_lines_ask_and_their_harmless_forms_run(world: dict[str, Any], program: str) -> None:
    through = [line for line, _, rules in GROUPS[program] if verdict(world, line, rules) == "allow"]
    blocked = [
        harmless
        for harmless, rules in {(h, r) for _, h, r in GROUPS[program]}
        if verdict(world, harmless, rules) != "allow"
    ]
    assert not through, f"{len(through)} hostile lines ran without asking: {through[:20]}"
    assert not blocked, f"harmless forms asked: {sorted(set(blocked))[:20]}"


@pytest.mark.parametrize("directory", REPOSITORIES)
def test_git_in_another_repository_asks_in_plan_and_accept_edits_too(world: dict[str, Any], directory: str) -> None:
    for mode in ("plan", "accept-edits"):
        assert verdict(world, f"cd {directory} && git log", (), mode) == "ask", (directory, mode)
        assert verdict(world, f"cd {directory} && git log", ("bash(git log*)",), mode) == "ask", (directory, mode)
    assert verdict(world, "cd src && git log", (), "plan") == "allow"
