"""Issue 10, the bash decision engine: static or ask, deny everywhere, the program table, read-only
commands, and a parser that refuses (rather than crashes or stalls on) what it cannot check."""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kimicode.permissions.engine import Decision, decide
from kimicode.permissions.policy import Policy, load_rules
from kimicode.permissions.programs import embedded, read_only, risk, unwrap
from kimicode.permissions.shellparse import MAX_DEPTH, ShellParseError, parse
from kimicode.tools.base import ToolContext
from kimicode.tools.shell import BASH

INNOCENT_RULES = ("bash(ls*)", "bash(cat*)", "bash(git diff*)", "bash(git status)")
MODES = ("default", "accept-edits", "plan")


@pytest.fixture
def env(tmp_path: Path) -> dict[str, Any]:
    ws = tmp_path / "ws"
    home = tmp_path / "home"
    ws.mkdir()
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("KEY")
    (ws / "README.md").write_text("hello\n")
    (ws / ".env").write_text("TOKEN=1\n")
    return {"ws": ws, "home": home}


def check(
    env: dict[str, Any],
    command: str,
    mode: str = "default",
    *,
    allow: tuple[str, ...] = (),
    deny: tuple[str, ...] = (),
    ask: tuple[str, ...] = (),
) -> Decision:
    policy = Policy(
        load_rules((), allow=allow, deny=deny, ask=ask),
        user_home=env["home"],
        kimicode_home=env["home"] / ".kimicode",
        workspace=env["ws"],
    )
    return decide(BASH, {"command": command}, mode, ToolContext(workspace=env["ws"]), policy)


# -- static or ask ------------------------------------------------------------------------------

DYNAMIC = [
    "$X",
    "${X}",
    '"$X"',
    "${x@P}",
    '"${a[$(id)]}"',
    "$(id)",
    "`id`",
    '"$(id)"',
    "*",
    "R*",
    "READ?E.md",
    "[R]EADME.md",
    "{a,b}",
    "{1..3}",
    "~root",
    "~+",
    "$'\\x41'",
    "$1",
    "$@",
    "$$",
    "<(id)",
    ">(id)",
    "$#",
]


@pytest.mark.parametrize("construct", DYNAMIC)
@pytest.mark.parametrize("mode", MODES)
def test_no_rule_admits_a_word_bash_expands(env: dict[str, Any], construct: str, mode: str) -> None:
    for line in (
        f"ls {construct}",
        f"cat README.md {construct}",
        f"git diff {construct}",
        f"git status; ls {construct}",
        f"ls > {construct}" if "(" not in construct else f"ls {construct}",
    ):
        decision = check(env, line, mode, allow=INNOCENT_RULES)
        assert decision.verdict == "ask", (line, decision)
    assert check(env, "ls -la", mode, allow=INNOCENT_RULES).verdict == "allow"  # the innocent form


def test_here_documents_that_expand_and_rejoined_text_ask(env: dict[str, Any]) -> None:
    for line in (
        "cat <<EOF\n$HOME\nEOF",
        "cat <<EOF\n$(id)\nEOF",
        "cat <<EOF\n$\\\n(id)\nEOF",
        "cat <<EOF\n`id`\nEOF",
        "cat <<EOF\n${x@P}\nEOF",
        "ls $\\\n(id)",
        'ls "a\\\nb"',
        "l\\\ns",
        "cat <<-EOF\n\t$X\n\tEOF",
    ):
        assert check(env, line, allow=INNOCENT_RULES).verdict == "ask", line
    for line in ("cat <<'EOF'\n$(id) $HOME \\\nEOF", 'cat <<"EOF"\n`id`\nEOF', "ls \\\n  -la"):
        assert check(env, line, allow=INNOCENT_RULES).verdict == "allow", line


def test_code_from_data_asks(env: dict[str, Any]) -> None:
    for line in (
        "printf -v 'a[$(id)]' x",
        "declare 'a[$(id)]=1'",
        "read 'a[$(id)]'",
        "unset 'a[$(id)]'",
        "test -v 'a[$(id)]'",
        "[ -v 'a[$(id)]' ]",
        "let 'x=a[$(id)]'",
        "a[$(id)]=1",
        "export 'a[$(id)]'",
        "mapfile 'a[$(id)]'",
        "x='$(id)'; ls ${x@P}",
    ):
        assert (
            check(
                env,
                line,
                allow=(
                    *INNOCENT_RULES,
                    "bash(printf*)",
                    "bash(declare*)",
                    "bash(read*)",
                    "bash(unset*)",
                    "bash(test*)",
                    "bash([*)",
                    "bash(let*)",
                    "bash(export*)",
                    "bash(mapfile*)",
                ),
            ).verdict
            == "ask"
        ), line


WORDS = st.sampled_from(["-la", "README.md", "src", "--stat", "'a b'", '"q"', "x=y", "--", "-1"])


@pytest.mark.prepush
@settings(max_examples=150, deadline=None)
@given(
    st.lists(WORDS, max_size=4),
    st.sampled_from(DYNAMIC),
    st.integers(min_value=0, max_value=4),
    st.sampled_from(MODES),
    st.booleans(),
)
def test_property_a_rule_never_admits_a_dynamic_construct(
    words: list[str], construct: str, at: int, mode: str, glued: bool
) -> None:
    """A static line the rules admit stops being admitted once any dynamic construct is put in any
    word position, as a word of its own or glued to the end of a word."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        env = {"ws": root, "home": root / "home"}
        line = " ".join(["ls", *words])
        assert check(env, line, mode, allow=("bash(ls*)",)).verdict == "allow", line
        at = min(at, len(words))
        if glued and "(" not in construct and not construct.startswith("~") and words:
            changed = [*words]
            changed[at - 1] += construct
        else:
            changed = [*words[:at], construct, *words[at:]]
        variant = " ".join(["ls", *changed])
        decision = check(env, variant, mode, allow=("bash(ls*)",))
        assert decision.verdict != "allow", (variant, decision)


# -- the parser refuses, within limits ---------------------------------------------------------


def test_deep_nesting_is_refused_not_a_recursion_error(env: dict[str, Any]) -> None:
    for line in (
        "$(" * 5000 + "ls" + ")" * 5000,
        "(" * 5000 + "ls" + ")" * 5000,
        "echo " + '"$(' * 3000 + "ls" + ')"' * 3000,
        "ls <(" * 3000 + "ls" + ")" * 3000,
        "bash -c " + shlex.quote("bash -c " * 10 + "ls"),
    ):
        if not line.startswith("bash"):
            with pytest.raises(ShellParseError):
                parse(line)
        assert check(env, line, allow=("bash(ls*)",)).verdict == "ask"
        assert check(env, line, "yolo", deny=("bash(rm*)",)).verdict == "ask"
    parse("$(" * (MAX_DEPTH - 2) + "ls" + ")" * (MAX_DEPTH - 2))  # within the limit: fine


@pytest.mark.prepush
def test_a_megabyte_line_is_decided_quickly(env: dict[str, Any]) -> None:
    """Not a timing assertion (see tests/bench): a 1 MB line must simply come back, with a decision."""
    for line in (
        "ls " + "a" * 1_000_000,
        "ls '" + "[{," * 300_000 + "'",
        "ls " + "{," * 500_000,
        "ls " + "[" * 1_000_000,
        "ls && " * 200_000 + "ls",
        "cat <<'EOF'\n" + "x\n" * 500_000 + "EOF",
        "echo " + "$" * (1 << 20),
        "echo " + "''" * 500_000,
        "echo " + "``" * 500_000,
        "ls " + "ab " * 333_000,
    ):
        started = time.monotonic()
        decision = check(env, line, allow=INNOCENT_RULES, deny=("bash(rm*)",))
        assert decision.verdict in ("allow", "ask"), decision
        assert time.monotonic() - started < 30  # a hang guard only; the benchmark measures


# -- deny reaches everywhere -------------------------------------------------------------------

DENY_EVASIONS = [
    "bash -lc 'rm x'",
    "sh -ec 'rm x'",
    "busybox rm x",
    "busybox sh -c 'rm x'",
    "find . -exec rm {} \\;",
    "find . -execdir /bin/rm {} +",
    "ls | xargs -I{} rm {}",
    "env -i rm x",
    "timeout -s KILL 5 rm x",
    "nice -n 5 nohup setsid stdbuf -o0 sudo -u root rm x",
    "trap 'rm x' EXIT",
    "eval 'rm x'",
    "git difftool -x 'rm x'",
    "rsync -e 'rm x' a b",
    "\\rm x",
    "r\\m x",
    '"rm" x',
    "command rm x",
    "exec rm x",
    "/usr/bin/rm x",
    'bash -c "sh -c \'bash -c \\"rm x\\"\'"',
    "ls; (cd /; rm x)",
    "ls $(rm x)",
    "x=$(rm x) ls",
    "ls <(rm x)",
    "ls && { rm x; }",
    "if true; then rm x; fi",
    "dash -c 'rm x'",
    "env -S 'rm x'",
    "env -S'rm x'",
    "su -c 'rm x'",
    "su root -c 'rm x'",
    "flock /tmp/l -c 'rm x'",
    "parallel rm ::: x",
    "script -qc 'rm x' /dev/null",
    "runuser -u nobody -- rm x",
    "sh <<< 'rm x'",
    "bash -e <<< 'ls; rm x'",
    "sudo sh <<< 'rm x'",
    "bash -c -- 'rm x'",
    "bash -c -e 'rm x'",
    "sh -o pipefail -c 'rm x'",
    "bash --rcfile f -c 'rm x'",
    "bash -euo pipefail -c 'rm x'",
    "chroot / rm x",
    "flock /tmp/l rm x",
    "sg users rm x",
    "builtin eval 'rm x'",
    "find . -exec sh -c 'rm \"$1\"' _ {} \\;",
    "xargs -I {} sh -c 'rm {}'",
]


@pytest.mark.parametrize("line", DENY_EVASIONS)
def test_deny_reaches_every_command(env: dict[str, Any], line: str) -> None:
    for mode in ("yolo", *MODES):
        decision = check(env, line, mode, allow=("bash",), deny=("bash(rm*)",))
        assert decision.verdict == "deny", (mode, line, decision)


@pytest.mark.parametrize(
    "line",
    [
        "echo 'rm x' | sudo -s",
        "echo 'rm x' | su",
        "at now <<< 'rm x'",
        "echo 'rm x' | sh",
        'sh <<< "$X"',
        "sh <<< 'ls' < f",
        "bash < script.sh",
        "source ./s",
        ". ./s",
        "$(echo rm) x",
        "bash -c 'f() { rm x; }; f'",
        "sh -s",
    ],
)
def test_what_deny_rules_cannot_see_asks(env: dict[str, Any], line: str) -> None:
    assert check(env, line, "yolo", deny=("bash(rm*)",)).verdict == "ask", line
    assert (
        check(
            env, line, "default", allow=("bash(echo*)", "bash(sh*)", "bash(bash*)", "bash(source*)", "bash(.*)")
        ).verdict
        == "ask"
    ), line


def test_deny_read_rules_reach_arguments_and_globs(env: dict[str, Any]) -> None:
    for line in ("cat .env", "cat .e*", "cat ./.env", "ls; cat -- .env"):
        assert check(env, line, "yolo", deny=("read(.env)",)).verdict == "deny", line


# -- the program table -------------------------------------------------------------------------

RISKY = [
    "git difftool -x 'rm x'",
    "git diff --output=/tmp/x",
    "git -c core.pager=id diff",
    "git -c alias.d=!id d",
    "git --exec-path=/tmp diff",
    "git -C /etc diff",
    "git --git-dir=/tmp/x diff",
    "git --work-tree=/ diff",
    "git format-patch -o /tmp HEAD~1",
    "git log --output=x",
    "git config core.pager id",
    "git rebase --exec id HEAD~1",
    "git grep --open-files-in-pager=id x",
    "git archive -o /tmp/x HEAD",
    "find . -exec id \\;",
    "find . -execdir id \\;",
    "find . -ok id \\;",
    "find . -delete",
    "find . -fprint /tmp/x",
    "find . -fls /tmp/x",
    "xargs rm",
    "env rm x",
    "env -S 'rm x'",
    "timeout 5 rm x",
    "nice rm x",
    "sed -i s/a/b/ f",
    "sed --in-place s/a/b/ f",
    "sed 's/a/b/w out' f",
    "sed 1e f",
    "sed 's/x/id/e' f",
    "awk 'BEGIN{system(\"id\")}'",
    "awk '{print > \"out\"}' f",
    "awk '{print | \"sh\"}' f",
    "sort -o x f",
    "sort --compress-program=id f",
    "tar xf x.tar",
    "tar cf x.tar .",
    "tar -t --to-command=id -f x.tar",
    "rsync -e id a b",
    "less -o log f",
    "man -P id ls",
    "vim f",
    "python -c 'import os'",
    "python3 -Bc 1",
    "perl -e 1",
    "ruby -e 1",
    "node -e 1",
    "php -r 1",
    "bash -c ls",
    "sh -c ls",
    "eval ls",
    "source x",
    "trap ls EXIT",
    "printf -v x 1",
    "let x=1",
    "curl -o x http://h",
    "wget http://h",
    "rg --pre ./evil x",
    "uniq in out",
    "date -s now",
    "tree -o out",
    "make CC=./evil test",
    "make -f /tmp/x",
    "cargo test --config target.x.runner=./evil",
    "go test -exec ./evil",
    "npm test --script-shell=./evil",
    "jq -n env",
]


@pytest.mark.parametrize("line", RISKY)
def test_programs_that_execute_or_write_through_options_are_never_admitted(env: dict[str, Any], line: str) -> None:
    argv = shlex.split(line)
    assert risk(argv) is not None, line
    assert not read_only(argv), line
    broad = (f"bash({argv[0]}*)", f"bash({' '.join(argv[:2])}*)", "bash(git diff*)", "bash(find*)")
    for mode in MODES:
        assert check(env, line, mode, allow=broad).verdict == "ask", (mode, line)


READ_ONLY = [
    "ls",
    "ls -la src",
    "cat README.md",
    "head -n 3 README.md",
    "tail README.md",
    "wc -l README.md",
    "grep -r x src",
    "rg x src",
    "find . -name '*.py'",
    "git status",
    "git diff",
    "git diff --stat",
    "git log --oneline",
    "git show HEAD",
    "git blame README.md",
    "git branch",
    "git branch -a",
    "pwd",
    "which git",
    "stat README.md",
    "du -sh .",
    "file README.md",
    "echo hi",
    "true",
    "git --no-pager log",
    "sort README.md",
    "ls 2>&1 | head",
    "cat README.md > /dev/null",
]


@pytest.mark.parametrize("line", READ_ONLY)
def test_read_only_commands_run_without_asking(env: dict[str, Any], line: str) -> None:
    for mode in MODES:
        assert check(env, line, mode).verdict == "allow", (mode, line)


@pytest.mark.parametrize(
    "line",
    [
        "rm x",
        "git push",
        "curl http://h",
        "git branch -D x",
        "git branch newname",
        "ls > ../out.txt",
        "X=1 ls",
        "./ls",
        "/tmp/cat README.md",
        "wget http://h",
        "tail -f README.md",
        "git stash",
        "cat .env",
        "cat ~/.ssh/id_rsa",
        "head /proc/self/environ",
        "cd ~/.ssh && cat id_rsa",
        "ls > /dev/fd/1/../x",
        "cat < /proc/self/root/etc/shadow",
        "cd - && ls",
        "pushd /",
        "printenv",
        "jq -n env",
        "cat < /dev/tcp/127.0.0.1/9",
        "cat /dev/stdout/.",
        "cat /dev/stdin/../../etc/hosts",
        "cat /proc/self/cwd/README.md",
        "head 0</dev/udp/127.0.0.1/9",
        "jq -n '$ENV.HOME'",
        "tail -qf README.md",
    ],
)
def test_what_still_asks_without_a_rule(env: dict[str, Any], line: str) -> None:
    for mode in MODES:
        assert check(env, line, mode).verdict != "allow", (mode, line)


def test_redirections_to_files_ask_where_edits_ask(env: dict[str, Any]) -> None:
    for line in ("ls > out.txt", "cat README.md >> notes", "git status 2> err", "ls >| x", "ls &> x"):
        assert check(env, line).verdict == "ask", line
        assert check(env, line, "plan").verdict == "ask", line
        assert check(env, line, "accept-edits").verdict == "allow", line  # like the edit tools
    assert check(env, "ls > .git/hooks/pre-commit", "accept-edits").verdict == "ask"


def test_cd_moves_the_paths_that_are_checked(env: dict[str, Any]) -> None:
    os.symlink(env["home"] / ".ssh", env["ws"] / "keys")
    for line in ("cd ~/.ssh && cat id_rsa", "cd keys; cat id_rsa", "cd ~; cd .ssh; head id_rsa"):
        assert check(env, line, allow=INNOCENT_RULES).verdict == "ask", line
    assert check(env, "cd src && cat README.md").verdict == "allow"


def test_unwrap_and_embedded() -> None:
    assert unwrap(["sudo", "-u", "x", "/usr/bin/nice", "-n", "2", "rm", "y"])[-1] == ["rm", "y"]
    assert embedded(["bash", "-lc", "rm x"])[0] == ["rm x"]
    assert embedded(["sh", "-e", "-c", "ls"])[0] == ["ls"]
    assert embedded(["sh"])[2] is not None and embedded(["bash", "script.sh"])[2] is not None
    assert embedded(["find", ".", "-exec", "rm", "{}", ";", "-print"])[1] == [["rm", "{}"]]
    assert risk(["git", "diff", "--output-indicator-new=x"]) is None  # not an output file
    assert risk(["sed", "-n", "s/a/b/p", "f"]) is None and risk(["awk", "{print $1}"]) is None


def test_the_bare_bash_rule_still_allows_everything_but_the_denied(env: dict[str, Any]) -> None:
    assert check(env, "ls $X; echo `date`", allow=("bash",)).verdict == "allow"
    assert check(env, "ls $X; rm -rf y", allow=("bash",), deny=("bash(rm*)",)).verdict == "deny"


def test_secrets_reached_by_a_search_or_a_revision_ask(env: dict[str, Any]) -> None:
    (env["ws"] / "src").mkdir()
    (env["ws"] / "src" / "app.py").write_text("x = 1\n")
    os.link(env["ws"] / ".env", env["ws"] / "src" / "notes.txt")
    for line in (
        "grep -r TOKEN .",
        "grep -R TOKEN",
        "grep -rn TOKEN src",
        "rg TOKEN",
        "rg TOKEN src",
        "grep -r x ~",
        "diff -r . /tmp",
        "git diff --no-index . /tmp",
        "git show HEAD:.env",
        "git cat-file -p HEAD:.env",
        "git log -p -- .env",
        "cat src/notes.txt",
    ):
        assert check(env, line).verdict == "ask", line
    (env["ws"] / "src" / "notes.txt").unlink()
    for line in ("grep -rn x src", "rg x src", "grep x README.md", "git show HEAD:README.md"):
        assert check(env, line).verdict == "allow", line


def test_control_characters_in_words_ask(env: dict[str, Any]) -> None:
    for line in ("ls\x1b[2K", "cat README.md\rrm x", "ls '\x7f'", "ls > 'a\x08b'", "git status\x0b"):
        assert check(env, line, allow=INNOCENT_RULES).verdict == "ask", repr(line)
    assert check(env, "ls\t-la", allow=INNOCENT_RULES).verdict == "allow"  # a tab is a blank


@pytest.mark.prepush
@settings(max_examples=200, deadline=None)
@given(
    st.text(st.sampled_from(list("ls cat$`'\"\\(){}[]<>|&;#*?~=\n\t!-0123456789x@P:/.")), max_size=60),
    st.sampled_from(("default", "plan", "yolo")),
)
def test_property_decide_never_crashes(text: str, mode: str) -> None:
    """Any text gets a decision (never an exception), whatever the rules and the mode."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        env = {"ws": Path(tmp), "home": Path(tmp) / "home"}
        decision = check(env, text, mode, allow=INNOCENT_RULES, deny=("bash(rm*)", "read(.env)"))
        assert decision.verdict in ("allow", "ask", "deny")
        if decision.verdict == "allow" and mode != "yolo":
            commands = parse(text)
            assert all(not w.dynamic for c in commands for w in c.words), text


def test_the_grep_tool_asks_for_a_tree_holding_a_hard_link_to_a_secret(env: dict[str, Any]) -> None:
    from kimicode.tools.files import READ_FILE
    from kimicode.tools.search import GREP

    (env["ws"] / "src").mkdir()
    (env["ws"] / "src" / "app.py").write_text("x = 1\n")
    policy = Policy(load_rules(()), user_home=env["home"], kimicode_home=env["home"] / ".kimicode", workspace=env["ws"])
    ctx = ToolContext(workspace=env["ws"])
    for args in ({"pattern": "TOKEN"}, {"pattern": "TOKEN", "path": "."}, {"pattern": "TOKEN", "path": "src"}):
        assert decide(GREP, args, "default", ctx, policy).verdict == "allow", args  # .env is hidden: skipped
    os.link(env["ws"] / ".env", env["ws"] / "src" / "notes.txt")
    for args in ({"pattern": "TOKEN"}, {"pattern": "TOKEN", "path": "src"}, {"pattern": "T", "path": "src/notes.txt"}):
        decision = decide(GREP, args, "plan", ctx, policy)
        assert decision.verdict == "ask" and "notes.txt" in decision.reason, (args, decision)
    assert decide(READ_FILE, {"path": "src/notes.txt"}, "default", ctx, policy).verdict == "ask"
    allowed = Policy(
        load_rules((), allow=("read(src/notes.txt)",)),
        user_home=env["home"],
        kimicode_home=env["home"] / ".kimicode",
        workspace=env["ws"],
    )
    assert decide(GREP, {"pattern": "TOKEN", "path": "src"}, "default", ctx, allowed).verdict == "allow"


WRAP = st.sampled_from(
    [
        "sudo {}",
        "env -i {}",
        "nice -n 3 {}",
        "timeout 5 {}",
        "nohup {}",
        "setsid {}",
        "stdbuf -o0 {}",
        "busybox {}",
        "command {}",
        "exec {}",
        "xargs {}",
        "parallel {} ::: y",
        "bash -c {q}",
        "sh -ec {q}",
        "bash -lc {q}",
        "eval {q}",
        "trap {q} EXIT",
        "su -c {q}",
        "find . -exec {} \\;",
        "sh <<< {q}",
        "ls; {}",
        "ls && ( {} )",
        "if true; then {}; fi",
        "echo $({})",
        "X=1 {}",
        "/usr/bin/env {}",
    ]
)


@pytest.mark.prepush
@settings(max_examples=200, deadline=None)
@given(st.lists(WRAP, min_size=1, max_size=4), st.sampled_from(["rm x", "/bin/rm -rf x", "\\rm x", "'rm' x"]))
def test_property_no_composition_of_wrappers_evades_a_deny_rule(wrappers: list[str], core: str) -> None:
    """However the denied command is wrapped and nested, in yolo it is refused (or, where a script is
    hidden from the parser, asked about): never run."""
    import tempfile

    line = core
    for wrapper in wrappers:
        line = wrapper.format(line, q=shlex.quote(line))
    with tempfile.TemporaryDirectory() as tmp:
        env = {"ws": Path(tmp), "home": Path(tmp) / "home"}
        decision = check(env, line, "yolo", deny=("Bash(rm:*)",))
        assert decision.verdict in ("deny", "ask"), (line, decision)


BROAD = tuple(
    f"bash({w}*)"
    for w in (
        "sudo",
        "env",
        "nice",
        "timeout",
        "nohup",
        "setsid",
        "stdbuf",
        "busybox",
        "command",
        "exec",
        "xargs",
        "parallel",
        "bash",
        "sh",
        "eval",
        "trap",
        "su",
        "find",
        "ls",
        "echo",
        "/usr/bin/env",
        "if",
        "true",
    )
)


@pytest.mark.prepush
@settings(max_examples=150, deadline=None)
@given(st.lists(WRAP, min_size=1, max_size=3), st.sampled_from(MODES))
def test_property_broad_allow_rules_never_admit_a_wrapped_command(wrappers: list[str], mode: str) -> None:
    """Allow rules for every wrapper and shell never let `rm` (which no rule names) run unasked."""
    import tempfile

    line = "rm x"
    for wrapper in wrappers:
        line = wrapper.format(line, q=shlex.quote(line))
    with tempfile.TemporaryDirectory() as tmp:
        env = {"ws": Path(tmp), "home": Path(tmp) / "home"}
        decision = check(env, line, mode, allow=BROAD)
        assert decision.verdict == "ask", (line, decision)
