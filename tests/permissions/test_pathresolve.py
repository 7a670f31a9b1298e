"""The one path resolver (kimicode.permissions.pathresolve) and the policy checks built on it: device and
/proc aliases, globs, hard links, other projects' session logs, files that run automatically, and
Claude Code's rule syntax."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kimicode.config.endpoint import ConfigError
from kimicode.permissions.pathresolve import expand_glob, hard_link_twin, is_harmless_device, resolve
from kimicode.permissions.policy import Policy, Rules, autorun_reason, parse_rule, sensitive_reason
from kimicode.tools.base import ToolContext


@pytest.mark.parametrize(
    "raw",
    [
        "/dev/fd/1/../../etc/passwd",
        "/dev/fd/3",
        "/dev/fd/0/..",
        "/dev/stdout/../x",
        "/dev/fd",
        "/proc/self/fd/1",
        "/proc/self/fd/3/../x",
        "/proc/self/root/etc/shadow",
        "/proc/thread-self/root/home",
        "/proc/1/root/etc/passwd",
        "/proc/self/cwd/.env",
        "/proc/12345/cwd",
        "/proc/self/task/1/fd/1",
        "/tmp/../dev/fd/1/../x",
        "/proc/self/map_files/x",
    ],
)
def test_aliases_that_cannot_be_resolved_are_flagged(raw: str, tmp_path: Path) -> None:
    got = resolve(raw, tmp_path)
    assert got.problem is not None and not got.device
    why = sensitive_reason(got.path, user_home=tmp_path / "home", kimicode_home=tmp_path / "kc")
    assert why is not None, raw


@pytest.mark.parametrize("raw", ["/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "/dev/fd/1", "/dev/fd/2"])
def test_harmless_devices_exactly(raw: str, tmp_path: Path) -> None:
    assert is_harmless_device(raw)
    assert resolve(raw, tmp_path).device
    assert not is_harmless_device(raw + "/")
    assert not is_harmless_device(raw + "/..")


def test_proc_environ_is_sensitive(tmp_path: Path) -> None:
    for raw in ("/proc/self/environ", f"/proc/{os.getpid()}/environ", "/proc/self/mem", "/proc/1/cmdline"):
        path = resolve(raw, tmp_path).path
        assert sensitive_reason(path, user_home=tmp_path, kimicode_home=tmp_path / "kc"), raw


def test_symlink_and_dotdot_resolved(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "link").symlink_to(tmp_path / "outside")
    assert resolve("link/x", ws).path == tmp_path / "outside" / "x"
    assert resolve("a/../../x", ws).path == tmp_path / "x"
    ctx = ToolContext(workspace=ws)
    assert ctx.resolve("link/x") == tmp_path / "outside" / "x"
    assert ctx.resolve("/dev/fd/1/../x") == Path("/dev/fd/1/../x")  # unresolved, as written


def test_symlink_into_proc_is_flagged(tmp_path: Path) -> None:
    (tmp_path / "fd").symlink_to("/proc/self/fd")
    assert resolve("fd/3/x", tmp_path).problem is not None


def test_globs_expand_like_bash(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("K=1")
    (tmp_path / "a.txt").write_text("")
    ssh = tmp_path / "home" / ".ssh"
    ssh.mkdir(parents=True)
    (ssh / "id_rsa").write_text("key")
    assert expand_glob(".e*", tmp_path) == [tmp_path / ".env"]
    assert sorted(expand_glob("*", tmp_path) or []) == [tmp_path / "a.txt", tmp_path / "home"]  # no dot files
    assert expand_glob("~/.ss?/id_rs?", tmp_path, tmp_path / "home") == [ssh / "id_rsa"]
    assert expand_glob("nothing*", tmp_path) == []


def test_hard_link_to_env_is_sensitive(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / ".env").write_text("API_KEY=1")
    os.link(ws / ".env", ws / "notes.txt")
    (ws / "plain.txt").write_text("x")
    why = sensitive_reason(ws / "notes.txt", user_home=tmp_path / "home", kimicode_home=tmp_path / "kc", workspace=ws)
    assert why is not None and ".env" in why
    assert sensitive_reason(ws / "plain.txt", user_home=tmp_path, kimicode_home=tmp_path / "kc", workspace=ws) is None


def test_hard_link_scan_too_large_means_maybe(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("x")
    os.link(tmp_path / "a", tmp_path / "b")
    for i in range(5):
        (tmp_path / f"f{i}").write_text("")
    assert hard_link_twin(tmp_path / "b", [tmp_path], lambda p: None, limit=3) is not None
    assert hard_link_twin(tmp_path / "b", [tmp_path], lambda p: None) is None


def test_other_projects_session_logs_are_sensitive(tmp_path: Path) -> None:
    kc = tmp_path / "kc"
    (kc / "sessions").mkdir(parents=True)
    ws = tmp_path / "ws"
    ws.mkdir()
    mine = kc / "sessions" / "a.jsonl"
    mine.write_text(json.dumps({"v": 1, "type": "meta", "workspace": str(ws)}) + "\n")
    theirs = kc / "sessions" / "b.jsonl"
    theirs.write_text(json.dumps({"v": 1, "type": "meta", "workspace": "/elsewhere"}) + "\n")
    policy = Policy(Rules(), kimicode_home=kc, user_home=tmp_path / "home", workspace=ws)
    assert policy.sensitive(theirs) is not None
    assert policy.sensitive(mine) is None
    assert Policy(Rules(), kimicode_home=kc, user_home=tmp_path / "home").sensitive(mine) is not None


@pytest.mark.parametrize(
    "rel",
    [
        ".husky/pre-commit",
        ".vscode/tasks.json",
        ".vscode/settings.json",
        ".envrc",
        ".github/workflows/ci.yml",
        "sub/.husky/x",
        ".pre-commit-config.yaml",
        ".devcontainer/devcontainer.json",
        ".gitattributes",
    ],
)
def test_autorun_files(rel: str, tmp_path: Path) -> None:
    assert autorun_reason(tmp_path / rel) is not None


@pytest.mark.parametrize("rel", ["src/main.py", "Makefile", "package.json", "vscode/tasks.json", "husky.txt"])
def test_not_autorun(rel: str, tmp_path: Path) -> None:
    assert autorun_reason(tmp_path / rel) is None


@pytest.mark.parametrize(
    ("text", "tool", "pattern"),
    [
        ("Bash(rm:*)", "bash", "rm"),
        ("Bash(npm run test:*)", "bash", "npm run test"),
        ("Bash(npm test)", "bash", "npm test"),
        ("Bash", "bash", None),
        ("Read(~/.ssh/**)", "read", "~/.ssh/**"),
        ("Read(//etc/hosts)", "read", "/etc/hosts"),
        ("Edit(src/**)", "edit", "src/**"),
        ("Write(docs/*)", "edit", "docs/*"),
        ("WebFetch", "web_fetch", None),
        ("bash(git diff:*)", "bash", "git diff"),
    ],
)
def test_claude_code_syntax(text: str, tool: str, pattern: str | None) -> None:
    rule = parse_rule(text)
    assert (rule.tool, rule.pattern) == (tool, pattern)


def test_claude_prefix_is_a_whole_word_prefix() -> None:
    rule = parse_rule("Bash(rm:*)")
    assert rule.matches_command("rm") and rule.matches_command("rm -rf x")
    assert not rule.matches_command("rmdir x")
    assert parse_rule("Bash(git diff:*)").matches_command("git diff --stat")
    assert not parse_rule("Bash(git diff:*)").matches_command("git difftool")


@pytest.mark.parametrize(
    "text",
    [
        "Bash(rm*:*)",
        "WebFetch(https://example.com)",
        "web_fetch(domain:)",
        "WebFetch(domain:a b)",
        "task(x)",
        "bash()",
        "",
        "b(a",
    ],
)
def test_unparseable_rules_are_errors_naming_the_rule(text: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_rule(text, "--deny")
    assert "--deny" in str(info.value)


def test_policy_with_rule_adds_a_session_rule() -> None:
    policy = Policy(Rules())
    more = policy.with_rule("Bash(git status:*)")
    assert more.rules.allow[0].pattern == "git status" and not policy.rules.allow
    with pytest.raises(ConfigError):
        policy.with_rule("Bash(x*:*)")


def test_this_sessions_spilled_outputs_are_readable(tmp_path: Path) -> None:
    kc = tmp_path / "kc"
    ws = tmp_path / "ws"
    ws.mkdir()
    (kc / "sessions" / "mine").mkdir(parents=True)
    (kc / "sessions" / "theirs").mkdir(parents=True)
    (kc / "sessions" / "mine.jsonl").write_text(json.dumps({"v": 1, "workspace": str(ws)}) + "\n")
    (kc / "sessions" / "theirs.jsonl").write_text(json.dumps({"v": 1, "workspace": "/elsewhere"}) + "\n")
    spilled = kc / "sessions" / "mine" / "bash-1.txt"
    spilled.write_text("out")
    foreign = kc / "sessions" / "theirs" / "bash-1.txt"
    foreign.write_text("out")
    fresh = kc / "sessions" / "new" / "bash-1.txt"  # a session whose log is not written yet
    fresh.parent.mkdir()
    fresh.write_text("out")
    policy = Policy(Rules(), kimicode_home=kc, user_home=tmp_path / "home", workspace=ws)
    assert policy.sensitive(spilled) is None
    assert policy.sensitive(foreign) is not None
    assert policy.sensitive(fresh) is not None
    own = Policy(Rules(), kimicode_home=kc, user_home=tmp_path / "home", workspace=ws, session_dir=fresh.parent)
    assert own.sensitive(fresh) is None and own.sensitive(foreign) is not None


_PARTS = st.sampled_from(["..", ".", "x", "etc", "passwd", "1", "3", "fd", "self", "root", "cwd", ""])


@pytest.mark.prepush
@settings(max_examples=200, deadline=None)
@given(
    prefix=st.sampled_from(
        [
            "/dev/fd/1",
            "/dev/fd/3",
            "/dev/stdout",
            "/proc/self/fd/1",
            "/proc/self/root",
            "/proc/1/cwd",
            "/proc/thread-self/fd",
            "/tmp/../dev/fd/2",
            "/dev/fd",
        ]
    ),
    rest=st.lists(_PARTS, min_size=1, max_size=6),
)
def test_property_aliases_are_never_harmless_nor_resolved_quietly(prefix: str, rest: list[str]) -> None:
    raw = prefix + "/" + "/".join(rest)
    got = resolve(raw, "/tmp")
    if got.device:  # only an exact harmless device name, e.g. /dev/fd/1/. is not one
        assert raw in ("/dev/fd/1", "/dev/stdout") or is_harmless_device(raw)
    else:
        assert got.problem is not None, raw
        assert sensitive_reason(got.path, user_home=Path("/nonexistent"), kimicode_home=Path("/nonexistent/kc")), raw


@settings(max_examples=100, deadline=None)
@given(rest=st.lists(st.sampled_from(["..", ".", "a", "link", "b"]), min_size=1, max_size=6))
def test_property_resolve_agrees_with_the_os(tmp_path_factory: pytest.TempPathFactory, rest: list[str]) -> None:
    base = tmp_path_factory.getbasetemp() / "agree"
    (base / "ws" / "a" / "b").mkdir(parents=True, exist_ok=True)
    link = base / "ws" / "link"
    if not link.is_symlink():
        link.symlink_to(base / "ws" / "a")
    raw = "/".join(rest)
    assert resolve(raw, base / "ws").path == Path(os.path.realpath(base / "ws" / raw))


def test_hard_links_in_pruned_folders_are_still_found(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "node_modules" / "pkg").mkdir(parents=True)
    (ws / ".env").write_text("K=1")
    store = tmp_path / "store"
    store.mkdir()
    for i in range(50):  # pnpm-style: the packages are hard links into a store outside the workspace
        (store / f"f{i}.js").write_text("x")
        os.link(store / f"f{i}.js", ws / "node_modules" / "pkg" / f"f{i}.js")
    os.link(ws / ".env", ws / "node_modules" / "pkg" / "README.md")
    policy = Policy(Rules(), kimicode_home=tmp_path / "kc", user_home=tmp_path / "home", workspace=ws)
    assert policy.sensitive(ws / "node_modules" / "pkg" / "f3.js") is None
    why = policy.sensitive(ws / "node_modules" / "pkg" / "README.md")
    assert why is not None and ".env" in why


def test_huge_paths_are_not_resolved_component_by_component(tmp_path: Path) -> None:
    got = resolve("a/" * 300_000, tmp_path)
    assert got.problem is not None and "components" in got.problem
    deep = "/".join(["d"] * 2000)
    assert resolve(deep, tmp_path).path == tmp_path.joinpath(*(["d"] * 2000))


@pytest.mark.parametrize(
    ("rule", "url", "hit"),
    [
        ("WebFetch(domain:python.org)", "https://python.org/x", True),
        ("WebFetch(domain:python.org)", "https://docs.python.org/3/", True),
        ("WebFetch(domain:python.org)", "https://DOCS.Python.org./3/", True),
        ("WebFetch(domain:python.org)", "https://evilpython.org/", False),
        ("WebFetch(domain:python.org)", "https://python.org.evil.com/", False),
        ("WebFetch(domain:python.org)", "https://evil.com/?u=https://python.org", False),
        ("WebFetch(domain:python.org)", "https://python.org@evil.com/", False),
        ("WebFetch(domain:python.org)", "not a url", False),
        ("WebFetch(domain:python.org)", None, False),
        ("WebFetch(domain:*.python.org)", "https://docs.python.org/", True),
        ("WebFetch", "https://anything.example/", True),
    ],
)
def test_web_fetch_domain_rules(rule: str, url: object, hit: bool) -> None:
    assert parse_rule(rule).matches_url(url) is hit


def test_web_fetch_domain_rules_decide(tmp_path: Path) -> None:
    from kimicode.permissions.engine import decide
    from kimicode.permissions.policy import load_rules
    from kimicode.tools.web import WEB_FETCH

    ctx = ToolContext(workspace=tmp_path)

    def verdict(url: str, allow: tuple[str, ...] = (), deny: tuple[str, ...] = ()) -> str:
        policy = Policy(load_rules((), allow=allow, deny=deny), kimicode_home=tmp_path / "kc", user_home=tmp_path)
        return decide(WEB_FETCH, {"url": url}, "default", ctx, policy).verdict

    assert verdict("https://docs.python.org/3/", allow=("WebFetch(domain:python.org)",)) == "allow"
    assert verdict("https://evil.com/", allow=("WebFetch(domain:python.org)",)) == "ask"
    assert verdict("https://evil.com/", allow=("web_fetch",), deny=("WebFetch(domain:evil.com)",)) == "deny"
    assert verdict("https://docs.python.org/", allow=("web_fetch",), deny=("WebFetch(domain:evil.com)",)) == "allow"
