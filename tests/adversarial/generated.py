"""Hostile command lines generated from the program specifications (kimicode.permissions.specs), with
the harmless form each must not break. Every unique prefix of every long option that runs, writes or
is not read-only, every short spelling alone, attached, separate and bundled after the program's
harmless flags; arguments glued to options naming a secret; `cd` into other repositories before git.

Each case is (line, harmless line, rules): the line must ask or be refused under `rules` (and with no
rules); the harmless line must run under `rules` (and, for read-only programs, with no rules)."""

from __future__ import annotations

from collections.abc import Iterator

from kimicode.permissions.optparse import Option, Spec
from kimicode.permissions.specs import SPECS

Case = tuple[str, str, tuple[str, ...]]

VALUES = {"exec": "id", "write": "/tmp/kc-pwned", "out": "/tmp/kc-out", "unsafe": "x", "search": ""}
_BUNDLE_WITH = 2
"""How many of a program's harmless flags each risky short option is bundled after."""


_GIT_OPERANDS = {
    "branch": "",
    "tag": "",
    "stash": "list",
    "remote": "",
    "reflog": "",
    "status": "",
    "count-objects": "",
    "version": "",
    "describe": "",
    "rev-parse": "HEAD",
    "merge-base": "a b",
    "name-rev": "HEAD",
    "ls-tree": "HEAD",
    "cat-file": "-p HEAD",
    "for-each-ref": "",
    "show-ref": "",
}


_OPERANDS = {"rg": "x src", "sed": "p README.md", "tar": "-tf x.tar"}


def _programs() -> Iterator[tuple[str, Spec, str]]:
    """(command prefix, spec, operands) for every program and git subcommand."""
    for name, spec in sorted(SPECS.items()):
        if spec.runs >= 0 or spec.always:
            continue
        if name == "git":
            yield "git", spec, "log"
            for sub_name, sub in sorted(spec.subcommands.items()):
                if not sub.always:
                    yield f"git {sub_name}", sub, _GIT_OPERANDS.get(sub_name, "README.md")
            if spec.other is not None:
                yield "git push", spec.other, "origin"
            continue
        yield name, spec, _OPERANDS.get(name, "README.md")


def _unique_prefixes(spec: Spec, option: Option, spelling: str) -> list[str]:
    """Every abbreviation of a long `spelling` that the parser takes for `option` alone."""
    if spec.style == "go":
        return [spelling]
    key = spelling[2:]
    out = []
    for n in range(1, len(key) + 1):
        found, candidates = spec.lookup_long(key[:n])
        if found is option and not candidates:
            out.append("--" + key[:n])
    return out


def _spellings(spec: Spec, option: Option, value: str) -> Iterator[str]:
    """The option with `value`, every way the program accepts it."""
    flags = [
        o.names[0][1:]
        for o in spec.table
        if not o.effect and o.arg == "" and o.names[0].startswith("-") and len(o.names[0]) == 2
    ]
    for spelling in option.names:
        if spelling.startswith("--") or spec.style == "go":
            for prefix in _unique_prefixes(spec, option, spelling):
                if option.arg in ("=", "?"):
                    yield f"{prefix}={value}"
                if option.arg == "=":
                    yield f"{prefix} {value}"
                if option.arg == "":
                    yield prefix
        elif len(spelling) == 2 and spelling[0] == "-":
            letter = spelling[1]
            tail = {"=": (f"{value}", f" {value}"), "?": (f"{value}",), "": ("",)}.get(option.arg, ())
            for end in tail:
                yield f"-{letter}{end}"
                for flag in flags[:_BUNDLE_WITH]:
                    yield f"-{flag}{letter}{end}"


def _rules(prefix: str) -> tuple[str, ...]:
    return (f"bash({prefix.split()[0]}*)",)


def option_cases() -> list[Case]:
    """Options that run, write (outside the workspace) or are not read-only, in every spelling."""
    cases: list[Case] = []
    for prefix, spec, operands in _programs():
        harmless = f"{prefix} {operands}"
        read_only = spec.read_only
        for option in spec.table:
            if option.effect in ("exec", "write", "out"):
                rules = _rules(prefix)
            elif option.effect == "unsafe" and read_only:
                rules = ()
            else:
                continue
            for form in _spellings(spec, option, VALUES[option.effect]):
                line = f"{prefix} {form} {operands}".rstrip() if prefix != "git" else f"git {form} log"
                cases.append((line, harmless.rstrip() if prefix != "git" else "git log", rules))
    return cases


def glued_cases() -> list[Case]:
    """A secret's name glued to an option of a read-only program (`grep -f.env`, `--file=.env`)."""
    cases: list[Case] = []
    for prefix, spec, operands in _programs():
        if not spec.read_only:
            continue
        for option in spec.table:
            if option.effect or option.arg != "=":
                continue
            for spelling in option.names:
                harmless = f"{prefix} {operands}".rstrip()
                if spelling.startswith("--"):
                    cases.append((f"{prefix} {spelling}=.env {operands}".rstrip(), harmless, ()))
                elif len(spelling) == 2:
                    cases.append((f"{prefix} {spelling}.env {operands}".rstrip(), harmless, ()))
    return cases


REPOSITORIES = ["nested", "nested/deep", "bare", "bare/refs", "gitfile", "written"]
"""Directories of the adversarial workspace git would take for another repository (see the test)."""
_GIT_READS = [
    "log",
    "show",
    "diff",
    "status",
    "log -p",
    "show HEAD:README.md",
    "blame README.md",
    "grep -n x",
    "diff HEAD~1",
    "whatchanged",
]


def repository_cases() -> list[Case]:
    """`cd` into a repository other than the workspace's before read-only git."""
    cases: list[Case] = []
    for directory in REPOSITORIES:
        for sub in _GIT_READS:
            for glue in (" && ", "; ", "\n"):
                cases.append((f"cd {directory}{glue}git {sub}", f"cd src{glue}git {sub}", ()))
                cases.append((f"cd {directory}{glue}git {sub}", f"cd src{glue}git {sub}", ("bash(git*)",)))
    return cases


def environment_cases() -> list[Case]:
    """Programs that would print the environment."""
    cases: list[Case] = []
    for program in ("jq", "gojq", "jaq", "yq"):
        rules = () if program == "jq" else (f"bash({program}*)",)
        for flags in ("-n", "-rn", "-cn", "-n -r"):
            for expr in ("env", "$ENV", "env.HOME", "$ENV.PATH", "[env[]]", "env|keys", "$ENV|to_entries"):
                cases.append((f"{program} {flags} '{expr}'", f"{program} {flags} '.a'", rules))
    for awk in ("awk", "gawk"):
        cases.append(
            (
                f"{awk} 'BEGIN{{for(k in ENVIRON) print k, ENVIRON[k]}}'",
                f"{awk} '{{print $1}}' README.md",
                (f"bash({awk}*)",),
            )
        )
    return cases


HOSTILE_CASES = option_cases() + glued_cases() + repository_cases() + environment_cases()
