"""A deliberately conservative parser for bash command lines, used by the permission rules.

`parse(command)` returns every simple command bash would run for the line: the parts of lists and
pipelines (`;`, `&&`, `||`, `|`, `&`, newlines), the bodies of subshells, brace groups, `if`/`while`/
`until`/`for` compounds, and the commands inside `$(...)`, backticks and `<(...)`/`>(...)`, each with
its redirections. A rule is then checked against each of them, so `git status && rm -rf ~` is two
commands and a rule for the first says nothing about the second.

The parser is written for safety, not completeness: whatever it does not fully understand (`case`,
function definitions, `[[ ]]`, arithmetic, `${...}` holding a command substitution, here-documents
whose body runs substitutions, unbalanced quotes, ...) raises `ShellParseError`, and a command that
cannot be parsed is never allowed by a rule. A word that bash would expand (`$VAR`, globs, braces,
`$'...'`, `~user`) is marked `dynamic`; a rule or the read-only allowance admits a line only when no
word of it is dynamic (see `kimicode.permissions.engine`).

Text that bash would re-join is refused: a backslash-newline inside a word or a double-quoted string
(it could form a `$(` the parser never saw), and an unquoted here-document whose body holds `$`, a
backtick or a backslash-newline. Nesting deeper than `MAX_DEPTH` is refused (never a RecursionError),
and the work is linear in the length of the line: runs of ordinary characters are read in one step.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kimicode.permissions.shellwords import Redirect, SimpleCommand, Word

__all__ = ["MAX_DEPTH", "Redirect", "ShellParseError", "SimpleCommand", "Word", "parse"]

MAX_DEPTH = 24
"""How deeply substitutions, subshells and groups may nest before the line is refused."""
MAX_WORDS = 20000  # words in one line: more are refused (nobody reviews such a line)
MAX_PIECES = 50000  # quotes, escapes and expansions in one line (`$$$$...`): more are refused
MAX_COMMANDS = 5000
"""More simple commands than this in one line are refused: nobody reviews such a line, and checking
each against every rule would take too long."""


class ShellParseError(ValueError):
    """The command line uses syntax this parser does not accept (or is not valid bash)."""


_METACHARS = frozenset(" \t\n;&|<>()")
_PREFIX_KEYWORDS = frozenset({"!", "if", "then", "else", "elif", "do", "while", "until", "{", "time"})
_END_KEYWORDS = frozenset({"fi", "done", "}", "esac"})
_UNSUPPORTED_KEYWORDS = frozenset({"case", "function", "coproc", "select", "[[", "]]", "((", "in"})
_SPECIAL_PARAMS = frozenset("@*#?-$!0123456789")
_PLAIN = re.compile(r"[^ \t\n;&|<>()\\'\"`$]+")
"""A run of characters that stand for themselves in a word (read in one step: linear time)."""


_PLAIN_DQ = re.compile(r'[^"\\`$]+')


def _expands(unquoted: str) -> bool:
    """Unquoted globs (`*`, `?`, `[...]`) or brace expansion (`{a,b}`, `{1..3}`), found in linear time.

    Over-approximates: any `{` followed later by `,` or `..` and then `}` counts, as does any `[`
    followed later by `]` (a lone `[` or `{}` is literal)."""
    if "*" in unquoted or "?" in unquoted:
        return True
    bracket = unquoted.find("[")
    if bracket >= 0 and unquoted.find("]", bracket + 1) >= 0:
        return True
    brace = unquoted.find("{")
    if brace >= 0:
        close = unquoted.rfind("}")
        if close > brace:
            inner = unquoted[brace + 1 : close]
            if "," in inner or ".." in inner:
                return True
    return False


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse(command: str) -> list[SimpleCommand]:
    """All simple commands of `command` in source order; raises ShellParseError (see the module doc)."""
    if "\x00" in command:
        raise ShellParseError("the command contains a NUL byte")
    parser = _Parser(command)
    try:
        parser.parse_list(None)
    except RecursionError:  # a safety net: MAX_DEPTH is reached long before Python's limit
        raise ShellParseError("the command nests too deeply to be checked") from None
    return parser.commands


@dataclass
class _ListState:
    """Where a list's parse is: just after `)`, `}`, `fi`, `done` (only redirections or operators may
    follow), or just after the `time` keyword (which takes -p)."""

    after_compound: bool = False
    after_time: bool = False


class _Parser:
    def __init__(
        self, src: str, commands: list[SimpleCommand] | None = None, depth: int = 0, word_count: list[int] | None = None
    ) -> None:
        self.s = src
        self.word_count = [0, 0] if word_count is None else word_count
        """Words and quoted or expanded pieces read so far in the whole line (shared with backtick
        sub-parsers): both are limited, so no shape of input makes the parser slow."""
        self.i = 0
        self.depth = depth
        self.last_dollar = src.rfind("$")
        self.commands: list[SimpleCommand] = [] if commands is None else commands
        self.heredocs: list[tuple[str, bool, bool]] = []  # (delimiter, quoted, strip tabs)

    # -- helpers ---------------------------------------------------------------------------------

    def _peek(self, n: int = 0) -> str:
        j = self.i + n
        return self.s[j] if j < len(self.s) else ""

    def _startswith(self, text: str) -> bool:
        return self.s.startswith(text, self.i)

    def _skip_blanks(self) -> None:
        while self.i < len(self.s):
            c = self.s[self.i]
            if c in " \t":
                self.i += 1
            elif c == "\\" and self._peek(1) == "\n":
                self.i += 2
            else:
                return

    def _piece(self) -> None:
        self.word_count[1] += 1
        if self.word_count[1] > MAX_PIECES:
            raise self._error(f"the line holds more than {MAX_PIECES} quotes, escapes and expansions")

    def _error(self, message: str) -> ShellParseError:
        return ShellParseError(f"{message} (at offset {self.i})")

    # -- lists -----------------------------------------------------------------------------------

    def parse_list(self, closer: str | None) -> None:
        """Parse commands until the end (closer None) or an unmatched `)` (closer ")"), consumed."""
        self.depth += 1
        try:
            self._parse_list(closer)
        finally:
            self.depth -= 1

    def _parse_list(self, closer: str | None) -> None:
        if self.depth > MAX_DEPTH:
            raise self._error(f"the command nests more than {MAX_DEPTH} levels deep")
        words: list[Word] = []
        redirects: list[Redirect] = []
        state = _ListState()
        count = self.word_count

        def flush() -> None:
            if words or redirects:
                if len(self.commands) >= MAX_COMMANDS:
                    raise self._error(f"the line holds more than {MAX_COMMANDS} commands")
                self.commands.append(SimpleCommand(tuple(words), tuple(redirects)))
            words.clear()
            redirects.clear()
            state.after_compound = state.after_time = False

        while True:
            self._skip_blanks()
            if self.i >= len(self.s):
                if closer is not None:
                    raise self._error("unclosed '('")
                flush()
                return
            c = self.s[self.i]
            if c == "#":  # at the start of a word: a comment, to the end of the line
                # (`#` inside a word, as in a#b, is not a comment: words are read whole below.)
                while self.i < len(self.s) and self.s[self.i] != "\n":
                    self.i += 1
                continue
            if c == "\n":
                flush()
                self.i += 1
                self._read_heredocs()
                continue
            if c == ")":
                if closer != ")":
                    raise self._error("unexpected ')'")
                flush()
                self.i += 1
                return
            if c in ";&|" and not self._startswith("&>"):
                self._operator()
                flush()
                continue
            if c == "(":
                self._subshell(bool(words) or state.after_compound)
                state.after_compound = True
                continue
            redirect = self._redirect()
            if redirect is not None:
                redirects.append(redirect)
                continue
            word = self._word()
            if state.after_compound:
                raise self._error(f"unexpected word {word.raw!r} after a compound command")
            if not words and not redirects and self._keyword(word, state):
                continue
            state.after_time = False
            count[0] += 1
            if count[0] > MAX_WORDS:
                raise self._error(f"the line holds more than {MAX_WORDS} words")
            words.append(word)

    def _operator(self) -> None:
        """Step over `;`, `&`, `|`, `&&`, `||` or `|&` (case clauses' `;;` and `;&` are refused)."""
        two = self.s[self.i : self.i + 2]
        if two in (";;", ";&"):
            raise self._error("case clauses are not supported")
        self.i += 2 if two in ("&&", "||", "|&") else 1

    def _subshell(self, after_word: bool) -> None:
        """A `( ... )` subshell in command position (not a function definition or arithmetic)."""
        if after_word:
            raise self._error("'(' after a word (function definitions and arrays are not supported)")
        if self._peek(1) == "(":
            raise self._error("arithmetic commands '((' are not supported")
        self.i += 1
        self.parse_list(")")

    def _keyword(self, word: Word, state: _ListState) -> bool:
        """Reserved words in command position (they count only unquoted): True when `word` was one."""
        if word.raw in _UNSUPPORTED_KEYWORDS:
            raise self._error(f"'{word.raw}' is not supported")
        if word.raw in _PREFIX_KEYWORDS:
            state.after_time = word.raw == "time"
            return True
        if state.after_time and word.raw in ("-p", "--"):  # `time -p CMD`: the options of the keyword
            return True
        if word.raw in _END_KEYWORDS:
            state.after_compound = True
            return True
        if word.raw == "for":
            self._for_header()
            return True
        return False

    def _for_header(self) -> None:
        """After `for`: the variable name, then optionally `in WORDS`, up to `;` or a newline."""
        self._skip_blanks()
        if self._startswith("(("):
            raise self._error("arithmetic for loops are not supported")
        name = self._word()
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name.raw):
            raise self._error(f"bad for loop variable {name.raw!r}")
        self._skip_blanks()
        if self.i < len(self.s) and self.s[self.i] not in ";\n":
            keyword = self._word()
            if keyword.raw != "in":
                raise self._error("expected 'in' in a for loop")
            while True:
                self._skip_blanks()
                if self.i >= len(self.s) or self.s[self.i] in ";\n":
                    break
                if self.s[self.i] in _METACHARS:
                    raise self._error(f"unexpected {self.s[self.i]!r} in a for loop")
                self._word()  # substitutions inside are recorded as commands
        if self.i < len(self.s):
            self.i += 1  # the ; or newline
            if self.s[self.i - 1] == "\n":
                self._read_heredocs()

    # -- redirections ----------------------------------------------------------------------------

    _REDIRECT = re.compile(r"([0-9]*)(&>>|&>|>>|>&|>\||>|<<<|<<-|<<|<&|<>|<)")

    def _redirect(self) -> Redirect | None:
        if self.s[self.i] not in "<>&0123456789":
            return None
        if self._startswith("<(") or self._startswith(">("):
            return None  # a process substitution: a word
        m = self._REDIRECT.match(self.s, self.i)
        if m is None:
            return None
        fd, op = m.group(1), m.group(2)
        if op.startswith("&") and fd:
            return None  # e.g. 2&>x: not a redirection of fd 2; let the word reader fail or split it
        self.i = m.end()
        self._skip_blanks()
        if self.i >= len(self.s) or self.s[self.i] in _METACHARS:
            if self._startswith("<(") or self._startswith(">("):
                target = self._word()
                return Redirect(op, target, fd)
            raise self._error(f"missing target after {op!r}")
        target = self._word()
        if op in ("<<", "<<-"):
            quoted = any(q in target.raw for q in "'\"\\")
            self.heredocs.append((target.text, quoted, op == "<<-"))
            if not quoted and self.last_dollar > self.i:  # the body may expand $VAR: not static
                target = Word(target.text, target.raw, dynamic=True)
        return Redirect(op, target, fd)

    def _read_heredocs(self) -> None:
        """Consume the bodies of pending here-documents (they start after the newline just read)."""
        pending, self.heredocs = self.heredocs, []
        for delimiter, quoted, strip_tabs in pending:
            body: list[str] = []
            while self.i < len(self.s):
                end = self.s.find("\n", self.i)
                line = self.s[self.i :] if end < 0 else self.s[self.i : end]
                self.i = len(self.s) if end < 0 else end + 1
                check = line.lstrip("\t") if strip_tabs else line
                if check == delimiter:
                    break
                body.append(line)
            text = "\n".join(body)
            if not quoted and (
                "`" in text or "$(" in text or "${" in text or "$[" in text or "\\\n" in text or text.endswith("\\")
            ):
                raise ShellParseError(
                    "a here-document whose body runs substitutions, ${...} or a backslash-newline is not "
                    "supported; quote its delimiter (<<'EOF')"
                )

    # -- words -----------------------------------------------------------------------------------

    def _word(self) -> Word:
        start = self.i
        text: list[str] = []
        unquoted: list[str] = []  # the unquoted literal characters, to spot globs and brace expansion
        dynamic = False
        tilde = self._peek() == "~"
        if self.s[self.i] in "<>" and self._peek(1) == "(":
            self.i += 2
            self.parse_list(")")
            return Word(self.s[start : self.i], self.s[start : self.i], dynamic=True)
        s = self.s
        while self.i < len(s):
            m = _PLAIN.match(s, self.i)
            if m is not None:
                chunk = m.group()
                text.append(chunk)
                unquoted.append(chunk)
                self.i = m.end()
                continue
            c = s[self.i]
            if c in _METACHARS:
                break
            self._piece()
            if c == "\\":
                nxt = self._peek(1)
                if nxt == "\n":
                    raise self._error("a backslash-newline inside a word is not supported (bash re-joins the text)")
                elif nxt:
                    text.append(nxt)
                    self.i += 2
                else:
                    text.append("\\")
                    self.i += 1
            elif c == "'":
                end = s.find("'", self.i + 1)
                if end < 0:
                    raise self._error("unclosed single quote")
                text.append(s[self.i + 1 : end])
                self.i = end + 1
            elif c == '"':
                self.i += 1
                dynamic |= self._double_quoted(text)
            elif c == "`":
                text.append(self._backticks())
                dynamic = True
            elif c == "$":
                dynamic |= self._dollar(text)
            else:
                text.append(c)
                unquoted.append(c)
                self.i += 1
        if self.i == start:
            raise self._error(f"unexpected {self._peek()!r}")
        if _expands("".join(unquoted)):
            dynamic = True
        if tilde and not re.match(r"~(/|$)", s[start : self.i]):
            dynamic = True  # ~user, ~+, ~-: another directory than the home
        return Word("".join(text), s[start : self.i], dynamic=dynamic, tilde=tilde)

    def _double_quoted(self, text: list[str]) -> bool:
        """Read up to the closing `"` (the opening one is consumed); True if it expands anything."""
        s = self.s
        dynamic = False
        while True:
            if self.i >= len(s):
                raise self._error("unclosed double quote")
            m = _PLAIN_DQ.match(s, self.i)
            if m is not None:
                text.append(m.group())
                self.i = m.end()
                continue
            c = s[self.i]
            if c == '"':
                self.i += 1
                return dynamic
            self._piece()
            if c == "\\":
                nxt = self._peek(1)
                if nxt in ('"', "\\", "$", "`"):
                    text.append(nxt)
                    self.i += 2
                elif nxt == "\n":
                    raise self._error("a backslash-newline inside double quotes is not supported")
                else:
                    text.append("\\")
                    self.i += 1
            elif c == "`":
                text.append(self._backticks())
                dynamic = True
            elif c == "$":
                dynamic |= self._dollar(text, quoted=True)
            else:
                text.append(c)
                self.i += 1

    def _backticks(self) -> str:
        """A backtick substitution starting at `; its commands are parsed and recorded."""
        s = self.s
        start = self.i
        j = self.i + 1
        inner: list[str] = []
        while True:
            if j >= len(s):
                raise self._error("unclosed backtick")
            c = s[j]
            if c == "`":
                break
            if c == "\\" and j + 1 < len(s) and s[j + 1] in "`\\$":
                inner.append(s[j + 1])
                j += 2
                continue
            inner.append(c)
            j += 1
        self.i = j + 1
        sub = _Parser("".join(inner), self.commands, self.depth, self.word_count)
        sub.parse_list(None)
        return s[start : self.i]

    def _dollar(self, text: list[str], quoted: bool = False) -> bool:
        """At a `$`: append what it stands for (as written); True when it is an expansion."""
        s = self.s
        start = self.i
        nxt = self._peek(1)
        if nxt == "(":
            if self._peek(2) == "(":
                raise self._error("arithmetic expansion $((...)) is not supported")
            self.i += 2
            self.parse_list(")")
            text.append(s[start : self.i])
            return True
        if nxt == "{":
            end = self._braced_end(self.i + 2)
            body = s[self.i + 2 : end]
            if "`" in body or "$(" in body:
                raise self._error("command substitution inside ${...} is not supported")
            self.i = end + 1
            text.append(s[start : self.i])
            return True
        if nxt == "'" and not quoted:  # $'...': ANSI-C quoting, its escapes can spell anything
            j = self.i + 2
            while j < len(s) and s[j] != "'":
                j += 2 if s[j] == "\\" else 1
            if j >= len(s):
                raise self._error("unclosed $'...' string")
            self.i = j + 1
            text.append(s[start : self.i])
            return True
        if nxt == '"' and not quoted:  # $"...": a translated string, otherwise like "..."
            self.i += 2
            return self._double_quoted(text)
        m = _NAME.match(s, self.i + 1)
        if m is not None:
            self.i = m.end()
            text.append(s[start : self.i])
            return True
        if nxt and nxt in _SPECIAL_PARAMS:
            self.i += 2
            text.append(s[start : self.i])
            return True
        text.append("$")
        self.i += 1
        return False

    def _braced_end(self, j: int) -> int:
        """Index of the `}` closing a `${` whose body starts at j (nesting and quotes respected)."""
        s = self.s
        depth = 1
        while j < len(s):
            c = s[j]
            if c == "\\":
                j += 2
                continue
            if c == "'":
                end = s.find("'", j + 1)
                if end < 0:
                    break
                j = end + 1
                continue
            if c == '"':
                j += 1
                while j < len(s) and s[j] != '"':
                    j += 2 if s[j] == "\\" else 1
                j += 1
                continue
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    return j
            j += 1
        raise self._error("unclosed ${...}")
