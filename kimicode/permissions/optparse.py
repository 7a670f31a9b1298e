"""One option parser for every program the permission checks know, driven by specifications.

A program reads its arguments with getopt_long (GNU), git's parse-options or Go's flag package, and an
attacker spells an option any way the program accepts. So the checks never compare words with option
names; they parse the words the way the program does, with its `Spec`, and ask what was found:

- long options by any unique prefix (`--compress-prog=sh` is `--compress-program=sh`), `--name=value`
  and `--name value`, and git's `--no-NAME` negations (also abbreviated);
- bundled short options (`-rno F` is `-r -n -o F`), arguments attached (`-oF`) or separate (`-o F`),
  optional arguments only attached (`-d[FILE]`, `--color[=WHEN]`), and `-NUM` where the program has
  an obsolete count option (`head -5`, `tail -5f`);
- `--` ends the options; `posix` programs stop at the first operand (git's global options, wrappers);
- subcommands with their own options (`git -c x=y log --output=F`).

An abbreviation that is ambiguous is an error for the program; the parser records every candidate, so
the checks see the worst of them. A short option the specification does not know is taken as a flag
and the rest of its bundle is still read (`-zO` is checked as `-z -O`): whatever the program really
does, the checks see at least as much as it might do. Unknown options are recorded; a strict
specification (`strict=True`) is not read-only with any of them.

The specification format (`Spec.options`, a block of lines) is documented in docs/permissions.md:
one option per line, its names (`-o --output`), `=` after a name when it takes an argument, `[=]`
when the argument is optional, then `!effect` and the reason shown to the user.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["EFFECTS", "Found", "Option", "Parsed", "Spec", "parse_args", "parse_options"]

ArgKind = Literal["", "=", "?", "2"]
EFFECTS = frozenset({"", "exec", "write", "out", "search", "unsafe", "module"})
"""What an option does, for the checks:

- `exec`: runs a program or code of the command line's choosing (asks, even under an allow rule);
- `write`: writes where its argument says in a program a rule would not expect to write (asks);
- `out`: its argument is a file or directory the program writes: checked like a redirection
  (inside the workspace, not protected, not in plan mode) under an allow rule; never read-only;
- `search`: reads files the program would otherwise skip (ignored, untracked, outside the repository):
  its operands are searched for secrets like `grep -r`'s;
- `unsafe`: not read-only (it changes something, never ends, or reads what cannot be checked), but an
  allow rule naming the program may admit it;
- `module`: (`python -m`) the rest of the words are the named module's own arguments.
"""


@dataclass(frozen=True)
class Option:
    """One option: its spellings, whether it takes an argument, and its effect (see `EFFECTS`)."""

    names: tuple[str, ...]
    arg: ArgKind = ""
    """`""` a flag, `"="` a required argument, `"?"` an optional (attached) one, `"2"` two separate ones."""
    effect: str = ""
    why: str = ""

    @property
    def label(self) -> str:
        """The longest spelling, for messages."""
        return max(self.names, key=len)


@dataclass(frozen=True)
class Found:
    """An option as the parser found it: `spelled` as written, `value` its argument or None."""

    option: Option
    spelled: str
    value: str | None = None
    candidates: tuple[Option, ...] = ()
    """For an ambiguous abbreviation: every option it may mean (`option` is the worst of them)."""


@dataclass
class Parsed:
    """The result of parsing a command's words with its `Spec`."""

    spec: Spec
    found: list[Found] = field(default_factory=list)
    operands: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    subcommand: str | None = None
    sub: Parsed | None = None
    """The subcommand's own parse (None for a subcommand the specification does not know)."""
    rest: list[str] = field(default_factory=list)
    """For `module`/`stop` options: the words after it, not parsed (`python -m pytest ARGS`)."""

    def effects(self) -> list[Found]:
        """Every option with an effect, here and in the subcommand (ambiguous ones once per candidate)."""
        out: list[Found] = []
        for f in self.found:
            for option in f.candidates or (f.option,):
                if option.effect:
                    out.append(Found(option, f.spelled, f.value))
        if self.sub is not None:
            out += self.sub.effects()
        return out

    def has(self, *names: str) -> bool:
        """True when an option with one of these spellings was given (by any spelling of it)."""
        return any(n in f.option.names for f in self.found for n in names)

    def values(self, *names: str) -> list[str]:
        """The arguments given to the options with these spellings."""
        return [f.value for f in self.found if f.value is not None and any(n in f.option.names for n in names)]

    def innermost(self) -> Parsed:
        """The deepest subcommand's parse (`git stash list` gives `list`'s)."""
        return self.sub.innermost() if self.sub is not None else self


_PREFIX_CACHE = 4096
_LINE = re.compile(r"^(?P<names>[^!]*?)\s*(?:!(?P<effect>[a-z]+)\s*(?P<why>.*))?$")


def parse_options(text: str) -> tuple[Option, ...]:
    """Read an option table: one option per line, `-o= --output= !write writes its output to a file`.

    A name ending in `=` takes an argument, `[=]` an optional one, `==` two (`--arg NAME VALUE`);
    `#` starts a comment. Raises ValueError for a malformed line (the tests load every table)."""
    out: list[Option] = []
    for raw in text.splitlines():
        line = raw.split("  #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if m is None or not m.group("names"):
            raise ValueError(f"bad option line {raw!r}")
        names: list[str] = []
        kinds: list[str] = []
        for token in m.group("names").split():
            kind = "?" if token.endswith("[=]") else "2" if token.endswith("==") else "=" if token.endswith("=") else ""
            name = token.removesuffix("[=]").rstrip("=")
            if not re.fullmatch(r"-{1,2}[^\s=]+|\+", name):
                raise ValueError(f"bad option name {token!r} in {raw!r}")
            names.append(name)
            kinds.append(kind)
        effect = m.group("effect") or ""
        if effect not in EFFECTS:
            raise ValueError(f"bad effect in option line {raw!r}")
        for kind in sorted(set(kinds)):  # names of one kind are one option (aliases); kinds split a line
            same = tuple(n for n, k in zip(names, kinds, strict=True) if k == kind)
            out.append(Option(same, kind, effect, (m.group("why") or "").strip()))  # type: ignore[arg-type]
    return tuple(out)


@dataclass(frozen=True)
class Spec:
    """What the checks know about one program (or subcommand): how it parses its options, which of
    them matter, and examples the tests check (see docs/permissions.md, "Option specifications")."""

    name: str
    options: str = ""
    read_only: bool = False
    """The read-only allowance may admit it (when nothing else forbids it)."""
    strict: bool = False
    """An option the table does not list makes it not read-only (the table lists every safe one)."""
    style: Literal["gnu", "git", "go"] = "gnu"
    """`gnu`: getopt_long; `git`: parse-options (also `--no-NAME`); `go`: Go's flag (`-name`, no bundling)."""
    posix: bool = False
    """Options end at the first operand (`git -p log`, `timeout 5 cmd -o`)."""
    numeric: bool = False
    """`-NUM` is an option (`head -5`), and so is `+NUM` when `plus` is empty."""
    plus: str = ""
    """The effect of a `+WORD` argument (`less +!cmd` runs it); empty: `+WORD` is an ordinary operand."""
    always: str = ""
    """Why the program is risky whatever its arguments (`sh`, `eval`, an editor); empty: see the options."""
    unsafe: str = ""
    """Why the program is never read-only (but an allow rule may admit it)."""
    max_operands: int = -1
    """Read-only only with at most this many operands (`uniq IN OUT` writes OUT); -1: any number."""
    check: str = ""
    """A content check in `kimicode.permissions.programs` for what options cannot say (a sed script,
    an awk program, a jq filter)."""
    runs: int = -1
    """A wrapper (`sudo`, `timeout 5`, `xargs`): it runs the command in its operands after skipping
    this many (and any `NAME=value`); -1: not a wrapper."""
    subcommands: Mapping[str, Spec] = field(default_factory=dict)
    other: Spec | None = None
    """The specification for subcommands not in `subcommands` (their risky options)."""
    match: tuple[str, ...] = ()
    """Commands admitted without asking: with no rules when `read_only`, else under `bash(NAME*)`."""
    not_match: tuple[str, ...] = ()
    """Commands that ask even under an allow rule `bash(NAME*)` (and with no rules)."""
    not_read_only: tuple[str, ...] = ()
    """Commands that ask with no rules, but an allow rule `bash(NAME*)` admits."""

    def __post_init__(self) -> None:
        table = parse_options(self.options)
        object.__setattr__(self, "table", table)
        long: dict[str, Option] = {}
        short: dict[str, Option] = {}
        for option in table:
            for name in option.names:
                if name.startswith("--") or (self.style == "go" and name.startswith("-")):
                    long[name.lstrip("-")] = option
                elif name != "+":
                    short[name[1:]] = option
        if self.style == "git":
            for option in table:
                for name in option.names:
                    key = name[2:]
                    if name.startswith("--") and not key.startswith("no-") and f"no-{key}" not in long:
                        long[f"no-{key}"] = Option((f"--no-{key}",))
        object.__setattr__(self, "long", long)
        object.__setattr__(self, "short", short)

    table: tuple[Option, ...] = field(init=False, repr=False, compare=False, default=())
    long: Mapping[str, Option] = field(init=False, repr=False, compare=False, default_factory=dict)
    short: Mapping[str, Option] = field(init=False, repr=False, compare=False, default_factory=dict)
    prefixes: dict[str, tuple[Option | None, tuple[Option, ...]]] = field(
        init=False, repr=False, compare=False, default_factory=dict
    )
    """Abbreviations already looked up (bounded: cleared past `_PREFIX_CACHE` entries)."""

    def lookup_long(self, key: str) -> tuple[Option | None, tuple[Option, ...]]:
        """The long option `key` names (exactly or by a unique prefix), and the candidates of an
        ambiguous prefix (then the first is the worst: an effect before none)."""
        exact = self.long.get(key)
        if exact is not None or self.style == "go":
            return exact, ()
        cached = self.prefixes.get(key)
        if cached is not None:
            return cached
        found = {id(o): o for k, o in self.long.items() if k.startswith(key)}
        options = sorted(found.values(), key=lambda o: (not o.effect, o.arg == ""))
        answer: tuple[Option | None, tuple[Option, ...]] = (
            (options[0], ()) if len(options) == 1 else (options[0], tuple(options)) if options else (None, ())
        )
        if len(self.prefixes) > _PREFIX_CACHE:
            self.prefixes.clear()
        self.prefixes[key] = answer
        return answer


def _take_long(spec: Spec, word: str, words: Sequence[str], i: int, out: Parsed) -> int:
    """Parse the long option `word` (at index i); return the index of the next word."""
    body = word[2:] if word.startswith("--") else word[1:]
    key, eq, value = body.partition("=")
    option, candidates = spec.lookup_long(key)
    if option is None:
        out.unknown.append(word)
        if eq:
            out.found.append(Found(Option((f"--{key}",), "="), word, value))
        return i + 1
    if eq:
        out.found.append(Found(option, word, value, candidates))
        return i + 1
    if option.arg == "=" and i + 1 < len(words):
        out.found.append(Found(option, word, words[i + 1], candidates))
        return i + 2
    if option.arg == "2" and i + 2 < len(words):
        out.found.append(Found(option, word, words[i + 2], candidates))
        return i + 3
    out.found.append(Found(option, word, None, candidates))
    return i + 1


def _take_short(spec: Spec, word: str, words: Sequence[str], i: int, out: Parsed) -> int:
    """Parse a bundle of short options (`-rno F`, `-oF`, `-5f`); return the index of the next word."""
    letters = word[1:]
    if spec.numeric:
        letters = letters.lstrip("0123456789")
        if len(letters) < len(word) - 1:
            out.found.append(Found(Option(("-NUM",)), word))
    for j, letter in enumerate(letters):
        option = spec.short.get(letter)
        if option is None:
            out.unknown.append(f"-{letter}")
            continue
        attached = letters[j + 1 :]
        if option.arg in ("=", "2"):
            if attached:
                out.found.append(Found(option, word, attached))
                return i + 1
            if i + 1 < len(words):
                out.found.append(Found(option, word, words[i + 1]))
                return i + 2
            out.found.append(Found(option, word))
            return i + 1
        if option.arg == "?":
            out.found.append(Found(option, word, attached or None))
            return i + 1
        out.found.append(Found(option, word))
        if option.effect == "module":
            return i + 1
    return i + 1


def parse_args(spec: Spec, words: Sequence[str]) -> Parsed:
    """Parse a command's arguments (the words after the program name) with `spec`."""
    out = Parsed(spec)
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--":
            out.operands += words[i + 1 :]
            break
        if word.startswith("+") and (spec.plus or spec.numeric) and len(word) > 1:
            plus = spec.short.get("+") or Option(("+",), "", spec.plus, "")
            out.found.append(Found(plus, word, word[1:]))
            i += 1
            continue
        if not word.startswith("-") or word == "-":
            if spec.subcommands or spec.other is not None:
                return _subcommand(spec, words, i, out)
            out.operands.append(word)
            if spec.posix:
                out.operands += words[i + 1 :]
                break
            i += 1
            continue
        if word.startswith("--") or (spec.style == "go"):
            i = _take_long(spec, word, words, i, out)
        else:
            i = _take_short(spec, word, words, i, out)
        last = out.found[-1] if out.found else None
        if last is not None and last.option.effect == "module" and last.spelled == word and last.value is not None:
            out.rest = list(words[i:])
            break
    return out


def _subcommand(spec: Spec, words: Sequence[str], i: int, out: Parsed) -> Parsed:
    name = words[i]
    out.subcommand = name
    sub = spec.subcommands.get(name, spec.other)
    if sub is not None:
        out.sub = parse_args(sub, words[i + 1 :])
    else:
        out.operands += words[i + 1 :]
    return out
