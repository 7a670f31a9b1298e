"""Every program specification's examples, run through the whole permission decision: `match` runs
without asking (with no rules when the program is read-only, else under `bash(NAME*)`), `not_match`
asks even under `bash(NAME*)`, `not_read_only` asks with no rules but runs under `bash(NAME*)`.
Also the parser itself: prefixes, bundles, attachments, `--no-`, `--`, subcommands, Go flags."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kimicode.permissions.engine import decide
from kimicode.permissions.optparse import Spec, parse_args, parse_options
from kimicode.permissions.policy import Policy, load_rules
from kimicode.permissions.specs import SPECS
from kimicode.tools.base import ToolContext
from kimicode.tools.shell import BASH


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A workspace with a secret (so searches that reach it ask), a fake home."""
    root = tmp_path_factory.mktemp("specs")
    ws, home = root / "ws", root / "home"
    (ws / "src").mkdir(parents=True)
    (ws / ".git").mkdir()
    (ws / "README.md").write_text("hello\n")
    (ws / "package.json").write_text("{}\n")
    (ws / "src" / "app.py").write_text("print(1)\n")
    (ws / ".env").write_text("API_KEY=sk-secret\n")
    home.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(home))
        mp.chdir(ws)
        yield {"ws": ws, "home": home, "ctx": ToolContext(workspace=ws)}


def verdict(world: dict[str, Any], line: str, mode: str = "default", allow: tuple[str, ...] = ()) -> str:
    rules = load_rules((), allow=list(allow))
    policy = Policy(rules, kimicode_home=world["ws"] / ".kc", user_home=world["home"], workspace=world["ws"])
    return decide(BASH, {"command": line}, mode, world["ctx"], policy).verdict


def _examples(kind: str) -> list[tuple[str, str]]:
    return [(name, line) for name, spec in sorted(SPECS.items()) for line in getattr(spec, kind)]


def _read_only(spec: Spec) -> bool:
    return spec.read_only or any(s.read_only for s in spec.subcommands.values())


def test_every_program_with_options_that_matter_has_examples() -> None:
    for name, spec in SPECS.items():
        risky = [o for o in spec.table if o.effect in ("exec", "write", "out")]
        if risky and spec.runs < 0:
            assert spec.not_match, f"{name}: options with effects need not_match examples"


@pytest.mark.parametrize(("name", "line"), _examples("match"))
def test_match_examples_run(world: dict[str, Any], name: str, line: str) -> None:
    spec = SPECS[name]
    assert verdict(world, line, allow=(f"bash({name}*)",)) == "allow", line
    if _read_only(spec):
        for mode in ("default", "plan"):
            assert verdict(world, line, mode) == "allow", (line, mode)


@pytest.mark.parametrize(("name", "line"), _examples("not_match"))
def test_not_match_examples_ask_even_under_a_rule(world: dict[str, Any], name: str, line: str) -> None:
    for mode in ("default", "accept-edits", "plan"):
        assert verdict(world, line, mode, allow=(f"bash({name}*)",)) in ("ask", "deny"), (line, mode)
    assert verdict(world, line) in ("ask", "deny"), line


@pytest.mark.parametrize(("name", "line"), _examples("not_read_only"))
def test_not_read_only_examples_ask_without_a_rule(world: dict[str, Any], name: str, line: str) -> None:
    for mode in ("default", "plan"):
        assert verdict(world, line, mode) in ("ask", "deny"), (line, mode)
    assert verdict(world, line, allow=(f"bash({name}*)",)) == "allow", line


# -- the parser -------------------------------------------------------------------------------------

SORT = Spec(
    "sort",
    "-r --reverse\n-n --numeric-sort\n-o= --output=  !write writes\n--compress-program=  !exec runs\n"
    "--color[=]\n-d[=]\n--arg==",
)


@pytest.mark.parametrize(
    ("words", "effects"),
    [
        (["-rno", "F"], [("write", "F")]),
        (["-rnoF"], [("write", "F")]),
        (["-oF", "-r"], [("write", "F")]),
        (["--out=F"], [("write", "F")]),
        (["--ou", "F"], [("write", "F")]),
        (["--compress-p=sh"], [("exec", "sh")]),
        (["--c=sh"], [("exec", "sh")]),  # ambiguous (--color, --compress-program): the worst of them
        (["--", "-oF"], []),
        (["-r", "x", "-o", "F"], [("write", "F")]),  # GNU permutes: options after operands count
        (["--color", "x"], []),  # an optional argument is only ever attached
        (["-d", "x"], []),
        (["--arg", "a", "b", "c"], []),
    ],
)
def test_the_parser_reads_options_as_getopt_long_does(words: list[str], effects: list[tuple[str, str]]) -> None:
    parsed = parse_args(SORT, words)
    assert [(f.option.effect, f.value) for f in parsed.effects()] == effects


def test_optional_and_two_argument_options_take_what_getopt_takes() -> None:
    parsed = parse_args(SORT, ["--color", "x", "-d", "y", "--arg", "a", "b", "c"])
    assert parsed.operands == ["x", "y", "c"]
    assert parsed.values("--arg") == ["b"]


def test_git_style_negations_and_posix_global_options() -> None:
    git = SPECS["git"]
    parsed = parse_args(git, ["--no-pager", "log", "--no-ext", "-p", "--", "--output=x"])
    assert parsed.subcommand == "log" and parsed.sub is not None
    assert parsed.effects() == [] and parsed.sub.operands == ["--output=x"]
    assert parse_args(git, ["-c", "x=y", "log"]).effects()[0].option.effect == "exec"
    assert [f.spelled for f in parse_args(git, ["log", "--ext-d"]).effects()] == ["--ext-d"]


def test_go_flags_are_single_dash_words_without_bundling() -> None:
    go = SPECS["go"]
    assert [f.value for f in parse_args(go, ["test", "-exec", "id"]).effects()] == ["id"]
    assert [f.value for f in parse_args(go, ["test", "--toolexec=id"]).effects()] == ["id"]
    assert parse_args(go, ["test", "-v", "-run", "X"]).effects() == []


def test_malformed_tables_are_refused() -> None:
    for bad in ("-o= !nonsense", "o --output", "-o --out put"):
        with pytest.raises(ValueError):
            parse_options(bad)


def test_every_table_loads_and_names_each_spelling_once() -> None:
    for name, spec in SPECS.items():
        seen: set[str] = set()
        for option in spec.table:
            for spelling in option.names:
                assert spelling not in seen, f"{name}: {spelling} twice"
                seen.add(spelling)
    assert os.path.basename(__file__)  # keep the import list honest


def test_python_m_pytest_is_suggested_and_admitted_as_pytest(world: dict[str, Any]) -> None:
    rules = load_rules((), allow=[])
    policy = Policy(rules, kimicode_home=world["ws"] / ".kc", user_home=world["home"], workspace=world["ws"])
    decision = decide(BASH, {"command": "python3 -m pytest -q"}, "default", world["ctx"], policy)
    assert decision.verdict == "ask" and decision.suggestion == "bash(pytest -q)"
    for line in ("python -m pytest -q", "python3 -m pytest -q", "python3.11 -m pytest tests -x"):
        assert verdict(world, line, allow=("bash(pytest*)",)) == "allow", line
        assert verdict(world, line, allow=("Bash(pytest:*)",)) == "allow", line
    for line in (
        "python -X dev -m pytest",
        "python -c 'import pytest' -m pytest",
        "PYTHONPATH=/tmp python -m pytest",
        "python -m pytest --basetemp=/tmp/x",
    ):
        assert verdict(world, line, allow=("bash(pytest*)",)) == "ask", line
    assert verdict(world, "python -m pytest_evil", allow=("Bash(pytest:*)",)) == "ask"  # whole words


def test_searches_that_follow_links_see_where_they_lead(tmp_path: Path) -> None:
    ws, home = tmp_path / "ws", tmp_path / "home"
    (ws / "src").mkdir(parents=True)
    (ws / "lib").mkdir()
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("KEY")
    (ws / "src" / "keys").symlink_to(home / ".ssh")
    (ws / "src" / "home").symlink_to(home)
    world = {"ws": ws, "home": home, "ctx": ToolContext(workspace=ws)}
    for line in ("grep -R KEY src", "grep -nR KEY src", "rg -L KEY src", "rg --follow KEY src", "grep -r KEY src"):
        assert verdict(world, line, allow=(f"bash({line.split()[0]}*)",)) == "ask", line
    assert verdict(world, "grep -R KEY lib", allow=("bash(grep*)",)) == "allow"
    assert verdict(world, "rg -L KEY lib") == "allow"
