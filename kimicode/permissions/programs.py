"""What programs do with their arguments: the table the bash permission checks consult.

Three questions, each answered from the command's words (after quote removal):

- `unwrap(argv)`: the command as written, by its base name (`/bin/rm` is `rm`), and behind each
  wrapper that runs the rest of its arguments (`sudo`, `env`, `timeout 5`, `nice -n 1`, `xargs -0`,
  `busybox`, ...). Deny and ask rules are matched against every form.
- `embedded(argv)`: the shell scripts a command runs (`sh -c S`, `bash -lc S`, `eval`, `trap S SIG`,
  `find -exec ... ;`, `git difftool -x S`, `rsync -e S`), parsed again by the caller so deny rules
  reach them; or a reason the command runs code nobody can see (`sh` reading stdin or a script file,
  `source`, `.`, `git -c alias.x=!...`), in which case no rule admits the line and deny rules ask.
- `risk(argv)`: why a command executes or writes through its own options (`git diff --output=F`,
  `find -delete`, `sed -i`, `awk 'system(...)'`, `sort -o F`, `python -c`, ...), or None. A risky
  command is never admitted by an allow rule nor by the read-only allowance: it asks.
- `read_only(argv)`: True for the commands that run without asking in `default` and `plan` modes
  (when static, not redirected, and not naming a sensitive file).

The table is conservative: options it does not know are fine only for the programs listed as read-only
with their known-safe options; everything else needs a rule (and then `risk` still applies).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

__all__ = ["SHELLS", "WRAPPERS", "embedded", "read_only", "risk", "unwrap"]

SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash", "mksh", "yash", "fish", "csh", "tcsh", "rbash"})
"""Shell interpreters: a line that feeds one a script the parser cannot see is never auto-allowed."""

WRAPPERS: dict[str, frozenset[str]] = {
    # program -> its options that take a separate value
    "command": frozenset(),
    "builtin": frozenset(),
    "exec": frozenset({"-a"}),
    "nohup": frozenset(),
    "env": frozenset({"-u", "-C", "-S", "--unset", "--chdir", "--split-string"}),
    "sudo": frozenset({"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "--user", "--group"}),
    "doas": frozenset({"-u", "-C"}),
    "nice": frozenset({"-n", "--adjustment"}),
    "ionice": frozenset({"-c", "-n", "-p"}),
    "time": frozenset({"-f", "-o", "--format", "--output"}),
    "timeout": frozenset({"-k", "-s", "--kill-after", "--signal"}),
    "stdbuf": frozenset({"-i", "-o", "-e"}),
    "xargs": frozenset({"-a", "-d", "-E", "-I", "-L", "-n", "-P", "-s", "--arg-file", "--delimiter",
                        "--max-args", "--max-procs", "--max-lines", "--replace"}),
    "setsid": frozenset(),
    "caffeinate": frozenset(),
    "busybox": frozenset(),
    "chroot": frozenset({"--userspec", "--groups"}),
    "unshare": frozenset(),
    "flock": frozenset({"-w", "-E", "--timeout", "--conflict-exit-code"}),
    "watch": frozenset({"-n", "-d", "--interval"}),
    "strace": frozenset({"-o", "-e", "-p", "-s", "-u"}),
    "ltrace": frozenset({"-o", "-e", "-p", "-s", "-u"}),
    "taskset": frozenset(),
    "chrt": frozenset(),
    "runuser": frozenset({"-u", "-g"}),
    "su": frozenset({"-c", "-s", "-g"}),
    "script": frozenset({"-c"}),
    "parallel": frozenset({"-j", "--jobs", "-S", "--sshlogin", "--delay", "--timeout", "-n", "-N", "-L"}),
    "unbuffer": frozenset(),
    "proxychains": frozenset({"-f"}),
    "proxychains4": frozenset({"-f"}),
    "torsocks": frozenset(),
    "firejail": frozenset(),
    "systemd-run": frozenset({"-p", "--property", "-u", "--unit", "-E", "--setenv"}),
    "xvfb-run": frozenset({"-s", "-n", "-a", "-f", "-e"}),
    "valgrind": frozenset(),
    "pkexec": frozenset({"--user"}),
    "numactl": frozenset(),
    "prlimit": frozenset(),
    "nsenter": frozenset({"-t", "--target"}),
    "catchsegv": frozenset(),
    "dbus-launch": frozenset(),
    "sg": frozenset(),
}
"""Programs that run the command in their arguments."""

_MAX_FORMS = 12
_OPERAND_FIRST = frozenset({"chroot", "flock", "sg"})


def unwrap(argv: Sequence[str]) -> list[list[str]]:
    """The command's words, then with the program's base name (`/bin/rm` is `rm`), then behind each
    wrapper (`sudo -u x nice rm -rf y` is also `rm -rf y`)."""
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
        value_options = WRAPPERS.get(base)
        if value_options is None:
            break
        words = words[1:]
        while words and (words[0].startswith("-") or re.match(r"[A-Za-z_][A-Za-z0-9_]*=", words[0])
                         or (base in ("timeout", "taskset", "chrt") and re.fullmatch(r"[0-9.,x]+[smhd]?", words[0]))):
            option = words.pop(0)
            if option == "--":
                break
            if option in value_options and words:
                words.pop(0)
        if base in _OPERAND_FIRST and words:
            words = words[1:]  # chroot NEWROOT CMD, flock FILE CMD, sg GROUP CMD
    return forms


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
        if name in SHELLS:
            script, opaque = _shell_script(rest)
            if opaque:
                return scripts, argvs, f"`{name}` runs a script that cannot be checked (stdin or a file)"
            if script is not None:
                scripts.append(script)
        elif name in ("su", "runuser", "script", "flock", "env") and any(
            w in ("-c", "--command", "-S", "--split-string") or w.startswith(("--command=", "--split-string="))
            or (name == "env" and w.startswith("-S"))
            for w in rest
        ):
            for i, word in enumerate(rest):
                if word in ("-c", "--command", "-S", "--split-string") and i + 1 < len(rest):
                    if name != "env" or word in ("-S", "--split-string"):
                        scripts.append(rest[i + 1])
                elif word.startswith(("--command=", "--split-string=")):
                    scripts.append(word.split("=", 1)[1])
                elif name == "env" and word.startswith("-S") and len(word) > 2:
                    scripts.append(word[2:])
        elif name in ("su", "sudo", "doas", "runuser", "pkexec") and (
            any(w in ("-s", "-i", "--shell", "--login", "-", "-l") for w in rest) or name == "su"
        ) and len(unwrap(form)) == 1:
            return scripts, argvs, f"`{name}` starts a shell that reads commands nobody can see"
        elif name in ("at", "batch"):
            return scripts, argvs, f"`{name}` runs commands read from its input later"
        elif name == "eval" and rest:
            scripts.append(" ".join(rest))
        elif name == "trap" and rest and not rest[0].startswith("-"):
            scripts.append(rest[0])
        elif name in ("source", "."):
            return scripts, argvs, f"`{name}` runs a script file that cannot be checked"
        elif name == "find":
            argvs.extend(_find_commands(rest))
        elif name == "git":
            for i, word in enumerate(rest):
                if word in ("-x", "--extcmd") and i + 1 < len(rest):
                    scripts.append(rest[i + 1])
                elif word.startswith("--extcmd="):
                    scripts.append(word.split("=", 1)[1])
                elif word in ("--exec", "-x") or word.startswith("--exec="):
                    scripts.append(word.split("=", 1)[1] if "=" in word else "")
        elif name == "rsync":
            for i, word in enumerate(rest):
                if word in ("-e", "--rsh") and i + 1 < len(rest):
                    scripts.append(rest[i + 1])
                elif word.startswith("--rsh="):
                    scripts.append(word.split("=", 1)[1])
    return scripts, argvs, None


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


# -- risk ---------------------------------------------------------------------------------------

_GIT_GLOBAL_RISKY = ("-c", "--exec-path", "-C", "--git-dir", "--work-tree", "--config-env", "--namespace",
                     "--super-prefix", "-p", "--paginate", "--list-cmds")
_GIT_RISKY_SUB = {
    "difftool": "runs an external diff tool",
    "mergetool": "runs an external merge tool",
    "filter-branch": "runs shell commands",
    "submodule": "may run commands (foreach) and fetch",
    "bisect": "may run commands (bisect run)",
    "send-email": "sends mail and may run commands",
    "daemon": "starts a server",
    "instaweb": "starts a web server",
    "web--browse": "starts a browser",
    "credential": "reads stored credentials",
    "credential-store": "reads stored credentials",
    "credential-cache": "reads stored credentials",
    "hook": "runs hooks",
    "config": "",
    "var": "",
}
_GIT_RISKY_OPTS = re.compile(
    r"--output(=|$)|--output-directory(=|$)|--upload-pack(=|$)|--receive-pack(=|$)|--exec(=|$)|--extcmd(=|$)"
    r"|--open-files-in-pager(=|$)|-O|--ext-diff$|--remote(=|$)|--template(=|$)|--run(=|$)|--config(=|$)"
    r"|-u$|--include-untracked-hook"
)
_GIT_READ_ONLY = frozenset({"status", "diff", "log", "show", "blame", "shortlog", "describe", "rev-parse",
                            "ls-files", "ls-tree", "cat-file", "grep", "reflog", "whatchanged", "annotate",
                            "merge-base", "name-rev", "count-objects", "version", "diff-tree",
                            "diff-files", "diff-index", "rev-list", "show-ref", "for-each-ref", "check-ignore"})
_GIT_BRANCH_WRITE = re.compile(r"-[dDmMcCfu]$|--delete|--move|--copy|--force|--set-upstream|--unset-upstream"
                               r"|--edit-description|--track|--no-track|--create-reflog")

_INTERPRETER_CODE = {
    "python": ("-c",), "python2": ("-c",), "python3": ("-c",), "pypy": ("-c",), "pypy3": ("-c",),
    "perl": ("-e", "-E"), "ruby": ("-e",), "node": ("-e", "-p", "--eval", "--print"), "nodejs": ("-e", "-p"),
    "deno": ("eval",), "bun": ("-e", "--eval"), "php": ("-r",), "lua": ("-e",), "luajit": ("-e",),
    "Rscript": ("-e",), "R": ("-e",), "tclsh": (), "osascript": ("-e",), "julia": ("-e", "--eval"),
    "pwsh": ("-c", "-Command"), "powershell": ("-c", "-Command"), "expect": ("-c",), "gdb": ("-ex", "-batch"),
}
_EDITORS = frozenset({"vi", "vim", "nvim", "ex", "view", "gvim", "emacs", "nano", "ed", "joe", "micro", "kak"})
_EVALUATING_BUILTINS = frozenset({"printf", "declare", "typeset", "local", "export", "readonly", "read", "shift",
                                  "return", "exit", "break", "continue", "caller", "kill", "disown", "jobs",
                                  "mapfile", "readarray", "getopts", "unset", "wait", "test", "[", "[["})
_NEVER_BUILTINS = {"let": "evaluates arithmetic (which can run commands)",
                   "alias": "defines an alias", "enable": "loads builtins", "shopt": "changes the shell's parsing",
                   "set": "changes the shell's behaviour", "hash": "changes where programs are found",
                   "ulimit": "", "umask": "", "fc": "re-runs history", "history": "", "bind": "", "complete": "",
                   "exec": "replaces the shell"}
_AWKS = frozenset({"awk", "gawk", "mawk", "nawk", "busybox-awk"})
_SED_S = re.compile(r"s(.)(?:\\.|(?!\1).)*\1(?:\\.|(?!\1).)*\1([gpiImMe0-9w]*)")
_SED_Y = re.compile(r"y(.)(?:\\.|(?!\1).)*\1(?:\\.|(?!\1).)*\1")


def _git_risk(rest: Sequence[str]) -> str | None:
    i = 0
    while i < len(rest) and rest[i].startswith("-"):
        word = rest[i]
        if word.split("=", 1)[0] in _GIT_GLOBAL_RISKY or word.startswith("-c"):
            return f"git {word} changes git's configuration, directory or pager"
        i += 1
    if i >= len(rest):
        return None
    sub, args = rest[i], rest[i + 1 :]
    if sub in _GIT_RISKY_SUB:
        if sub in ("config", "var"):
            reading = {"--get", "--get-all", "--get-regexp", "--list", "-l", "--get-urlmatch", "--show-origin",
                       "--show-scope", "--name-only"}
            if sub == "var" or (args and args[0] in reading and all(a in reading or not a.startswith("-")
                                                                    for a in args)):
                return None
            return "git config changes git's configuration (pagers, aliases and hooks run code)"
        return f"git {sub} {_GIT_RISKY_SUB[sub]}"
    for word in args:
        if _GIT_RISKY_OPTS.match(word) or (sub == "format-patch" and word.startswith("-o")):
            return f"git {sub} {word} writes files or runs a program"
    if sub == "archive" and any(w.startswith(("-o", "--output", "--remote", "--exec")) for w in args):
        return "git archive writes a file or runs a program"
    if sub == "rebase" and any(w in ("-x", "--exec") or w.startswith("--exec") for w in args):
        return "git rebase --exec runs commands"
    return None


def _sed_risk(rest: Sequence[str]) -> str | None:
    scripts: list[str] = []
    i = 0
    positional = True
    while i < len(rest):
        word = rest[i]
        if word.startswith(("-i", "--in-place")):
            return "sed -i changes files"
        if word in ("-f", "--file") or word.startswith("--file="):
            return "sed -f runs a script from a file"
        if word in ("-e", "--expression") and i + 1 < len(rest):
            scripts.append(rest[i + 1])
            positional = False
            i += 2
            continue
        if word.startswith("--expression="):
            scripts.append(word.split("=", 1)[1])
            positional = False
        elif word.startswith("-") and len(word) > 1 and not word.startswith("--"):
            if "i" in word[1:]:
                return "sed -i changes files"
            if "f" in word[1:]:
                return "sed -f runs a script from a file"
            if word.endswith("e") and i + 1 < len(rest):
                scripts.append(rest[i + 1])
                positional = False
                i += 2
                continue
        elif positional and not word.startswith("-"):
            scripts.append(word)
            positional = False
        i += 1
    for script in scripts:
        for m in _SED_S.finditer(script):
            if "e" in m.group(2) or "w" in m.group(2):
                return "a sed s///e or s///w command runs a command or writes a file"
        rest_text = _SED_Y.sub("", _SED_S.sub("", script))
        rest_text = re.sub(r"/(?:\\.|[^/\\])*/", "", rest_text)  # addresses
        if re.search(r"[wWeE]|\br\b|[rR]\s", rest_text):
            return "a sed w, W, e or r command writes, runs or reads a file"
    return None


def _awk_risk(rest: Sequence[str]) -> str | None:
    for i, word in enumerate(rest):
        if word in ("-f", "--file", "-i", "--include", "-l", "--load", "-E", "--exec", "-o", "--pretty-print",
                    "-p", "--profile", "-d", "--dump-variables") or word.startswith(("--file=", "--load=",
                                                                                      "--include=", "--exec=")):
            return f"awk {word} loads or writes a file"
        if word in ("-v", "-F") and i + 1 < len(rest):
            continue
        if not word.startswith("-") and any(t in word for t in ("system", "|", ">", "@load", "ENVIRON", "close(")):
            return "the awk program runs commands or writes files (system(), |, >)"
    return None


def risk(argv: Sequence[str]) -> str | None:
    """Why this command executes or writes through its own arguments (see the module doc), or None."""
    scripts, argvs, opaque = embedded(argv)
    if opaque is not None:
        return opaque
    if scripts or argvs:
        return f"`{os.path.basename(argv[0])}` runs a script or command given in its arguments"
    forms = unwrap(argv)
    for index, form in enumerate(forms):
        name, rest = os.path.basename(form[0]), form[1:]
        later = forms[index + 1 :]
        if name in WRAPPERS and later and os.path.basename(later[0][0]) != name:
            return f"`{name}` runs another command"
        if name == "env" and any(w.startswith(("-S", "--split-string")) for w in rest):
            return "env -S re-splits its text into a command"
        reason = _risk_one(name, rest)
        if reason:
            return reason
    return None


def _risk_one(name: str, rest: Sequence[str]) -> str | None:
    if name in SHELLS:
        return f"`{name}` runs a shell script"
    if name in ("eval", "source", ".", "trap"):
        return f"`{name}` runs text as commands"
    if name in _NEVER_BUILTINS:
        return f"`{name}` {_NEVER_BUILTINS[name] or 'changes the shell'}"
    if name in _EVALUATING_BUILTINS:
        if name == "printf" and any(w == "-v" or w.startswith("-v") for w in rest):
            return "printf -v assigns a variable (its subscript can run commands)"
        if name != "printf" and any(c in w for w in rest for c in "[$`"):
            return f"`{name}` evaluates a variable name or subscript (which can run commands)"
        if name in ("test", "[", "[[") and any(w in ("-v", "-R") for w in rest):
            return f"`{name} -v` evaluates a subscript"
    if name == "git":
        return _git_risk(rest)
    if name == "find":
        for word in rest:
            if word in ("-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf", "-fls"):
                return f"find {word} runs commands, deletes or writes files"
        return None
    if name == "sed":
        return _sed_risk(rest)
    if name in _AWKS:
        return _awk_risk(rest)
    if name == "sort" and any(w.startswith(("-o", "--output", "--compress-program", "-T", "--temporary-directory"))
                              for w in rest):
        return "sort -o writes a file (--compress-program runs one)"
    if name == "tar":
        listing = bool(rest) and (rest[0].lstrip("-").startswith("t") or "--list" in rest
                                  or (rest[0].startswith("-") and not rest[0].startswith("--") and "t" in rest[0]))
        bad = any(w.startswith(("--to-command", "--use-compress-program", "-I", "--checkpoint-action", "-F",
                                "--info-script", "--new-volume-script", "--rsh-command", "--rmt-command"))
                  for w in rest)
        if bad or not listing:
            return "tar writes files or runs programs (only listing with -t is read-only)"
    if name == "rsync":
        return "rsync writes files (and -e runs a program)"
    if name in ("less", "more", "most", "pg"):
        if any(w.startswith(("-o", "-O", "--log-file", "--LOG-FILE", "+", "-k", "--lesskey")) for w in rest):
            return f"{name} writes a log file or runs commands"
        return None
    if name == "man" and any(w.startswith(("-P", "--pager", "-H", "--html", "-l", "--local-file", "-t", "-T",
                                           "-X", "-Z")) for w in rest):
        return "man runs a pager or formatter of the command line's choosing"
    if name in _EDITORS:
        return f"{name} edits files and runs commands (:!, -c)"
    if name in _INTERPRETER_CODE:
        flags = _INTERPRETER_CODE[name]
        letters = {f[1] for f in flags if len(f) == 2 and f[0] == "-"}
        for word in rest:
            if not flags or word in flags or (
                word.startswith("-") and not word.startswith("--") and letters & set(word[1:])
            ):
                return f"{name} runs code given on its command line"
    if name in ("tee", "dd", "truncate", "shred", "install", "ln", "cp", "mv", "rm", "rmdir", "mkdir", "touch",
                "chmod", "chown", "chgrp", "patch"):
        return None  # they change files by design: a rule that names them means it
    if name == "curl" and any(w.startswith(("-o", "-O", "--output", "--remote-name", "-K", "--config", "-D",
                                            "--dump-header", "-c", "--cookie-jar", "--trace", "--libcurl",
                                            "--stderr", "-T", "--upload-file")) for w in rest):
        return "curl writes or uploads a file through its options"
    if name == "wget":
        return "wget writes files"
    if name == "ssh" and any("ProxyCommand" in w or "LocalCommand" in w or "PermitLocalCommand" in w
                             or w.startswith("-F") for w in rest):
        return "ssh -o ProxyCommand/LocalCommand runs a local command"
    if name in ("rg", "ripgrep") and any(w.startswith(("--pre", "--hostname-bin")) for w in rest):
        return "rg --pre runs a program on every file"
    if name == "file" and any(w in ("-C", "--compile") for w in rest):
        return "file -C writes a compiled magic file"
    if name == "tree" and any(w.startswith(("-o", "--fromfile")) for w in rest):
        return "tree -o writes a file"
    if name == "uniq" and len([w for w in rest if not w.startswith("-")]) > 1:
        return "uniq IN OUT writes its second argument"
    if name in ("jq", "gojq", "yq") and any(re.search(r"\benv\b|\$ENV|input_filename|\$__prog", w) for w in rest):
        return f"{name} reads the environment (which may hold secrets)"
    if name == "date" and any(w.startswith(("-s", "--set")) for w in rest):
        return "date -s sets the clock"
    if name == "hostname" and [w for w in rest if not w.startswith("-")]:
        return "hostname NAME sets the host name"
    if name in ("make", "gmake") and any(w.startswith(("--eval", "-E", "-f", "--file", "--makefile", "-C",
                                                       "--directory", "-I", "--include-dir")) or
                                         (not w.startswith("-") and "=" in w) for w in rest):
        return "make VAR=value, -f, -C or --eval changes what the recipes run"
    if name == "cargo" and any(w.startswith(("--config", "-Z", "--manifest-path")) for w in rest):
        return "cargo --config can set a runner (a program cargo runs)"
    if name == "go" and any(w.startswith(("-exec", "--exec", "-toolexec", "--toolexec", "-modfile", "-overlay"))
                            for w in rest):
        return "go -exec/-toolexec runs a program of the command line's choosing"
    if name in ("npm", "pnpm", "yarn", "npx", "bun") and any(
        w.startswith(("--script-shell", "--node-options", "--userconfig", "--globalconfig", "--prefix", "-C",
                      "--dir", "--call", "-c", "--shell")) for w in rest
    ):
        return f"{name} runs a shell, node options or a config of the command line's choosing"
    return None


# -- read-only allowance ------------------------------------------------------------------------

_READ_ONLY = frozenset({
    "ls", "cat", "head", "tail", "wc", "grep", "egrep", "fgrep", "rg", "find", "pwd", "which", "stat", "du",
    "df", "file", "echo", "true", "false", "printf", "basename", "dirname", "realpath", "readlink", "uname",
    "whoami", "id", "date", "cut", "tr", "nl", "sort", "uniq", "diff", "cmp", "comm", "md5sum", "sha1sum",
    "sha256sum", "sha512sum", "cksum", "tree", "type", "jq", "test", "[", "seq", "column", "fold", "expand",
    "unexpand", "rev", "tac", "od", "hexdump", "xxd", "strings", "hostname", "nproc", "arch",
    "groups", "locale", "tty", "sleep", "yes", "less", "more",
})
_NO_ARGS_ONLY = frozenset({"xxd"})  # xxd IN OUT writes OUT: only with one file


def read_only(argv: Sequence[str]) -> bool:
    """True when the command only reads (see the module doc); the caller checks paths and redirects."""
    if not argv:
        return True
    name = argv[0]
    if "/" in name:
        return False  # ./ls or /tmp/ls: not the system's ls
    rest = argv[1:]
    if risk(argv) is not None:
        return False
    if name == "git":
        i = 0
        while i < len(rest) and rest[i].startswith("-"):
            if rest[i] not in ("--no-pager", "--no-optional-locks", "--literal-pathspecs", "--no-replace-objects"):
                return False
            i += 1
        if i >= len(rest):
            return False
        sub, args = rest[i], rest[i + 1 :]
        if sub == "branch":
            return not any(_GIT_BRANCH_WRITE.match(w) for w in args) and all(
                w.startswith("-") for w in args
            )  # `git branch NAME` creates one
        if sub in ("tag", "remote", "stash"):
            listing = {"tag": ("-l", "--list"), "remote": ("-v", "get-url"), "stash": ("list", "show")}[sub]
            return (not args and sub != "stash") or (bool(args) and args[0] in listing)  # bare `git stash` stashes
        return sub in _GIT_READ_ONLY
    if name in _NO_ARGS_ONLY:
        return len([w for w in rest if not w.startswith("-")]) <= 1 and "-r" not in rest
    if name == "sort":
        return True  # -o is caught by risk
    if name == "tail" and any(w.startswith("--follow") or (w.startswith("-") and not w.startswith("--")
                                                            and ("f" in w or "F" in w)) for w in rest):
        return False  # never ends
    if name in ("sleep", "yes"):
        return False
    return name in _READ_ONLY
