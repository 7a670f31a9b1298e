"""What programs do with their arguments: the questions the bash permission checks ask, answered from
the program specifications (`kimicode.permissions.specs`, parsed by `kimicode.permissions.optparse`).

- `unwrap(argv)`: the command as written, by its base name (`/bin/rm` is `rm`), and behind each
  wrapper that runs the rest of its arguments (`sudo`, `env`, `timeout 5`, `nice -n 1`, `xargs -0`,
  `busybox`, `python -m MODULE`, ...). Deny and ask rules are matched against every form.
- `embedded(argv)`: the shell scripts a command runs (`sh -c S`, `bash -lc S`, `eval`, `trap S SIG`,
  `find -exec ... ;`, `git difftool -x S`, `rsync -e S`), parsed again by the caller so deny rules
  reach them; or a reason the command runs code nobody can see (`sh` reading stdin or a script file,
  `source`, `.`), in which case no rule admits the line and deny rules ask.
- `analyze(argv)`: the command's options parsed the way the program parses them, and from them:
  `risk`, why it executes or writes through its own options (`git diff --out=F`, `sort -rno F`,
  `find -delete`, `sed -i`, `awk 'system(...)'`, `python -c`; a risky command is never admitted by an
  allow rule nor by the read-only allowance: it asks); `unsafe`, why it is not read-only (None: the
  read-only allowance may admit it); the files its `!out` options write (checked like redirections
  under an allow rule); the values of all its options (checked as paths); and the directories it
  searches when an option makes it read ignored files.

The specifications are conservative: a program without one is never read-only, and a strict table
makes any option it does not list not read-only.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache

from kimicode.permissions.jqlex import program_reaches
from kimicode.permissions.optparse import Parsed, Spec, parse_args
from kimicode.permissions.specs import spec_for
from kimicode.permissions.specs.tools import SHELLS as _SHELL_NAMES
from kimicode.permissions.specs.wrappers import WRAPPERS

__all__ = [
    "SHELLS",
    "WRAPPERS",
    "Analysis",
    "analyze",
    "embedded",
    "module_form",
    "out_paths",
    "read_only",
    "risk",
    "unwrap",
]

SHELLS = frozenset(_SHELL_NAMES)
"""Shell interpreters: a line that feeds one a script the parser cannot see is never auto-allowed."""

_MAX_FORMS = 12
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def unwrap(argv: Sequence[str]) -> list[list[str]]:
    """The command's words, then with the program's base name (`/bin/rm` is `rm`), then behind each
    wrapper (`sudo -u x nice rm -rf y` is also `rm -rf y`, `python3 -m pytest -q` is `pytest -q`)."""
    forms: list[list[str]] = []
    words = list(argv)
    for _ in range(_MAX_FORMS):
        if not words:
            break
        forms.append(words)
        base = os.path.basename(words[0])
        if base != words[0]:
            words = [base, *words[1:]]
            forms.append(words)
        inner = _inner_command(base, words[1:])
        if not inner:
            break
        words = inner
    return forms


def _inner_command(name: str, rest: Sequence[str]) -> list[str] | None:
    """The command a wrapper runs (its operands after `runs` of them and any `NAME=value`), or the
    module `python -m MODULE` runs as a command; None for other programs."""
    spec = spec_for(name)
    if spec is None:
        return None
    parsed = parse_args(spec, rest)
    if spec.runs >= 0:
        operands = _skip_assignments(parsed.operands)  # `env X=1 cmd`, `timeout 5 X=1 cmd` (over-matching
        return _skip_assignments(operands[spec.runs :])  # only makes deny rules reach further)
    module = [f.value for f in parsed.found if f.option.effect == "module" and f.value]
    if module and _MODULE.fullmatch(module[-1]):
        return [module[-1], *parsed.rest]
    return None


def _skip_assignments(words: Sequence[str]) -> list[str]:
    i = 0
    while i < len(words) and _ASSIGNMENT.match(words[i]):
        i += 1
    return list(words[i:])


def module_form(argv: Sequence[str]) -> list[str] | None:
    """`python -m pytest ARGS` as `pytest ARGS`, when the interpreter is given nothing but `-m`: an
    allow rule for `pytest` admits it (both run the workspace's code: pytest imports its conftest.py
    and test files, and `python -m` also puts the working directory first on the module path)."""
    if len(argv) < 3 or argv[1] != "-m" or not re.fullmatch(r"python(3(\.[0-9]+)?)?", argv[0]):
        return None
    return list(argv[2:]) if _MODULE.fullmatch(argv[2]) else None


def _shell_script(rest: Sequence[str]) -> tuple[str | None, bool]:
    """For a shell's arguments: (the `-c` script or None, whether it reads a script we cannot see).

    Options come first (`-e`, `-lc`, `-o pipefail`, `--norc`, `--rcfile F`, up to `--`); with `c` among
    them the first operand is the script (`bash -c -- 'rm x'`, `bash -ec 'rm x'`), otherwise an operand
    is a script file and no operand means standard input."""
    command = False
    i = 0
    while i < len(rest):
        word = rest[i]
        if word == "--" or word == "-":
            i += 1
            break
        if not word.startswith(("-", "+")) or word == "+":
            break
        if word.startswith("--"):
            i += 2 if word in ("--rcfile", "--init-file") else 1
            continue
        if "c" in word[1:]:
            command = True
        i += 2 if word[1:] in ("o", "O") or (word[-1] in ("o", "O") and len(word) > 2) else 1
    if command:
        return (rest[i] if i < len(rest) else ""), False
    return None, True  # a script file, or standard input (a pipe, a here-string, a file)


def embedded(argv: Sequence[str]) -> tuple[list[str], list[list[str]], str | None]:
    """(scripts the command runs, argument vectors it runs, why it runs code nobody can see or None)."""
    scripts: list[str] = []
    argvs: list[list[str]] = []
    for form in unwrap(argv):
        name, rest = os.path.basename(form[0]), form[1:]
        opaque = _embedded_one(name, rest, form, scripts, argvs)
        if opaque is not None:
            return scripts, argvs, opaque
    return scripts, argvs, None


def _embedded_one(
    name: str, rest: Sequence[str], form: Sequence[str], scripts: list[str], argvs: list[list[str]]
) -> str | None:
    """Add what one form runs to `scripts`/`argvs`; return why it runs code nobody can see, or None."""
    if name in SHELLS:
        script, opaque = _shell_script(rest)
        if opaque:
            return f"`{name}` runs a script that cannot be checked (stdin or a file)"
        if script is not None:
            scripts.append(script)
    elif name in ("su", "runuser", "script", "flock", "env"):
        given = _command_options(name, rest)
        scripts += given
        if name == "su" and not given and len(unwrap(form)) == 1:
            return "`su` starts a shell that reads commands nobody can see"
    if (
        name in ("sudo", "doas", "runuser", "pkexec")
        and len(unwrap(form)) == 1
        and any(w in ("-s", "-i", "--shell", "--login", "-", "-l") for w in rest)
    ):
        return f"`{name}` starts a shell that reads commands nobody can see"
    if name in ("at", "batch"):
        return f"`{name}` runs commands read from its input later"
    if name in ("source", "."):
        return f"`{name}` runs a script file that cannot be checked"
    if name == "eval" and rest:
        scripts.append(" ".join(rest))
    elif name == "trap" and rest and not rest[0].startswith("-"):
        scripts.append(rest[0])
    elif name == "find":
        argvs.extend(_find_commands(rest))
    elif name in ("git", "rsync"):
        scripts += _option_scripts(rest, ("-x", "--extcmd", "--exec") if name == "git" else ("-e", "--rsh"))
    return None


def _command_options(name: str, rest: Sequence[str]) -> list[str]:
    """The scripts of `su -c S`, `runuser -c S`, `script -c S`, `flock F -c S`, `env -S S` (any spelling)."""
    spec = _permuting(name)
    if spec is None:
        return []
    parsed = parse_args(spec, rest)
    wanted = ("-S", "--split-string") if name == "env" else ("-c", "--command")
    return [f.value or "" for f in parsed.found if any(n in f.option.names for n in wanted)]


@lru_cache(maxsize=16)
def _permuting(name: str) -> Spec | None:
    """`name`'s specification reading options anywhere (`su root -c S`, `flock F -c S`)."""
    spec = spec_for(name)
    return replace(spec, posix=False) if spec is not None else None


def _option_scripts(rest: Sequence[str], names: Sequence[str]) -> list[str]:
    """The values of the options `names` (separate, `=`-attached or, for short ones, glued)."""
    out: list[str] = []
    for i, word in enumerate(rest):
        for name in names:
            if word == name:
                out.append(rest[i + 1] if i + 1 < len(rest) else "")
            elif (
                name.startswith("--")
                and len(word) > 3
                and word.startswith("--")
                and name.startswith(word.split("=", 1)[0])
            ):
                out.append(word.split("=", 1)[1] if "=" in word else (rest[i + 1] if i + 1 < len(rest) else ""))
            elif not name.startswith("--") and word.startswith(name) and len(word) > 2:
                out.append(word[2:])
    return out


def _find_commands(rest: Sequence[str]) -> list[list[str]]:
    out: list[list[str]] = []
    i = 0
    while i < len(rest):
        if rest[i] in ("-exec", "-execdir", "-ok", "-okdir"):
            j = i + 1
            while j < len(rest) and rest[j] not in (";", "+"):
                j += 1
            if j > i + 1:
                out.append(list(rest[i + 1 : j]))
            i = j
        i += 1
    return out


# -- analysis -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Analysis:
    """What one command does through its arguments (see the module doc)."""

    risk: str | None = None
    unsafe: str | None = None
    written: tuple[str, ...] = ()
    """Arguments of `!out` options: files or directories the command writes."""
    values: tuple[str, ...] = ()
    """Every option argument (attached or separate): each may name a file."""
    searches: tuple[str, ...] | None = None
    """When the command reads whole trees: the operands naming them (empty: the working directory)."""
    known: bool = False
    """The program has a specification, so `values` holds exactly the arguments glued to its options."""


def out_paths(value: str) -> list[str]:
    """The paths an `!out` option's argument may name: itself, after `KEY=` (`-o cache_dir=D`) and
    after `TYPE:` (`--cov-report=xml:F`)."""
    out = [value] if value else []
    if "=" in value:
        out.append(value.split("=", 1)[1])
    for text in list(out):
        head, colon, tail = text.partition(":")
        if colon and re.fullmatch(r"[A-Za-z0-9_-]+", head) and tail:
            out.append(tail)
    return [t for t in out if t]


def risk(argv: Sequence[str]) -> str | None:
    """Why this command executes or writes through its own arguments (see the module doc), or None."""
    return analyze(argv).risk


def read_only(argv: Sequence[str]) -> bool:
    """True when the command only reads (see the module doc); the caller checks paths and redirects."""
    return not argv or analyze(argv).unsafe is None


def analyze(argv: Sequence[str]) -> Analysis:
    """The analysis of one command's words (after quote removal); see the module doc."""
    return _analyze(tuple(argv))


@lru_cache(maxsize=512)
def _analyze(argv: tuple[str, ...]) -> Analysis:
    if not argv:
        return Analysis()
    scripts, argvs, opaque = embedded(argv)
    why = opaque or (
        f"`{os.path.basename(argv[0])}` runs a script or command given in its arguments" if scripts or argvs else None
    )
    forms = unwrap(argv)
    first = _one(os.path.basename(argv[0]), argv[1:])
    written, values = list(first.written), list(first.values)
    for index, form in enumerate(forms):
        name = os.path.basename(form[0])
        later = forms[index + 1 :]
        if why is None and name in WRAPPERS and later and os.path.basename(later[0][0]) != name:
            why = f"`{name}` runs another command"
        if index == 0:
            continue
        inner = _one(name, form[1:])
        why = why or inner.risk
        written += inner.written  # `python -m pytest --basetemp=D`: pytest's own options
        values += inner.values
    unsafe = first.unsafe
    if "/" in argv[0]:
        unsafe = f"`{argv[0]}` is not the system's {os.path.basename(argv[0])}"
    why = why or first.risk
    return Analysis(why, unsafe or why, tuple(written), tuple(values), first.searches, first.known)


@dataclass
class _Result:
    risk: str | None = None
    unsafe: str | None = None
    written: list[str] = field(default_factory=list)
    values: tuple[str, ...] = ()
    searches: tuple[str, ...] | None = None


def _one(name: str, rest: Sequence[str]) -> Analysis:
    """One program's words, without wrappers (see `analyze`)."""
    spec = spec_for(name)
    if spec is None:
        return Analysis(None, f"`{name}` is not a program the read-only allowance knows")
    parsed = parse_args(spec, rest)
    out = _Result()
    level: Parsed | None = parsed
    label = name
    while level is not None:
        _judge_level(label, level, rest, out)
        for found in level.found:
            for option in found.candidates or (found.option,):
                _judge_effect(label, option.effect, found.spelled, option.why, found.value, out)
        label = f"{label} {level.subcommand}"
        level = level.sub
    if out.searches is not None or name in _ALWAYS_SEARCHES:
        out.searches = _search_operands(name, parsed)
    return Analysis(out.risk, out.unsafe or out.risk, tuple(out.written), out.values, out.searches, True)


def _judge_level(name: str, level: Parsed, rest: Sequence[str], out: _Result) -> None:
    """The verdicts of one level of a parse (a program, then its subcommand)."""
    spec = level.spec
    if spec.always:
        out.risk = out.risk or spec.always
    if spec.unsafe:
        out.unsafe = out.unsafe or f"`{name}` {spec.unsafe}"
    if spec.strict and level.unknown:
        out.unsafe = out.unsafe or f"`{name} {level.unknown[0]}`: an option the read-only table does not list"
    if (spec.subcommands or spec.other is not None) and level.sub is None:
        out.unsafe = out.unsafe or f"`{name}` without a known read-only subcommand"
    if level.sub is None and not spec.read_only:
        out.unsafe = out.unsafe or f"`{name}` is not read-only"
    if spec.max_operands >= 0 and len(level.operands) > spec.max_operands:
        out.unsafe = out.unsafe or f"`{name}` with {len(level.operands)} operands writes or changes something"
    out.values += tuple(f.value for f in level.found if f.value)
    _run_check(level, rest, out)


def _run_check(level: Parsed, rest: Sequence[str], out: _Result) -> None:
    """The specification's content check (a sed script, a jq program, ...), if it has one."""
    check = CHECKS.get(level.spec.check)
    verdict = check(level, rest) if check is not None else None
    if verdict is not None:
        kind, why = verdict
        if kind == "exec":
            out.risk = out.risk or why
        else:
            out.unsafe = out.unsafe or why


def _judge_effect(name: str, effect: str, spelled: str, why: str, value: str | None, out: _Result) -> None:
    if effect in ("exec", "write"):
        out.risk = out.risk or f"`{name} {spelled}` {why or 'runs or writes something of the command line choosing'}"
    elif effect == "out":
        out.written.append(value or "")
        out.unsafe = out.unsafe or f"`{name} {spelled}` writes files"
    elif effect == "unsafe":
        out.unsafe = out.unsafe or f"`{name} {spelled}` {why or 'is not read-only'}"
    elif effect == "search":
        out.searches = ()


_ALWAYS_SEARCHES = frozenset({"rg", "ag", "ack"})
_PATTERN_FIRST = frozenset({"grep", "egrep", "fgrep", "rg", "ag", "ack", "grep-git"})


def _search_operands(name: str, parsed: Parsed) -> tuple[str, ...]:
    """The operands naming the trees a search reads (its pattern, when first, left out)."""
    level = parsed.innermost()
    operands = list(level.operands)
    patterned = name in _PATTERN_FIRST or level.spec.name == "grep"
    if patterned and operands and not level.has("-e", "--regexp", "-f", "--file", "--files"):
        operands = operands[1:]
    return tuple(operands)


# -- content checks: what options cannot say ------------------------------------------------------

Verdict = tuple[str, str] | None
"""("exec", why): risky; ("unsafe", why): not read-only; None: nothing found."""

_SED_S = re.compile(r"s(.)(?:\\.|(?!\1).)*\1(?:\\.|(?!\1).)*\1([gpiImMe0-9w]*)")
_SED_Y = re.compile(r"y(.)(?:\\.|(?!\1).)*\1(?:\\.|(?!\1).)*\1")
_FIND_RISKY = frozenset({"-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf", "-fls"})


def _check_sed(parsed: Parsed, rest: Sequence[str]) -> Verdict:
    scripts = parsed.values("-e", "--expression") or parsed.operands[:1]
    for script in scripts:
        for m in _SED_S.finditer(script):
            if "e" in m.group(2) or "w" in m.group(2):
                return "exec", "a sed s///e or s///w command runs a command or writes a file"
        text = _SED_Y.sub("", _SED_S.sub("", script))
        text = re.sub(r"/(?:\\.|[^/\\])*/", "", text)  # addresses
        if re.search(r"[wWeE]|\br\b|[rR]\s", text):
            return "exec", "a sed w, W, e or r command writes, runs or reads a file"
    return None


def _check_awk(parsed: Parsed, rest: Sequence[str]) -> Verdict:
    programs = parsed.values("-e", "--source") or parsed.operands[:1]
    for program in programs:
        if any(t in program for t in ("system", "|", ">", "@load", "@include", "ENVIRON", "close(", "getline")):
            return "exec", "the awk program runs commands, reads the environment or writes files (system(), |, >)"
    return None


def _check_jq(parsed: Parsed, rest: Sequence[str]) -> Verdict:
    if parsed.has("-f", "--from-file"):
        return None  # the option's own effect says it
    program = parsed.operands[:1]
    why = program_reaches(program[0]) if program else None
    return ("exec", why) if why else None


def _check_find(parsed: Parsed, rest: Sequence[str]) -> Verdict:
    for word in rest:
        if word in _FIND_RISKY:
            return "exec", f"find {word} runs commands, deletes or writes files"
    return None


def _check_tar(parsed: Parsed, rest: Sequence[str]) -> Verdict:
    old_style = rest[0] if rest and not rest[0].startswith("-") else ""
    if old_style and any(c in old_style for c in "IF"):
        return "exec", "tar I or F runs a program"
    if parsed.has("-t", "--list") or "t" in old_style:
        return None
    return "exec", "tar writes files or runs programs (only listing with -t is read-only)"


def _check_make(parsed: Parsed, rest: Sequence[str]) -> Verdict:
    if any("=" in w for w in parsed.operands):
        return "exec", "make VAR=value changes what the recipes run"
    return None


def _check_ssh(parsed: Parsed, rest: Sequence[str]) -> Verdict:
    if any(
        re.search(r"(?i)proxycommand|localcommand|permitlocalcommand|knownhostscommand|match\s+exec", v)
        for v in parsed.values("-o")
    ):
        return "exec", "ssh -o ProxyCommand/LocalCommand runs a local command"
    return None


def _check_pytest(parsed: Parsed, rest: Sequence[str]) -> Verdict:
    if any(v.strip().startswith("addopts") for v in parsed.values("-o", "--override-ini")):
        return "exec", "pytest -o addopts=... adds options nobody checked"
    return None


def _check_builtin(parsed: Parsed, rest: Sequence[str]) -> Verdict:
    if any(c in w for w in rest for c in "[$`"):
        return "exec", "the builtin evaluates a variable name or subscript (which can run commands)"
    return "unsafe", "a shell builtin that changes the shell"


def _check_test(parsed: Parsed, rest: Sequence[str]) -> Verdict:
    if any(w in ("-v", "-R") for w in rest):
        return "exec", "`test -v` evaluates a subscript"
    if any(c in w for w in rest for c in "[$`"):
        return "exec", "`test` evaluates a variable name or subscript (which can run commands)"
    return None


def _check_second_written(parsed: Parsed, rest: Sequence[str]) -> Verdict:
    if len(parsed.operands) > 1:
        return "exec", f"`{parsed.spec.name} IN OUT` writes its second operand"
    return None


def _listing(flags: tuple[str, ...], subcommands: tuple[str, ...] = ()) -> Callable[[Parsed, Sequence[str]], Verdict]:
    """A git subcommand that lists with no operands, with one of `flags`, or with one of `subcommands` first."""

    def check(parsed: Parsed, rest: Sequence[str]) -> Verdict:
        ops = parsed.operands
        if not ops or parsed.has(*flags) or ops[0] in subcommands:
            return None
        return "unsafe", f"`git {parsed.spec.name} {ops[0]}` changes the repository"

    return check


def _check_stash(parsed: Parsed, rest: Sequence[str]) -> Verdict:
    ops = parsed.operands
    if ops and ops[0] in ("list", "show"):
        return None
    return "unsafe", "`git stash` without `list` or `show` changes the repository"


def _check_reflog(parsed: Parsed, rest: Sequence[str]) -> Verdict:
    ops = parsed.operands
    if ops and ops[0] in ("expire", "delete", "write", "drop"):
        return "unsafe", f"`git reflog {ops[0]}` changes the repository"
    return None


CHECKS: dict[str, Callable[[Parsed, Sequence[str]], Verdict]] = {
    "sed": _check_sed,
    "awk": _check_awk,
    "jq": _check_jq,
    "find": _check_find,
    "tar": _check_tar,
    "make": _check_make,
    "ssh": _check_ssh,
    "pytest": _check_pytest,
    "builtin-eval": _check_builtin,
    "test": _check_test,
    "git-branch": _listing(("-l", "--list")),
    "git-tag": _listing(("-l", "--list")),
    "git-remote": _listing((), ("get-url",)),
    "second-operand-written": _check_second_written,
    "git-stash": _check_stash,
    "git-reflog": _check_reflog,
}
"""Content checks by name (`Spec.check`)."""
