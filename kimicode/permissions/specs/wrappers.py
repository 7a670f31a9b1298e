"""Wrappers: programs that run the command in their operands (`sudo -u x nice -n 5 rm y` runs `rm y`).

Deny and ask rules are matched against the command behind each wrapper, and a wrapper is never
read-only (`kimicode.permissions.programs.unwrap`). Each table lists the options that take an argument,
so the command is found after them; `runs` is how many operands come before it (`timeout 5 cmd`).
"""

from __future__ import annotations

from kimicode.permissions.optparse import Spec


def _wrap(name: str, options: str = "", runs: int = 0, **kw: object) -> Spec:
    return Spec(name, options, posix=True, runs=runs, **kw)  # type: ignore[arg-type]


SPECS = [
    *(
        _wrap(name)
        for name in (
            "command",
            "builtin",
            "nohup",
            "setsid",
            "caffeinate",
            "busybox",
            "unshare",
            "taskset",
            "chrt",
            "unbuffer",
            "torsocks",
            "firejail",
            "valgrind",
            "numactl",
            "prlimit",
            "catchsegv",
            "dbus-launch",
        )
    ),
    _wrap("exec", "-a=\n-c\n-l", always="`exec` replaces the shell"),
    _wrap(
        "env",
        "-u= --unset=\n-C= --chdir=\n-S= --split-string=\n-i --ignore-environment\n-0 --null\n-v --debug\n"
        "--block-signal[=] --default-signal[=] --ignore-signal[=] --list-signal-handling",
    ),
    _wrap(
        "sudo",
        "-u= --user=\n-g= --group=\n-C= --close-from=\n-D= --chdir=\n-h= --host=\n-p= --prompt=\n"
        "-r= --role=\n-t= --type=\n-U= --other-user=\n-T= --command-timeout=",
    ),
    _wrap("doas", "-u=\n-C="),
    _wrap("nice", "-n= --adjustment=", numeric=True),
    _wrap("ionice", "-c= --class=\n-n= --classdata=\n-p= --pid=\n-P= --pgid=\n-u= --uid="),
    _wrap(
        "time",
        "-f= --format=\n-o= --output=  !write writes its report to a file\n-a --append\n-p --portability\n"
        "-v --verbose\n-q --quiet",
    ),
    _wrap("timeout", "-k= --kill-after=\n-s= --signal=\n--preserve-status --foreground -v --verbose", runs=1),
    _wrap("stdbuf", "-i= --input=\n-o= --output=\n-e= --error="),
    _wrap(
        "xargs",
        "-a= --arg-file=\n-d= --delimiter=\n-E= -e[=] --eof[=]\n-I= -i[=] --replace[=]\n"
        "-L= -l[=] --max-lines[=]\n-n= --max-args=\n-P= --max-procs=\n-s= --max-chars=\n--process-slot-var=\n"
        "-0 --null -o --open-tty -p --interactive -r --no-run-if-empty -t --verbose -x --exit --show-limits",
    ),
    _wrap("chroot", "--userspec= --groups= --skip-chdir", runs=1),
    _wrap(
        "flock",
        "-w= --timeout= --wait=\n-E= --conflict-exit-code=\n-c= --command=\n-s --shared -x -e --exclusive "
        "-u --unlock -n --nb --nonblock -o --close -F --no-fork --verbose",
        runs=1,
    ),
    _wrap(
        "watch",
        "-n= --interval=\n-d --differences[=]\n-q= --equexit=\n-x --exec -t --no-title -b --beep "
        "-e --errexit -g --chgexit -c --color -C --no-color -p --precise -w --no-wrap -r --no-rerun",
    ),
    _wrap("strace", "-o= -e= -p= -s= -u= -a= -b= -E= -I= -O= -P= -S= -X=  !unsafe traces (and writes) where it says"),
    _wrap("ltrace", "-o= -e= -p= -s= -u= -a= -A= -D= -E= -F= -l= -n= -x=  !unsafe traces (and writes) where it says"),
    _wrap(
        "runuser",
        "-u= --user=\n-g= --group=\n-G= --supp-group=\n-s= --shell=\n-c= --command=\n-w= "
        "--whitelist-environment=\n-l --login -m -p --preserve-environment -P --pty",
    ),
    _wrap(
        "su",
        "-c= --command=\n-s= --shell=\n-g= --group=\n-G= --supp-group=\n-w= --whitelist-environment=\n"
        "-l --login -m -p --preserve-environment -P --pty -f --fast",
    ),
    _wrap(
        "script",
        "-c= --command=\n-E= --echo=\n-I= --log-in=\n-O= --log-out=\n-B= --log-io=\n-T= --log-timing=\n"
        "-m= --logging-format=\n-o= --output-limit=\n-a --append -e --return -f --flush --force -q --quiet",
    ),
    _wrap("parallel", "-j= --jobs=\n-S= --sshlogin=\n--delay= --timeout=\n-n= -N= -L="),
    _wrap("proxychains", "-f=\n-q"),
    _wrap("proxychains4", "-f=\n-q"),
    _wrap(
        "systemd-run",
        "-p= --property=\n-u= --unit=\n-E= --setenv=\n--uid= --gid= --working-directory= "
        "--description= --slice= -M= --machine= -H= --host=",
    ),
    _wrap(
        "xvfb-run", "-s= --server-args=\n-n= --server-num=\n-f= --auth-file=\n-e= --error-file=\n-a --auto-servernum"
    ),
    _wrap("pkexec", "--user="),
    _wrap("nsenter", "-t= --target="),
    _wrap("sg", "", runs=1),
]
WRAPPERS = frozenset(s.name for s in SPECS)
