"""The persistence matrix (issue 34) counted on two checkouts side by side: how many of its cases got
through (a write to a place that runs later allowed unasked, a question a hook's allow would answer, a
branch applied unasked, a place changed on the host from inside the workspace-write sandbox).

    python tests/bench/persistence_matrix.py [BASELINE_REF]   (default: main)

The list of places is this checkout's `RUNS_LATER`, also for the baseline (which may have none); the
baseline is `git archive BASELINE_REF`, run with the same interpreter. The cases are those of
tests/adversarial/test_persistence.py, minus the yolo bash ones (the sandbox half covers them).
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _count(checkout: Path) -> dict[str, object]:
    listed = str(ROOT / "kimicode" / "permissions" / "runslater.py")
    env = {**os.environ, "PYTHONPATH": str(checkout), "PERSISTENCE_LIST": listed}
    done = subprocess.run(
        [sys.executable, __file__, "--child"], env=env, capture_output=True, text=True, timeout=900, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    ref = sys.argv[1] if len(sys.argv) > 1 else "main"
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        rows = {ref: _count(Path(tmp)), "this checkout": _count(ROOT)}
    print(f"load: {os.getloadavg()[0]:.1f}")
    print(f"{'':16}{'engine cases':>14}{'through':>9}{'sandbox cases':>15}{'through':>9}{'total':>8}{'through':>9}")
    for name, r in rows.items():
        e, s = r["engine"], r["sandbox"]
        assert isinstance(e, list) and isinstance(s, list)
        print(f"{name:16}{e[0]:>14}{e[1]:>9}{s[0]:>15}{s[1]:>9}{e[0] + s[0]:>8}{e[1] + s[1]:>9}")
    for name, r in rows.items():
        print(f"{name}: by route {r['routes']}")


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
METHODS = ("write", "mkdir", "mv", "ln", "replace")
GIT = ["git", "-c", "user.name=a", "-c", "user.email=a@b", "-c", "init.defaultBranch=main"]
NOT_PRESENT = ("config", "commondir", "rebase-merge", "rebase-apply", "sequencer")


class _Tool:
    def __init__(self, name: str, kind: str) -> None:
        self.name, self.kind, self.paths = name, kind, None


class _Ctx:
    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace

    def resolve(self, p: str) -> Path:
        return Path(os.path.realpath(self.workspace / os.path.expanduser(p)))

    def is_inside(self, p: Path) -> bool:
        root = Path(os.path.realpath(self.workspace))
        return p == root or root in p.parents


def _engine(places: Any) -> tuple[int, int, dict[str, int]]:
    """The engine's half, with whatever kimicode is importable (the child's PYTHONPATH)."""
    from kimicode.permissions.engine import decide
    from kimicode.permissions.policy import Policy, Rules, parse_rule

    root = Path(tempfile.mkdtemp())
    ws, home, kc = root / "ws", root / "userhome", root / "kc"
    for d in (ws / ".git" / "objects", ws / ".git" / "refs", home, kc):
        d.mkdir(parents=True)
    (ws / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    total = through = 0
    by_route: dict[str, int] = {}
    for e, route, mode, sandbox, rules in itertools.product(
        places, ROUTES, ("default", "accept-edits", "plan", "yolo"), ("auto", "off"), RULES
    ):
        if mode == "yolo" and (sandbox == "off" or route.startswith("bash")):
            continue  # Codex's yolo; yolo's bash: the sandbox half
        top = {"git": ws / ".git", "workspace": ws, "home": home, "kimicode_home": kc}[e.where]
        rel = "plugins/evil/.claude-plugin/plugin.json" if e.where == "kimicode_home" else e.name
        path = top / rel / "x" if e.is_dir else top / rel
        policy = Policy(
            Rules(allow=tuple(parse_rule(x, "user") for x in RULES[rules])),
            kimicode_home=kc,
            user_home=home,
            workspace=ws,
            read_only_sandbox=sandbox != "off",
        )
        total += 1
        got = _through(route, path, mode, ws, policy, decide)
        through += got
        by_route[route] = by_route.get(route, 0) + got
    return total, through, by_route


def _through(route: str, path: Path, mode: str, ws: Path, policy: Any, decide: Any) -> bool:
    if route == "apply":
        try:
            from kimicode.branches.exploration import runs_later_changes
        except ImportError:
            return True  # before issue 34: applying carries every changed file
        return not runs_later_changes(type("P", (), {"workspace": ws, "policy": policy})(), [os.path.relpath(path, ws)])
    if route in ("write_file", "hook updatedInput"):
        d = decide(_Tool("write_file", "edit"), {"path": str(path), "content": "x"}, mode, _Ctx(ws), policy)
    elif route == "edit_file":
        d = decide(_Tool("edit_file", "edit"), {"path": str(path), "old": "a", "new": "b"}, mode, _Ctx(ws), policy)
    else:
        if route == "bash cp into dir":
            path.parent.mkdir(parents=True, exist_ok=True)
        command = {
            "bash cp": f"cp src.txt {path}",
            "bash mv": f"mv src.txt {path}",
            "bash redirect": f"echo x > {path}",
            "bash tee": f"tee {path}",
            "bash cp into dir": f"cp {ws / 'stage' / path.name} {path.parent}",
        }[route]
        d = decide(_Tool("bash", "execute"), {"command": command}, mode, _Ctx(ws), policy)
    hook_answers = route == "hook updatedInput" and d.verdict == "ask" and not getattr(d, "firm", False)
    return d.verdict == "allow" or (hook_answers and mode != "plan")


def _attempt(name: str, is_dir: bool, method: str) -> str:
    body = f"{name}/x" if is_dir else name
    return {
        "write": f"mkdir -p {name} 2>/dev/null; printf planted > {body}",
        "mkdir": f"mkdir -p {name}/sub",
        "mv": f"printf planted > /tmp/m; mkdir -p {os.path.dirname(body) or '.'}; mv -f /tmp/m {body}",
        "ln": f"ln -sfn /tmp/evil {name}",
        "replace": f"rm -rf {name}; printf planted > {name}",
    }[method]


def _snap(p: Path) -> Any:
    if not os.path.lexists(p):
        return None
    if p.is_symlink():
        return ("link", os.readlink(p))
    if p.is_dir():
        return (
            "dir",
            sorted(
                (str(q.relative_to(p)), q.read_bytes() if q.is_file() and not q.is_symlink() else None)
                for q in p.rglob("*")
            ),
        )
    return ("file", p.read_bytes())


def _sandbox(places: Any) -> tuple[int, int]:
    """The bwrap half: every place, absent or present, in a workspace or one holding the home directory."""
    from kimicode.tools.sandbox import Sandbox, probe

    status = probe()
    ents = {
        w: [e for e in places if e.where == w and e.sandbox and e.name != ".git"] for w in ("git", "workspace", "home")
    }
    total = through = 0
    for present, home_in_ws, method in itertools.product((False, True), (False, True), METHODS):
        d = Path(tempfile.mkdtemp())
        w = d / "ws"
        w.mkdir()
        subprocess.run([*GIT, "init", "-q", str(w)], check=True)
        subprocess.run([*GIT, "-C", str(w), "commit", "-q", "--allow-empty", "-m", "c"], check=True)
        targets = [(e, w / ".git" / e.name) for e in ents["git"]] + [(e, w / e.name) for e in ents["workspace"]]
        targets += [(e, w / e.name) for e in ents["home"]] if home_in_ws else []
        for e, p in targets if present else ():
            if not p.exists() and e.name not in NOT_PRESENT:
                p.parent.mkdir(parents=True, exist_ok=True)
                if e.is_dir:
                    p.mkdir()
                    (p / "keep").write_text("mine")
                else:
                    p.write_text("mine")
        before = {p: _snap(p) for _, p in targets}
        script = "\n".join(f"( {_attempt(os.path.relpath(p, w), e.is_dir, method)} ) 2>/dev/null" for e, p in targets)
        sandbox = Sandbox(w, str(status.bwrap), kimicode_home=d / "kc", user_home=w if home_in_ws else d / "uh")
        guard = sandbox.placeholders() if hasattr(sandbox, "placeholders") else contextlib.nullcontext()
        with guard:
            subprocess.run(sandbox.wrap(["bash", "-c", script]), capture_output=True, timeout=120, check=False)
        total += len(targets)
        through += sum(_snap(p) != before[p] for _, p in targets)
    return total, through


def child() -> None:
    spec = importlib.util.spec_from_file_location("runslater_list", os.environ["PERSISTENCE_LIST"])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["runslater_list"] = module
    spec.loader.exec_module(module)
    total, through, by_route = _engine(module.RUNS_LATER)
    stotal, sthrough = _sandbox(module.RUNS_LATER)
    print(json.dumps({"engine": [total, through], "routes": by_route, "sandbox": [stotal, sthrough]}))


if __name__ == "__main__":
    child() if "--child" in sys.argv else main()
