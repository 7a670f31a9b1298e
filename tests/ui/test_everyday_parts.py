"""Issue 23's habits, piece by piece (no terminal): paste collapsing and image paths, the clipboard image,
`kimicode "PROMPT"`'s command line, `!command`'s output going with the next message, steering."""

from __future__ import annotations

import asyncio
import io
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from ui_helpers import PNG, plain_session

from kimicode.cli.firstprompt import FIRST_PROMPT, NotACommand, first_prompt_args
from kimicode.testing import FakeServer, Reply, ToolCall
from kimicode.ui.paste import Pastes, clipboard_image, image_path

COMMANDS = {"sessions", "doctor", "login", "undo", "mcp", "config", "batch", "completion"}


def main_value_options() -> set[str]:
    """The main command's value-taking options, read from it as `kimicode` does."""
    import typer

    from kimicode.cli.app import app
    from kimicode.cli.firstprompt import value_options

    return value_options(typer.main.get_command(app))


TAKES = main_value_options()


def test_long_pastes_collapse_and_expand(workspace: Path) -> None:
    pastes = Pastes()
    short = "one\ntwo\n"
    assert pastes.collapse(short, workspace) == short
    big = "".join(f"line {i}\n" for i in range(300))
    assert pastes.collapse(big, workspace) == "[pasted 300 lines]"
    other = "".join(f"other {i}\r\n" for i in range(300))
    assert pastes.collapse(other, workspace) == "[pasted 300 lines #2]"
    assert pastes.collapse("x" * 5000, workspace) == "[pasted 5000 characters]"
    text = pastes.expand("look: [pasted 300 lines] and [pasted 300 lines #2] [pasted 7 lines]")
    assert text == f"look: {big} and {other.replace(chr(13), '')} [pasted 7 lines]"


def test_a_pasted_image_path_becomes_a_mention(workspace: Path, tmp_path: Path) -> None:
    (workspace / "shot.png").write_bytes(PNG)
    spaced = tmp_path / "my shots"
    spaced.mkdir()
    (spaced / "a b.png").write_bytes(PNG)
    (workspace / "notes.txt").write_text("hi")
    pastes = Pastes()
    assert pastes.collapse(str(workspace / "shot.png"), workspace) == "@shot.png "
    for dropped in (
        f"'{spaced}/a b.png'",
        str(spaced / "a b.png").replace(" ", "\\ "),
        f"file://{str(spaced).replace(' ', '%20')}/a%20b.png",
    ):
        assert pastes.collapse(dropped, workspace) == f'@"{spaced}/a b.png" ', dropped
    assert image_path("notes.txt", workspace) is None and image_path("nope.png", workspace) is None
    assert pastes.collapse("notes.txt", workspace) == "notes.txt"


def test_the_clipboard_image_is_saved_privately(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    png = tmp_path / "clip.png"
    png.write_bytes(PNG)
    fake = bin_dir / "xclip"  # answers as xclip does: the targets, then the PNG
    fake.write_text(f'#!/bin/sh\ncase "$*" in *TARGETS*) echo TARGETS; echo image/png;; *) cat {png};; esac\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin")
    saved = clipboard_image(tmp_path / "home")
    assert saved is not None and saved.read_bytes() == PNG
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600 and stat.S_IMODE(saved.parent.stat().st_mode) == 0o700
    fake.write_text("#!/bin/sh\necho TARGETS; echo UTF8_STRING\n")  # text on the clipboard
    assert clipboard_image(tmp_path / "home") is None


def test_a_first_prompt_on_the_command_line() -> None:
    assert first_prompt_args(["fix the bug"], COMMANDS, TAKES) == [FIRST_PROMPT, "fix the bug"]
    assert first_prompt_args(["--yolo", "-m", "kimi-k3", "fix", "it"], COMMANDS, TAKES) == [
        "--yolo",
        "-m",
        "kimi-k3",
        FIRST_PROMPT,
        "fix it",
    ]
    assert first_prompt_args(["-r", "abc123", "go on"], COMMANDS, TAKES) == ["-r", "abc123", FIRST_PROMPT, "go on"]
    assert first_prompt_args(["sessions", "list"], COMMANDS, TAKES) == ["sessions", "list"]
    assert first_prompt_args(["-v", "doctor"], COMMANDS, TAKES) == ["-v", "doctor"]
    assert first_prompt_args(["-p", "headless"], COMMANDS, TAKES) == ["-p", "headless"]
    assert first_prompt_args(["--", "doctr"], COMMANDS, TAKES) == [FIRST_PROMPT, "doctr"]
    with pytest.raises(NotACommand, match="did you mean 'doctor'"):
        first_prompt_args(["doctr"], COMMANDS, TAKES)


def make_session(server: FakeServer, workspace: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    return plain_session(server, workspace, monkeypatch)


def test_bang_command_output_goes_with_the_next_message(
    server: FakeServer, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kimicode.ui.shellmode import run_shell

    session = make_session(server, workspace, monkeypatch)
    (workspace / "f.txt").write_text("content-of-f\n")
    asyncio.run(run_shell(session, "cat f.txt; echo err >&2; exit 3"))
    shown = session.console.file.getvalue()
    assert "content-of-f" in shown and "err" in shown and "exit 3" in shown
    server.add(Reply(content="seen"))
    asyncio.run(session.run_turn("why did it fail"))
    sent = server.requests[-1].body["messages"][-1]["content"]
    assert sent.startswith("why did it fail") and "content-of-f" in sent and 'status="exit 3"' in sent
    server.add(Reply(content="again"))
    asyncio.run(session.run_turn("next"))
    assert server.requests[-1].body["messages"][-1]["content"] == "next"  # sent once
    asyncio.run(session.agent.aclose())


def test_steering_reaches_the_model_after_the_step_and_leftovers_are_sent_next(
    make_agent: Any, server: FakeServer, workspace: Path
) -> None:
    from kimicode.agent.ecosystem import steer

    agent = make_agent(permission_mode="yolo")

    def steer_during_the_tool(request: Any) -> Reply:
        steer(agent, "use tabs, not spaces")
        return Reply(tool_calls=[ToolCall("bash", {"command": "echo hi"})])

    server.add(steer_during_the_tool, Reply(content="ok"))
    result = agent.run_sync("format it")
    assert result.ok
    messages = server.requests[1].body["messages"]
    assert [m["role"] for m in messages[-3:]] == ["assistant", "tool", "user"]
    assert messages[-1]["content"] == "use tabs, not spaces" and agent.extras.steering == []


def test_a_context_error_whose_numbers_fit_is_retried_for_real(make_agent: Any, server: FakeServer) -> None:
    from kimicode.events import Notice

    def refuse(request: Any) -> Any:
        from kimicode.testing import ErrorReply

        asked = request.body.get("max_completion_tokens") or request.body.get("max_tokens")
        msg = (
            f"'max_tokens' or 'max_completion_tokens' is too large: {asked}. This model's maximum context "
            f"length is 32768 tokens and your request has 120 input tokens ({asked} > 32768 - 120)."
        )
        return ErrorReply(400, msg, "BadRequestError")

    server.add(refuse, Reply(content="fits now"))
    notices: list[str] = []
    agent = make_agent(
        context_window=32_768,
        max_completion_tokens=8_192,
        on_event=lambda ev: notices.append(ev.text) if isinstance(ev, Notice) else None,
    )
    result = agent.run_sync("hello")
    assert result.ok and result.result == "fits now", result
    first, second = (r.body.get("max_completion_tokens") or r.body.get("max_tokens") for r in server.requests)
    assert second < first
    assert any(f"retrying with max_tokens {second:,}" in n for n in notices)


def test_a_five_character_summary_is_refused(make_agent: Any, server: FakeServer) -> None:
    agent = make_agent()
    for i in range(8):
        server.add(Reply(content=f"answer {i} " + "word " * 200))
        assert agent.run_sync(f"question {i} " + "more " * 200).ok
    server.add(Reply(content="Done."))

    async def compact() -> Any:
        return await agent.compact()

    result = asyncio.run(compact())
    assert result is not None and result.fallback and "too short" in (result.error or "")
    summary = next(m["content"] for m in agent.messages if "question 0" in str(m["content"]) and m["role"] == "user")
    assert summary  # the first prompt is still there, kept by the fallback summary


def test_model_checks_the_servers_list_and_completes_its_ids(
    server: FakeServer, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prompt_toolkit.document import Document

    from kimicode.ui import commands, model_cmds
    from kimicode.ui.completion import PromptCompleter

    model_cmds._served.clear()
    server.get_routes["/v1/models"] = {"object": "list", "data": [{"id": "kimi-k3"}, {"id": "kimi-k2-turbo"}]}
    session = make_session(server, workspace, monkeypatch)

    def run(line: str) -> str:
        asyncio.run(commands.dispatch(session, line))
        out: str = session.console.file.getvalue()
        session.console.file.seek(0)
        session.console.file.truncate()
        return out

    before = session.agent.endpoint.model
    text = run("/model kimi-k9")
    assert "does not serve 'kimi-k9'" in text and "did you mean kimi-k3" in text
    assert session.agent.endpoint.model == before
    assert "Model set to kimi-k2-turbo" in run("/model kimi-k2-turbo")
    assert session.agent.endpoint.model == "kimi-k2-turbo"
    assert "Model set to my-own-id" in run("/model my-own-id --force")
    completer = PromptCompleter(lambda: commands.command_infos(session), session.index)
    offered = [c.text for c in completer.get_completions(Document("/model kimi-k"), None)]  # type: ignore[arg-type]
    assert {"kimi-k3", "kimi-k2-turbo"} <= set(offered)
    asyncio.run(session.agent.aclose())


@pytest.mark.prepush
def test_shell_completion_scripts_complete_commands_and_choices(tmp_path: Path) -> None:
    import shlex
    import shutil
    import subprocess

    from helpers import kimicode_command

    kc = kimicode_command()
    scripts = {
        shell: subprocess.run([*kc, "completion", shell], capture_output=True, text=True, timeout=60)
        for shell in ("bash", "zsh", "fish")
    }
    assert all(done.returncode == 0 for done in scripts.values())
    assert "compdef _kimicode_completion kimicode" in scripts["zsh"].stdout
    assert "complete --command kimicode" in scripts["fish"].stdout
    assert "# install:" in scripts["fish"].stderr and "# install" not in scripts["fish"].stdout
    bash = shutil.which("bash")
    assert bash is not None
    (tmp_path / "kc.sh").write_text(scripts["bash"].stdout)
    run = f"_kimicode_completion {shlex.quote(kc[0])}"  # as bash calls it: $1 is the command to ask
    probe = (
        f"source {tmp_path / 'kc.sh'}; COMP_WORDS=(kimicode ses); COMP_CWORD=1; {run}; "
        "echo \"${COMPREPLY[@]}\"; COMP_WORDS=(kimicode --permission-mode ''); COMP_CWORD=2; "
        f'{run}; echo "${{COMPREPLY[@]}}"'
    )
    done = subprocess.run([bash, "-c", probe], capture_output=True, text=True, timeout=60)
    lines = done.stdout.splitlines()
    assert lines[0] == "sessions", done
    assert lines[1].split() == ["default", "accept-edits", "plan", "yolo"]


def test_notifications_bell_osc9_and_a_command(
    server: FakeServer, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json
    import time

    from kimicode.ui.notify import Notifier

    out = io.StringIO()
    monkeypatch.delenv("TMUX", raising=False)
    monkeypatch.delenv("WT_SESSION", raising=False)
    monkeypatch.setenv("TERM_PROGRAM", "Apple_Terminal")
    Notifier().notify("turn-finished", "done", out)
    assert out.getvalue() == "\a"
    monkeypatch.setenv("TERM_PROGRAM", "WezTerm")
    out = io.StringIO()
    Notifier().notify("turn-finished", "done\x1b]0;x\x07 now", out)
    sent = out.getvalue()
    assert sent.startswith("\x1b]9;done") and sent.endswith("\x07") and sent.count("\x07") == 1
    monkeypatch.setenv("TMUX", "/tmp/tmux-0/default,1,0")
    out = io.StringIO()
    Notifier(terminal="osc9").notify("turn-finished", "done", out)
    assert out.getvalue() == "\x1bPtmux;\x1b\x1b]9;done\x07\x1b\\"
    from kimicode.config.endpoint import ConfigError
    from kimicode.config.settings import load_settings

    (tmp_path / "home").mkdir(exist_ok=True)
    for bad, said in (
        ('terminal = "loud"', "notify.terminal: must be one of auto, bell, osc9, off"),
        ("after_seconds = -1", "notify.after_seconds: input should be greater than or equal to 0"),
    ):
        (tmp_path / "home" / "config.toml").write_text(f"[notify]\n{bad}\n")
        with pytest.raises(ConfigError, match=said):  # the one reading of the file refuses it, naming the line
            load_settings(workspace, tmp_path / "home")
    (tmp_path / "home" / "config.toml").write_text('[notify]\ncommand = ["notify-send", "kc"]\n')
    assert Notifier.from_config(load_settings(workspace, tmp_path / "home").config.notify) == Notifier(
        "auto", ("notify-send", "kc"), 10.0
    )

    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    seen = tmp_path / "seen.json"
    script = tmp_path / "notify.sh"
    script.write_text(f'#!/bin/sh\nprintf "%s" "$1" > {seen}\n')
    script.chmod(0o755)
    (home / "config.toml").write_text(f'[notify]\nterminal = "off"\ncommand = ["{script}"]\nafter_seconds = 0\n')
    session = make_session(server, workspace, monkeypatch)
    server.add(Reply(content="all done"))
    asyncio.run(session.run_turn("work"))
    for _ in range(200):
        if seen.exists() and seen.read_text():
            break
        time.sleep(0.02)
    payload = json.loads(seen.read_text())
    assert payload["type"] == "turn-finished" and "all done" in payload["message"]
    assert payload["session_id"] == session.agent.session_id and payload["cwd"] == str(session.workspace)
    asyncio.run(session.agent.aclose())


@pytest.mark.prepush
def test_add_dir_lets_the_tools_write_there_as_in_the_workspace(
    server: FakeServer, make_agent: Any, workspace: Path, tmp_path: Path
) -> None:
    import subprocess

    from helpers import kimicode_command

    other = tmp_path / "shared-lib"
    other.mkdir()
    target = other / "notes.txt"
    write = Reply(tool_calls=[ToolCall("write_file", {"path": str(target), "content": "from kimicode\n"})])
    server.add(write, Reply(content="ok"))
    refused = make_agent(permission_mode="accept-edits", headless=True).run_sync("write it")
    assert not target.exists() and refused.permission_denials  # outside the workspace: asked, so refused

    server.add(write, Reply(content="ok"))
    agent = make_agent(permission_mode="accept-edits", headless=True, add_dirs=(other,))
    assert agent.run_sync("write it").ok and target.read_text() == "from kimicode\n"
    assert str(other) in agent.messages[0]["content"]  # the model is told where else it may work

    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI_", "OPENAI_"))}
    env.update(KIMI_API_KEY="sk-test", KIMI_BASE_URL=server.base_url)
    bad = subprocess.run(
        [*kimicode_command(), "-p", "x", "--add-dir", str(tmp_path / "nope")],
        env=env,
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "--add-dir: not a directory" in bad.stderr
    target.unlink()
    server.add(write, Reply(content="done"))
    ok = subprocess.run(
        [*kimicode_command(), "-p", "write it", "--permission-mode", "accept-edits", "--add-dir", str(other)],
        env=env,
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ok.returncode == 0, ok.stderr
    assert target.read_text() == "from kimicode\n"


def test_moonshot_builtin_web_search_flow(server: FakeServer, make_agent: Any, tmp_path: Path) -> None:
    from kimicode.testing import web_search_flow

    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text('[web_search]\nprovider = "moonshot"\n')  # the fake stands for Moonshot
    server.add(*web_search_flow("Python 3.14 came out in October 2025.", tokens=1500))
    events: list[Any] = []
    agent = make_agent(on_event=events.append, allow=["web_search"])  # the server's search cannot ask
    result = agent.run_sync("when did Python 3.14 come out?")
    assert result.ok and "October 2025" in result.result, result
    first, second = (r.body for r in server.requests)
    assert {"type": "builtin_function", "function": {"name": "$web_search"}} in first["tools"]
    echo = next(m for m in second["messages"] if m["role"] == "tool")
    assert echo["name"] == "$web_search" and json.loads(echo["content"])["usage"]["total_tokens"] == 1500
    summaries = [getattr(e, "summary", "") for e in events]
    assert any("1,500 tokens of results; $0.005 per search" in s for s in summaries)

    server.add(*web_search_flow("never"))  # without the declaration the server refuses, as Moonshot does
    (home / "config.toml").write_text('[web_search]\nprovider = "off"\n')
    assert make_agent(allow=["web_search"]).run_sync("search").status == "error"


def test_a_configured_search_provider_elsewhere(server: FakeServer, make_agent: Any, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text(f'[web_search]\nprovider = "searxng"\nurl = "{server.base_url}"\n')
    server.get_routes["/v1/search"] = {
        "results": [
            {
                "title": "Python 3.14 released",
                "url": "https://www.python.org/downloads/release/python-3140/",
                "content": "Python 3.14.0 is the newest major release.",
            },
        ]
    }
    server.add(Reply(tool_calls=[ToolCall("web_search", {"query": "python 3.14 release"})]), Reply(content="found"))
    agent = make_agent(allow=["web_search"])  # network access: asks without the rule
    assert "web_search" in agent.tools.names and "$web_search" not in agent.tools.names
    assert agent.run_sync("search it").ok
    tool = next(m for m in server.requests[1].body["messages"] if m["role"] == "tool")
    assert "Python 3.14 released" in tool["content"] and "python-3140" in tool["content"]
    assert "GET /v1/search" in server.other_requests


def test_help_one_liners_are_whole(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from kimicode.cli.app import run_app

    for argv in (["kimicode", "--help"], ["kimicode", "sessions", "--help"]):
        monkeypatch.setattr(sys, "argv", argv)
        with pytest.raises(SystemExit):
            run_app()
        listing = capsys.readouterr().out.split("Commands:", 1)[1].split("Environment:", 1)[0]
        assert listing.strip() and not [line for line in listing.splitlines() if line.rstrip().endswith("...")]


def test_the_retry_status_counts_down() -> None:
    from terminals import Term

    from kimicode.events import Retrying
    from kimicode.ui.view import TurnView

    now = [100.0]
    term = Term(rows=30, cols=120)
    view = TurnView(term.console, plain=False, show_reasoning=True, clock=lambda: now[0])
    view.start()
    view.handle(Retrying(1, 5, 10.0, "HTTP 429 rate_limit: too many requests, try again."))
    view.tick()
    screen = "\n".join(term.screen.display)
    assert "retrying in 10s" in screen and "try again.: retrying" not in screen
    assert "↻ retry 1 of 5 in 10.0s, after: HTTP 429" in screen
    now[0] += 4
    view.tick()
    assert "retrying in 6s" in "\n".join(term.screen.display)
    now[0] += 8
    view.tick()
    assert "retried, waiting for the model" in "\n".join(term.screen.display)
    view.close()


def test_continuing_after_compact_shows_the_summary_not_no_answer() -> None:
    from kimicode.context.compact import summary_message
    from kimicode.ui.recap import last_exchange, recap

    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "refactor the parser"},
        summary_message("## Goal\\nRefactor the parser.\\n## Done\\n- split tokenize()"),
    ]
    prompt, answer, _ = last_exchange(messages)
    assert prompt == "refactor the parser" and answer is not None and "Refactor the parser." in answer
    shown = "\n".join(t.plain for t in recap(messages, "Resumed session x"))
    assert "no answer to it yet" not in shown and "compacted" in shown


def test_a_denial_with_a_reason_takes_one_line(tmp_path: Path) -> None:
    from kimicode.agent.results import ApprovalRequest
    from kimicode.events import PermissionDenied
    from kimicode.ui.approvals import Approver, SessionRules
    from kimicode.ui.view import TurnView

    out = io.StringIO()
    console = Console(file=out, width=100, color_system=None)

    async def choose(question: str, options: list[Any]) -> str | None:
        return "no"

    async def ask(message: str, default: str) -> str | None:
        return "use make test instead"

    approver = Approver(console, tmp_path, SessionRules(), choose_fn=choose, ask_fn=ask)
    request = ApprovalRequest("call-9", "bash", "execute", {"command": "npm test"}, "bash runs commands")
    answer = asyncio.run(approver(request))
    assert not answer.approved and answer.reason == "use make test instead"
    view = TurnView(console, plain=True, show_reasoning=True, previewed=approver.shown)
    view.handle(PermissionDenied("call-9", "bash", {"command": "npm test"}, "bash runs commands"))
    view.close()
    text = out.getvalue()
    assert text.count("✗ not allowed: use make test instead") == 1
    assert "not run" not in text  # said once, by the question


def test_a_closed_port_keeps_the_message_and_suggests_doctor(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    from prompt_toolkit.application.current import create_app_session
    from prompt_toolkit.input import create_pipe_input
    from prompt_toolkit.output import DummyOutput

    from kimicode.ui.app import Session, SessionOptions

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again when the block ends: nothing listens there
    monkeypatch.setenv("KIMI_API_KEY", "sk-test")
    monkeypatch.setenv("KIMI_BASE_URL", f"http://127.0.0.1:{port}/v1")
    console = Console(file=io.StringIO(), width=120, color_system=None, force_terminal=False)
    session = Session(SessionOptions(workspace=workspace, retry_base_delay=0.01, max_retries=1), console, plain=True)
    finished = asyncio.run(session.run_turn("my important message"))
    assert finished is not None and finished.status == "error"
    assert "kimicode doctor" in console.file.getvalue()  # type: ignore[attr-defined]

    async def read() -> str:
        with create_pipe_input() as pipe, create_app_session(input=pipe, output=DummyOutput()):
            pipe.send_text("\r")
            text: str = await session.read_input()
            return text

    assert asyncio.run(read()) == "my important message"  # back in the prompt: Enter sends it again
    asyncio.run(session.agent.aclose())
