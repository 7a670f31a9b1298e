"""The permission decision for bash command lines (called by `kimicode.permissions.engine.decide`).

1. The line is parsed (`shellparse`); what cannot be parsed is never admitted by a rule or the
   read-only allowance.
2. **Deny reaches everywhere**: deny (then ask) rules are matched against every simple command, also
   behind wrappers and program paths (`sudo`, `env`, `timeout`, `xargs`, `busybox`, `/bin/rm`), inside
   the scripts given to `sh -c`/`bash -lc`/`eval`/`trap`/`git difftool -x`/`rsync -e`, and against the
   commands of `find -exec`. With restricting rules present, a line that runs code nobody can see
   (`… | sh`, `sh <<< …`, `source f`) or a computed command name asks, even in `yolo`.
   `edit(...)`/`read(...)` deny rules apply to redirection targets and to the files arguments name.
3. **Static or ask**: an allow rule or the read-only allowance admits a line only when every word of
   every command is static (no expansion of any kind) and no program in it executes or writes through
   its options (`kimicode.permissions.programs.risk`). The bare `bash` rule (every command) is the exception:
   it names everything, so nothing can hide behind it. Then arguments naming sensitive files (also by a hard
   link or after `cd`) and redirections are checked with the one path resolver (`agent.pathresolve`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kimicode.permissions import pathresolve
from kimicode.permissions.engine import (
    Decision,
    _path_rule_hit,
    _rule_text,
    _shown,
    _specific_allow,
)
from kimicode.permissions.policy import Policy, Rule
from kimicode.permissions.programs import SHELLS, embedded, read_only, risk, unwrap
from kimicode.permissions.shellparse import Redirect, ShellParseError, SimpleCommand, Word, parse
from kimicode.permissions.subjects import Place, ToolLike

__all__ = ["decide_bash"]

_MAX_NESTING = 4
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
MAX_PATH_ARGUMENTS = 256
"""More file-like arguments than this in one line ask instead of being checked one by one (each check
resolves a path on disk: a line of 300,000 arguments would otherwise take minutes)."""
_CD = frozenset({"cd", "pushd", "popd"})


def decide_bash(tool: ToolLike, args: Mapping[str, Any], mode: str, ctx: Place, policy: Policy) -> Decision:
    """The decision for one bash call (see the module doc)."""
    rules = policy.rules
    deny = rules.for_tool("deny", tool.name, tool.kind)
    ask = rules.for_tool("ask", tool.name, tool.kind)
    allow = rules.for_tool("allow", tool.name, tool.kind)
    confined = policy.sandboxed and mode in ("default", "accept-edits")
    command = args.get("command")
    if not isinstance(command, str):
        command = ""
    try:
        commands = parse(command)
    except ShellParseError as exc:
        if (mode == "yolo" or confined) and not deny and not ask:
            return Decision("allow")
        return Decision("ask", f"the command cannot be checked against the permission rules: {exc}")

    # 1. deny rules, everywhere
    restricting = [r for r in (*deny, *ask) if r.pattern is not None]
    nested, opaque = _nested_commands(commands)
    everything = [*commands, *nested]
    if restricting and opaque is not None:
        return Decision("ask", f"cannot tell whether the line is denied by the rules: {opaque}")
    edit_deny = rules.for_tool("deny", "", "edit")
    read_deny = rules.for_tool("deny", "", "read")
    too_many = _count_path_arguments(everything) > MAX_PATH_ARGUMENTS
    if too_many and (read_deny or edit_deny):
        return Decision("ask", f"the line has more than {MAX_PATH_ARGUMENTS} file arguments, too many to check "
                               "against the read and edit rules")
    for cmd in everything:
        forms = _deny_forms(cmd)
        for rule in deny:
            if rule.pattern is None or any(rule.matches_command(form) for form in forms):
                return Decision("deny", f"`{cmd.text}` is denied by the rule {_rule_text(rule)}", by_rule=True)
        for redirect, path in _redirect_paths(cmd, ctx, policy):
            rule_list = edit_deny if redirect.kind == "write" else read_deny if redirect.kind == "read" else []
            if path is None and rule_list:
                return Decision("ask", f"cannot tell whether the redirection to {redirect.target.raw!r} is denied "
                                       "by the rules: its target is computed or cannot be resolved")
            hit = _path_rule_hit(rule_list, [path], ctx) if path is not None else None
            if hit is not None and path is not None:
                return Decision(
                    "deny", f"the redirection to {_shown(path, ctx)} is denied by the rule {_rule_text(hit)}",
                    by_rule=True,
                )
        if read_deny:
            for path in _argument_paths(cmd, ctx, policy, expand_globs=True):
                hit = _path_rule_hit([r for r in read_deny if r.pattern is not None], [path], ctx)
                if hit is not None:
                    return Decision("deny", f"`{cmd.text}` names {_shown(path, ctx)}, denied by the rule "
                                    f"{_rule_text(hit)}", by_rule=True)
    dynamic = [cmd for cmd in everything if cmd.name is not None and cmd.name.dynamic]
    if dynamic and any(r.pattern is not None for r in deny):
        return Decision(
            "ask", f"cannot tell whether `{dynamic[0].text}` is denied by the rules: its command name is computed"
        )

    # 2. ask rules (matched like deny rules)
    for cmd in everything:
        forms = _deny_forms(cmd)
        for rule in ask:
            if rule.pattern is None or any(rule.matches_command(form) for form in forms):
                return Decision("ask", f"the rule {_rule_text(rule)} asks before `{cmd.text}`", by_rule=True)

    # 3. modes that run everything
    if mode == "yolo" or confined:
        return Decision("allow")
    if any(getattr(r, "literal", False) and r.pattern == command for r in allow):  # "this exact command"
        return Decision("allow")

    # 4. static or ask; then allow rules or the read-only allowance, command by command
    unrestricted = any(r.pattern is None for r in allow)  # `bash`: every command (deny rules came first)
    if opaque is not None and not unrestricted:
        return Decision("ask", f"the line runs code that cannot be checked: {opaque}")
    edit_allow = rules.for_tool("allow", "", "edit")
    read_allow = rules.for_tool("allow", "", "read")
    patterned = [r for r in allow if not getattr(r, "literal", False)]
    bases, unknown_cwd = _working_dirs(commands, ctx, policy)
    if too_many:
        return Decision("ask", f"the line has more than {MAX_PATH_ARGUMENTS} file arguments, too many to check "
                               "for sensitive files")
    for cmd in commands:
        shown = cmd.text or " ".join(r.target.raw for r in cmd.redirects)
        moving = _is_dynamic(cmd)
        if moving is not None and not unrestricted:
            return Decision("ask", f"`{shown}`: {moving}, so neither a rule nor the read-only allowance can "
                                   "allow it without asking")
        argv = [w.text for w in cmd.argv]
        if cmd.words and not unrestricted:
            why_risky = risk(argv) if argv else None
            matched = any(rule.matches_command(cmd.text) for rule in patterned)
            if why_risky is not None:
                reason = f"`{cmd.text}`: {why_risky}"
                if matched:
                    reason += " (allow rules never admit that without asking)"
                return Decision("ask", reason)  # no rule would admit it: suggest none
            if not matched and (cmd.assignments or not (read_only(argv) or argv[0] in _CD)):
                return Decision("ask", _bash_reason(cmd, mode, allow), _suggest(cmd))
        if unknown_cwd:
            return Decision("ask", f"`{shown}`: the line changes directory in a way that cannot be followed")
        for base in bases:
            problem = _path_problems(cmd, ctx, policy, base, mode, edit_allow, read_allow)
            if problem is not None:
                return problem
    return Decision("allow")


def _count_path_arguments(commands: Sequence[SimpleCommand]) -> int:
    """How many arguments and redirection targets of the line would be resolved as paths."""
    count = 0
    for cmd in commands:
        count += len(cmd.redirects) + sum(1 for w in cmd.words[1:] if not w.text.startswith("-") or "=" in w.text)
    return count


def _is_dynamic(cmd: SimpleCommand) -> str | None:
    """Why a command is not static (a word or a redirection target that bash would expand), or None."""
    for word in cmd.words:
        if word.dynamic:
            return f"{word.raw!r} is expanded by bash (variables, globs, braces or substitutions)"
        if _CONTROL.search(word.text):
            return f"{word.raw!r} holds control characters (what is shown is not what runs)"
        if word.tilde and not (word.raw == "~" or word.raw.startswith("~/")):
            return f"{word.raw!r} names another user's home"
    for redirect in cmd.redirects:
        if _CONTROL.search(redirect.target.text):
            return f"{redirect.target.raw!r} holds control characters"
        if redirect.target.dynamic:
            what = "a here-document that expands" if redirect.kind == "heredoc" else f"{redirect.target.raw!r}"
            return f"{what} is expanded by bash"
    return None


def _path_problems(
    cmd: SimpleCommand, ctx: Place, policy: Policy, base: Path, mode: str,
    edit_allow: Sequence[Rule], read_allow: Sequence[Rule],
) -> Decision | None:
    """Sensitive files named by arguments and the redirections of an otherwise admitted command."""
    for word in cmd.argv[1:] if cmd.name else cmd.words:
        try:
            paths = _word_paths(word, base, policy)
        except _Unresolvable as exc:
            return Decision("ask", f"`{cmd.text}`: {exc}")
        for path in paths:
            why = policy.sensitive(path)
            if why and not _specific_allow(read_allow, path, ctx):
                return Decision("ask", f"`{cmd.text}` names {_shown(path, ctx)}, which is sensitive: {why}",
                                f"read({_shown(path, ctx)})")
    searched = _recursive_search_roots([w.text for w in cmd.argv], base, policy)
    for root in searched:
        found = _sensitive_below(root, policy, ctx, read_allow)
        if found is not None:
            return Decision("ask", f"`{cmd.text}` searches {_shown(root, ctx)}, which holds {found}")
    for redirect in cmd.redirects:
        if redirect.kind not in ("write", "read"):
            continue
        text = _literal(redirect.target, policy)
        target: Path | None = None
        if text is not None and "/dev/" in text and ("tcp" in text or "udp" in text):
            return Decision("ask", f"`{cmd.text or redirect.target.raw}`: a redirection to {text} opens a network "
                                   "connection")
        if text is not None:
            resolved = pathresolve.resolve(text, base, policy.user_home)
            if resolved.problem is not None:
                return Decision("ask", f"`{cmd.text or redirect.target.raw}`: {resolved.problem}")
            if resolved.device:
                continue
            target = resolved.path
        problem = _redirect_problem(redirect, target, mode, ctx, policy, edit_allow, read_allow)
        if problem:
            return Decision("ask", f"`{cmd.text or redirect.target.raw}`: {problem}")
    return None


def _working_dirs(commands: Sequence[SimpleCommand], ctx: Place, policy: Policy) -> tuple[list[Path], bool]:
    """Every directory a relative path of the line may be relative to (the workspace and each static
    `cd` target, composed), and whether a `cd` cannot be followed (`cd -`, `pushd`, a computed one)."""
    bases = [Path(os.path.realpath(ctx.workspace))]
    for cmd in commands:
        argv = cmd.argv
        if not argv or argv[0].text not in _CD or argv[0].dynamic:
            continue
        rest = [w for w in argv[1:] if w.text != "--"]
        if argv[0].text != "cd" or len(rest) > 1 or any(w.dynamic or w.text.startswith("-") for w in rest):
            return bases, True
        target = _literal(rest[0], policy) if rest else str(policy.user_home)
        if target is None:
            return bases, True
        resolved = [pathresolve.resolve(target, b, policy.user_home) for b in bases]
        if any(r.problem is not None for r in resolved):
            return bases, True
        new = [r.path for r in resolved]
        bases += [b for b in new if b not in bases]
        if len(bases) > 16:
            return bases, True
    return bases, False


def _nested_commands(commands: Sequence[SimpleCommand], depth: int = 0) -> tuple[list[SimpleCommand], str | None]:
    """The commands inside scripts and argument vectors other commands run (`programs.embedded`), parsed,
    recursively; and why the line runs code nobody can see (None when everything could be parsed)."""
    found: list[SimpleCommand] = []
    for cmd in commands:
        if not cmd.words or (cmd.name is not None and cmd.name.dynamic):
            continue
        scripts, argvs, opaque = embedded([w.text for w in cmd.argv])
        fed = [r.target for r in cmd.redirects if r.kind == "herestring"]
        if opaque is not None and fed and not fed[-1].dynamic and _reads_stdin_script(cmd):
            scripts, opaque = [fed[-1].text], None  # `sh <<< 'rm x'`: the here-string is the script
        if opaque is not None:
            return found, opaque
        run = [SimpleCommand(tuple(Word(t, t) for t in cmd_argv)) for cmd_argv in argvs]
        if run:  # `find -exec bash -c '...' \;`: what they run may run more
            if depth >= _MAX_NESTING:
                return found, f"`{cmd.text}` nests commands too deeply"
            deeper, why = _nested_commands(run, depth + 1)
            found += [*run, *deeper]
            if why is not None:
                return found, why
        for script in scripts:
            if depth >= _MAX_NESTING:
                return found, f"`{cmd.text}` nests shells too deeply"
            try:
                inner = parse(script)
            except ShellParseError:
                return found, f"the script `{cmd.text}` runs cannot be parsed"
            deeper, why = _nested_commands(inner, depth + 1)
            found += [*inner, *deeper]
            if why is not None:
                return found, why
    return found, None


def _reads_stdin_script(cmd: SimpleCommand) -> bool:
    """A shell given no `-c` and no script file (`sh`, `bash -e`, `sudo sh`): it runs its standard input."""
    last = unwrap([w.text for w in cmd.argv])[-1]
    if os.path.basename(last[0]) not in SHELLS:
        return False
    return all(w.startswith("-") and "c" not in w.lstrip("-") for w in last[1:]) and not any(
        r.kind in ("read", "heredoc") for r in cmd.redirects
    )


def _deny_forms(cmd: SimpleCommand) -> list[str]:
    """The texts a deny or ask rule is matched against: the command as written and each of its
    unwrapped forms. Over-matching here only refuses (or asks) more."""
    if not cmd.words:
        return []
    return [cmd.text, *(" ".join(form) for form in unwrap([w.text for w in cmd.argv]))]


def _suggest(cmd: SimpleCommand) -> str:
    """A rule that would allow `cmd`: the command itself, or its first words and `*` when it is long."""
    text = cmd.text
    if len(text) <= 60 and "(" not in text and ")" not in text:
        return f"bash({text})"
    head = " ".join(w.text for w in cmd.words[: len(cmd.assignments) + 2])
    return f"bash({head[:60]}*)" if "(" not in head and ")" not in head else ""


def _bash_reason(cmd: SimpleCommand, mode: str, allow: Sequence[Rule]) -> str:
    if not allow:
        return f"bash runs commands (permission mode {mode!r})"
    return f"bash runs commands (permission mode {mode!r}) and no allow rule matches `{cmd.text}`"


def _literal(word: Word, policy: Policy) -> str | None:
    """A static word's value with `~` expanded; None when bash would compute it."""
    if word.dynamic:
        return None
    text = word.text
    if word.tilde and (text == "~" or text.startswith("~/")):
        text = str(policy.user_home) + text[1:]
    elif word.tilde:
        return None
    return text


def _word_paths(word: Word, base: Path, policy: Policy) -> list[Path]:
    """The files an argument may name: itself (or an `--opt=FILE` value), and the part after a `:`
    (`HEAD:.env` for git show, `host:path`)."""
    first = _word_path(word, base, policy)
    out = [first] if first is not None else []
    text = word.text
    if ":" in text and not word.dynamic:
        rest = text.rsplit(":", 1)[1]
        if rest and not rest.startswith("-"):
            resolved = pathresolve.resolve(rest, base, policy.user_home)
            if resolved.problem is not None:
                raise _Unresolvable(resolved.problem)
            out.append(resolved.path)
    return out


_RECURSIVE_GREP = re.compile(r"-[A-Za-z]*[rR]|--recursive$|--dereference-recursive$|--directories=recurse$")
_SUSPECT_NAME = re.compile(
    r"(?i)^\.env|^\.envrc$|^id_|\.(pem|key|p12|pfx|jks|keystore|ppk)$|credential|netrc|npmrc|pypirc|pgpass"
    r"|my\.cnf$|htpasswd|yarnrc|^\.vault-token$|\.jsonl$"
)
_SEARCH_LIMIT = 5000


def _recursive_search_roots(argv: Sequence[str], base: Path, policy: Policy) -> list[Path]:
    """The directories a recursive `grep -r`/`rg` reads every file of (the working directory by default)."""
    if not argv:
        return []
    name, rest = argv[0], argv[1:]
    if (name == "diff" and any(_RECURSIVE_GREP.match(w) for w in rest)) or (
        name == "git" and "--no-index" in rest
    ):
        operands = [w for w in rest if not w.startswith("-") and w not in ("diff",)]
        return [r for r in (pathresolve.resolve(o, base, policy.user_home).path for o in operands) if r.is_dir()]
    if name in ("grep", "egrep", "fgrep") and any(_RECURSIVE_GREP.match(w) for w in rest):
        pass
    elif name not in ("rg", "ripgrep", "ag", "ack"):
        return []
    operands = [w for w in rest if not w.startswith("-")]
    if name in ("grep", "egrep", "fgrep", "rg", "ripgrep", "ag", "ack") and operands:
        operands = operands[1:]  # the pattern (a -e/-f pattern makes this over-approximate: more roots)
    roots = [pathresolve.resolve(o, base, policy.user_home).path for o in operands] or [base]
    return [r for r in roots if r.is_dir()]


def _sensitive_below(root: Path, policy: Policy, ctx: Place, read_allow: Sequence[Rule]) -> str | None:
    """A description of a sensitive file a recursive search of `root` would read, or None; a tree too
    large to check, or one that holds the home directory, counts as holding one."""
    home = Path(os.path.realpath(policy.user_home))
    if root == home or root in home.parents or root == Path("/"):
        return "your home directory's credential stores"
    seen = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in (".git", "node_modules", ".venv", "__pycache__")]
        seen += len(filenames) + len(dirnames)
        if seen > _SEARCH_LIMIT:
            return f"more than {_SEARCH_LIMIT} files (too many to check for secrets)"
        for fname in filenames:
            path = Path(dirpath) / fname
            if _SUSPECT_NAME.search(fname) or _linked(path):
                why = policy.sensitive(path)
                if why and not _specific_allow(read_allow, path, ctx):
                    return f"{_shown(path, ctx)} ({why})"
    return None


def _linked(path: Path) -> bool:
    """A regular file with more than one name (it may be a secret under another name)."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return st.st_nlink > 1 and not os.path.islink(path)


def _word_path(word: Word, base: Path, policy: Policy) -> Path | None:
    """The file an argument may name (`--opt=FILE` included), resolved; None for options and computed words."""
    text = _literal(word, policy)
    if text is None:
        return None
    if text.startswith("-"):
        if "=" not in text:
            return None
        text = text.split("=", 1)[1]
    if not text or text.startswith("-"):
        return None
    resolved = pathresolve.resolve(text, base, policy.user_home)
    if resolved.problem is not None:
        raise _Unresolvable(resolved.problem)
    return resolved.path


class _Unresolvable(ValueError):
    """An argument reaches through a device alias or /proc (`cat /dev/stdin/../x`): it cannot be checked."""


def _argument_paths(cmd: SimpleCommand, ctx: Place, policy: Policy, expand_globs: bool) -> list[Path]:
    """Files the arguments of `cmd` name, globs expanded (for read deny rules); unresolvable ones skipped."""
    out: list[Path] = []
    base = Path(os.path.realpath(ctx.workspace))
    for word in cmd.argv[1:]:
        if not word.dynamic:
            lit = _literal(word, policy)
            if lit is not None:
                out.append(pathresolve.resolve(lit, base, policy.user_home).path)  # aliases: asked later
        elif expand_globs and not any(c in word.raw for c in "$`'\"\\{"):
            out += pathresolve.expand_glob(word.raw, base, policy.user_home) or []
    return out


def _redirect_paths(cmd: SimpleCommand, ctx: Place, policy: Policy) -> list[tuple[Redirect, Path | None]]:
    """Each file redirection of `cmd` with its resolved target (None when computed or unresolvable)."""
    out: list[tuple[Redirect, Path | None]] = []
    base = Path(os.path.realpath(ctx.workspace))
    for redirect in cmd.redirects:
        if redirect.kind not in ("write", "read"):
            continue
        text = _literal(redirect.target, policy)
        resolved = pathresolve.resolve(text, base, policy.user_home) if text is not None else None
        if resolved is not None and resolved.device:
            continue
        out.append((redirect, resolved.path if resolved is not None and resolved.problem is None else None))
    return out


def _redirect_problem(
    redirect: Redirect,
    path: Path | None,
    mode: str,
    ctx: Place,
    policy: Policy,
    edit_allow: Sequence[Rule],
    read_allow: Sequence[Rule],
) -> str | None:
    """Why a redirection keeps an otherwise allowed command from running without approval, or None.

    An output redirection is a write and is allowed exactly when the edit tools could write that file
    without asking (`accept-edits` inside the workspace, or an `edit(...)` rule naming it); an input
    redirection from a sensitive file needs a `read(...)` rule naming it.
    """
    target = redirect.target.raw
    if path is None:
        return f"the redirection target {target!r} is computed, so it cannot be checked"
    shown = _shown(path, ctx)
    if redirect.kind == "read":
        why = policy.sensitive(path)
        if why and not _specific_allow(read_allow, path, ctx):
            return f"it reads {shown}, which is sensitive: {why}"
        return None
    why = policy.config(path)
    if why:
        return f"it writes {shown}: {why}"
    if _specific_allow(edit_allow, path, ctx) and mode != "plan":
        return None
    if mode == "plan":
        return f"it writes {shown}, and nothing is changed in plan mode"
    why = policy.write_care(path)
    if why:
        return f"it writes {shown}: {why}"
    if not ctx.is_inside(path):
        return f"it writes outside the workspace ({path})"
    if mode == "accept-edits" or any(r.pattern is None for r in edit_allow):
        return None
    return f"it writes {shown} (permission mode {mode!r} asks before file changes)"
