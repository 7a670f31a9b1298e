"""Git's specification: its global options, the read-only subcommands with their options, and the
options of every other subcommand that run programs or write where the command line says.

Git reads subcommand options with parse-options (unique prefixes of long options, `--no-NAME`,
bundled short options, attached arguments); its global options (before the subcommand) end at the
first operand. A read-only subcommand is read-only only with the options its table lists (`strict`
for the small ones); the diff family accepts the rest of git's many diff and log options as flags,
because every option there that runs or writes something is listed. Read-only git also runs with
external diff, textconv, pager, fsmonitor and hooks switched off (`kimicode.permissions.gitsafe`).
"""

from __future__ import annotations

from kimicode.permissions.optparse import Spec

_GLOBAL = """
    -c=                   !exec sets configuration for this command (pagers, aliases and hooks run programs)
    --config-env=         !exec sets configuration for this command (pagers, aliases and hooks run programs)
    -C=                   !exec runs git in another directory, with that repository's configuration
    --git-dir=            !exec uses another repository and its configuration
    --work-tree=          !exec uses another work tree
    --exec-path[=]        !exec runs git's programs from another directory
    --namespace=          !exec uses another namespace
    --super-prefix=       !exec changes paths (an internal option)
    --list-cmds=          !exec lists commands, aliases among them, from the configuration
    -p --paginate         !exec runs the configured pager
    -P --no-pager
    --no-replace-objects --literal-pathspecs --glob-pathspecs --noglob-pathspecs --icase-pathspecs
    --no-optional-locks
    --bare                !unsafe treats the directory as a bare repository
    --no-lazy-fetch
    --attr-source=
    -v --version
    -h --help
    --html-path --man-path --info-path
"""

_DIFF = """
    --output=              !write writes the diff to the file named
    --ext-diff             !exec runs the external diff program of the configuration
    --textconv             !exec runs the textconv programs of the configuration
    --submodule[=]         !unsafe runs diff inside submodules, with their configuration
    --no-index             !search compares any files, also outside the repository
    -O=                    # an order file (a path, checked)
    -U= --unified[=]
    -M --find-renames[=]
    -C --find-copies[=]
    -B --break-rewrites[=]
    -l=
    -S= -G=
    --stat[=] --numstat --shortstat --dirstat[=] --summary --patch-with-stat --name-only --name-status
    --color[=] --word-diff[=] --word-diff-regex= --color-words[=] --color-moved[=] --color-moved-ws=
    --diff-filter= --relative[=] --src-prefix= --dst-prefix= --line-prefix= --abbrev[=] --inter-hunk-context=
    --anchored= --diff-algorithm= --ws-error-highlight= --find-object= --skip-to= --rotate-to=
    --stat-width= --stat-name-width= --stat-count= --stat-graph-width= --output-indicator-new=
    --output-indicator-old= --output-indicator-context= -I= --ignore-matching-lines=
    -p -u --patch -s --no-patch -z --raw --cached --staged --merge-base
    --exit-code --quiet --check --full-index --binary -R -a --text -b -w
"""

_LOG = (
    _DIFF
    + """
    -n= --max-count=
    --skip= --since= --after= --until= --before= --author= --committer= --grep= --format= --pretty[=]
    --decorate[=] --decorate-refs= --decorate-refs-exclude= --date= --encoding= --notes[=] --show-notes[=]
    --min-parents= --max-parents= --branches[=] --tags[=] --remotes[=] --glob= --exclude= -L=
    --grep-reflog= --author-date-order --oneline --graph --follow --all --reverse --first-parent
    --stdin                !unsafe reads revisions from standard input
"""
)

_BLAME = """
    --textconv             !exec runs the textconv programs of the configuration
    --contents=
    -S=                    # a revisions file (a path, checked)
    -L= --since= --date= --abbrev[=] -M[=] -C[=] --ignore-rev= --ignore-revs-file= --color-lines --color-by-age
    -l -t -s -e -w -p -c -f -n -b --root --porcelain --line-porcelain --incremental --progress --show-stats
    --show-name --show-number --show-email --score-debug --minimal --reverse=
"""

_GREP = """
    -O --open-files-in-pager[=]   !exec opens the matching files in a program of the command line's choosing
    --no-index                    !search searches files git ignores, also outside the repository
    --no-exclude-standard         !search searches the files .gitignore excludes
    --untracked                   !search searches untracked files (a .env git does not track)
    --textconv                    !exec runs the textconv programs of the configuration
    --recurse-submodules          !unsafe searches submodules, with their configuration
    -f=                           # patterns from a file (a path, checked)
    -e= --and --or --not --all-match
    -A= --after-context= -B= --before-context= -C= --context= -m= --max-count= --max-depth= --threads=
    --color[=]
    --cached --exclude-standard -a --text -i --ignore-case -I -w --word-regexp -v --invert-match -h -H
    --full-name -E --extended-regexp -G --basic-regexp -P --perl-regexp -F --fixed-strings -n --line-number
    --column -l --files-with-matches --name-only -L --files-without-match -z --null -o --only-matching
    -c --count --break --heading -p --show-function -W --function-context -q --quiet
"""

_OTHER = """
    --upload-pack=        !exec runs a program of the command line's choosing as git-upload-pack
    --receive-pack=       !exec runs a program of the command line's choosing as git-receive-pack
    --exec=               !exec runs a program of the command line's choosing
    --template=           !exec installs hooks (or a message template) from a place of the command line's choosing
    --config=             !exec sets configuration (which can name programs to run)
    --separate-git-dir=   !write puts the repository elsewhere
    --output=             !write writes where the command line says
    --output-directory=   !write writes where the command line says
    --ext-diff            !exec runs the external diff program of the configuration
    --textconv            !exec runs the textconv programs of the configuration
    --extcmd=             !exec runs a command given in its arguments
    --exec-path=          !exec runs git's programs from another directory
    --remote=             !exec runs git-upload-archive on a remote
    --open-files-in-pager[=]  !exec runs a program of the command line's choosing
"""
_UPLOAD = "-u=  !exec runs a program of the command line's choosing as git-upload-pack\n"
_CONFIG = "-c=  !exec sets configuration (which can name programs to run)\n"

_BRANCH_WRITE = (
    "-d -D -m -M -c -C -f -u --delete --move --copy --force --set-upstream-to= --unset-upstream "
    "--edit-description --track[=] --no-track --create-reflog --recurse-submodules  "
    "!unsafe changes branches\n"
)


def _read(name: str, options: str, strict: bool = False, **kw: object) -> Spec:
    return Spec(name, options, read_only=True, strict=strict, style="git", **kw)  # type: ignore[arg-type]


_SUBCOMMANDS = {
    **{name: _read(name, _DIFF) for name in ("diff", "diff-tree", "diff-files", "diff-index")},
    **{name: _read(name, _LOG) for name in ("log", "show", "whatchanged", "shortlog", "rev-list")},
    "blame": _read("blame", _BLAME),
    "annotate": _read("annotate", _BLAME),
    "grep": _read("grep", _GREP),
    "status": _read(
        "status",
        """
        -s --short -b --branch --show-stash --porcelain[=] --long -v --verbose -z --column[=] --no-column
        -u[=] --untracked-files[=] --ignored[=] --ignore-submodules[=] --ahead-behind --renames --find-renames[=]
        """,
        strict=True,
    ),
    "cat-file": _read(
        "cat-file",
        """
        --textconv    !exec runs the textconv programs of the configuration
        --filters     !exec runs the clean and smudge filters of the configuration
        --path=
        -t -s -e -p --batch[=] --batch-check[=] --batch-command[=] --batch-all-objects --buffer --unordered
        --follow-symlinks -z --allow-unknown-type --use-mailmap --mailmap
        """,
        strict=True,
    ),
    "ls-files": _read(
        "ls-files",
        """
        -o --others
        --exclude-standard -x= --exclude= -X= --exclude-from= --exclude-per-directory=
        -c --cached -d --deleted -m --modified -i --ignored -s --stage -k --killed -u --unmerged -z -t -v -f
        --directory --no-empty-directory --eol --full-name --recurse-submodules --abbrev[=] --debug
        --error-unmatch --with-tree= --deduplicate --sparse --format= --resolve-undo
        """,
        strict=True,
    ),
    **{
        name: _read(
            name,
            "--format= --sort= --points-at= --merged[=] --no-merged[=] --contains[=] "
            "--no-contains[=] --count= --color[=] --abbrev[=] -d --dereference -s --hash[=] --heads --tags "
            "--head --verify -q --quiet --exclude-existing[=] --ignore-case --omit-empty --stdin",
        )
        for name in ("for-each-ref", "show-ref")
    },
    "ls-tree": _read(
        "ls-tree",
        "-d -r -t -l --long -z --name-only --name-status --object-only --full-name --full-tree --abbrev[=] --format=",
        strict=True,
    ),
    "rev-parse": _read("rev-parse", ""),
    "describe": _read(
        "describe",
        "--all --tags --contains --abbrev= --candidates= --exact-match --debug --long "
        "--match= --exclude= --always --first-parent --dirty[=] --broken[=]",
        strict=True,
    ),
    "merge-base": _read("merge-base", "-a --all --octopus --independent --is-ancestor --fork-point", strict=True),
    "name-rev": _read(
        "name-rev", "--tags --refs= --exclude= --all --stdin --annotate-stdin --name-only --no-undefined --always"
    ),
    "count-objects": _read("count-objects", "-v --verbose -H --human-readable", strict=True),
    "version": _read("version", "--build-options", strict=True),
    "check-ignore": _read(
        "check-ignore", "-q --quiet -v --verbose --stdin -z -n --non-matching --no-index", strict=True
    ),
    "reflog": _read("reflog", _LOG, check="git-reflog"),
    "branch": _read(
        "branch",
        _BRANCH_WRITE + "-l --list -a --all -r --remotes -v -vv --verbose -q --quiet "
        "--abbrev[=] --color[=] --column[=] --sort= --merged[=] --no-merged[=] --contains[=] "
        "--no-contains[=] --points-at= --format= --show-current -i --ignore-case --omit-empty",
        check="git-branch",
    ),
    "tag": _read(
        "tag",
        "-d --delete -a --annotate -s --sign -u= --local-user= -f --force -m= --message= "
        "-F= --file= -e --edit --cleanup= --create-reflog  !unsafe changes tags\n"
        "-l --list -n[=] --sort= --contains[=] --no-contains[=] --merged[=] --no-merged[=] --points-at= "
        "--format= --color[=] --column[=] -i --ignore-case -v --verify --omit-empty",
        check="git-tag",
    ),
    "remote": _read("remote", "-v --verbose", check="git-remote"),
    "stash": _read("stash", "", check="git-stash"),
}

_RISKY_SUBCOMMANDS = {
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
    "upload-pack": "runs a server side",
    "config": "changes git's configuration (pagers, aliases and hooks run code)",
}

GIT = Spec(
    "git",
    _GLOBAL,
    style="git",
    posix=True,
    subcommands={
        **_SUBCOMMANDS,
        **{
            name: Spec(name, _OTHER, style="git", always=f"git {name} {why}")
            for name, why in _RISKY_SUBCOMMANDS.items()
        },
        "rebase": Spec("rebase", _OTHER + "-x=  !exec runs commands after each commit", style="git"),
        "archive": Spec("archive", _OTHER + "-o=  !write writes where the command line says", style="git"),
        "format-patch": Spec("format-patch", _OTHER + "-o=  !write writes where the command line says", style="git"),
        "difftool": Spec(
            "difftool",
            _OTHER + "-x=  !exec runs a command given in its arguments",
            style="git",
            always="git difftool runs an external diff tool",
        ),
        "clone": Spec("clone", _OTHER + _UPLOAD + _CONFIG, style="git"),
        **{name: Spec(name, _OTHER + _UPLOAD, style="git") for name in ("fetch", "pull", "ls-remote")},
    },
    other=Spec("other", _OTHER, style="git"),
    match=(
        "git status",
        "git diff",
        "git diff --stat HEAD~1 -- src/app.py",
        "git log --oneline -5",
        "git show HEAD",
        "git log -p --no-ext-diff",
        "git grep -n hello",
        "git branch",
        "git branch -a",
        "git stash list",
        "git --no-pager log -1",
        "git -P diff",
        "git diff --no-textconv",
        "git log --no-ext",
        "git status -uno",
        "git remote -v",
        "git tag -l",
        "git tag",
        "git reflog",
        "git blame README.md",
        "git cat-file -p HEAD",
    ),
    not_match=(
        "git diff --output=x",
        "git diff --out=x",
        "git diff --outp x",
        "git log --ext-diff",
        "git log -p --ext-d",
        "git show --textconv",
        "git show --textc",
        "git grep -O id x",
        "git grep -Oid x",
        "git grep -nOid x",
        "git grep --open-files-in-pager=id x",
        "git grep --open=id x",
        "git grep --op=id x",
        "git grep --open-files id x",
        "git -c core.pager=id log",
        "git -ccore.pager=id log",
        "git -C /tmp log",
        "git --git-dir=/tmp/x log",
        "git --git=/tmp/x log",
        "git --exec-path=/tmp log",
        "git -p log",
        "git --paginate log",
        "git --pag log",
        "git cat-file --filters HEAD:x",
        "git difftool -x id",
        "git rebase --exe=id",
        "git fetch --upload-pack=id",
        "git fetch --upl=id",
        "git clone -u id x",
        "git clone --temp=/tmp/t x",
        "git archive --remote=x HEAD",
        "git config x y",
        "git format-patch -o /tmp HEAD~1",
        "git grep --no-index x",
        "git grep --no-ind x",
        "git grep --untracked --no-exclude-standard x",
        "git grep --no-exclude x",
        "git diff --no-index . /tmp",
    ),
    not_read_only=(
        "git branch -D main",
        "git branch -m a b",
        "git branch --set-up=x",
        "git branch newname",
        "git tag -d v1",
        "git tag v2",
        "git stash",
        "git stash drop",
        "git reflog expire --all",
        "git reflog delete x",
        "git status --bogus",
        "git remote add x y",
        "git log --stdin",
        "git diff --submodule=diff",
        "git push",
        "git add -u",
        "git commit -o x",
        "git commit -m x",
        "git --bare log",
        "git st",
    ),
)
