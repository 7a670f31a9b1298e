"""The permission policy: the shell parser, rules, modes, sensitive paths and confinement (unit level)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kimicode.config.endpoint import ConfigError
from kimicode.permissions.engine import Decision, decide, denial_message
from kimicode.permissions.policy import Policy, Rules, load_rules, parse_rule
from kimicode.permissions.shellparse import ShellParseError, parse
from kimicode.tools.base import Tool, ToolContext
from kimicode.tools.files import EDIT_FILE, READ_FILE, WRITE_FILE
from kimicode.tools.search import GLOB, GREP
from kimicode.tools.shell import BASH


async def _noop(args: dict[str, Any], ctx: ToolContext) -> str:
    return "ok"


OTHER = Tool("todo_like", "a harmless library tool", {"type": "object"}, _noop, kind="other")
RUNNER = Tool("run_tests", "runs the test suite", {"type": "object"}, _noop, kind="execute")


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / ".git").mkdir()
    home = tmp_path / "user"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("KEY")
    (home / ".aws").mkdir()
    kc = tmp_path / "kchome"
    kc.mkdir()
    monkeypatch.setenv("HOME", str(home))  # `~` in paths and rules is this fake home
    return {"ctx": ToolContext(workspace=ws), "ws": ws, "home": home, "kc": kc, "tmp": tmp_path}


def policy(
    env: dict[str, Any],
    allow: tuple[str, ...] = (),
    deny: tuple[str, ...] = (),
    ask: tuple[str, ...] = (),
    sandboxed: bool = False,
) -> Policy:
    rules = load_rules((), allow=allow, deny=deny, ask=ask)
    return Policy(rules, kimicode_home=env["kc"], user_home=env["home"], sandboxed=sandboxed)


def bash(env: dict[str, Any], command: str, mode: str = "default", **rules: Any) -> Decision:
    return decide(BASH, {"command": command}, mode, env["ctx"], policy(env, **rules))


def verdict(env: dict[str, Any], tool: Tool, args: dict[str, Any], mode: str = "default", **rules: Any) -> str:
    return decide(tool, args, mode, env["ctx"], policy(env, **rules)).verdict


# -- the shell parser ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "texts"),
    [
        ("git status && rm -rf ~", ["git status", "rm -rf ~"]),
        ("git status; curl x | sh", ["git status", "curl x", "sh"]),
        ("a || b & c |& d\ne", ["a", "b", "c", "d", "e"]),
        ("echo $(whoami) `id`", ["whoami", "id", "echo $(whoami) `id`"]),
        ('echo "in $(date +%s) quotes"', ["date +%s", "echo 'in $(date +%s) quotes'"]),
        ("(cd a && make) > out 2>&1", ["cd a", "make", ""]),
        ("{ echo a; echo b; } | sort", ["echo a", "echo b", "sort"]),
        ("for f in $(ls); do echo $f; done", ["ls", "echo $f"]),
        ("if git diff --quiet; then echo clean; else git stash; fi", ["git diff --quiet", "echo clean", "git stash"]),
        ("while read l; do echo $l; done < in.txt", ["read l", "echo $l", ""]),
        ("diff <(ls a) >(wc -l)", ["ls a", "wc -l", "diff '<(ls a)' '>(wc -l)'"]),
        ("X=1 npm test # a comment; rm -rf /", ["X=1 npm test"]),
        ("echo a#b", ["echo a#b"]),
        ("cat <<'EOF' > f\n$(rm -rf /)\nEOF\necho after", ["cat", "echo after"]),
        ("cat <<EOF\nhello $USER\nEOF", ["cat"]),
        ("! git diff --quiet || echo changed", ["git diff --quiet", "echo changed"]),
        ("echo 'a b' \"c d\" e\\ f", ["echo 'a b' 'c d' 'e f'"]),
        ("git\\ status", ["'git status'"]),
        ("echo `echo \\`id\\``", ["id", "echo `id`", "echo '`echo \\`id\\``'"]),
        ("echo ok \\\n  && ls", ["echo ok", "ls"]),
    ],
)
def test_parser_finds_every_simple_command(command: str, texts: list[str]) -> None:
    assert sorted(c.text for c in parse(command)) == sorted(texts)


@pytest.mark.parametrize(
    "command",
    [
        "f() { rm -rf ~; }; f",
        "function f { rm; }",
        "case $x in a) rm;; esac",
        "echo $((1 + 2))",
        "(( i++ ))",
        "[[ -f x ]] && rm x",
        "echo ${x:-$(rm -rf ~)}",
        "echo 'unclosed",
        'echo "unclosed',
        "echo `unclosed",
        "echo $(unclosed",
        "cat <<EOF\n$(rm -rf ~)\nEOF",
        "a=(1 2 3)",
        "echo a )",
        "select x in a b; do rm; done",
        "coproc rm x",
        "(ls) rm",
        "echo x >",
        "for ((i=0; i<3; i++)); do rm; done",
        "ls\x00rm",
    ],
)
def test_parser_refuses_what_it_does_not_understand(command: str) -> None:
    with pytest.raises(ShellParseError):
        parse(command)


def test_redirections_and_dynamic_words() -> None:
    (cmd,) = parse("sort < in.txt > out.txt 2>&1 2>>err.log &>all >&2 <<<'s' 3<>rw")
    kinds = [(r.op, r.fd, r.target.text, r.kind) for r in cmd.redirects]
    assert kinds == [
        ("<", "", "in.txt", "read"),
        (">", "", "out.txt", "write"),
        (">&", "2", "1", "dup"),
        (">>", "2", "err.log", "write"),
        ("&>", "", "all", "write"),
        (">&", "", "2", "dup"),
        ("<<<", "", "s", "herestring"),
        ("<>", "3", "rw", "write"),
    ]
    assert parse("echo x >&out.txt")[0].redirects[0].kind == "write"
    for dynamic in ("$CMD x", "{git,rm} x", "g*t x", "$'\\x72m' x", "${CMD} x", "`which rm` x", "g[i]t x"):
        name = parse(dynamic)[-1].name
        assert name is not None and name.dynamic, dynamic
    for literal in ("[ -f x ]", "find . -exec rm {} \\;", "'g*t' x", "git x"):
        name = parse(literal)[-1].name
        assert name is not None and not name.dynamic, literal
    cmd = parse("A=1 B=2 make test")[0]
    assert [w.text for w in cmd.assignments] == ["A=1", "B=2"] and cmd.name is not None and cmd.name.text == "make"
    assert parse("'A=1' make")[0].assignments == ()


# -- rules --------------------------------------------------------------------------------------------


def test_rule_syntax_and_errors() -> None:
    assert parse_rule("bash(git   diff*)").pattern == "git diff*"
    assert parse_rule("edit( src/** )").pattern == "src/**"
    rule = parse_rule("write_file")
    assert rule.tool == "write_file" and rule.pattern is None
    for bad in ("", "bash(git", "bash()", "(x)", "two words", "bash(x) trailing"):
        with pytest.raises(ConfigError) as info:
            parse_rule(bad, "--allow")
        assert "--allow" in str(info.value) and "rules look like" in str(info.value)


def test_rules_from_both_config_files_are_joined(tmp_path: Path) -> None:
    user = tmp_path / "user.toml"
    user.write_text('[permissions]\ndeny = ["bash(rm*)"]\nallow = ["bash(git diff*)"]\n')
    project = tmp_path / "project.toml"
    project.write_text('[permissions]\ndeny = []\nallow = ["bash(npm test)"]\nask = ["bash(git push*)"]\n')
    rules = load_rules([user, project, tmp_path / "missing.toml"], allow=["edit(src/**)"], deny=["read(secrets/**)"])
    assert [r.raw for r in rules.deny] == ["bash(rm*)", "read(secrets/**)"]  # a project cannot drop a deny
    assert [r.raw for r in rules.allow] == ["bash(git diff*)", "bash(npm test)", "edit(src/**)"]
    assert [r.raw for r in rules.ask] == ["bash(git push*)"]
    assert str(user) in rules.deny[0].source and rules.deny[1].source == "--deny"
    project.write_text('[permissions]\nallow = ["bash(oops"]\n')
    with pytest.raises(ConfigError, match=r"project\.toml"):
        load_rules([project])


# -- bash ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        "git status && rm -rf ~",
        "git status; curl x | sh",
        "git status | sh",
        "git status $(rm -rf ~)",
        "git status `rm -rf ~`",
        "(git status; rm x)",
        "git status & rm x",
        "git status\nrm x",
        "git status <(rm x)",
        "if git status; then rm x; fi",
        "X=./evil git status",
        "PATH=/tmp/evil:$PATH; git status",
        "$(echo git) status",
        "git status; f() { :; }",
        "git status > /etc/passwd",
        "git status; echo ${x:-$(rm x)}",
    ],
)
def test_a_bash_rule_never_allows_more_than_it_names(env: dict[str, Any], command: str) -> None:
    decision = bash(env, command, allow=("bash(git status*)",))
    assert decision.verdict == "ask", decision


def test_a_bash_rule_allows_every_matching_part(env: dict[str, Any]) -> None:
    allow = ("bash(git status*)", "bash(git diff*)", "bash(npm test)")
    for command in (
        "git status",
        "git status -s",
        "git status && git diff --stat",
        "git diff | git status",
        "(git status)",
        "npm test",
        "npm 'test'",
        "git status 2>&1",
        "git status >/dev/null",
        "if git diff --quiet; then git status; fi",
    ):
        assert bash(env, command, allow=allow).verdict == "allow", command
    for command in ("npm test --watch", "npm tests", "/usr/bin/git status", "git  stat"):
        assert bash(env, command, allow=allow).verdict == "ask", command
    assert bash(env, "rm -rf x").verdict == "ask"
    assert bash(env, "anything at all", allow=("bash",)).verdict == "allow"
    assert bash(env, "ls; f() { :; }", allow=("bash",)).verdict == "ask"  # unparseable: never by a rule


def test_deny_always_wins(env: dict[str, Any]) -> None:
    d = bash(env, "ls && rm -rf x", allow=("bash",), deny=("bash(rm*)",))
    assert d.verdict == "deny" and d.by_rule and "bash(rm*)" in d.reason
    assert bash(env, "ls && rm -rf x", "yolo", deny=("bash(rm*)",)).verdict == "deny"
    assert bash(env, "echo $(rm x)", "yolo", deny=("bash(rm*)",)).verdict == "deny"
    # a computed command name might be the denied one: ask, even in yolo
    assert bash(env, "$CMD x", "yolo", deny=("bash(rm*)",)).verdict == "ask"
    assert bash(env, "ls; f() { :; }", "yolo", deny=("bash(rm*)",)).verdict == "ask"
    assert bash(env, "ls", "yolo", deny=("bash",)).verdict == "deny"
    assert bash(env, "echo hi > secret/x", "yolo", deny=("edit(secret/**)",)).verdict == "deny"
    assert verdict(env, WRITE_FILE, {"path": "src/a.py", "content": ""}, "yolo", deny=("edit(src/**)",)) == "deny"
    assert verdict(env, READ_FILE, {"path": "src/a.py"}, "default", allow=("read",), deny=("read(src/**)",)) == "deny"
    assert verdict(env, OTHER, {}, "yolo", deny=("todo_like",)) == "deny"


def test_ask_rules_ask_in_every_mode(env: dict[str, Any]) -> None:
    assert bash(env, "git push origin", "yolo", ask=("bash(git push*)",)).verdict == "ask"
    assert bash(env, "git status", "yolo", ask=("bash(git push*)",)).verdict == "allow"
    assert verdict(env, WRITE_FILE, {"path": "a", "content": ""}, "accept-edits", ask=("write_file",)) == "ask"


def test_redirections_are_writes(env: dict[str, Any]) -> None:
    rules = {"allow": ("bash(echo*)",)}
    assert bash(env, "echo x > out.txt", "default", **rules).verdict == "ask"
    assert bash(env, "echo x > out.txt", "accept-edits", **rules).verdict == "allow"
    assert bash(env, "echo x >> src/log 2>&1", "accept-edits", **rules).verdict == "allow"
    assert bash(env, "echo x > /etc/passwd", "accept-edits", **rules).verdict == "ask"
    assert bash(env, "echo x > ../escape", "accept-edits", **rules).verdict == "ask"
    assert bash(env, "echo x > $OUT", "accept-edits", **rules).verdict == "ask"
    assert bash(env, "echo x > .git/config", "accept-edits", **rules).verdict == "ask"
    assert bash(env, "echo x > .kimicode/config.toml", "accept-edits", **rules).verdict == "ask"
    assert bash(env, "echo x > out.txt", "plan", **rules).verdict == "ask"
    assert bash(env, "echo x > /dev/null 2>&1", "default", **rules).verdict == "allow"
    assert bash(env, "echo x > out/a", "default", allow=("bash(echo*)", "edit(out/**)")).verdict == "allow"
    assert (
        bash(env, "echo x > ~/notes.txt", "accept-edits", allow=("bash(echo*)", "edit(~/notes.txt)")).verdict == "allow"
    )
    # a shell start-up file runs later, outside any sandbox: it asks whatever the rules (issue 34)
    assert bash(env, "echo x > ~/.bashrc", "accept-edits", allow=("bash(echo*)", "edit(~/.bashrc)")).verdict == "ask"


def test_commands_naming_secrets_are_not_allowed_by_a_rule(env: dict[str, Any]) -> None:
    (env["ws"] / ".env").write_text("TOKEN=1")
    rules = ("bash(cat*)",)
    assert bash(env, "cat README.md", allow=rules).verdict == "allow"
    for command in (
        "cat .env",
        "cat ~/.ssh/id_rsa",
        "cat $HOME/.aws/credentials",
        "cat < .env",
        "cat ~/.ssh/*",
        "cat --file=.env",
        "cat server.pem",
    ):
        assert bash(env, command, allow=rules).verdict == "ask", command
    assert bash(env, "cat .env", allow=("bash(cat*)", "read(.env)")).verdict == "allow"


def test_modes_for_bash(env: dict[str, Any]) -> None:
    assert bash(env, "make", "default").verdict == "ask"
    assert bash(env, "make", "accept-edits").verdict == "ask"
    assert bash(env, "make", "plan").verdict == "ask"
    assert bash(env, "make", "yolo").verdict == "allow"
    assert bash(env, "ls; f() { :; }", "yolo").verdict == "allow"
    assert bash(env, "git diff", "plan", allow=("bash(git diff*)",)).verdict == "allow"


def test_the_sandbox_runs_commands_in_default_and_accept_edits(env: dict[str, Any]) -> None:
    for mode in ("default", "accept-edits"):
        assert (
            decide(BASH, {"command": "rm -rf build; f() { :; }"}, mode, env["ctx"], policy(env, sandboxed=True)).verdict
            == "allow"
        )
    assert decide(BASH, {"command": "make"}, "plan", env["ctx"], policy(env, sandboxed=True)).verdict == "ask"
    assert (
        decide(
            BASH, {"command": "rm x"}, "default", env["ctx"], policy(env, deny=("bash(rm*)",), sandboxed=True)
        ).verdict
        == "deny"
    )


# -- files --------------------------------------------------------------------------------------------


def test_modes_for_files(env: dict[str, Any]) -> None:
    write = {"path": "src/a.py", "content": "x"}
    assert [verdict(env, WRITE_FILE, write, m) for m in ("default", "accept-edits", "plan", "yolo")] == [
        "ask",
        "allow",
        "deny",
        "allow",
    ]
    read = {"path": "src/a.py"}
    assert [verdict(env, READ_FILE, read, m) for m in ("default", "accept-edits", "plan", "yolo")] == ["allow"] * 4
    outside = {"path": str(env["tmp"] / "elsewhere.txt"), "content": "x"}
    assert [verdict(env, WRITE_FILE, outside, m) for m in ("default", "accept-edits", "yolo")] == [
        "ask",
        "ask",
        "allow",
    ]
    assert verdict(env, OTHER, {}, "plan") == "allow"
    assert [verdict(env, RUNNER, {}, m) for m in ("default", "plan", "yolo")] == ["ask", "ask", "allow"]
    assert verdict(env, RUNNER, {}, "default", allow=("run_tests",)) == "allow"


def test_edit_rules(env: dict[str, Any]) -> None:
    rules = ("edit(src/**)",)
    assert (
        verdict(env, EDIT_FILE, {"path": "src/deep/a.py", "old_string": "a", "new_string": "b"}, allow=rules) == "allow"
    )
    assert verdict(env, WRITE_FILE, {"path": "docs/a.md", "content": ""}, allow=rules) == "ask"
    assert verdict(env, WRITE_FILE, {"path": "src/a.py", "content": ""}, "plan", allow=rules) == "deny"
    # a bare tool rule allows edits in the workspace, not outside it, not secrets, not .git
    assert verdict(env, WRITE_FILE, {"path": "docs/a.md", "content": ""}, allow=("edit",)) == "allow"
    assert verdict(env, WRITE_FILE, {"path": "/tmp/x", "content": ""}, allow=("edit",)) == "ask"
    assert verdict(env, WRITE_FILE, {"path": ".env", "content": ""}, "accept-edits", allow=("edit",)) == "ask"
    assert verdict(env, WRITE_FILE, {"path": ".git/hooks/pre-commit", "content": ""}, "accept-edits") == "ask"
    # an absolute rule may open a place outside the workspace
    scratch = env["tmp"] / "scratch"
    assert (
        verdict(env, WRITE_FILE, {"path": str(scratch / "a"), "content": ""}, allow=(f"edit({scratch}/**)",)) == "allow"
    )


def test_kimicodes_own_configuration_always_needs_approval(env: dict[str, Any]) -> None:
    targets = [".kimicode/config.toml", str(env["kc"] / "config.toml"), str(env["kc"] / "sessions" / "x.jsonl")]
    for target in targets:
        args = {"path": target, "content": "[permissions]\nallow = ['bash']\n"}
        for mode in ("default", "accept-edits"):
            assert verdict(env, WRITE_FILE, args, mode, allow=("edit", "edit(**)", f"edit({target})")) == "ask"
        assert verdict(env, WRITE_FILE, args, "plan") == "ask"
        assert verdict(env, WRITE_FILE, args, "yolo") == "deny"  # yolo skips questions, not the sandbox's promise
        unconfined = replace(policy(env), read_only_sandbox=False)  # --yolo --sandbox off: Codex's yolo
        assert decide(WRITE_FILE, args, "yolo", env["ctx"], unconfined).verdict == "allow"
        assert bash(env, f"echo x > {target}", "accept-edits", allow=("bash(echo*)", "edit(**)")).verdict == "ask"


@pytest.mark.parametrize(
    "target",
    [
        ".env",
        ".env.local",
        ".envrc",
        "config/id_rsa",
        "certs/server.pem",
        "tls.key",
        "~/.ssh/config",
        "~/.ssh/id_rsa",
        "~/.aws/credentials",
        "~/.config/gcloud/application_default_credentials.json",
        "~/.kube/config",
        "~/.azure/accessTokens.json",
        "~/.netrc",
        "~/.npmrc",
        ".git-credentials",
    ],
)
def test_sensitive_files_ask_even_for_reads(env: dict[str, Any], target: str) -> None:
    target = target.replace("~", str(env["home"]))
    decision = decide(READ_FILE, {"path": target}, "default", env["ctx"], policy(env))
    assert decision.verdict == "ask" and "sensitive" in decision.reason
    assert decide(READ_FILE, {"path": target}, "yolo", env["ctx"], policy(env)).verdict == "allow"


def test_sensitive_read_exceptions_and_rules(env: dict[str, Any]) -> None:
    ws = env["ws"]
    (ws / ".npmrc").write_text("registry=https://registry.example.org/\n")
    assert verdict(env, READ_FILE, {"path": ".npmrc"}) == "allow"
    (ws / ".npmrc").write_text("//registry.npmjs.org/:_authToken=npm_abc\n")
    assert verdict(env, READ_FILE, {"path": ".npmrc"}) == "ask"
    assert verdict(env, READ_FILE, {"path": ".env.example"}) == "allow"
    assert verdict(env, READ_FILE, {"path": str(env["kc"] / "config.toml")}) == "ask"
    ssh = str(env["home"] / ".ssh" / "id_rsa")
    assert verdict(env, READ_FILE, {"path": ssh}, allow=(f"read({env['home']}/.ssh/**)",)) == "allow"
    assert verdict(env, READ_FILE, {"path": ssh}, allow=("read",)) == "ask"  # a bare rule is not enough
    assert verdict(env, GREP, {"pattern": "BEGIN", "path": str(env["home"] / ".ssh")}) == "ask"
    assert verdict(env, GREP, {"pattern": "BEGIN", "glob": "*.pem"}) == "ask"
    assert verdict(env, GREP, {"pattern": "x", "glob": "*.py"}) == "allow"
    assert verdict(env, GLOB, {"pattern": "**/*", "path": str(env["home"] / ".aws")}) == "ask"
    assert verdict(env, GLOB, {"pattern": "**/*.py"}) == "allow"


def test_read_rules_with_tilde_match_the_users_home(env: dict[str, Any]) -> None:
    ssh = str(env["home"] / ".ssh" / "id_rsa")
    assert verdict(env, READ_FILE, {"path": ssh}, allow=("read(~/.ssh/**)",)) == "allow"
    assert verdict(env, READ_FILE, {"path": "~/.ssh/id_rsa"}, deny=("read(~/.ssh/**)",)) == "deny"


# -- confinement ----------------------------------------------------------------------------------------


def test_symlinks_and_dotdot_are_resolved_before_checking(env: dict[str, Any]) -> None:
    ws, tmp = env["ws"], env["tmp"]
    outside = tmp / "outside"
    outside.mkdir()
    (ws / "link").symlink_to(outside)
    (ws / "file_link").symlink_to(outside / "target.txt")
    (ws / "key_link").symlink_to(env["home"] / ".ssh" / "id_rsa")
    ctx: ToolContext = env["ctx"]
    assert not ctx.is_inside(ctx.resolve("link/x.txt"))
    assert not ctx.is_inside(ctx.resolve("src/../../outside/x"))
    assert ctx.is_inside(ctx.resolve("src/../src/a.py"))
    for path in ("link/x.txt", "file_link", "src/../../outside/x"):
        decision = decide(WRITE_FILE, {"path": path, "content": ""}, "accept-edits", ctx, policy(env))
        assert decision.verdict == "ask" and "outside the workspace" in decision.reason, path
    assert verdict(env, WRITE_FILE, {"path": "link/x", "content": ""}, allow=("edit(link/**)",)) == "ask"
    assert verdict(env, READ_FILE, {"path": "key_link"}) == "ask"
    assert bash(env, "echo x > link/x", "accept-edits", allow=("bash(echo*)",)).verdict == "ask"
    # a workspace that is itself reached through a symlink still counts as inside
    alias = tmp / "alias"
    alias.symlink_to(ws)
    aliased = ToolContext(workspace=alias)
    assert (
        decide(WRITE_FILE, {"path": "src/a.py", "content": ""}, "accept-edits", aliased, policy(env)).verdict == "allow"
    )


# -- messages -----------------------------------------------------------------------------------------


def test_denial_messages_say_how_to_allow(env: dict[str, Any]) -> None:
    d = bash(env, "npm test")
    text = denial_message(BASH, "default", d.reason, True, d)
    assert "--allow 'bash(npm test)'" in text and "--yolo" in text and "non-interactive" in text
    d = decide(WRITE_FILE, {"path": "a.txt", "content": ""}, "plan", env["ctx"], policy(env))
    assert "plan mode" in denial_message(WRITE_FILE, "plan", d.reason, True, d)
    d = bash(env, "rm x", deny=("bash(rm*)",))
    text = denial_message(BASH, "default", d.reason, False, d)
    assert "rules forbid" in text and "do not retry" in text
    d = decide(READ_FILE, {"path": ".env"}, "default", env["ctx"], policy(env))
    assert "--allow 'read(.env)'" in denial_message(READ_FILE, "default", d.reason, True, d)
    assert denial_message(BASH, "default", "no", False) == "Permission denied by the user: no."


def test_rules_object_is_immutable() -> None:
    rules = Rules((parse_rule("bash(ls)"),))
    with pytest.raises(AttributeError):
        rules.allow = ()  # type: ignore[misc]
    assert bool(rules) and not bool(Rules())


def test_workspace_paths_resolve_relative_to_the_real_workspace(env: dict[str, Any]) -> None:
    rule = parse_rule("edit(src/*.py)")
    ws = env["ws"]
    assert rule.matches_path(Path(os.path.realpath(ws)) / "src" / "a.py", ws)
    assert not rule.matches_path(Path(os.path.realpath(ws)) / "src" / "deep" / "a.py", ws)
    assert parse_rule("edit(src)").matches_path(Path(os.path.realpath(ws)) / "src" / "deep" / "a.py", ws)


def test_apply_patch_is_checked_for_every_file_it_touches(env: dict[str, Any]) -> None:
    from kimicode.tools.patch import APPLY_PATCH

    def patch(*paths: str) -> dict[str, Any]:
        body = "".join(f"*** Add File: {p}\n+x\n" for p in paths)
        return {"input": f"*** Begin Patch\n{body}*** End Patch"}

    assert verdict(env, APPLY_PATCH, patch("src/a.py", "src/b.py"), "accept-edits") == "allow"
    assert verdict(env, APPLY_PATCH, patch("src/a.py", "../outside.py"), "accept-edits") == "ask"
    assert verdict(env, APPLY_PATCH, patch("src/a.py", ".kimicode/config.toml"), "accept-edits") == "ask"
    assert verdict(env, APPLY_PATCH, patch("src/a.py"), "default", allow=("edit(src/**)",)) == "allow"
    assert verdict(env, APPLY_PATCH, patch("src/a.py", "docs/x"), "default", allow=("edit(src/**)",)) == "ask"
    assert verdict(env, APPLY_PATCH, patch("src/a.py"), "plan") == "deny"
    assert verdict(env, APPLY_PATCH, {"input": "not a patch"}, "accept-edits") == "ask"  # no path to check


@pytest.mark.parametrize(
    "command",
    [
        "X=1 rm -rf x",
        "/bin/rm -rf x",
        "sudo -u root rm -rf x",
        "env -i PATH=/bin rm -rf x",
        "nohup nice -n 5 rm x",
        "timeout 5 rm x",
        "time -p rm x",
        "ls | xargs -0 -n 1 rm",
        "command rm x",
        "bash -c 'ls; rm -rf x'",
        'sudo sh -c "echo hi && rm x"',
        "eval rm x",
        "bash -c \"bash -c 'rm x'\"",
    ],
)
def test_deny_rules_see_through_wrappers_and_nested_shells(env: dict[str, Any], command: str) -> None:
    assert bash(env, command, "yolo", deny=("bash(rm*)",)).verdict == "deny", command
    assert bash(env, command, "yolo", ask=("bash(rm*)",)).verdict == "ask", command


def test_a_nested_script_that_cannot_be_parsed_is_not_let_through(env: dict[str, Any]) -> None:
    assert bash(env, "bash -c 'f() { rm x; }; f'", "yolo", deny=("bash(rm*)",)).verdict == "ask"
    assert bash(env, "bash -c 'f() { rm x; }; f'", "yolo").verdict == "allow"  # no deny rule: yolo runs it
    assert bash(env, "bash -c 'ls'", "yolo", deny=("bash(rm*)",)).verdict == "allow"
    # an allow rule for the wrapper still does not allow what a deny rule names
    assert bash(env, "sudo rm x", "default", allow=("bash(sudo*)",), deny=("bash(rm*)",)).verdict == "deny"
