"""Helpers shared by the tests (importable as `helpers` from every directory of tests/: pyproject's
`[tool.pytest.ini_options] pythonpath` puts tests/ on the path).

The repository's places, named once (tests live one or two directories down, so none computes them itself).

One history-validity checker for every test: what a chat-completions server refuses, said as problems."""

from __future__ import annotations

import itertools
import json
import os
import random
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kimicode import Agent, tool
from kimicode.agent.modes import noted_mode
from kimicode.testing import FakeServer, Reply, ToolCall
from kimicode.testing.replies import RecordedRequest

ROOT = Path(__file__).resolve().parents[1]
"""The repository's root (pyproject.toml, README.md, docs/, kimicode/)."""
TESTS = ROOT / "tests"
FIXTURES = TESTS / "fixtures"
"""Recorded streams, ACP exchanges, hooks, prompt snapshots, third-party setups."""
MCP_DEMO = TESTS / "mcp" / "demo_server.py"
"""A real stdio MCP server written with the official SDK, for the tests that start one."""


def history_problems(
    messages: list[dict[str, Any]], *, system_first: bool = False, alternating: bool = False
) -> list[str]:
    """What a strict chat-completions server would reject in `messages`, one sentence per problem: a tool
    result without its call (or twice), a message before every call of the assistant message before it has
    its result, a call left without a result, a call without an id or with its message's other call's id, an
    unknown role; with `system_first`, a history that does not
    start with the system prompt; with `alternating`, two user messages in a row (strict servers refuse them;
    the permission-mode note that follows a prompt is the one allowed)."""
    problems: list[str] = []
    if system_first and (not messages or messages[0].get("role") != "system"):
        problems.append("the history does not start with the system prompt")
    open_calls: list[str] = []
    previous = None
    for i, message in enumerate(messages):
        role = message.get("role")
        if role not in ("system", "user", "assistant", "tool"):
            problems.append(f"message {i}: unknown role {role!r}")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id in open_calls:
                open_calls.remove(call_id)
            else:
                problems.append(f"message {i}: a tool result for {call_id!r} without its call")
        else:
            if open_calls:
                problems.append(f"message {i} ({role}) comes before the results of {open_calls}")
                open_calls = []
            if alternating and role == "user" and previous == "user" and noted_mode(message) is None:
                problems.append(f"message {i}: two user messages in a row")
            if role == "assistant":
                open_calls = [str(c.get("id") or "") for c in message.get("tool_calls") or ()]
                if "" in open_calls:
                    problems.append(f"message {i}: a tool call without an id")
                if len(set(open_calls)) < len(open_calls):
                    problems.append(f"message {i}: two tool calls with the same id")
        previous = role
    if open_calls:
        problems.append(f"the calls {open_calls} have no result")
    return problems


def valid_history(messages: list[dict[str, Any]], **kw: Any) -> bool:
    """True when `history_problems` finds nothing (for `assert valid_history(...)`)."""
    return not history_problems(messages, **kw)


def assert_valid_history(messages: list[dict[str, Any]], **kw: Any) -> None:
    """Fail naming every problem `history_problems` finds."""
    problems = history_problems(messages, **kw)
    assert not problems, "; ".join(problems)


def lib_agent(server: FakeServer, tmp_path: Path, **kw: Any) -> Agent:
    """A hermetic library agent pointed at the fake server (as a harness builds one): workspace
    `tmp_path/ws`, home `tmp_path/home`, fast retries."""
    ws = tmp_path / "ws"
    ws.mkdir(parents=True, exist_ok=True)
    settings: dict[str, Any] = {
        "base_url": server.base_url,
        "api_key": "sk-test",
        "workspace": ws,
        "home": tmp_path / "home",
        "retry_base_delay": 0.01,
    }
    settings.update(kw)
    return Agent(**settings)


# -- the installed command -----------------------------------------------------------------------------

TEST_KEY = "sk-test-secret"
"""The API key the child processes get (tests check it never reaches a log, an output or a command)."""
OWN_VARIABLES = ("KIMI_", "MOONSHOT_", "OPENAI_", "KIMICODE_")
"""kimicode's own environment variables: a test's child process never inherits the developer's."""


def kimicode_command() -> list[str]:
    """The installed `kimicode` console script (next to this Python), else `python -m kimicode`."""
    script = Path(sys.executable).parent / "kimicode"
    if script.exists():
        return [str(script)]
    found = shutil.which("kimicode")
    return [found] if found else [sys.executable, "-m", "kimicode"]


def command_env(home: Path, server: FakeServer | None = None, *, key: str = TEST_KEY, **extra: str) -> dict[str, str]:
    """The environment for the installed `kimicode` run as a child process: this one's without kimicode's
    own variables, `home` as KIMICODE_HOME, fast retries, and with a `server`, its address and `key`;
    `extra` last (e.g. `HOME=...`, or `KIMICODE_RETRY_BASE_DELAY=...` to change the retries)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(OWN_VARIABLES)}
    env.update(KIMICODE_HOME=str(home), KIMICODE_RETRY_BASE_DELAY="0.01")
    if server is not None:
        env.update(KIMI_API_KEY=key, KIMI_BASE_URL=server.base_url)
    env.update(extra)
    return env


def headless_json(
    server: FakeServer,
    home: Path,
    cwd: Path,
    *args: str,
    prompt: str = "x",
    key: str = TEST_KEY,
    timeout: float = 60,
    **extra: str,
) -> tuple[int, dict[str, Any], str]:
    """Run `kimicode -p PROMPT --output-format json ARGS` in `cwd` against `server` (environment as
    `command_env`); (exit code, the result object or {} when stdout is empty, stderr). A traceback fails."""
    done = subprocess.run(
        [*kimicode_command(), "-p", prompt, "--output-format", "json", *args],
        env=command_env(home, server, key=key, **extra),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else {}, done.stderr


def run_app(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run the kimicode command line in this process (as `kimicode ARGS`); (exit code, stdout, stderr)."""
    from kimicode.cli.app import app

    try:
        code = app(args=args, prog_name="kimicode", standalone_mode=False)
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    return int(code or 0), captured.out, captured.err


# -- scripts for the fake server and what came back ----------------------------------------------------


def bash_turn(server: FakeServer, cmd: str) -> None:
    """Script one turn that runs `cmd` with the bash tool, then answers "done"."""
    server.add(Reply(tool_calls=[ToolCall("bash", {"command": cmd})]), Reply(content="done"))


def tool_results(messages: list[dict[str, Any]]) -> list[str]:
    """The contents of the tool results in `messages`, in order."""
    return [m["content"] for m in messages if m["role"] == "tool"]


def sent_tool_results(server: FakeServer) -> list[str]:
    """The tool results the last request to `server` carried."""
    return tool_results(server.requests[-1].body["messages"])


def last_tool_result(request: RecordedRequest) -> str:
    """The last tool result `request` carried."""
    return next(m["content"] for m in reversed(request.body["messages"]) if m["role"] == "tool")


# -- the machine ---------------------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on (free when asked)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def git(ws: Path, *args: str) -> str:
    """Run git in `ws` with a fixed author and none of the caller's GIT_ variables; its stdout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_AUTHOR_NAME="u", GIT_AUTHOR_EMAIL="u@x", GIT_COMMITTER_NAME="u", GIT_COMMITTER_EMAIL="u@x")
    return subprocess.run(["git", *args], cwd=ws, env=env, check=True, capture_output=True, text=True).stdout


def tiny_fs_problem(tmp: Path) -> str | None:
    """None when bubblewrap can mount a size-limited tmpfs here (a real full disk), else why not."""
    if shutil.which("bwrap") is None:
        return "bubblewrap (bwrap) is not installed"
    mnt = tmp / "probe"
    mnt.mkdir()
    proc = subprocess.run(
        [
            "bwrap",
            "--dev-bind",
            "/",
            "/",
            "--size",
            str(1 << 20),
            "--tmpfs",
            str(mnt),
            "sh",
            "-c",
            f"! head -c 2000000 /dev/zero > {mnt}/x",
        ],
        capture_output=True,
        text=True,
    )
    return None if proc.returncode == 0 else f"bwrap cannot mount a sized tmpfs here: {proc.stderr.strip()}"


def running(cmdline: bytes) -> list[int]:
    """Live (not zombie) processes with exactly this /proc cmdline: found by name, since a sandboxed
    command's own idea of its pid is its PID namespace's."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and Path(f"/proc/{entry}/cmdline").read_bytes() == cmdline:
                stat = Path(f"/proc/{entry}/stat").read_bytes()
                if stat[stat.rfind(b")") + 2 :][:1] not in (b"Z", b"X"):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def invoke(*args: str) -> tuple[int, str, str]:
    """Run the kimicode command line in this process with typer's runner; (exit code, stdout, stderr)."""
    from typer.testing import CliRunner

    from kimicode.cli.app import app

    res = CliRunner().invoke(app, list(args))
    return res.exit_code, res.stdout, res.stderr


def terminal_env(home: Path, server: FakeServer, **extra: str) -> dict[str, str]:
    """`command_env` for the installed `kimicode` in a (pseudo-)terminal: a colour terminal, outside any
    tmux, whatever the developer's NO_COLOR."""
    env = command_env(home, server, TERM="xterm-256color", **extra)
    env.pop("NO_COLOR", None)
    env.pop("TMUX", None)
    return env


# -- files and text ------------------------------------------------------------------------------------


def write(path: Path, text: str) -> Path:
    """Write `text` to `path`, making its directories; the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def split_at(text: str, cuts: list[int]) -> list[str]:
    """`text` cut into non-empty pieces at the positions `cuts` (taken modulo its length + 1), as a stream
    might deliver it."""
    points = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    return [text[a:b] for a, b in itertools.pairwise(points) if b > a]


def stream_json_user(text: str) -> str:
    """One `--input-format stream-json` line carrying a user message."""
    return json.dumps({"type": "user", "message": {"role": "user", "content": text}}) + "\n"


CODE_WORDS = ["value", "return", "self", "config", "path", "the", "request", "token", "of", "and", "items", "count"]


def code_text(n_lines: int, seed: int, words: list[str] = CODE_WORDS) -> str:
    """`n_lines` of code-like text, the same for the same seed (for token counts that tests can predict)."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n_lines):
        line = [rng.choice(words) for _ in range(rng.randint(4, 12))]
        lines.append(f"    {line[0]}_{line[1]} = {rng.randint(0, 9999)}  # " + " ".join(line[2:]))
    return "\n".join(lines)


PRODUCE_WORDS = ["value", "return", "self", "config", "path", "request", "token", "items", "count", "parser"]


@tool(kind="read")
def produce(n: int, seed: int) -> str:
    """Produce n lines of code-like text."""
    rng = random.Random(seed)
    return "\n".join(
        f"{rng.choice(PRODUCE_WORDS)}_{rng.choice(PRODUCE_WORDS)} = {rng.randint(0, 9999)}  # "
        + " ".join(rng.choice(PRODUCE_WORDS) for _ in range(6))
        for _ in range(n)
    )


class MemoryStore:
    """A caller's session store (`kimicode.SessionStore`): every record in a dict; `fail(record)` true makes
    `append` raise `error` (a store that is down)."""

    def __init__(self, fail: Callable[[dict[str, Any]], bool] | None = None, error: type[Exception] = OSError) -> None:
        self.sessions: dict[str, list[dict[str, Any]]] = {}
        self.fail, self.error = fail, error

    def append(self, session_id: str, record: dict[str, Any]) -> None:
        if self.fail is not None and self.fail(record):
            raise self.error("the store is down")
        self.sessions.setdefault(session_id, []).append(record)

    def load(self, session_id: str) -> list[dict[str, Any]]:
        return list(self.sessions.get(session_id, []))
