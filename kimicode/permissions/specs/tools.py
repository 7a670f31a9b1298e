"""Specifications of the programs that only an allow rule admits: shells and builtins, interpreters,
editors, network tools, wrappers that run other commands, build tools, test runners and package
managers (the options that write outside the workspace or run a program of the command line's
choosing), and the script languages checked by content (sed, awk, find, tar).

An option with `!out` writes where its argument says: under an allow rule naming the program the
argument is checked like a redirection target (inside the workspace, not protected, not in plan
mode), so `bash(pytest*)` admits `pytest --junitxml=report.xml` and asks for `--basetemp=/elsewhere`.
"""

from __future__ import annotations

from kimicode.permissions.optparse import Spec

SHELLS = ("sh", "bash", "dash", "zsh", "ksh", "ash", "mksh", "yash", "fish", "csh", "tcsh", "rbash")

_INTERPRETERS = {
    # program -> options whose argument is code
    "python": "-c=",
    "python2": "-c=",
    "python3": "-c=",
    "pypy": "-c=",
    "pypy3": "-c=",
    "perl": "-e= -E=",
    "ruby": "-e=",
    "node": "-e= -p= --eval= --print= -r= --require= --import= --loader=",
    "nodejs": "-e= -p=",
    "bun": "-e= --eval= -p= --print=",
    "php": "-r= -B= -R= -E=",
    "lua": "-e= -l=",
    "luajit": "-e= -l=",
    "Rscript": "-e=",
    "R": "-e=",
    "osascript": "-e=",
    "julia": "-e= --eval= -E= --print=",
    "pwsh": "",
    "powershell": "",
    "expect": "-c=",
    "gdb": "-ex= -iex= -x= --batch --command= --eval-command=",
}

_PYTHON_FLAGS = (
    "-b -B -d -E -i -I -O -OO -q -s -S -u -v -V -x -P -h --help --version\n-W= -X= --check-hash-based-pycs=\n"
)

_PYTEST = """
    --basetemp=                        !out a directory pytest empties and writes
    --junitxml= --junit-xml=           !out
    --resultlog= --result-log=         !out
    --report-log=                      !out
    --log-file=                        !out
    --html=                            !out
    --json-report-file=                !out
    --cov-report=                      !out
    --debug[=]                         !out
    --rootdir=                         !out pytest writes its cache below the root directory
    -o= --override-ini=                !out
    -c= --config-file=                 !exec reads options (addopts) from a file of the command line's choosing
    --pastebin=                        !unsafe sends the results to a web service
    -p= -k= -m= --deselect= --ignore= --ignore-glob= --confcutdir= --tb= --maxfail= -n= --numprocesses= --durations=
    --import-mode= --capture= --log-level= --log-cli-level= --cov= --timeout= -W= --pythonwarnings= -r=
    """

_PACKAGES = """
    --prefix=                          !out
    --cache= --cache-dir=              !out
    -g --global                        !write installs outside the workspace
    --location=                        !write installs where it says (global is outside the workspace)
    --userconfig= --globalconfig=      !exec reads configuration (scripts) from a file of the command line's choosing
    --script-shell= --shell=           !exec runs scripts with a shell of the command line's choosing
    --node-options=                    !exec passes options (--require) to node
    -c= --call=                        !exec runs a command given in its arguments
    -C= --dir=                         !exec runs in another directory, with its scripts
    --registry=
    """

_PIP = """
    -t= --target=                      !out
    --prefix= --root= --src= --cache-dir= --log= -d= --dest= -w= --wheel-dir= --report=  !out
    --user                             !write installs into your home directory
    --break-system-packages            !write changes the system's packages
    --config-settings= -C=
    -r= --requirement= -c= --constraint= -e= --editable= -i= --index-url= --extra-index-url= -f= --find-links=
    """

SPECS = [
    *(Spec(name, "", always=f"`{name}` runs a shell script") for name in SHELLS),
    *(Spec(name, "", always=f"`{name}` runs text as commands") for name in ("eval", "source", ".", "trap")),
    *(
        Spec(name, "", always=f"`{name}` {why}")
        for name, why in {
            "let": "evaluates arithmetic (which can run commands)",
            "alias": "defines an alias",
            "enable": "loads builtins",
            "shopt": "changes the shell's parsing",
            "set": "changes the shell's behaviour",
            "hash": "changes where programs are found",
            "ulimit": "changes the shell",
            "umask": "changes the shell",
            "fc": "re-runs history",
            "history": "changes the shell",
            "bind": "changes the shell",
            "complete": "changes the shell",
            "at": "runs commands later",
            "batch": "runs commands later",
            "wget": "writes files",
            "rsync": "writes files (and -e runs a program)",
            "crontab": "installs commands that run later",
            "tclsh": "runs code",
            "wish": "runs code",
        }.items()
    ),
    *(
        Spec(name, "", check="builtin-eval")
        for name in (
            "declare",
            "typeset",
            "local",
            "export",
            "readonly",
            "read",
            "shift",
            "return",
            "exit",
            "break",
            "continue",
            "caller",
            "kill",
            "disown",
            "jobs",
            "mapfile",
            "readarray",
            "getopts",
            "unset",
            "wait",
        )
    ),
    *(
        Spec(name, "", always=f"{name} edits files and runs commands (:!, -c)")
        for name in ("vi", "vim", "nvim", "ex", "view", "gvim", "emacs", "nano", "ed", "joe", "micro", "kak")
    ),
    *(
        Spec(
            name,
            (_PYTHON_FLAGS + "-m=  !module\n" if name.startswith(("python", "pypy")) else "")
            + "\n".join(f"{opt} !exec runs code given on its command line" for opt in opts.split()),
            posix=True,
            always="" if opts else f"{name} runs code",
            not_match=tuple(f"{name} {opt.rstrip('=')} x" for opt in opts.split()[:3]) or (f"{name} x",),
        )
        for name, opts in _INTERPRETERS.items()
    ),
    Spec(
        "pytest",
        _PYTEST,
        check="pytest",
        match=(
            "pytest -q",
            "pytest tests/test_x.py -k foo",
            "pytest --junitxml=report.xml",
            "pytest --basetemp=build/tmp",
            "pytest --cov-report=xml:cov.xml",
            "python -m pytest -q",
            "python3 -m pytest -x tests",
        ),
        not_match=(
            "pytest --basetemp=/tmp/elsewhere",
            "pytest --base=/tmp/elsewhere",
            "pytest --junitxml=/tmp/r.xml",
            "pytest --junit-x=../r.xml",
            "pytest --cov-report=html:/tmp/cov",
            "pytest -o cache_dir=/tmp/c",
            "pytest -ocache_dir=/tmp/c",
            "pytest -o addopts=--basetemp=/tmp/x",
            "pytest -c /tmp/evil.ini",
            "pytest --basetemp=.git/x",
            "python -m pytest --basetemp=/tmp/x",
            "python3 -m pytest --junitxml=/tmp/r",
        ),
    ),
    *(
        Spec(
            name,
            _PACKAGES,
            match=(f"{name} test", f"{name} run build"),
            not_match=(
                f"{name} install -g x",
                f"{name} --prefix=/tmp/x install",
                f"{name} --script-sh=sh test",
                f"{name} --cache=/tmp/c install",
            ),
        )
        for name in ("npm", "pnpm", "yarn", "npx")
    ),
    *(
        Spec(
            name,
            _PIP,
            match=(f"{name} install -r requirements.txt", f"{name} install -t vendor x"),
            not_match=(
                f"{name} install --target=/tmp/x y",
                f"{name} install --tar /tmp/x y",
                f"{name} install -t/tmp/x y",
                f"{name} install --user x",
                f"{name} download -d /tmp x",
            ),
        )
        for name in ("pip", "pip3")
    ),
    Spec(
        "uv",
        "--cache-dir= --target= --prefix= -o= --output-file= --directory= --project=  !out\n"
        "--config-file=  !exec reads configuration from a file of the command line's choosing\n",
        match=("uv pip install -r requirements.txt",),
        not_match=("uv pip install --target /tmp/x y",),
    ),
    Spec(
        "cargo",
        """
        --config=                  !exec can set a runner (a program cargo runs)
        -Z=                        !exec enables unstable features (which can run programs)
        --manifest-path=           !exec builds (and runs build scripts of) another package
        --target-dir= --out-dir= --artifact-dir= --root=  !out
        -C=                        !exec runs in another directory
        """,
        match=("cargo test", "cargo build --target-dir target/x"),
        not_match=(
            "cargo --config 'target.x.runner=\"id\"' run",
            "cargo test --target-dir=/tmp/t",
            "cargo test --targ=/tmp/t",
        ),
    ),
    Spec(
        "go",
        """
        -exec= -toolexec=          !exec runs a program of the command line's choosing
        -modfile= -overlay=        !exec builds other sources than the module's
        -o=                        !out
        -C=                        !exec runs in another directory
        -pkgdir= -coverprofile= -cpuprofile= -memprofile= -blockprofile= -mutexprofile= -trace= -outputdir=  !out
        """,
        style="go",
        match=("go test ./...", "go build -o bin/x ."),
        not_match=(
            "go test -exec id ./...",
            "go test --exec=id ./...",
            "go build -o /tmp/x .",
            "go test -coverprofile=/tmp/c ./...",
        ),
    ),
    *(
        Spec(
            name,
            """
        -f= --file= --makefile=    !exec runs the recipes of a makefile of the command line's choosing
        -C= --directory=           !exec runs the recipes of another directory's makefile
        --eval= -E=                !exec evaluates make code given on its command line
        -I= --include-dir=         !exec includes makefiles from another directory
        -o= --old-file= --assume-old= -W= --what-if= --new-file= --assume-new= -j[=] --jobs[=] -l[=] -O[=]
        """,
            check="make",
            match=(f"{name} test", f"{name} -j4 test"),
            not_match=(
                f"{name} -f /tmp/m",
                f"{name} --file=/tmp/m",
                f"{name} --eval='x:;id' x",
                f"{name} CC=id x",
                f"{name} -C /tmp",
                f"{name} --dir=/tmp",
                f"{name} -sC/tmp",
            ),
        )
        for name in ("make", "gmake")
    ),
    Spec(
        "jest",
        "--outputFile= --coverageDirectory= --cacheDirectory=  !out\n--config= -c=  !exec reads a "
        "configuration (which names programs to run) from the command line\n",
        match=("jest src",),
        not_match=("jest --outputFile=/tmp/x", "jest --coverageDir=/tmp/c", "jest -c /tmp/j.js"),
    ),
    Spec(
        "vitest",
        "--outputFile= --coverage.reportsDirectory= --dir=  !out\n--config= -c=  !exec reads a "
        "configuration (which names programs to run) from the command line\n",
        match=("vitest run",),
        not_match=("vitest run --outputFile=/tmp/x",),
    ),
    Spec(
        "tox",
        "--workdir= --result-json= --installpkg=  !out\n-c= --conf=  !exec reads a configuration of the "
        "command line's choosing\n-e=",
        match=("tox -e py312",),
        not_match=("tox --workdir=/tmp/x",),
    ),
    Spec(
        "coverage",
        "--data-file= -o= -d= --directory=  !out\n--rcfile=  !exec reads a configuration of the "
        "command line's choosing",
        match=("coverage run -m pytest", "coverage html -d htmlcov"),
        not_match=("coverage html -d /tmp/h", "coverage xml -o /tmp/c.xml"),
    ),
    Spec(
        "mypy",
        "--cache-dir= --junit-xml= --html-report= --txt-report= --xml-report= --linecount-report= "
        "--any-exprs-report= --lineprecision-report= --cobertura-xml-report=  !out\n--config-file=",
        match=("mypy src", "mypy --cache-dir .mypy_cache src"),
        not_match=("mypy --cache-dir=/tmp/m src",),
    ),
    Spec(
        "ruff",
        "--cache-dir= -o= --output-file=  !out\n--config=",
        match=("ruff check src",),
        not_match=("ruff check -o /tmp/r src", "ruff check --output-f=/tmp/r src"),
    ),
    Spec(
        "curl",
        """
        -o= --output= -O --remote-name --remote-name-all -D= --dump-header= -c= --cookie-jar=  !write writes a file
        --trace= --trace-ascii= --libcurl= --stderr= --output-dir= -J --remote-header-name  !write writes a file
        -K= --config=                  !exec reads options from a file of the command line's choosing
        -T= --upload-file=             !write uploads a file
        -d= --data= --data-binary= --data-raw= --data-urlencode= -F= --form= -H= --header= -u= --user=
        -X= --request= -A= --user-agent= -e= --referer= -b= --cookie= -m= --max-time= -w= --write-out=
        """,
        match=("curl -s https://example.com",),
        not_match=(
            "curl -o /tmp/x https://example.com",
            "curl -sSo x https://e",
            "curl --out x https://e",
            "curl -K cfg https://e",
            "curl --upload-f x https://e",
        ),
    ),
    Spec(
        "ssh",
        "-F=  !exec reads a configuration (ProxyCommand) of the command line's choosing\n"
        "-o= -i= -p= -l= -L= -R= -D= -J= -E= -S= -W= -b= -c= -e= -m= -O= -Q= -w= -B=",
        check="ssh",
        match=("ssh host uptime",),
        not_match=(
            "ssh -o ProxyCommand=id host",
            "ssh -oProxyCommand=id host",
            "ssh -F cfg host",
            "ssh -o 'LocalCommand id' -o PermitLocalCommand=yes host",
        ),
    ),
    Spec(
        "find",
        "",
        check="find",
        read_only=True,
        match=("find . -name '*.py'", "find src -type f"),
        not_match=(
            "find . -exec rm {} ;",
            "find . -delete",
            "find . -fprint x",
            "find . -execdir id ;",
            "find . -fls x",
            "find . -ok id ;",
        ),
    ),
    Spec(
        "sed",
        """
        -i --in-place[=]            !write changes files
        -f= --file=                 !exec runs a script from a file
        -e= --expression=
        -n --quiet --silent
        -E -r --regexp-extended
        -s --separate
        -z --null-data
        -u --unbuffered
        -l= --line-length=
        --posix --debug --sandbox --follow-symlinks -b --binary --help --version
        """,
        check="sed",
        match=("sed -n 1,5p README.md", "sed s/a/b/g README.md", "sed -e s/a/b/ README.md"),
        not_match=(
            "sed -i s/a/b/ README.md",
            "sed -ni s/a/b/ README.md",
            "sed --in-pl s/a/b/ README.md",
            "sed -n 'w x' README.md",
            "sed 'e id' README.md",
            "sed s/a/b/e README.md",
            "sed -f x.sed README.md",
            "sed -nf x.sed README.md",
            "sed --fi=x.sed README.md",
        ),
    ),
    *(
        Spec(
            name,
            """
        -f= --file=                 !exec runs a program from a file
        -i= --include=              !exec loads a program from a file
        -l= --load=                 !exec loads an extension
        -E= --exec=                 !exec runs a program from a file
        -o --pretty-print[=]        !write writes a file
        -p --profile[=]             !write writes a file
        -d --dump-variables[=]      !write writes a file
        -D --debug[=]               !unsafe starts a debugger
        -e= --source=
        -v= --assign=
        -F= --field-separator=
        -b -c -C -g -h -L -M -n -N -O -P -r -s -S -t -V
        --characters-as-bytes --traditional --copyright --gen-pot --help --lint[=] --bignum --use-lc-numeric
        --non-decimal-data --optimize --posix --re-interval --no-optimize --sandbox --lint-old --version
        """,
            check="awk",
            match=(f"{name} '{{print $1}}' README.md", f"{name} -F, '{{print $2}}' README.md"),
            not_match=(
                f"{name} 'BEGIN{{system(\"id\")}}'",
                f"{name} '{{print > \"/tmp/x\"}}' README.md",
                f"{name} -f x.awk README.md",
                f"{name} --fi=x.awk README.md",
                f"{name} -e 'BEGIN{{system(\"id\")}}'",
                f"{name} --so='BEGIN{{system(\"id\")}}'",
                f"{name} 'BEGIN{{print ENVIRON[\"HOME\"]}}'",
            ),
        )
        for name in ("awk", "gawk", "mawk", "nawk")
    ),
    Spec(
        "tar",
        """
        --to-command= --use-compress-program= -I=      !exec runs a program of the command line's choosing
        --checkpoint-action= -F= --info-script=        !exec runs a program of the command line's choosing
        --new-volume-script= --rsh-command= --rmt-command=  !exec runs a program of the command line's choosing
        -t --list
        -f= --file= -C= --directory= -T= --files-from= -X= --exclude-from= --exclude= -b= --blocking-factor=
        -H= --format= -g= --listed-incremental= -K= --starting-file= -N= --newer= -V= --label=
        """,
        check="tar",
        match=("tar tf x.tar", "tar -tzf x.tgz"),
        not_match=(
            "tar -cf /tmp/x.tar .",
            "tar xf x.tar",
            "tar -tf x.tar --to-command=id",
            "tar -tf x.tar --to-c=id",
            "tar -t -I id -f x.tar",
        ),
    ),
    *(
        Spec(
            name,
            "--pager= -P= -H[=] --html[=] -l --local-file -t --troff -T[=] --troff-device[=] -X[=] -Z --ditroff  "
            "!exec runs a pager or formatter of the command line's choosing",
            match=("man ls",),
            not_match=("man -P id ls", "man --pag=id ls", "man -Pid ls"),
        )
        for name in ("man",)
    ),
]
