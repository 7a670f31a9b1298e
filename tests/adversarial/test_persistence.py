"""The generated persistence matrix (issue 34): every place of `RUNS_LATER` x every write route x every
permission mode, with and without user rules. Nothing is created or changed without a question.

Two halves. The permission engine (in-process, cheap): each route's decision for each place must ask or
refuse, never allow, and an ask must be firm (no hook's allow answers it). The OS sandbox (real bwrap,
one command per setup): every place, absent or present, written, made, moved over, linked and replaced
from inside the workspace-write sandbox (what `auto` with a rule, `workspace-write` and `--yolo` run in)
is unchanged on the host afterwards, and the host's `git status`, `git commit` and `git rebase
--continue` then run nothing planted.

Routes covered elsewhere end to end: tests/adversarial/test_persistence_e2e.py (findings 1-3, an
agent's yolo run, `--sandbox off` with rules, the next trusted session, applying a branch).
"""

from __future__ import annotations

import itertools
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kimicode.branches.exploration import runs_later_changes
from kimicode.config.trustseen import fingerprint
from kimicode.permissions.engine import decide
from kimicode.permissions.policy import Policy, Rules, parse_rule
from kimicode.permissions.runslater import RUNS_LATER, RunsLater
from kimicode.tools.sandbox import Sandbox, probe

STATUS = probe()
needs_bwrap = pytest.mark.skipif(not STATUS.available, reason=f"bubblewrap cannot run here: {STATUS.reason}")

MODES = ("default", "accept-edits", "plan", "yolo")
SANDBOX = ("auto", "off")
RULES = {
    "none": (),
    "broad": (
        "bash(cp *)",
        "bash(mv *)",
        "bash(tee *)",
        "bash(echo *)",
        "bash(mkdir *)",
        "bash(ln *)",
        "edit(**)",
        "edit(~/**)",
        "edit(/**)",
        "write_file",
        "edit_file",
    ),
}
ROUTES = (
    "write_file",
    "edit_file",
    "bash cp",
    "bash mv",
    "bash redirect",
    "bash tee",
    "bash cp into dir",
    "hook updatedInput",
    "apply",
)


@dataclass(frozen=True)
class Place:
    ws: Path
    home: Path
    kc: Path


@dataclass(frozen=True)
class _Tool:
    name: str
    kind: str
    paths: None = None


@dataclass(frozen=True)
class _Ctx:
    workspace: Path

    def resolve(self, path: str) -> Path:
        return Path(os.path.realpath(self.workspace / os.path.expanduser(path)))

    def is_inside(self, path: Path) -> bool:
        root = Path(os.path.realpath(self.workspace))
        return path == root or root in path.parents


def target(entry: RunsLater, p: Place) -> Path:
    """A file the model would write for `entry` (below a folder entry, the folder's file `x`)."""
    top = {"git": p.ws / ".git", "workspace": p.ws, "home": p.home, "kimicode_home": p.kc}[entry.where]
    rel = "plugins/evil/.claude-plugin/plugin.json" if entry.where == "kimicode_home" else entry.name
    return top / rel / "x" if entry.is_dir else top / rel


@pytest.fixture(scope="module")
def place(tmp_path_factory: pytest.TempPathFactory) -> Place:
    root = tmp_path_factory.mktemp("persist")
    p = Place(root / "ws", root / "userhome", root / "kc")
    for d in (p.ws / ".git" / "objects", p.ws / ".git" / "refs", p.home, p.kc):
        d.mkdir(parents=True)
    (p.ws / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (p.ws / "src.txt").write_text("planted\n")
    return p


def _policy(p: Place, rules: str, sandbox: str) -> Policy:
    parsed = tuple(parse_rule(r, "user") for r in RULES[rules])
    return Policy(
        Rules(allow=parsed), kimicode_home=p.kc, user_home=p.home, workspace=p.ws, read_only_sandbox=sandbox != "off"
    )


def _route_decision(route: str, path: Path, mode: str, p: Place, policy: Policy) -> Any:
    ctx = _Ctx(p.ws)
    if route in ("write_file", "hook updatedInput"):
        return decide(_Tool("write_file", "edit"), {"path": str(path), "content": "x"}, mode, ctx, policy)
    if route == "edit_file":
        return decide(_Tool("edit_file", "edit"), {"path": str(path), "old": "a", "new": "b"}, mode, ctx, policy)
    if route == "bash cp into dir":  # the folder exists (else cp would make a file of that name)
        path.parent.mkdir(parents=True, exist_ok=True)
    command = {
        "bash cp": f"cp src.txt {path}",
        "bash mv": f"mv src.txt {path}",
        "bash redirect": f"echo x > {path}",
        "bash tee": f"tee {path}",
        "bash cp into dir": f"cp {p.ws / 'stage' / path.name} {path.parent}",
    }[route]
    return decide(_Tool("bash", "execute"), {"command": command}, mode, ctx, policy)


COMBOS = [(m, s, rules) for m, s, rules in itertools.product(MODES, SANDBOX, RULES) if not (m == "yolo" and s == "off")]
"""Every mode x sandbox x rules (not Codex's --yolo with --sandbox off: no questions, no sandbox, by choice)."""
CASES = [pytest.param(e, r, id=f"{e.where}:{e.path or '*'}-{r}") for e, r in itertools.product(RUNS_LATER, ROUTES)]
"""The engine's half of the matrix: `len(CASES) * len(COMBOS)` decisions, one test per place and route."""


def _through(entry: RunsLater, route: str, mode: str, sandbox: str, rules: str, p: Place) -> str | None:
    """Why this case got through (None: it asks firmly or is refused)."""
    path = target(entry, p)
    policy = _policy(p, rules, sandbox)
    if route == "apply":
        parent = type("Parent", (), {"workspace": p.ws, "policy": policy})()
        return None if runs_later_changes(parent, [os.path.relpath(path, p.ws)]) else "applied unasked"
    decision = _route_decision(route, path, mode, p, policy)
    if route.startswith("bash") and mode == "yolo":  # the sandbox is the boundary: the bwrap half below
        return None if decision.verdict == "allow" else f"yolo asked: {decision}"
    if decision.verdict == "allow":
        return decision.reason or "allowed"
    if decision.verdict == "ask" and mode != "plan" and not decision.firm:
        return f"a hook's allow would answer: {decision.reason}"  # nor a hook's rewritten input
    return None


@pytest.mark.parametrize(("entry", "route"), CASES)
def test_nothing_that_runs_later_is_written_unasked(place: Place, entry: RunsLater, route: str) -> None:
    through = [(c, why) for c in COMBOS if (why := _through(entry, route, *c, place)) is not None]
    assert not through, through


def test_the_matrix_covers_every_place_route_and_mode() -> None:
    places = {(e.where, e.path) for e in RUNS_LATER}
    assert len(places) == len(RUNS_LATER) >= 40
    assert len(CASES) * len(COMBOS) == len(RUNS_LATER) * len(ROUTES) * 7 * len(RULES)


# -- the sandbox's half: real bwrap ---------------------------------------------------------------------

GIT = ["git", "-c", "user.name=a", "-c", "user.email=a@b", "-c", "init.defaultBranch=main"]
METHODS = ("write", "mkdir", "mv", "ln", "replace")


def _attempt(name: str, is_dir: bool, method: str) -> str:
    """Shell lines trying to create or change `name` (relative to the command's directory) by `method`."""
    body = f"{name}/x" if is_dir else name
    return {
        "write": f"mkdir -p {name} 2>/dev/null; printf planted > {body}",
        "mkdir": f"mkdir -p {name}/sub",
        "mv": f"printf planted > /tmp/m; mkdir -p {os.path.dirname(body) or '.'}; mv -f /tmp/m {body}",
        "ln": f"ln -sfn /tmp/evil {name}",
        "replace": f"rm -rf {name}; printf planted > {name}",
    }[method]


def _sandbox_entries(where: str) -> list[RunsLater]:
    return [e for e in RUNS_LATER if e.where == where and e.sandbox and e.name != ".git"]


def _state(root: Path) -> dict[str, Any]:
    """Every path below `root` with its type and content (the host's view, to compare before and after)."""
    out: dict[str, Any] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if rel.startswith((".git/objects", ".git/logs", ".git/refs")) or rel in (
                ".git/index",
                ".git/ORIG_HEAD",
                ".git/COMMIT_EDITMSG",
            ):
                continue
            out[rel] = (
                ("link", os.readlink(path))
                if path.is_symlink()
                else (("dir", None) if path.is_dir() else ("file", path.read_bytes()))
            )
    return out


def _repo(ws: Path, present: bool) -> None:
    ws.mkdir(parents=True)
    subprocess.run([*GIT, "init", "-q", str(ws)], check=True)
    (ws / "README.md").write_text("hi\n")
    subprocess.run([*GIT, "-C", str(ws), "add", "."], check=True)
    subprocess.run([*GIT, "-C", str(ws), "commit", "-qm", "one"], check=True)
    if present:  # every place exists, harmless, and must stay as it is (not an operation in progress)
        for entry in [*_sandbox_entries("git"), *_sandbox_entries("workspace")]:
            path = (ws / ".git" if entry.where == "git" else ws) / entry.name
            if path.exists() or entry.name in _NOT_PRESENT:
                continue
            if entry.is_dir:
                path.mkdir(parents=True)
                (path / "keep").write_text("mine\n")
            else:
                path.write_text("" if entry.name == "config.worktree" else "mine\n")


_NOT_PRESENT = ("config", "commondir", "rebase-merge", "rebase-apply", "sequencer")
"""Not made for the `present` setup: git takes them for another repository or an operation in progress."""


def _plant_script(ws: Path, home_in_ws: bool) -> str:
    lines = []
    for where, base in (("git", ".git"), ("workspace", "."), *((("home", "."),) if home_in_ws else ())):
        for entry, method in itertools.product(_sandbox_entries(where), METHODS):
            name = f"{base}/{entry.name}" if base != "." else entry.name
            lines.append(f"( {_attempt(name, entry.is_dir, method)} ) 2>/dev/null")
    evil = ws / "evil"
    lines += [  # finding 1's chain, and a fake interactive rebase with an exec line
        f"mkdir -p {evil}/hooks && printf '[core]\\n\\tfsmonitor = touch {ws}/pwned-fsmonitor\\n"
        f"\\thooksPath = {evil}/hooks\\n' > {evil}/config",
        f"printf '#!/bin/sh\\ntouch {ws}/pwned-hook\\n' > {evil}/hooks/pre-commit; chmod +x {evil}/hooks/pre-commit",
        "printf '../evil' > .git/commondir",
        f"mkdir -p .git/rebase-merge && printf 'exec touch {ws}/pwned-rebase\\n' > .git/rebase-merge/git-rebase-todo",
        "git -c user.name=a -c user.email=a@b commit -q --allow-empty -m inside && echo COMMITTED",
        "echo fine > ordinary.txt && echo WROTE",
    ]
    return "\n".join(lines)


@needs_bwrap
@pytest.mark.slow
@pytest.mark.parametrize("present", [False, True], ids=["absent", "present"])
@pytest.mark.parametrize("home_in_ws", [False, True], ids=["ws", "ws-is-home"])
def test_the_sandbox_keeps_every_place_that_runs_later(tmp_path: Path, present: bool, home_in_ws: bool) -> None:
    ws = tmp_path / "ws"
    _repo(ws, present)
    home = ws if home_in_ws else tmp_path / "userhome"
    home.mkdir(exist_ok=True)
    before, seen = _state(ws), fingerprint(ws)
    sandbox = Sandbox(ws, str(STATUS.bwrap), kimicode_home=tmp_path / "kc", user_home=home)
    with sandbox.placeholders():
        done = subprocess.run(
            sandbox.wrap(["bash", "-c", _plant_script(ws, home_in_ws)]), capture_output=True, text=True, timeout=120
        )
    assert "COMMITTED" in done.stdout and "WROTE" in done.stdout, done.stderr[-2000:]
    after = _state(ws)
    changed = sorted(
        k
        for k in set(before) | set(after)
        if before.get(k) != after.get(k) and not k.startswith(("evil", "ordinary.txt"))
    )
    assert not changed, changed
    assert fingerprint(ws) == seen  # the next trusted session loads exactly what it loaded before
    subprocess.run(["git", "status"], cwd=ws, capture_output=True, check=False)
    subprocess.run([*GIT, "commit", "-q", "--allow-empty", "-m", "host"], cwd=ws, capture_output=True, check=False)
    subprocess.run(["git", "rebase", "--continue"], cwd=ws, capture_output=True, check=False)
    assert not [p.name for p in ws.glob("pwned-*")]
    log = subprocess.run(["git", "log", "--oneline"], cwd=ws, capture_output=True, text=True, check=True).stdout
    assert len(log.splitlines()) == 3  # the commit made inside the sandbox, and the host's


def sandbox_matrix_size() -> int:
    """The bwrap half's cases: places x methods x (absent, present) x (workspace, workspace holding home)."""
    per = len(_sandbox_entries("git")) + len(_sandbox_entries("workspace"))
    return per * len(METHODS) * 2 + (per + len(_sandbox_entries("home"))) * len(METHODS) * 2


def test_the_docs_list_every_place_that_runs_later() -> None:
    docs = (Path(__file__).parents[2] / "docs" / "permissions.md").read_text()
    section = docs.split("## Persistence: what runs later", 1)[1].split("\n## ", 1)[0]
    missing = [e.path for e in RUNS_LATER if e.path and f"`{e.path}`" not in section]
    assert not missing, missing
