"""Permission rules (`bash(git diff*)`, `edit(src/**)`, `read(~/.ssh/**)`, `tool_name`) and the paths
that need care (secrets to read, kimicode's own configuration and `.git` to write).

Rules come from the `[permissions]` table of `KIMICODE_HOME/config.toml` and of the workspace's
`.kimicode/config.toml`, and from the `--allow`/`--deny`/`--ask` flags. They are read once, when the
agent starts, into an immutable `Rules`: nothing the model writes or reads during the session (a
config file, a tool result) changes them. `kimicode.permissions.engine.decide` applies them.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from kimicode.config.endpoint import ConfigError
from kimicode.config.endpoint import kimicode_home as default_kimicode_home
from kimicode.permissions.protected import AUTORUN_FILES, autorun_reason, protected_reason
from kimicode.permissions.runslater import config_reason
from kimicode.permissions.secretfiles import TOKEN_FILES, secret_name_reason
from kimicode.permissions.visibility import (
    CREDENTIAL_HOME_PATHS,
    HOME_CREDENTIAL_DIRS,
    Places,
    history_reason,
    outside_reason,
    visible_roots,
    within_text,
)

if TYPE_CHECKING:
    from kimicode.config.settings import Settings

__all__ = [
    "AUTORUN_FILES",
    "Policy",
    "Rule",
    "Rules",
    "autorun_reason",
    "config_reason",
    "glob_may_match_sensitive",
    "is_special_device",
    "load_rules",
    "parse_rule",
    "protected_reason",
    "secret_env_names",
    "sensitive_reason",
]

RuleAction = Literal["allow", "deny", "ask"]

_RULE = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_.-]*(?:__\*)?)\s*(?:\((.*)\))?\s*", re.DOTALL)
_RULE_HELP = (
    "rules look like bash(git diff*), bash(npm test), edit(src/**), read(~/.ssh/**) or a tool name "
    "(Claude Code's Bash(cmd:*), Read(path), Edit(path), Write(path), WebFetch are accepted too)"
)
_CLAUDE_TOOLS = {
    "Bash": "bash",
    "Read": "read",
    "Edit": "edit",
    "Write": "edit",
    "MultiEdit": "edit",
    "NotebookEdit": "edit",
    "Grep": "read",
    "Glob": "read",
    "LS": "read",
    "WebFetch": "web_fetch",
    "WebSearch": "web_search",
    "Task": "task",
    "TodoWrite": "todo_write",
}
"""Claude Code's tool names, as the kimicode tool (or tool kind) each one means."""
_PATTERNLESS = frozenset({"task", "todo_write", "web_search"})
"""Built-in tools whose calls have no path or command, so a pattern would never mean anything."""


@dataclass(frozen=True)
class Rule:
    """One rule: a tool (`bash`, `edit` = every file-changing tool, `read` = every reading tool, or a
    tool's name) and an optional pattern (a command pattern for bash, a path pattern otherwise)."""

    tool: str
    pattern: str | None
    raw: str
    source: str = ""
    """Where it came from: `--allow`, or the config file's path."""
    word_prefix: bool = False
    """Claude Code's `Bash(cmd:*)`: the command is `cmd` or starts with `cmd ` (a whole-word prefix)."""
    literal: bool = False
    """A session answer "this exact command": matches only the whole command line equal to `pattern`
    (no syntax spells it; `Approval(remember=Rule(..., literal=True))` or the terminal creates it)."""

    def __str__(self) -> str:
        return self.raw

    def applies_to(self, tool_name: str, kind: str) -> bool:
        """True when the rule is about this tool (whatever the arguments)."""
        if self.tool == tool_name:
            return True
        if self.tool.startswith("mcp__") and tool_name.startswith("mcp__"):  # mcp__server, mcp__server__*
            if self.tool.endswith("__*"):
                return tool_name.startswith(self.tool[:-1])
            return "__" not in self.tool[5:] and tool_name.startswith(self.tool + "__")
        return (self.tool == "edit" and kind == "edit") or (self.tool == "read" and kind == "read")

    def matches_command(self, text: str) -> bool:
        """For bash rules: the pattern matches the whole simple command (`*` is any text)."""
        if self.pattern is None:
            return True
        if self.literal:
            return False  # only the whole line, checked by the bash decision itself
        if self.word_prefix:
            return text == self.pattern or text.startswith(self.pattern + " ")
        return _command_regex(self.pattern).fullmatch(text) is not None

    def matches_url(self, url: object) -> bool:
        """For web_fetch rules: the URL's host is the rule's domain or below it (`domain:python.org`
        matches docs.python.org); a rule without a pattern matches every URL, a URL without a host none."""
        if self.pattern is None:
            return True
        if not isinstance(url, str) or not self.pattern.startswith("domain:"):
            return False
        from urllib.parse import urlsplit

        try:
            host = (urlsplit(url.strip()).hostname or "").rstrip(".").lower()
        except ValueError:
            return False
        domain = self.pattern[len("domain:") :]
        return bool(host) and (host == domain or host.endswith("." + domain))

    def matches_path(self, path: Path, workspace: Path) -> bool:
        """For path rules: the pattern matches the resolved `path` (relative patterns are workspace-relative)."""
        if self.pattern is None:
            return True
        return _path_regex(self.pattern, str(workspace)).fullmatch(str(path)) is not None


def parse_rule(text: str, source: str = "") -> Rule:
    """Parse `tool` or `tool(pattern)`; raise ConfigError naming `source` when it is malformed."""
    where = f"{source}: " if source else ""
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"{where}empty permission rule; {_RULE_HELP}")
    m = _RULE.fullmatch(text)
    if m is None:
        raise ConfigError(f"{where}bad permission rule {text!r}; {_RULE_HELP}")
    tool, pattern = m.group(1), m.group(2)
    claude = tool in _CLAUDE_TOOLS
    if claude:
        tool = _CLAUDE_TOOLS[tool]
    word_prefix = False
    if pattern is not None:
        pattern = " ".join(pattern.split()) if tool == "bash" else pattern.strip()
        if tool == "bash" and pattern.endswith(":*"):  # Claude Code's prefix form, also accepted lower case
            pattern, word_prefix = pattern[:-2].rstrip(), True
            if "*" in pattern:
                raise ConfigError(f"{where}bad permission rule {text!r}: `:*` must be the only wildcard")
        elif tool == "web_fetch":
            m_domain = re.fullmatch(r"domain:(?:\*\.)?([A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*)\.?", pattern)
            if m_domain is None:
                raise ConfigError(
                    f"{where}bad permission rule {text!r}: web_fetch takes domain:HOST (e.g. "
                    f"WebFetch(domain:docs.python.org)); {_RULE_HELP}"
                )
            pattern = "domain:" + m_domain.group(1).lower()
        elif tool in ("read", "edit") and claude and pattern.startswith("//"):
            pattern = pattern[1:]  # Claude Code's //absolute/path
        elif tool in _PATTERNLESS:
            raise ConfigError(f"{where}bad permission rule {text!r}: {tool} takes no pattern; {_RULE_HELP}")
        if not pattern:
            raise ConfigError(f"{where}bad permission rule {text!r}: empty pattern; {_RULE_HELP}")
    return Rule(tool, pattern, text.strip(), source, word_prefix)


_COMMAND_CACHE: dict[str, re.Pattern[str]] = {}
_PATH_CACHE: dict[tuple[str, str, str], re.Pattern[str]] = {}


def _command_regex(pattern: str) -> re.Pattern[str]:
    compiled = _COMMAND_CACHE.get(pattern)
    if compiled is None:
        compiled = re.compile(".*".join(re.escape(part) for part in pattern.split("*")), re.DOTALL)
        _COMMAND_CACHE[pattern] = compiled
    return compiled


def _path_regex(pattern: str, workspace: str) -> re.Pattern[str]:
    """`**` spans directories, `*` and `?` stay within one; a pattern without wildcards also matches
    everything below it (`dir` is `dir/**` too).

    Relative patterns are anchored at the resolved workspace and `~` patterns at the resolved home
    directory; the rest of the pattern is not resolved, so a symbolic link inside the workspace never
    stretches a rule to where it points. An absolute pattern's literal directories are resolved (as
    written by the user: `/tmp/x` is `/private/tmp/x` on macOS).
    """
    key = (pattern, workspace, os.path.expanduser("~"))
    compiled = _PATH_CACHE.get(key)
    if compiled is not None:
        return compiled
    if pattern == "~" or pattern.startswith("~/"):
        anchor, rest_text = os.path.realpath(os.path.expanduser("~")), pattern[2:]
    elif not os.path.isabs(pattern):
        anchor, rest_text = os.path.realpath(workspace), pattern
    else:
        parts = pattern.split("/")
        literal: list[str] = []
        for part in parts:
            if "*" in part or "?" in part:
                break
            literal.append(part)
        anchor = os.path.realpath("/".join(literal) or "/")
        rest_text = "/".join(parts[len(literal) :])
    rest = [p for p in os.path.normpath("/" + rest_text).split("/") if p] if rest_text else []
    out = re.escape(anchor.rstrip("/"))
    for part in rest:
        if part == "**":
            out += "(?:/.*)?"
        else:
            out += "/" + "".join("[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c) for c in part)
    if not any("*" in p or "?" in p for p in rest):  # a plain path: it and everything below it
        out += "(?:/.*)?"
    compiled = re.compile(out, re.DOTALL)
    _PATH_CACHE[key] = compiled
    return compiled


@dataclass(frozen=True)
class Rules:
    """The rules in effect for a session (immutable once the agent starts)."""

    allow: tuple[Rule, ...] = ()
    deny: tuple[Rule, ...] = ()
    ask: tuple[Rule, ...] = ()

    def for_tool(self, action: RuleAction, tool_name: str, kind: str) -> list[Rule]:
        """The rules of one action that are about this tool."""
        return [r for r in getattr(self, action) if r.applies_to(tool_name, kind)]

    def __bool__(self) -> bool:
        return bool(self.allow or self.deny or self.ask)


def load_rules(
    config_files: Iterable[Path],
    *,
    allow: Iterable[str] = (),
    deny: Iterable[str] = (),
    ask: Iterable[str] = (),
    untrusted: Collection[Path] = (),
    ignored: list[str] | None = None,
    parsed: Mapping[Path, Mapping[str, Any]] | None = None,
) -> Rules:
    """Rules from the `[permissions]` tables of `config_files` (those that exist; `parsed`: those read
    already, as `Settings.parsed`) plus the flags.

    Unlike other settings, the lists of the files are joined, not replaced: a project file cannot drop
    a user's `deny` rule. The `allow` rules of an `untrusted` file are skipped (its `deny` and `ask`
    rules only restrict, so they apply), with a message appended to `ignored`. Raises ConfigError
    (file and rule named) on a malformed rule or file.
    """
    from kimicode.config.settings import parse_file

    lists: dict[str, list[Rule]] = {"allow": [], "deny": [], "ask": []}
    for path in config_files:
        data = parsed.get(path) if parsed else None  # read already: not again
        if data is None and not path.is_file():
            continue
        table = (data if data is not None else parse_file(path)).get("permissions", {})
        for action in ("allow", "deny", "ask"):
            texts = table.get(action, [])
            if action == "allow" and texts and path in untrusted:
                if ignored is not None:
                    ignored.append(
                        f"{path}: permissions.allow ignored: this workspace is not trusted (add it to "
                        "[trust] workspaces in your own config.toml to let the project allow tool calls)"
                    )
                continue
            for text in texts:
                lists[action].append(parse_rule(text, f"{path}: permissions.{action}"))
    for action, flagged in (("allow", allow), ("deny", deny), ("ask", ask)):
        for text in flagged:
            lists[action].append(parse_rule(text, f"--{action}"))
    return Rules(tuple(lists["allow"]), tuple(lists["deny"]), tuple(lists["ask"]))


def secret_env_names(settings: Settings, key_source: str | None = None) -> list[str]:
    """Environment variables holding the agent's own secrets: every configured provider's `api_key_env`
    and the variable the key in use came from. Commands never see them."""
    names = [key_source] if key_source and key_source != "argument" else []
    for provider in settings.config.providers.values():
        if provider.api_key_env is not None:
            names.append(provider.api_key_env)
    return names


# -- paths that need care ---------------------------------------------------------------------------

_HOME_DIRS = HOME_CREDENTIAL_DIRS
_TOKEN_MARKER = re.compile(rb"(?i)(_authtoken|_auth\b|password|token|secret)\s*[=:]")


def _within(path: Path, root: Path) -> bool:
    """`path` is `root` or below it (both resolved; compared as text: `root in path.parents` built every
    parent, and this runs for each of some 80 credential places per path checked)."""
    return within_text(str(path), str(root))


def sensitive_reason(
    path: Path,
    *,
    user_home: Path,
    kimicode_home: Path,
    workspace: Path | None = None,
    links: bool = True,
    session_dir: Path | None = None,
    visible: Sequence[Path] | None = None,
    places: Places | None = None,
) -> str | None:
    """Why reading `path` (resolved by `kimicode.permissions.pathresolve`) needs approval, or None: it
    probably holds secrets, it is another project's session log, it is an alias that cannot be
    resolved (`/dev/fd/3/..`, `/proc/self/root/...`), a hard link to such a file (`links`), or (with
    `visible`, the roots of `kimicode.permissions.visibility`) it lies outside the workspace and off
    the visible list. `places` holds those directories already resolved (`Policy.places`)."""
    real = places or Places.resolve(user_home, kimicode_home, workspace, session_dir)
    if real.session_dir is not None and within_text(str(path), real.session_dir):
        return None  # this session's own spilled tool outputs
    why = _name_reason(path, real, workspace=workspace)
    if why is None and visible is not None and workspace is not None:
        why = outside_reason(path, workspace, visible, kimicode_home, real)
    if why or not links:
        return why
    from kimicode.permissions.pathresolve import hard_link_twin

    def roots() -> Iterable[Path]:  # only walked for a file with several hard links
        if real.workspace is not None:
            yield Path(real.workspace)
        yield from (Path(real.home) / rel for rel in _HOME_DIRS)

    return hard_link_twin(path, roots(), lambda other: _name_reason(other, real, workspace=workspace))


_PROC_PRIVATE = re.compile(r"/proc/(?:self|thread-self|[0-9]+)(?:/|$)")
_DEV_ALIAS = re.compile(r"/dev/(?:fd|std(?:in|out|err))(?:/|$)")


def _name_reason(path: Path, real: Places, *, workspace: Path | None) -> str | None:
    text = str(path)
    if _PROC_PRIVATE.match(text) or _DEV_ALIAS.match(text) or text.startswith("/dev/fd"):
        return "it is a process's private view (file descriptors, environment, memory or root) that cannot be checked"
    name = path.name
    lower = name.lower()
    history = history_reason(name)
    if history:
        return history
    named = secret_name_reason(path)
    if named:
        return named
    home = real.home
    if text == home or text.startswith(home.rstrip("/") + "/"):
        for rel, prefix, why in _home_places(home):
            if text == prefix or text.startswith(prefix + "/"):
                return f"~/{rel} {why}"
    if lower in TOKEN_FILES and _has_token(path):
        return f"{name} contains a token or password"
    kc_home = real.kimicode_home
    if text == os.path.join(kc_home, "config.toml") or within_text(text, os.path.join(kc_home, "credentials")):
        return "kimicode's own configuration may hold keys"
    if within_text(text, os.path.join(kc_home, "sessions")) and not _own_session(path, workspace):
        return "it is a session log of another project (KIMICODE_HOME/sessions)"
    return None


@lru_cache(maxsize=8)
def _home_places(home: str) -> tuple[tuple[str, str, str], ...]:
    """The credential places below `home` as (relative name, absolute prefix, why), built once per home."""
    mine = tuple((rel, os.path.join(home, rel), "holds credentials") for rel in _HOME_DIRS)
    others = tuple(
        (rel, os.path.join(home, rel), "holds another program's credentials or private data")
        for rel in CREDENTIAL_HOME_PATHS
    )
    return mine + others


def _own_session(path: Path, workspace: Path | None) -> bool:
    """True when `path` is a session log recorded for `workspace`, or a file in the directory of such a
    log (`sessions/ID/` holds the spilled outputs of `sessions/ID.jsonl`)."""
    if workspace is None:
        return False
    sessions = next((p for p in path.parents if p.name == "sessions"), None)
    if sessions is not None and path.parent != sessions:
        top = path.relative_to(sessions).parts[0]
        path = sessions / f"{top}.jsonl"
    if not path.is_file():
        return False
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            first = fh.readline(65536)
    except OSError:
        return False
    m = re.search(r'"workspace":\s*("(?:[^"\\]|\\.)*")', first)
    if m is None:
        return False
    import json

    try:
        recorded = json.loads(m.group(1))
    except ValueError:
        return False
    return isinstance(recorded, str) and recorded == os.path.realpath(workspace)


def _has_token(path: Path) -> bool:
    try:
        from kimicode.safeio import read_regular

        head = read_regular(path, 65536)  # a FIFO named .npmrc must not hang the permission check
    except OSError:
        return False
    return _TOKEN_MARKER.search(head) is not None


def is_special_device(path: str) -> bool:
    """`/dev/null`-like targets that a redirection may always write to, written exactly so
    (`/dev/fd/1/../x` is not one: see `kimicode.permissions.pathresolve`)."""
    from kimicode.permissions.pathresolve import is_harmless_device

    return is_harmless_device(path)


def glob_may_match_sensitive(glob: str) -> bool:
    """Whether a search's file filter (e.g. grep's `glob`) selects files that usually hold secrets."""
    probes = (".env", ".env.local", "id_rsa", "id_ed25519", "server.pem", "server.key", ".netrc", "credentials")
    name = glob.rsplit("/", 1)[-1].lstrip("!")
    if glob.startswith("!"):
        return False
    return any(fnmatch.fnmatchcase(p, name) for p in probes)


@dataclass(frozen=True)
class Policy:
    """Everything `decide` needs besides the mode: the rules and the places that need care."""

    rules: Rules = field(default_factory=Rules)
    kimicode_home: Path = field(default_factory=default_kimicode_home)
    user_home: Path = field(default_factory=Path.home)
    sandboxed: bool = False
    """True when bash commands run inside the OS sandbox (the workspace writable, nothing else)."""
    workspace: Path | None = None
    """The session's workspace: its own session logs are not sensitive, and hard links to its secret
    files are found there."""
    session_dir: Path | None = None
    """This session's directory of spilled tool outputs (readable: the model is told to read them)."""
    read_only_sandbox: bool = True
    """False when bash commands admitted by the read-only allowance could not run in the OS sandbox (no
    bwrap, `--sandbox off`): the allowance then shrinks to `kimicode.permissions.unsandboxed`."""
    outside_asks: bool = True
    """With a `workspace`: reading outside it asks unless the path is visible (`visible`)."""
    extra_dirs: tuple[Path, ...] = ()
    """Directories the user added (`--add-dir`): visible, like the literal roots of `read(...)` rules."""

    @cached_property
    def visible(self) -> list[Path]:
        """The places outside the workspace read without asking and shown by the sandbox
        (`kimicode.permissions.visibility`, plus the literal directories of `read(...)` allow rules)."""
        return visible_roots(
            self.user_home, [Path("/proc"), Path("/dev"), *self.read_rule_roots(), *self.extra_dirs], self.kimicode_home
        )

    @cached_property
    def places(self) -> Places:
        """The policy's fixed directories resolved once (each check compared with them resolved anew)."""
        return Places.resolve(self.user_home, self.kimicode_home, self.workspace, self.session_dir)

    def read_rule_roots(self) -> list[Path]:
        """The literal directories of the absolute and `~` patterns of `read(...)` allow rules."""
        roots: list[Path] = []
        for rule in self.rules.allow:
            if rule.tool != "read" or rule.pattern is None:
                continue
            text = os.path.expanduser(rule.pattern) if rule.pattern.startswith("~") else rule.pattern
            if not os.path.isabs(text):
                continue
            literal = []
            for part in text.split("/"):
                if any(c in part for c in "*?["):
                    break
                literal.append(part)
            joined = "/".join(literal) or "/"
            if joined != "/" and os.path.realpath(joined) != os.path.realpath(self.user_home):
                roots.append(Path(os.path.realpath(joined)))
        return roots

    def read_only_view(self) -> Policy:
        """This policy without allow rules and without the sandbox's leniency (deny and ask rules kept):
        what the read-only allowance alone admits. Shares the visible places already found."""
        import dataclasses

        bare = dataclasses.replace(self, rules=Rules(deny=self.rules.deny, ask=self.rules.ask), sandboxed=False)
        if "visible" in self.__dict__:
            bare.__dict__["visible"] = self.__dict__["visible"]  # the cached_property's own slot
        if "places" in self.__dict__:
            bare.__dict__["places"] = self.__dict__["places"]
        return bare

    def sensitive(self, path: Path) -> str | None:
        """Why reading (or writing) `path` needs approval: it probably holds secrets, or it lies outside
        the workspace and the visible places."""
        return sensitive_reason(
            path,
            user_home=self.user_home,
            kimicode_home=self.kimicode_home,
            workspace=self.workspace,
            session_dir=self.session_dir,
            visible=self.visible if self.outside_asks and self.workspace is not None else None,
            places=self.places,
        )

    def with_rule(self, rule: Rule | str, action: RuleAction = "allow") -> Policy:
        """This policy plus one session rule (e.g. a "don't ask again" answer), parsed by `parse_rule`."""
        import dataclasses

        parsed = rule if isinstance(rule, Rule) else parse_rule(rule, "session")

        def key(r: Rule) -> tuple[str, str | None, bool, bool]:
            return (r.tool, r.pattern, r.word_prefix, r.literal)

        if any(key(r) == key(parsed) for r in getattr(self.rules, action)):
            return self
        rules = dataclasses.replace(self.rules, **{action: (*getattr(self.rules, action), parsed)})
        return dataclasses.replace(self, rules=rules)

    def without_session_rules(self) -> Policy:
        """This policy without the rules `with_rule` added from answers (source "session")."""
        import dataclasses

        keep = {a: tuple(r for r in getattr(self.rules, a) if r.source != "session") for a in ("allow", "deny", "ask")}
        return dataclasses.replace(self, rules=Rules(**keep))

    def config(self, path: Path) -> str | None:
        """Why writing `path` needs approval whatever the rules (kimicode's own configuration)."""
        return config_reason(path, kimicode_home=self.kimicode_home, workspace=self.workspace, user_home=self.user_home)

    def write_care(self, path: Path) -> str | None:
        """Why writing `path` needs approval unless a rule names it (secrets, .git)."""
        return protected_reason(path) or self.sensitive(path)
