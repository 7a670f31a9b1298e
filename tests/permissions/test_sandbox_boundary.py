"""The OS is the boundary for what runs without asking (issue 22, part B), attacked end to end.

The fake server plays an attacker: its tool calls try to write through /proc, /dev/shm, symbolic links
and FIFOs, to read ~/.ssh and other tools' credentials by path tricks, to remount the file system, to
fork-bomb and fill the disk. Through the library and `kimicode -p`, with bubblewrap and with bwrap
"missing" (KIMICODE_BWRAP=""), every attempt must fail or ask, the harmless forms must run, and the
user and the model must be told what the sandbox blocked.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import headless_json, sent_tool_results

from kimicode.events import Notice
from kimicode.permissions.engine import decide
from kimicode.permissions.policy import Policy, load_rules
from kimicode.permissions.toolchains import ENV_VARIABLES
from kimicode.testing import FakeServer, Reply, ToolCall
from kimicode.tools.base import ToolContext
from kimicode.tools.sandbox import probe
from kimicode.tools.shell import BASH

pytestmark = pytest.mark.prepush  # the sandbox boundary (bubblewrap): the pre-push tier (README)

MakeAgent = Callable[..., Any]
STATUS = probe()
needs_bwrap = pytest.mark.skipif(not STATUS.available, reason=f"bubblewrap cannot run here: {STATUS.reason}")


def run_calls(server: FakeServer, make_agent: MakeAgent, commands: list[str], **opts: Any) -> tuple[list[str], Any]:
    server.add(
        Reply(tool_calls=[ToolCall("bash", {"command": c, "timeout": 20}) for c in commands]), Reply(content="ok")
    )
    seen: list[Any] = []
    agent = make_agent(on_event=seen.append, **opts)
    agent.run_sync("x")
    return sent_tool_results(server), [e for e in seen if isinstance(e, Notice)]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake user home with credentials (ssh key, other agents' tokens, shell history)."""
    user = tmp_path / "user"
    for rel, text in {
        ".ssh/id_rsa": "PRIVATE-KEY-MATERIAL",
        ".codex/auth.json": '{"token": "CODEX-TOKEN"}',
        ".claude/.credentials.json": '{"token": "CLAUDE-TOKEN"}',
        ".kimi/credentials/kimi.json": "KIMI-TOKEN",
        ".bash_history": "export SECRET=HISTORY-TOKEN",
        ".gitconfig": "[user]\n\tname = Tester\n\temail = t@example.com\n",
        "notes/private.txt": "HOME-NOTES",
    }.items():
        path = user / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    monkeypatch.setenv("HOME", str(user))
    monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin:/bin")  # the runner's own toolchain (pyenv under
    for name in ENV_VARIABLES:  # /root, say) would be shown, as the user's is
        monkeypatch.delenv(name, raising=False)
    return user


# -- decisions: which sandbox, and what reading outside the workspace does ---------------------------------


def _ctx_policy(ws: Path, home: Path, rules: Any = None, **kw: Any) -> tuple[ToolContext, Policy]:
    policy = Policy(rules or load_rules(()), kimicode_home=home / ".kimicode", user_home=home, workspace=ws, **kw)
    return ToolContext(workspace=ws), policy


def test_the_read_only_allowance_runs_in_the_read_only_profile(workspace: Path, home: Path) -> None:
    ctx, policy = _ctx_policy(workspace, home, load_rules((), allow=["bash(make build)"]))
    for line, profile in [
        ("ls -la", "read-only"),
        ("git log --oneline -3 | head -2", "read-only"),
        ("make build", "workspace-write"),  # a user rule admits it
        ("make build && ls", "workspace-write"),
    ]:
        decision = decide(BASH, {"command": line}, "default", ctx, policy)
        assert (decision.verdict, decision.profile) == ("allow", profile), line
    decision = decide(BASH, {"command": "cat README > copy.txt"}, "accept-edits", ctx, policy)
    assert (decision.verdict, decision.profile) == ("allow", "workspace-write")  # the mode admits the write
    assert decide(BASH, {"command": "touch x"}, "yolo", ctx, policy).profile == "workspace-write"


def test_reading_outside_the_workspace_asks_unless_visible(workspace: Path, home: Path) -> None:
    policy = _ctx_policy(workspace, home)[1]
    (workspace.parent / "elsewhere.txt").write_text("x")
    asks = [
        home / "notes/private.txt",
        home / ".codex/auth.json",
        home / ".claude/.credentials.json",
        home / ".kimi/credentials/kimi.json",
        home / ".bash_history",
        workspace / ".zsh_history",
        Path("/etc/shadow"),
        workspace.parent / "elsewhere.txt",
    ]
    runs = [workspace / "a.txt", Path("/usr/bin/env"), Path("/etc/hostname"), home / ".gitconfig"]
    for path in asks:
        assert policy.sensitive(path), path
    for path in runs:
        assert policy.sensitive(path) is None, path
    assert policy.sensitive(workspace.parent / "not-there.txt") is None  # nothing to read (a URL's //host)
    opened = _ctx_policy(workspace, home, load_rules((), allow=[f"read({home}/notes/**)"]))[1]
    assert opened.sensitive(home / "notes/private.txt") is None  # a read(...) rule adds a place


def test_bash_arguments_outside_the_visible_list_ask(workspace: Path, home: Path) -> None:
    ctx, policy = _ctx_policy(workspace, home)
    for line in [
        "cat ~/notes/private.txt",
        "cat ~/.codex/auth.json",
        "head ~/.bash_history",
        f"cat {home}/../user/.ssh/id_rsa",
        "ls ~/",
    ]:
        assert decide(BASH, {"command": line}, "default", ctx, policy).verdict == "ask", line
    assert decide(BASH, {"command": "ls /usr/bin"}, "default", ctx, policy).verdict == "allow"


# -- with bubblewrap: the attacks, through the library ------------------------------------------------------


@needs_bwrap
def test_yolo_attacks_stay_inside(server: FakeServer, make_agent: MakeAgent, workspace: Path, home: Path) -> None:
    shm = Path("/dev/shm") / f"kimicode-attack-{os.getpid()}"
    host_tmp = Path("/var/tmp") / f"kimicode-attack-{os.getpid()}"
    (workspace / "keylink").symlink_to(home / ".ssh" / "id_rsa")
    (workspace / "etclink").symlink_to("/etc/hostname")
    attacks = [
        "cat ~/.ssh/id_rsa; cat /proc/self/root/$HOME/.ssh/id_rsa; cat keylink; cat $HOME/../user/.ssh/id_rsa",
        "cat ~/.codex/auth.json ~/.claude/.credentials.json ~/.kimi/credentials/kimi.json ~/.bash_history",
        "ls -a ~ ; cat ~/notes/private.txt",
        "echo pwned > etclink; echo pwned > /proc/self/root/etc/kimicode-pwned; echo pwned > /proc/1/root/etc/x",
        f"echo pwned > {shm} && cat {shm}",
        f"mkfifo {host_tmp}; echo pwned > {host_tmp}",
        "mount -o remount,rw / ; mount -t tmpfs none /etc; unshare -r true; echo done",
        "cat /etc/shadow; ls /run /root 2>&1 | head -3",
        "echo fine > inside.txt && cat inside.txt",
    ]
    texts, notices = run_calls(server, make_agent, attacks, permission_mode="yolo")
    joined = "\n".join(texts)
    for secret in (
        "PRIVATE-KEY-MATERIAL",
        "CODEX-TOKEN",
        "CLAUDE-TOKEN",
        "KIMI-TOKEN",
        "HISTORY-TOKEN",
        "HOME-NOTES",
        "root:",
    ):
        assert secret not in joined, secret
    assert not Path("/etc/kimicode-pwned").exists() and Path("/etc/hostname").read_text() != "pwned\n"
    assert not shm.exists() and not host_tmp.exists()
    assert "pwned" in texts[4]  # /dev/shm is the sandbox's own
    assert texts[-1] == "fine\n[exit code: 0]"
    assert "[sandbox (workspace-write): writing" in texts[3] and "only the workspace is writable" in texts[3]
    assert any("sandbox blocked" in n.text and n.level == "warning" for n in notices)


@needs_bwrap
def test_a_gap_in_the_program_table_cannot_write(
    server: FakeServer, make_agent: MakeAgent, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pretend the table wrongly calls `touch` read-only: it then runs without asking, in default mode,
    and still writes nothing (the read-only profile), and the model is told why."""
    import kimicode.permissions.bashcheck as bashcheck
    from kimicode.permissions.programs import Analysis

    real = bashcheck.analyze
    monkeypatch.setattr(bashcheck, "analyze", lambda argv: Analysis() if argv[:1] == ["touch"] else real(argv))
    texts, notices = run_calls(server, make_agent, ["touch made-by-a-gap"])
    assert not (workspace / "made-by-a-gap").exists()
    assert "Read-only file system" in texts[0] and "admitted without asking as read-only" in texts[0]
    assert [n.text for n in notices if "sandbox blocked" in n.text]


@needs_bwrap
def test_git_commit_works_under_yolo_and_git_hooks_stay_read_only(
    server: FakeServer, make_agent: MakeAgent, workspace: Path, home: Path
) -> None:
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    (workspace / "a.txt").write_text("a\n")
    texts, notices = run_calls(
        server,
        make_agent,
        [
            "git add a.txt && git commit -qm first && git log --oneline | wc -l",
            "echo 'touch /tmp/pwned' > .git/hooks/post-checkout",
            "git config core.fsmonitor 'touch pwned'",
        ],
        permission_mode="yolo",
    )
    assert texts[0].startswith("1\n") and texts[0].endswith("[exit code: 0]")
    assert not (workspace / ".git" / "hooks" / "post-checkout").exists()
    assert ".git/hooks stays read-only" in texts[1] and ".git/config stays read-only" in texts[2]
    assert "fsmonitor" not in (workspace / ".git" / "config").read_text()
    assert sum("sandbox blocked" in n.text for n in notices) == 2


@needs_bwrap
def test_a_forks_own_worktree_is_writable_by_its_agent(
    server: FakeServer, make_agent: MakeAgent, workspace: Path, home: Path
) -> None:
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    (workspace / "a.txt").write_text("a\n")
    subprocess.run(["git", "-C", str(workspace), "add", "a.txt"], check=True)
    subprocess.run(["git", "-C", str(workspace), "commit", "-qm", "base"], check=True)
    server.add(Reply(content="first"))
    parent = make_agent(permission_mode="yolo")
    parent.run_sync("x")
    fork = parent.fork(workspace="worktree")
    assert fork.workspace != workspace
    server.add(
        Reply(
            tool_calls=[
                ToolCall(
                    "bash",
                    {
                        "command": "echo b > b.txt && git add b.txt && "
                        "git commit -qm in-fork && git log --oneline | wc -l"
                    },
                ),
                ToolCall("bash", {"command": "echo x >> $(git rev-parse --git-common-dir)/config"}),
                ToolCall("bash", {"command": "echo 'gitdir: /tmp' > .git"}),
            ]
        ),
        Reply(content="ok"),
    )
    fork.run_sync("y")
    commit, config, repoint = sent_tool_results(server)
    assert commit.startswith("2\n") and commit.endswith("[exit code: 0]"), commit
    assert "Read-only file system" in config
    assert "Read-only file system" in repoint and (fork.workspace / ".git").read_text().startswith("gitdir: /")
    assert (fork.workspace / ".git").read_text().split(" ", 1)[1] != "/tmp\n"
    assert (
        subprocess.run(["git", "-C", str(workspace), "log", "--oneline"], capture_output=True, text=True).stdout.count(
            "\n"
        )
        == 1
    )  # the user's branch did not move


@needs_bwrap
def test_a_fork_bomb_leaves_kimicode_answering(server: FakeServer, make_agent: MakeAgent, workspace: Path) -> None:
    server.add(
        Reply(tool_calls=[ToolCall("bash", {"command": "b(){ b|b& }; b; sleep 3; echo survived", "timeout": 8})]),
        Reply(content="after the bomb"),
        Reply(tool_calls=[ToolCall("bash", {"command": "echo still-here"})]),
        Reply(content="done"),
    )
    (workspace / ".kimicode").mkdir()
    (workspace / ".kimicode" / "config.toml").write_text("[sandbox]\nmax_processes = 64\n")
    agent = make_agent(permission_mode="yolo")
    first = agent.run_sync("bomb")
    second = agent.run_sync("again")
    assert first.result == "after the bomb" and second.result == "done"
    assert "still-here\n[exit code: 0]" in sent_tool_results(server)[-1]
    assert not [p for p in Path("/sys/fs/cgroup/pids").glob(f"kimicode-{os.getpid()}-*")]  # cleaned up


@needs_bwrap
def test_filling_the_disk_and_memory_hit_the_limits(server: FakeServer, make_agent: MakeAgent, workspace: Path) -> None:
    (workspace / ".kimicode").mkdir()
    (workspace / ".kimicode" / "config.toml").write_text(
        "[sandbox]\nmax_file_size_mb = 8\nmax_memory_mb = 200\nmax_cpu_seconds = 2\n"
    )
    texts, _ = run_calls(
        server,
        make_agent,
        [
            "head -c 20000000 /dev/zero > big.bin; ls -l big.bin | awk '{print $5}'",
            "for i in 1 2 3; do head -c 5000000 /dev/zero > /tmp/f$i || echo tmp-full; done",
            "python3 -c 'x = bytearray(400 * 2**20)' 2>&1 | tail -1",
            "python3 -c 'while True: pass'",
            "ulimit -f unlimited 2>&1 || echo cannot-raise",
        ],
        permission_mode="yolo",
    )
    size = int(texts[0].split("\n")[-2]) if texts[0].split("\n")[-2].isdigit() else int(texts[0].split()[0])
    assert size <= 8 * 1024 * 1024
    assert "tmp-full" in texts[1]
    assert "MemoryError" in texts[2]
    assert "[sandbox: the command was killed by SIGXCPU" in texts[3]
    assert "cannot-raise" in texts[4]


# -- through `kimicode -p`, with and without bubblewrap ------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("bwrap", ["present", "missing"])
def test_headless_attacker_default_mode(
    server: FakeServer, workspace: Path, home: Path, tmp_path: Path, bwrap: str
) -> None:
    if bwrap == "present" and not STATUS.available:
        pytest.skip(STATUS.reason)
    (workspace / "a.txt").write_text("hello\n")
    steps = [
        "cat ~/.ssh/id_rsa",  # asks (headless: refused)
        "cat ~/.codex/auth.json",
        "cat a.txt",  # the harmless form runs either way
        "git --no-pager log --oneline -1",  # read-only allowance: runs sandboxed, asks without bwrap
        "ls",
    ]
    server.add(Reply(tool_calls=[ToolCall("bash", {"command": c}) for c in steps]), Reply(content="ok"))
    extra = {"KIMICODE_BWRAP": ""} if bwrap == "missing" else {}
    _, result, stderr = headless_json(server, tmp_path / "kc", workspace, timeout=90, HOME=str(home), **extra)
    texts = sent_tool_results(server)
    assert "PRIVATE-KEY-MATERIAL" not in texts[0] and "CODEX-TOKEN" not in texts[1]
    assert texts[0].startswith("Permission denied") and texts[1].startswith("Permission denied")
    assert texts[2] == "hello\n[exit code: 0]" and texts[4].endswith("[exit code: 0]")
    denied = [d["tool_input"]["command"] for d in result["permission_denials"]]
    if bwrap == "missing":
        assert "git --no-pager log --oneline -1" in denied and "short list" in texts[3]
        assert "sandbox is not available" in stderr
    else:
        assert "git --no-pager log --oneline -1" not in denied


@pytest.mark.slow
@needs_bwrap
def test_headless_yolo_reports_a_blocked_path_on_stderr(
    server: FakeServer, workspace: Path, home: Path, tmp_path: Path
) -> None:
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    server.add(
        Reply(
            tool_calls=[
                ToolCall("bash", {"command": "echo evil > .git/hooks/pre-commit"}),
                ToolCall("bash", {"command": "echo x > a.txt && git add a.txt && git commit -qm m && echo committed"}),
            ]
        ),
        Reply(content="ok"),
    )
    code, _, stderr = headless_json(server, tmp_path / "kc", workspace, "--yolo", timeout=90, HOME=str(home))
    hook, commit = sent_tool_results(server)
    assert code == 0 and "committed" in commit
    lines = [line for line in stderr.splitlines() if "sandbox blocked" in line]
    assert len(lines) == 1 and ".git/hooks" in lines[0] and "pre-commit" in lines[0]
    assert ".git/hooks stays read-only" in hook


TECHNIQUES = [
    "echo pwned > {f}",
    "echo pwned >> {f}",
    "ln -s {f} l1 && echo pwned > l1",
    "ln {f} h1 && echo pwned > h1",  # a hard link across the mount: EXDEV
    "echo pwned > /proc/self/root{f}",
    "echo pwned > /proc/1/root{f}",
    "cd {d} && echo pwned > sentinel.txt",
    "echo pwned | tee {f}",
    "cp /etc/hostname {f}",
    "mv {f} {d}/moved.txt",
    "rm -f {f}",
    "dd if=/dev/zero of={f} bs=1 count=1 2>&1",
    "python3 -c \"open('{f}', 'w').write('pwned')\"",
    "truncate -s 0 {f}",
    "chmod 777 {f}",
    "touch -d 2000-01-01 {f}",
    "mkfifo {d}/fifo",
    "mkdir {d}/new",
    "mount --bind . {d}",
    "unshare -rm sh -c 'mount -o remount,rw {d} && echo pwned > {f}'",
]


@needs_bwrap
@pytest.mark.parametrize("mode", ["yolo", "default"])
def test_every_way_of_writing_a_visible_file_outside_fails(
    server: FakeServer, make_agent: MakeAgent, tmp_path: Path, mode: str
) -> None:
    """A place made visible by a read(...) rule is shown read-only: each technique, run without asking
    (yolo: workspace-write; default: a bash rule admits it), leaves it as it was."""
    outside = tmp_path / "outside"
    outside.mkdir()
    sentinel = outside / "sentinel.txt"
    sentinel.write_text("original\n")
    commands = [t.format(f=sentinel, d=outside) for t in TECHNIQUES]
    rules = [f"read({outside}/**)"] + (["bash"] if mode == "default" else [])
    texts, _ = run_calls(server, make_agent, commands, permission_mode=mode, allow=rules)
    ran = [t for t in texts if not t.startswith("Permission denied")]  # the rest the rules still refused
    assert len(texts) == len(TECHNIQUES) and len(ran) >= (len(TECHNIQUES) if mode == "yolo" else 10)
    assert sentinel.read_text() == "original\n" and sorted(p.name for p in outside.iterdir()) == ["sentinel.txt"]
    assert oct(sentinel.stat().st_mode & 0o777) != "0o777"
    assert "original" in run_calls_text(server, make_agent, f"cat {sentinel}", mode, rules)  # visible


def run_calls_text(server: FakeServer, make_agent: MakeAgent, command: str, mode: str, rules: list[str]) -> str:
    texts, _ = run_calls(server, make_agent, [command], permission_mode=mode, allow=rules)
    return texts[0]


@needs_bwrap
def test_a_workspace_inside_the_home_sees_the_toolchains_and_not_the_rest(home: Path) -> None:
    """The usual layout (~/project): the home is a private tmpfs with git's config and toolchains bound
    in, the project bound over it; ~/.ssh and ~/notes are not there."""
    from kimicode.tools.sandbox import Sandbox

    project = home / "project"
    project.mkdir()
    (home / ".local" / "bin").mkdir(parents=True)
    (home / ".local" / "bin" / "mytool").write_text("#!/bin/sh\necho TOOL\n")
    wrapped = Sandbox(project, str(STATUS.bwrap), user_home=home).wrap(
        ["/bin/bash", "-c", "ls -a ~; cat ~/.local/bin/mytool ~/.gitconfig; cat ~/.ssh/id_rsa ~/notes/private.txt"],
        "read-only",
    )
    done = subprocess.run(wrapped, capture_output=True, text=True, cwd=project, timeout=30)
    listing = done.stdout.split()
    assert "project" in listing and ".gitconfig" in listing and ".local" in listing
    assert ".ssh" not in listing and "notes" not in listing and ".codex" not in listing
    assert "echo TOOL" in done.stdout and "name = Tester" in done.stdout
    assert "PRIVATE-KEY-MATERIAL" not in done.stdout and "HOME-NOTES" not in done.stdout
