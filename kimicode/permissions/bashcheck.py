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
from dataclasses import replace
from pathlib import Path
from typing import Any

from kimicode.permissions import gitsafe, pathresolve
from kimicode.permissions.decision import Decision, path_rule_hit, rule_text, shown_path, specific_allow
from kimicode.permissions.hints import combined_refusal, show_word, suggest_rule
from kimicode.permissions.policy import Policy, Rule
from kimicode.permissions.programs import SHELLS, Analysis, analyze, embedded, module_form, out_paths, unwrap
from kimicode.permissions.searchcheck import sensitive_below
from kimicode.permissions.shellparse import Redirect, ShellParseError, SimpleCommand, Word, parse
from kimicode.permissions.shellwords import why_not_static
from kimicode.permissions.subjects import Place, ToolLike

__all__ = ["decide_bash"]

_MAX_NESTING = 4
MAX_PATH_ARGUMENTS = 256
"""More file-like arguments than this in one line ask instead of being checked one by one (each check
resolves a path on disk: a line of 300,000 arguments would otherwise take minutes)."""
_CD = frozenset({"cd", "pushd", "popd"})


def decide_bash(tool: ToolLike, args: Mapping[str, Any], mode: str, ctx: Place, policy: Policy) -> Decision:
    """The decision for one bash call (see the module doc): parse, deny rules, ask rules, the modes that
    run everything, then allow rules or the read-only allowance command by command, then paths."""
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
    nested, opaque = _nested_commands(commands)
    everything = [*commands, *nested]
    too_many = _count_path_arguments(everything) > MAX_PATH_ARGUMENTS
    gate = _deny_step(everything, opaque, too_many, deny, ask, ctx, policy) or _ask_step(everything, ask)
    if gate is not None:
        return gate
    if mode == "yolo" or confined:
        return Decision("allow")
    if any(getattr(r, "literal", False) and r.pattern == command for r in allow):  # "this exact command"
        return Decision("allow")
    return _firm(_admit_step(commands, opaque, too_many, allow, mode, ctx, policy), everything, too_many, ctx, policy)


def _firm(
    decision: Decision, commands: Sequence[SimpleCommand], too_many: bool, ctx: Place, policy: Policy
) -> Decision:
    """A question about a line that writes a place that runs later is firm: no hook's allow, no rule answers it."""
    if decision.verdict == "ask" and not decision.firm and not too_many and _names_runs_later(commands, ctx, policy):
        return replace(decision, firm=True, suggestion="")
    return decision


def _names_runs_later(commands: Sequence[SimpleCommand], ctx: Place, policy: Policy) -> bool:
    """True when a command of the line that may write names a place that runs later (an argument or a
    redirection target; relative to the workspace)."""
    for cmd in commands:
        argv = [w.text for w in cmd.argv]
        targets = [p for r, p in _redirect_paths(cmd, ctx, policy) if r.kind == "write" and p is not None]
        if any(policy.config(p) for p in targets):
            return True
        writer = bool(argv) and argv[0] not in _CD and analyze(argv).unsafe is not None
        if writer and _runs_later_problem(cmd, _argument_paths(cmd, ctx, policy, expand_globs=False), ctx, policy):
            return True
    return False


def _deny_step(
    everything: Sequence[SimpleCommand],
    opaque: str | None,
    too_many: bool,
    deny: Sequence[Rule],
    ask: Sequence[Rule],
    ctx: Place,
    policy: Policy,
) -> Decision | None:
    """1. Deny rules, everywhere: every command, behind wrappers, inside scripts; redirections and
    arguments against `edit(...)`/`read(...)` deny rules."""
    rules = policy.rules
    restricting = [r for r in (*deny, *ask) if r.pattern is not None]
    if restricting and opaque is not None:
        return Decision("ask", f"cannot tell whether the line is denied by the rules: {opaque}")
    edit_deny = rules.for_tool("deny", "", "edit")
    read_deny = rules.for_tool("deny", "", "read")
    if too_many and (read_deny or edit_deny):
        return Decision(
            "ask",
            f"the line has more than {MAX_PATH_ARGUMENTS} file arguments, too many to check "
            "against the read and edit rules",
        )
    for cmd in everything:
        found = _deny_one(cmd, deny, edit_deny, read_deny, ctx, policy)
        if found is not None:
            return found
    dynamic = [cmd for cmd in everything if cmd.name is not None and cmd.name.dynamic]
    if dynamic and any(r.pattern is not None for r in deny):
        return Decision(
            "ask", f"cannot tell whether `{dynamic[0].text}` is denied by the rules: its command name is computed"
        )
    return None


def _deny_one(
    cmd: SimpleCommand,
    deny: Sequence[Rule],
    edit_deny: Sequence[Rule],
    read_deny: Sequence[Rule],
    ctx: Place,
    policy: Policy,
) -> Decision | None:
    """The deny rules against one simple command: its forms, its redirections, its file arguments."""
    forms = _deny_forms(cmd)
    for rule in deny:
        if rule.pattern is None or any(rule.matches_command(form) for form in forms):
            return Decision("deny", f"`{cmd.text}` is denied by the rule {rule_text(rule)}", by_rule=True)
    for redirect, path in _redirect_paths(cmd, ctx, policy):
        rule_list = edit_deny if redirect.kind == "write" else read_deny if redirect.kind == "read" else []
        if path is None and rule_list:
            return Decision(
                "ask",
                f"cannot tell whether the redirection to {redirect.target.raw!r} is denied "
                "by the rules: its target is computed or cannot be resolved",
            )
        hit = path_rule_hit(rule_list, [path], ctx) if path is not None else None
        if hit is not None and path is not None:
            return Decision(
                "deny",
                f"the redirection to {shown_path(path, ctx)} is denied by the rule {rule_text(hit)}",
                by_rule=True,
            )
    if read_deny:
        for path in _argument_paths(cmd, ctx, policy, expand_globs=True):
            hit = path_rule_hit([r for r in read_deny if r.pattern is not None], [path], ctx)
            if hit is not None:
                return Decision(
                    "deny",
                    f"`{cmd.text}` names {shown_path(path, ctx)}, denied by the rule {rule_text(hit)}",
                    by_rule=True,
                )
    return None


def _ask_step(everything: Sequence[SimpleCommand], ask: Sequence[Rule]) -> Decision | None:
    """2. Ask rules, matched like deny rules."""
    for cmd in everything:
        forms = _deny_forms(cmd)
        for rule in ask:
            if rule.pattern is None or any(rule.matches_command(form) for form in forms):
                return Decision("ask", f"the rule {rule_text(rule)} asks before `{cmd.text}`", by_rule=True)
    return None


def _admit_step(
    commands: Sequence[SimpleCommand],
    opaque: str | None,
    too_many: bool,
    allow: Sequence[Rule],
    mode: str,
    ctx: Place,
    policy: Policy,
) -> Decision:
    """3-4. Static or ask; then allow rules or the read-only allowance, command by command; then the
    files each command names, writes or searches, and the repositories git would use."""
    unrestricted = any(r.pattern is None for r in allow)  # `bash`: every command (deny rules came first)
    if opaque is not None and not unrestricted:
        return Decision("ask", f"the line runs code that cannot be checked: {opaque}")
    patterned = [r for r in allow if not getattr(r, "literal", False)]
    bases, unknown_cwd = _working_dirs(commands, ctx, policy)
    if too_many:
        return Decision(
            "ask", f"the line has more than {MAX_PATH_ARGUMENTS} file arguments, too many to check for sensitive files"
        )
    wanting: list[Decision] = []  # parts no rule admits but one could: the hint names each of them
    for cmd in commands:
        shown = cmd.text or " ".join(r.target.raw for r in cmd.redirects)
        argv = [w.text for w in cmd.argv]
        analysis = analyze(argv) if argv and not unrestricted else Analysis()
        if not unrestricted:
            refused = _admitted(cmd, argv, analysis, patterned, mode, allow)
            if refused is not None and refused.suggestion:
                wanting.append(refused)
                continue
            if refused is not None:
                return combined_refusal(wanting) or refused
        if unknown_cwd:
            return combined_refusal(wanting) or Decision(
                "ask", f"`{shown}`: the line changes directory in a way that cannot be followed"
            )
        problem = _place_problems(cmd, argv, analysis, bases, unrestricted, mode, ctx, policy)
        if problem is not None:
            return combined_refusal(wanting) or problem
    return combined_refusal(wanting) or Decision("allow")


def _place_problems(
    cmd: SimpleCommand,
    argv: Sequence[str],
    analysis: Analysis,
    bases: Sequence[Path],
    unrestricted: bool,
    mode: str,
    ctx: Place,
    policy: Policy,
) -> Decision | None:
    """4. In every directory the command may run in: the files it names, writes or searches, its
    redirections, and the repository git would use."""
    edit_allow = policy.rules.for_tool("allow", "", "edit")
    read_allow = policy.rules.for_tool("allow", "", "read")
    for base in bases:
        problem = _path_problems(
            cmd,
            ctx,
            policy,
            base,
            mode,
            edit_allow,
            read_allow,
            analysis,
            writes=(unrestricted or analysis.unsafe is not None) and not set(argv[:1]) & _CD,
        ) or _git_boundary(cmd, argv, base, ctx, unrestricted)
        if problem is not None:
            return problem
    return None


def _admitted(
    cmd: SimpleCommand,
    argv: Sequence[str],
    analysis: Analysis,
    patterned: Sequence[Rule],
    mode: str,
    allow: Sequence[Rule],
) -> Decision | None:
    """None when an allow rule or the read-only allowance admits `cmd` (static, not risky); else why not."""
    shown = cmd.text or " ".join(r.target.raw for r in cmd.redirects)
    moving = why_not_static(cmd)
    if moving is not None:
        return Decision(
            "ask", f"`{shown}`: {moving}, so neither a rule nor the read-only allowance can allow it without asking"
        )
    if not cmd.words:
        return None
    texts = [cmd.text]
    module = module_form(argv)
    if module is not None and not cmd.assignments:
        texts.append(" ".join(show_word(w) for w in module))  # `python -m pytest` under `bash(pytest*)`
    matched = any(rule.matches_command(t) for rule in patterned for t in texts)
    if analysis.risk is not None:
        reason = f"`{cmd.text}`: {analysis.risk}"
        if matched:
            reason += " (allow rules never admit that without asking)"
        return Decision("ask", reason)  # no rule would admit it: suggest none
    if not matched and (cmd.assignments or not (analysis.unsafe is None or argv[0] in _CD)):
        return Decision("ask", _bash_reason(cmd, mode, allow), suggest_rule(cmd, None if cmd.assignments else module))
    return None


def _git_boundary(
    cmd: SimpleCommand, argv: Sequence[str], base: Path, ctx: Place, unrestricted: bool
) -> Decision | None:
    """Git run in `base` would use a repository other than the workspace's (`cd sub && git log`): ask."""
    if unrestricted or not argv or not any(os.path.basename(f[0]) == "git" for f in unwrap(argv)):
        return None
    foreign = gitsafe.foreign_repository(base, ctx.workspace)
    if foreign is None:
        return None
    return Decision(
        "ask",
        f"`{cmd.text}` runs git in {shown_path(foreign, ctx)}, a repository other than the "
        "workspace's: its own configuration can run programs (as with `git -C`)",
    )


def _count_path_arguments(commands: Sequence[SimpleCommand]) -> int:
    """How many arguments and redirection targets of the line would be resolved as paths."""
    return sum(len(cmd.redirects) + max(0, len(cmd.words) - 1) for cmd in commands)


def _path_problems(
    cmd: SimpleCommand,
    ctx: Place,
    policy: Policy,
    base: Path,
    mode: str,
    edit_allow: Sequence[Rule],
    read_allow: Sequence[Rule],
    analysis: Analysis,
    *,
    writes: bool = True,
) -> Decision | None:
    """Sensitive files named by arguments (also glued to options: `-fNAME`, `--file=NAME`), the places
    that run later named by a command that may write (`writes`: not one the read-only allowance runs),
    the files `!out` options write, the trees searched, and the redirections of an otherwise admitted
    command."""
    words = cmd.argv[1:] if cmd.name else cmd.words
    texts = {w.text for w in words}
    texts |= {w.text.split("=", 1)[1] for w in words if w.text.startswith("-") and "=" in w.text}  # seen below
    glued = [Word(v, v) for v in analysis.values if v not in texts and not v.startswith("-")]
    named: list[Path] = []
    for word in [*words, *glued]:
        try:
            paths = _word_paths(word, base, policy, glued=not analysis.known)
        except _Unresolvable as exc:
            return Decision("ask", f"`{cmd.text}`: {exc}")
        named += paths
        for path in paths:
            why = policy.sensitive(path)
            if why and not specific_allow(read_allow, path, ctx):
                return Decision(
                    "ask",
                    f"`{cmd.text}` names {shown_path(path, ctx)}, which is sensitive: {why}",
                    f"read({shown_path(path, ctx)})",
                )
    later = _runs_later_problem(cmd, named, ctx, policy) if writes else None
    if later is not None:
        return later
    written = _written_problem(cmd, analysis, base, mode, ctx, policy, edit_allow)
    if written is not None:
        return written
    return _searched_problem(cmd, ctx, policy, base, read_allow, analysis) or _redirects_problem(
        cmd, ctx, policy, base, mode, edit_allow, read_allow
    )


def _redirects_problem(
    cmd: SimpleCommand,
    ctx: Place,
    policy: Policy,
    base: Path,
    mode: str,
    edit_allow: Sequence[Rule],
    read_allow: Sequence[Rule],
) -> Decision | None:
    """The first of the command's redirections that is not admitted, as a Decision."""
    for redirect in cmd.redirects:
        problem = _redirect_check(cmd, redirect, base, mode, ctx, policy, edit_allow, read_allow)
        if problem is not None:
            return problem
    return None


def _searched_problem(
    cmd: SimpleCommand, ctx: Place, policy: Policy, base: Path, read_allow: Sequence[Rule], analysis: Analysis
) -> Decision | None:
    """Ask when a tree the command searches holds a sensitive file that no specific rule allows reading."""
    for root in _search_roots(analysis, base, policy):
        found = sensitive_below(
            root, policy, lambda p: specific_allow(read_allow, p, ctx), lambda p: shown_path(p, ctx)
        )
        if found is not None:
            return Decision("ask", f"`{cmd.text}` searches {shown_path(root, ctx)}, which holds {found}")
    return None


def _redirect_check(
    cmd: SimpleCommand,
    redirect: Redirect,
    base: Path,
    mode: str,
    ctx: Place,
    policy: Policy,
    edit_allow: Sequence[Rule],
    read_allow: Sequence[Rule],
) -> Decision | None:
    if redirect.kind not in ("write", "read"):
        return None
    text = _literal(redirect.target, policy)
    target: Path | None = None
    shown = cmd.text or redirect.target.raw
    if text is not None and "/dev/" in text and ("tcp" in text or "udp" in text):
        return Decision("ask", f"`{shown}`: a redirection to {text} opens a network connection")
    if text is not None:
        resolved = pathresolve.resolve(text, base, policy.user_home)
        if resolved.problem is not None:
            return Decision("ask", f"`{shown}`: {resolved.problem}")
        if resolved.device:
            return None
        target = resolved.path
    problem = _redirect_problem(redirect, target, mode, ctx, policy, edit_allow, read_allow)
    firm = target is not None and redirect.kind == "write" and policy.config(target) is not None
    return Decision("ask", f"`{shown}`: {problem}", firm=firm) if problem else None


def _written_problem(
    cmd: SimpleCommand,
    analysis: Analysis,
    base: Path,
    mode: str,
    ctx: Place,
    policy: Policy,
    edit_allow: Sequence[Rule],
) -> Decision | None:
    """An `!out` option's file (`pytest --basetemp=D`, `--junitxml=F`), checked like an output
    redirection except that inside the workspace the allow rule naming the program admits it."""
    for value in analysis.written:
        for text in out_paths(value):
            resolved = pathresolve.resolve(text, base, policy.user_home)
            if resolved.problem is not None:
                return Decision("ask", f"`{cmd.text}`: {resolved.problem}")
            path = resolved.path
            shown = shown_path(path, ctx)
            if specific_allow(edit_allow, path, ctx) and mode != "plan" and policy.config(path) is None:
                continue
            why = (
                policy.config(path)
                or policy.write_care(path)
                or ("nothing is changed in plan mode" if mode == "plan" else "")
                or ("" if ctx.is_inside(path) else "it is outside the workspace")
            )
            if why:
                firm = policy.config(path) is not None
                return Decision(
                    "ask", f"`{cmd.text}` writes {shown}: {why}", "" if firm else f"edit({shown})", firm=firm
                )
    return None


def _runs_later_problem(cmd: SimpleCommand, named: Sequence[Path], ctx: Place, policy: Policy) -> Decision | None:
    """A command that may write names a place that runs later (`kimicode.permissions.runslater`), itself
    or as a directory the other arguments would land in by name (`cp x/.bashrc ~`): ask, whatever the
    rules (which program writes which argument is not known; naming one is enough)."""
    dirs = [p for p in named if p.is_dir()]
    landing = [d / p.name for d in dirs for p in named if p != d and p.name not in ("", ".", "..")]
    for path in [*named, *landing]:
        why = policy.config(path)
        if why:
            return Decision(
                "ask",
                f"`{cmd.text}` names {shown_path(path, ctx)}: {why}; no rule admits that without asking",
                firm=True,
            )
    return None


def _search_roots(analysis: Analysis, base: Path, policy: Policy) -> list[Path]:
    """The directories a search reads every file of (`grep -r`, `rg`, `git grep --no-index`, `diff -r`)."""
    if analysis.searches is None:
        return []
    roots = [pathresolve.resolve(o, base, policy.user_home).path for o in analysis.searches] or [base]
    return [r for r in roots if r.is_dir()]


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


def _word_paths(word: Word, base: Path, policy: Policy, glued: bool = True) -> list[Path]:
    """The files an argument may name: itself (or an `--opt=FILE` value), and the part after a `:`
    (`HEAD:.env` for git show, `host:path`)."""
    first = _word_path(word, base, policy)
    out = [first] if first is not None else []
    text = word.text
    if ":" in text and not word.dynamic and not _URL.match(text):
        rest = text.rsplit(":", 1)[1]
        if rest and not rest.startswith("-"):
            resolved = pathresolve.resolve(rest, base, policy.user_home)
            if resolved.problem is not None:
                raise _Unresolvable(resolved.problem)
            out.append(resolved.path)
    if glued and text.startswith("-") and not text.startswith("--") and not word.dynamic:
        out += _glued_paths(text, base, policy)  # a program without a specification: any letter may take one
    return out


_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
"""`https://host/x` names no file (`HEAD:.env` and `host:path` do)."""
_GLUE_SPAN = 12
"""How far into a bundle of short options an attached argument may start (`-abcfNAME`)."""


def _glued_paths(text: str, base: Path, policy: Policy) -> list[Path]:
    """The files an argument glued to short options may name (`-fNAME`, `-nfNAME`, `-I/etc`): every
    suffix after the option letters, since without knowing the program any letter may take one."""
    out: list[Path] = []
    for start in range(2, min(len(text), _GLUE_SPAN + 2)):
        tail = text[start:]
        if "=" in tail and tail.index("=") < len(tail) - 1 and start == 2:
            tail = tail.split("=", 1)[1]  # `-ocache_dir=/x`
        resolved = pathresolve.resolve(tail, base, policy.user_home)
        if resolved.problem is not None:
            raise _Unresolvable(resolved.problem)
        out.append(resolved.path)
    return out


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
    shown = shown_path(path, ctx)
    if redirect.kind == "read":
        why = policy.sensitive(path)
        if why and not specific_allow(read_allow, path, ctx):
            return f"it reads {shown}, which is sensitive: {why}"
        return None
    why = policy.config(path)
    if why:
        return f"it writes {shown}: {why}"
    if specific_allow(edit_allow, path, ctx) and mode != "plan":
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
