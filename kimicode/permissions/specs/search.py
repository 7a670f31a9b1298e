"""Specifications of the readers the read-only allowance admits with care: searches (grep, rg), jq,
pagers and tree. A search that reads whole trees (`grep -r`, `rg`) has its trees checked for secrets;
options that follow links out of the tree, run decompressors or programs are listed with their effects.
"""

from __future__ import annotations

from kimicode.permissions.optparse import Spec

_COMMON = "--help\n--version\n"

SPECS = [
    Spec(
        "grep",
        _COMMON
        + """
        -E --extended-regexp
        -F --fixed-strings
        -G --basic-regexp
        -P --perl-regexp
        -e= --regexp=
        -f= --file=
        -i -y --ignore-case
        --no-ignore-case
        -w --word-regexp
        -x --line-regexp
        -z --null-data
        -s --no-messages
        -v --invert-match
        -V
        -m= --max-count=
        -b --byte-offset
        -n --line-number
        --line-buffered
        -H --with-filename
        -h --no-filename
        --label=
        -o --only-matching
        -q --quiet --silent
        --binary-files=
        -a --text
        -I
        -d= --directories=            !unsafe may read every file below a directory (recurse)
        -D= --devices=
        -r --recursive                 !search
        -R --dereference-recursive     !search follows symbolic links (their targets are checked too)
        --include=
        --exclude=
        --exclude-from=
        --exclude-dir=
        -L --files-without-match
        -l --files-with-matches
        -c --count
        -T --initial-tab
        -Z --null
        -B= --before-context=
        -A= --after-context=
        -C= --context=
        --group-separator=
        --no-group-separator
        --color[=] --colour[=]
        -U --binary
        """,
        read_only=True,
        strict=True,
        numeric=True,
        match=("grep -n hello README.md", "grep -rn hello src", "grep -e hello -- README.md", "grep -C2 hi README.md"),
        not_match=("grep -R hello .", "grep --derefer hello .", "grep -nR hello ."),
        not_read_only=("grep -d recurse hello src",),
    ),
    Spec(
        "rg",
        """
        --pre=              !exec runs a program on every file
        --pre-glob=
        --hostname-bin=     !exec runs a program to find the host name
        -z --search-zip     !unsafe runs decompressors
        -L --follow         !search follows symbolic links (their targets are checked too)
        -u --unrestricted   !search
        --no-ignore --no-ignore-vcs --no-ignore-dot --no-ignore-global --no-ignore-parent --no-ignore-files  !search
        --no-ignore-exclude  !search
        -. --hidden          !search
        --ignore-file=
        --files
        -e= --regexp=
        -f= --file=
        -g= --glob=
        --iglob=
        -t= --type=
        -T= --type-not=
        --type-add=
        -m= --max-count=
        -A= --after-context=
        -B= --before-context=
        -C= --context=
        -M= --max-columns=
        -j= --threads=
        -d= --max-depth=
        --max-filesize=
        -E= --encoding=
        -r= --replace=
        --color= --colors=
        --sort= --sortr=
        --engine=
        --path-separator=
        --field-match-separator= --field-context-separator=
        --context-separator=
        --dfa-size-limit= --regex-size-limit=
        --generate=
        """,
        read_only=True,
        match=("rg hello src", "rg -n hello src", "rg -tpy hello src", "rg --files src"),
        not_match=(
            "rg --pre id KEY",
            "rg --pre=id KEY",
            "rg --pr id KEY",
            "rg --hostname-b=id KEY",
            "rg -L hello",
            "rg --fol hello .",
        ),
        not_read_only=("rg -z hello src",),
    ),
    Spec(
        "jq",
        """
        -c --compact-output
        -n --null-input
        -e --exit-status
        -s --slurp
        -r --raw-output
        -j --join-output
        -a --ascii-output
        -R --raw-input
        -C --color-output
        -M --monochrome-output
        -S --sort-keys
        --tab
        --indent=
        --unbuffered
        --stream --stream-errors --seq
        -f= --from-file=     !unsafe reads its program from a file nobody checked
        -L=                  !unsafe loads modules from a directory
        --arg== --argjson==
        --slurpfile== --rawfile==
        --args --jsonargs
        -h --help
        -V --version
        --build-configuration
        """,
        read_only=True,
        check="jq",
        match=(
            "jq .name package.json",
            "jq -r '.a | keys' package.json",
            "jq -n '[1,2]'",
            "jq '.a.env' x.json",
            "jq -r '.config.env' x.json",
            "jq -n '\"env is $ENV\"'",
            "jq '. as $env | $env' x.json",
            'jq -n \'"a\\"b"\'',
        ),
        not_match=(
            "jq -n env",
            "jq -n '$ENV'",
            "jq -n '$ENV.HOME'",
            "jq -rn 'env.HOME'",
            "jq -n 'env|keys'",
            "jq -n '[env[]]'",
            "jq -n '$ ENV'",
            "jq -n '$\tENV.HOME'",
            "jq -n '$ # c\n ENV'",
            "jq -n '\"\\(env.HOME)\"'",
            "jq -n '..env'",
            "jq -n '$__prog_args'",
            "jq -n 'import \"a\" as a; 1'",
            "jq -n '\"open'",
        ),
        not_read_only=("jq -f prog.jq x", "jq -L lib .a x"),
    ),
    *(
        Spec(
            name,
            "",
            check="jq",
            match=(f"{name} .a package.json",),
            not_match=(f"{name} -n env", f"{name} -n 'env(HOME)'", f"{name} -n 'strenv(HOME)'", f"{name} '$ENV' x"),
        )
        for name in ("gojq", "jaq", "yq")
    ),
    Spec(
        "less",
        """
        -o= --log-file=     !write writes a log file
        -O= --LOG-FILE=     !write writes a log file
        -k= --lesskey-file= !exec reads key bindings that run commands
        --lesskey-src=      !exec reads key bindings that run commands
        --lesskey-content=  !exec reads key bindings that run commands
        -t= --tag=
        -T= --tag-file=
        -p= --pattern=
        -P= --prompt=
        -b= --buffers=
        -h= --max-back-scroll=
        -j= --jump-target=
        -x= --tabs=
        -y= --max-forw-scroll=
        -z= --window=
        --shift=
        """,
        read_only=True,
        plus="exec",
        match=("less README.md", "less -R README.md"),
        not_match=(
            "less '+!id' README.md",
            "less -o /tmp/x README.md",
            "less -SoX README.md",
            "less --log=x README.md",
            "less --lesskey-s=x README.md",
        ),
    ),
    Spec(
        "more",
        "-d --silent\n-f --logical\n-l --no-pause\n-c --print-over\n-p --clean-print\n-e --exit-on-eof\n"
        "-s --squeeze\n-u --plain\n-n= --lines=\n-h\n-V\n",
        read_only=True,
        strict=True,
        numeric=True,
        plus="exec",
        match=("more README.md",),
        not_match=("more '+!id' README.md",),
    ),
    Spec(
        "tree",
        """
        -o= --output=    !write writes its output to a file
        --fromfile       !unsafe reads the listing from a file
        -P= -I= -L= --filelimit= --timefmt= --charset= -H= -T= --sort= --gitfile= --infile=
        """,
        read_only=True,
        match=("tree src", "tree -L 2"),
        not_match=("tree -o x", "tree -ax -o x", "tree --out=x"),
    ),
]
