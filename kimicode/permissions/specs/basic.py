"""Specifications of the small programs the read-only allowance admits (coreutils, grep, rg, jq, ...).

Strict tables (`strict=True`) list every option the program has (from its `--help`): any other option
asks. Each table names the options that write, run programs or read what cannot be checked, and keeps
examples the tests run through the whole permission decision (see `kimicode.permissions.optparse`).
"""

from __future__ import annotations

from kimicode.permissions.optparse import Spec

_COMMON = "--help\n--version\n"

SPECS = [
    Spec(
        "cat",
        _COMMON
        + """
        -A --show-all
        -b --number-nonblank
        -e
        -E --show-ends
        -n --number
        -s --squeeze-blank
        -t
        -T --show-tabs
        -u
        -v --show-nonprinting
        """,
        read_only=True,
        strict=True,
        match=("cat README.md", "cat -n README.md", "cat -An README.md", "cat --number README.md"),
        not_read_only=("cat -w README.md", "cat --bogus README.md", "cat -fREADME.md"),
    ),
    Spec(
        "head",
        _COMMON
        + """
        -c= --bytes=
        -n= --lines=
        -q --quiet --silent
        -v --verbose
        -z --zero-terminated
        """,
        read_only=True,
        strict=True,
        numeric=True,
        match=(
            "head -5 README.md",
            "head -n 3 README.md",
            "head -n3 README.md",
            "head --lines=3 README.md",
            "head --li=3 README.md",
        ),
        not_read_only=("head -n3 -x README.md",),
    ),
    Spec(
        "tail",
        _COMMON
        + """
        -c= --bytes=
        -f --follow[=]          !unsafe never ends
        -F                      !unsafe never ends
        -n= --lines=
        --max-unchanged-stats=
        --pid=
        -q --quiet --silent
        --retry                 !unsafe waits for a file to appear
        -s= --sleep-interval=
        -v --verbose
        -z --zero-terminated
        """,
        read_only=True,
        strict=True,
        numeric=True,
        match=("tail -5 README.md", "tail -n +2 README.md", "tail +2 README.md", "tail -qn2 README.md"),
        not_read_only=(
            "tail -f README.md",
            "tail --fol README.md",
            "tail --follow=name README.md",
            "tail -5f README.md",
            "tail -qF README.md",
            "tail --re README.md",
        ),
    ),
    Spec(
        "wc",
        _COMMON
        + """
        -c --bytes
        -m --chars
        -l --lines
        --files0-from=
        -L --max-line-length
        -w --words
        --total=
        """,
        read_only=True,
        strict=True,
        match=("wc -l README.md", "wc -lw README.md", "wc --li README.md"),
    ),
    Spec(
        "sort",
        _COMMON
        + """
        -b --ignore-leading-blanks
        -d --dictionary-order
        -f --ignore-case
        -g --general-numeric-sort
        -i --ignore-nonprinting
        -M --month-sort
        -h --human-numeric-sort
        -n --numeric-sort
        -R --random-sort
        --random-source=
        -r --reverse
        --sort=
        -V --version-sort
        --batch-size=
        -c -C --check[=]
        --compress-program=          !exec runs the program named to compress temporary files
        --debug
        --files0-from=
        -k= --key=
        -m --merge
        -o= --output=                !write writes its output to the file named
        -s --stable
        -S= --buffer-size=
        -t= --field-separator=
        -T= --temporary-directory=   !write writes temporary files where it is told
        --parallel=
        -u --unique
        -z --zero-terminated
        """,
        read_only=True,
        strict=True,
        match=(
            "sort README.md",
            "sort -rn README.md",
            "sort -t, -k2 README.md",
            "sort -k 2,2 README.md",
            "sort --rev README.md",
        ),
        not_match=(
            "sort -o x README.md",
            "sort -ox README.md",
            "sort -rno x README.md",
            "sort --output=x README.md",
            "sort --out=x README.md",
            "sort --o x README.md",
            "sort --compress-prog=sh README.md",
            "sort --compress-program sh README.md",
            "sort -T /tmp README.md",
            "sort --temp=/tmp README.md",
        ),
    ),
    Spec(
        "uniq",
        _COMMON
        + """
        -c --count
        -d --repeated
        -D
        --all-repeated[=]
        -f= --skip-fields=
        --group[=]
        -i --ignore-case
        -s= --skip-chars=
        -u --unique
        -z --zero-terminated
        -w= --check-chars=
        """,
        read_only=True,
        strict=True,
        numeric=True,
        check="second-operand-written",
        match=("uniq README.md", "uniq -c README.md", "uniq -f 1 README.md"),
        not_match=("uniq README.md out.txt", "uniq -c README.md out"),
    ),
    Spec(
        "cut",
        _COMMON
        + """
        -b= --bytes=
        -c= --characters=
        -d= --delimiter=
        -f= --fields=
        -n
        --complement
        -s --only-delimited
        --output-delimiter=
        -z --zero-terminated
        """,
        read_only=True,
        strict=True,
        match=("cut -d, -f1 README.md", "cut -c1-3 README.md"),
    ),
    Spec(
        "tr",
        _COMMON + "-c -C --complement\n-d --delete\n-s --squeeze-repeats\n-t --truncate-set1\n",
        read_only=True,
        strict=True,
        match=("tr a-z A-Z", "tr -d x"),
    ),
    Spec(
        "nl",
        _COMMON
        + """
        -b= --body-numbering=
        -d= --section-delimiter=
        -f= --footer-numbering=
        -h= --header-numbering=
        -i= --line-increment=
        -l= --join-blank-lines=
        -n= --number-format=
        -p --no-renumber
        -s= --number-separator=
        -v= --starting-line-number=
        -w= --number-width=
        """,
        read_only=True,
        strict=True,
        match=("nl README.md", "nl -ba README.md"),
    ),
    Spec(
        "basename",
        _COMMON + "-a --multiple\n-s= --suffix=\n-z --zero\n",
        read_only=True,
        strict=True,
        match=("basename src/app.py .py",),
    ),
    Spec("dirname", _COMMON + "-z --zero\n", read_only=True, strict=True, match=("dirname src/app.py",)),
    Spec(
        "realpath",
        _COMMON
        + """
        -e --canonicalize-existing
        -m --canonicalize-missing
        -L --logical
        -P --physical
        -q --quiet
        --relative-to=
        --relative-base=
        -s --strip --no-symlinks
        -z --zero
        """,
        read_only=True,
        strict=True,
        match=("realpath src",),
    ),
    Spec(
        "readlink",
        _COMMON
        + """
        -f --canonicalize
        -e --canonicalize-existing
        -m --canonicalize-missing
        -n --no-newline
        -q --quiet
        -s --silent
        -v --verbose
        -z --zero
        """,
        read_only=True,
        strict=True,
        match=("readlink -f src",),
    ),
    Spec(
        "stat",
        _COMMON + "-L --dereference\n-f --file-system\n--cached=\n-c= --format=\n--printf=\n-t --terse\n",
        read_only=True,
        strict=True,
        match=("stat README.md", "stat -c %s README.md"),
    ),
    Spec(
        "du",
        _COMMON
        + """
        -0 --null
        -a --all
        --apparent-size
        -B= --block-size=
        -b --bytes
        -c --total
        -D --dereference-args
        -d= --max-depth=
        --files0-from=
        -H
        -h --human-readable
        --inodes
        -k
        -L --dereference
        -l --count-links
        -m
        -P --no-dereference
        -S --separate-dirs
        --si
        -s --summarize
        -t= --threshold=
        --time[=]
        --time-style=
        -X= --exclude-from=
        --exclude=
        -x --one-file-system
        """,
        read_only=True,
        strict=True,
        match=("du -sh src", "du -d1 ."),
    ),
    Spec(
        "df",
        _COMMON
        + """
        -a --all
        -B= --block-size=
        -h --human-readable
        -H --si
        -i --inodes
        -k
        -l --local
        --no-sync
        --output[=]
        -P --portability
        --sync
        --total
        -t= --type=
        -T --print-type
        -x= --exclude-type=
        -v
        """,
        read_only=True,
        strict=True,
        match=("df -h .",),
    ),
    Spec(
        "ls",
        _COMMON
        + """
        -a --all
        -A --almost-all
        --author
        -b --escape
        --block-size=
        -B --ignore-backups
        -c
        -C
        --color[=] --colour[=]
        -d --directory
        -D --dired
        -f
        -F --classify[=]
        --file-type
        --format=
        --full-time
        -g
        --group-directories-first
        -G --no-group
        -h --human-readable
        --si
        -H --dereference-command-line
        --dereference-command-line-symlink-to-dir
        --hide=
        --hyperlink[=]
        --indicator-style=
        -i --inode
        -I= --ignore=
        -k --kibibytes
        -l
        -L --dereference
        -m
        -n --numeric-uid-gid
        -N --literal
        -o
        -p
        -q --hide-control-chars
        --show-control-chars
        -Q --quote-name
        --quoting-style=
        -r --reverse
        -R --recursive
        -s --size
        -S
        --sort=
        --time=
        --time-style=
        -t
        -T= --tabsize=
        -u
        -U
        -v
        -w= --width=
        -x
        -X
        -Z --context
        --zero
        -1
        """,
        read_only=True,
        strict=True,
        match=("ls", "ls -la", "ls -la src", "ls --color=never -1", "ls -lhS", "ls --group-dir"),
        not_read_only=("ls -y",),
    ),
    Spec(
        "date",
        _COMMON
        + """
        -d= --date=
        --debug
        -f= --file=
        -I --iso-8601[=]
        --resolution
        -R --rfc-email
        --rfc-3339=
        -r= --reference=
        -s= --set=            !write sets the clock
        -u --utc --universal
        """,
        read_only=True,
        strict=True,
        match=("date", "date -u +%s", "date -d yesterday"),
        not_match=("date -s 2020-01-01", "date --se=2020-01-01", "date -us2020-01-01"),
    ),
    Spec(
        "seq",
        _COMMON + "-f= --format=\n-s= --separator=\n-w --equal-width\n",
        read_only=True,
        strict=True,
        numeric=True,
        match=("seq 3", "seq -w 1 10"),
    ),
    Spec(
        "fold",
        _COMMON + "-b --bytes\n-s --spaces\n-w= --width=\n",
        read_only=True,
        strict=True,
        numeric=True,
        match=("fold -w 20 README.md",),
    ),
    Spec(
        "expand",
        _COMMON + "-i --initial\n-t= --tabs=\n",
        read_only=True,
        strict=True,
        numeric=True,
        match=("expand README.md",),
    ),
    Spec(
        "unexpand",
        _COMMON + "-a --all\n--first-only\n-t= --tabs=\n",
        read_only=True,
        strict=True,
        numeric=True,
        match=("unexpand README.md",),
    ),
    Spec(
        "tac",
        _COMMON + "-b --before\n-r --regex\n-s= --separator=\n",
        read_only=True,
        strict=True,
        match=("tac README.md",),
    ),
    Spec(
        "od",
        _COMMON
        + """
        -A= --address-radix=
        --endian=
        -j= --skip-bytes=
        -N= --read-bytes=
        -S --strings[=]
        -t= --format=
        -v --output-duplicates
        -w --width[=]
        --traditional
        -a
        -b
        -c
        -d
        -f
        -i
        -l
        -o
        -s
        -x
        """,
        read_only=True,
        strict=True,
        match=("od -c README.md",),
    ),
    *(
        Spec(
            name,
            _COMMON
            + """
        -a= --algorithm=
        -b --binary
        -c --check
        -l= --length=
        --tag
        --untagged
        -t --text
        -z --zero
        --ignore-missing
        --quiet
        --status
        --strict
        -w --warn
        --debug
        --base64
        --raw
        """,
            read_only=True,
            strict=True,
            match=(f"{name} README.md",),
        )
        for name in ("cksum", "md5sum", "sha1sum", "sha224sum", "sha256sum", "sha384sum", "sha512sum", "b2sum")
    ),
    Spec(
        "comm",
        _COMMON + "-1\n-2\n-3\n--check-order\n--nocheck-order\n--output-delimiter=\n--total\n-z --zero-terminated\n",
        read_only=True,
        strict=True,
        match=("comm -12 README.md src/app.py",),
    ),
    Spec(
        "cmp",
        _COMMON + "-b --print-bytes\n-i= --ignore-initial=\n-l --verbose\n-n= --bytes=\n-s --quiet --silent\n-v\n",
        read_only=True,
        strict=True,
        match=("cmp README.md src/app.py",),
    ),
    Spec(
        "diff",
        _COMMON
        + """
        --normal
        -q --brief
        -s --report-identical-files
        -c
        -C= --context[=]
        -u
        -U= --unified[=]
        -e --ed
        -n --rcs
        -y --side-by-side
        -W= --width=
        --left-column
        --suppress-common-lines
        -p --show-c-function
        -F= --show-function-line=
        --label=
        -t --expand-tabs
        -T --initial-tab
        --tabsize=
        --suppress-blank-empty
        -l --paginate          !exec runs the pr program
        -r --recursive         !search
        --no-dereference
        -N --new-file
        --unidirectional-new-file
        --ignore-file-name-case
        --no-ignore-file-name-case
        -x= --exclude=
        -X= --exclude-from=
        -S= --starting-file=
        --from-file=
        --to-file=
        -i --ignore-case
        -E --ignore-tab-expansion
        -Z --ignore-trailing-space
        -b --ignore-space-change
        -w --ignore-all-space
        -B --ignore-blank-lines
        -I= --ignore-matching-lines=
        -a --text
        --strip-trailing-cr
        -D= --ifdef=
        --old-group-format= --new-group-format= --changed-group-format= --unchanged-group-format=
        --line-format= --old-line-format= --new-line-format= --unchanged-line-format=
        -d --minimal
        --horizon-lines=
        --speed-large-files
        --color[=]
        --palette=
        -v
        """,
        read_only=True,
        strict=True,
        match=("diff README.md src/app.py", "diff -u README.md src/app.py"),
        not_match=("diff -l README.md src/app.py", "diff --pag README.md src/app.py"),
    ),
    Spec(
        "file",
        _COMMON
        + """
        -v
        -m= --magic-file=
        -z --uncompress       !unsafe runs decompressors
        -Z --uncompress-noreport  !unsafe runs decompressors
        -b --brief
        -c --checking-printout
        -C --compile          !write writes a compiled magic file
        -e= --exclude=
        --exclude-quiet=
        -f= --files-from=
        -F= --separator=
        -i --mime
        --apple
        --extension
        --mime-type
        --mime-encoding
        -k --keep-going
        -l --list
        -L --dereference
        -h --no-dereference
        -n --no-buffer
        -N --no-pad
        -0 --print0
        -p --preserve-date
        -P= --parameter=
        -r --raw
        -s --special-files
        -S --no-sandbox
        """,
        read_only=True,
        strict=True,
        match=("file README.md", "file -b README.md"),
        not_match=("file -C -m x", "file --comp -m x"),
    ),
    Spec(
        "id",
        _COMMON + "-a\n-Z --context\n-g --group\n-G --groups\n-n --name\n-r --real\n-u --user\n-z --zero\n",
        read_only=True,
        strict=True,
        match=("id -u",),
    ),
    Spec(
        "uname",
        _COMMON
        + """
        -a --all
        -s --kernel-name
        -n --nodename
        -r --kernel-release
        -v --kernel-version
        -m --machine
        -p --processor
        -i --hardware-platform
        -o --operating-system
        """,
        read_only=True,
        strict=True,
        match=("uname -a",),
    ),
    *(
        Spec(name, _COMMON, read_only=True, strict=True, match=(name,))
        for name in ("whoami", "groups", "arch", "tty", "true", "false")
    ),
    Spec("nproc", _COMMON + "--all\n--ignore=\n", read_only=True, strict=True, match=("nproc",)),
    Spec("pwd", _COMMON + "-L --logical\n-P --physical\n", read_only=True, strict=True, match=("pwd", "pwd -P")),
    Spec(
        "locale",
        _COMMON + "-a --all-locales\n-m --charmaps\n-c --category-name\n-k --keyword-name\n-v --verbose\n",
        read_only=True,
        strict=True,
        match=("locale",),
    ),
    Spec(
        "hostname",
        _COMMON + "-s --short\n-f --fqdn --long\n-d --domain\n-i --ip-address\n-I --all-ip-addresses\n"
        "-A --all-fqdns\n-a --alias\n-y --yp --nis\n-F= --file=  !write sets the host name from a file\n",
        read_only=True,
        strict=True,
        max_operands=0,
        match=("hostname", "hostname -s"),
        not_read_only=("hostname evil",),
        not_match=("hostname -F x",),
    ),
    Spec(
        "column",
        _COMMON
        + """
        -t --table
        -n= --table-name=
        -O= --table-order=
        -N= --table-columns=
        -l= --table-columns-limit=
        -E= --table-noextreme=
        -d --table-noheadings
        -e --table-header-repeat
        -H= --table-hide=
        -R= --table-right=
        -T= --table-truncate=
        -W= --table-wrap=
        -L --keep-empty-lines
        -J --json
        -r= --tree=
        -i= --tree-id=
        -p= --tree-parent=
        -c= --output-width=
        -o= --output-separator=
        -s= --separator=
        -x --fillrows
        -h
        -V
        """,
        read_only=True,
        strict=True,
        match=("column -t README.md",),
    ),
    Spec("rev", _COMMON + "-h\n-V\n-0 --zero\n", read_only=True, strict=True, match=("rev README.md",)),
    Spec(
        "strings",
        _COMMON
        + """
        -a --all
        -d --data
        -f --print-file-name
        -n= --bytes=
        -t= --radix=
        -w --include-all-whitespace
        -o
        -T= --target=
        -e= --encoding=
        -U= --unicode=
        -s= --output-separator=
        -h
        -v -V
        """,
        read_only=True,
        strict=True,
        numeric=True,
        match=("strings README.md",),
    ),
    Spec(
        "hexdump",
        _COMMON
        + """
        -b --one-byte-octal
        -X --one-byte-hex
        -c --one-byte-char
        -C --canonical
        -d --two-bytes-decimal
        -o --two-bytes-octal
        -x --two-bytes-hex
        -L --color[=]
        -e= --format=
        -f= --format-file=
        -n= --length=
        -s= --skip=
        -v --no-squeezing
        -h
        -V
        """,
        read_only=True,
        strict=True,
        match=("hexdump -C README.md",),
    ),
    Spec(
        "xxd",
        """
        -a -autoskip
        -b -bits
        -C -capitalize
        -c= -cols=
        -E -EBCDIC
        -e
        -g= -groupsize=
        -h -help
        -i -include
        -l= -len=
        -n= -name=
        -o= -offset=
        -p -ps -postscript -plain
        -r -revert         !unsafe writes binary back (with a second operand, into a file)
        -d
        -R=
        -s= -seek=
        -u
        -v -version
        """,
        style="go",
        read_only=True,
        strict=True,
        max_operands=1,
        match=("xxd README.md", "xxd -l 16 README.md"),
        not_read_only=("xxd README.md out.bin", "xxd -r README.md"),
    ),
    Spec("echo", "", read_only=True, match=("echo hello", "echo -n hi")),
    Spec(
        "printf",
        "-v=  !exec assigns a variable (its subscript can run commands)",
        read_only=True,
        match=("printf '%s\\n' hi",),
        not_match=("printf -v x hi", "printf -vx hi"),
    ),
    Spec(
        "which",
        "-a\n-s\n--all\n--skip-alias\n--read-alias\n--skip-functions\n--read-functions\n--skip-dot\n"
        "--skip-tilde\n--show-dot\n--show-tilde\n--tty-only\n-i\n",
        read_only=True,
        match=("which git",),
    ),
    Spec("type", "-a\n-f\n-p\n-P\n-t\n", read_only=True, match=("type git",)),
    Spec("test", "", read_only=True, check="test", match=("test -f README.md",), not_match=("test -v 'a[x]'",)),
    Spec("[", "", read_only=True, check="test", match=("[ -f README.md ]",)),
    Spec("sleep", "", unsafe="waits", match=()),
    Spec("yes", "", unsafe="never ends", match=()),
]
