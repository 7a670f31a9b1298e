"""`kimicode`'s main command, step by step and in process: every check of the flags gives its one clean line
(exit 2, no traceback) in the order the steps take them, and the headless paths read the prompt, open or
resume the agent and say where a fork works."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import pytest

from kimicode.cli.app import run_app
from kimicode.testing import FakeServer, Reply


def run(
    args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], stdin: str = ""
) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["kimicode", *args])
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))  # not a terminal: never the interactive face
    with pytest.raises(SystemExit) as exit_info:
        run_app()
    out = capsys.readouterr()
    code = exit_info.value.code
    return (code if isinstance(code, int) else 0), out.out, out.err


@pytest.fixture
def endpoint(server: FakeServer, workspace: Path, monkeypatch: pytest.MonkeyPatch) -> FakeServer:
    monkeypatch.setenv("KIMI_API_KEY", "sk-test")
    monkeypatch.setenv("KIMI_BASE_URL", server.base_url)
    monkeypatch.setenv("KIMICODE_RETRY_BASE_DELAY", "0.01")
    monkeypatch.chdir(workspace)
    return server


CHECKS = [
    (["-C", "no-such-dir", "-p", "x"], {}, "-C/--cwd: not a directory"),
    (["-c", "--worktree", "-p", "x"], {}, "--worktree goes with --fork"),
    (["--fork", "-p", "x"], {}, "--fork needs -c/--continue or -r/--resume ID"),
    (["-c", "-r", "abc", "-p", "x"], {}, "use either -c/--continue or -r/--resume, not both"),
    (["-p", "x"], {"KIMICODE_RETRY_BASE_DELAY": "soon"}, "KIMICODE_RETRY_BASE_DELAY must be a number"),
    (["--add-dir", "nowhere", "-p", "x"], {}, "--add-dir: not a directory: nowhere"),
    (
        ["--input-format", "stream-json", "-p", "x", "--output-format", "stream-json"],
        {},
        "--input-format stream-json reads the messages from stdin",
    ),
    (["--input-format", "stream-json"], {}, "--input-format stream-json reads the messages from stdin"),
    (["-p", "x", "--first-prompt", "y"], {}, "two prompts: -p 'x' and 'y'"),
    (["--max-budget-usd", "1"], {}, "--max-budget-usd, --system-prompt-file"),
    (["--trust-workspace"], {}, "apply to headless runs: add -p PROMPT"),
    (["--verify", "true", "-p", "x"], {}, "--verify goes with --branches N"),
    (["--branches", "2"], {}, "--branches applies to headless runs"),
    (["-p", "x", "--json-schema", "{}", "--output-schema", "s.json"], {}, "both give the schema: use one"),
    (["-p", "x", "--branches", "2", "--json-schema", "{}"], {}, "--branches does not take --output-schema"),
    (
        ["--input-format", "stream-json", "--output-format", "stream-json", "--branches", "2"],
        {},
        "--branches does not take --output-schema, --json-schema or --input-format stream-json",
    ),
    (["--json-schema", "{}"], {}, "--output-schema and --json-schema apply to headless runs"),
    ([], {}, "no prompt: pass -p PROMPT"),
    (["--first-prompt", "hi"], {}, 'kimicode "PROMPT" opens an interactive session, which needs a terminal'),
    (["-p", "   "], {}, "the prompt is empty"),
    (["-p", "x", "--system-prompt-file", "missing.md"], {}, "--system-prompt-file"),
    (["-p", "x", "--max-budget-usd", "1", "-m", "my-local-model"], {}, "--max-budget-usd needs the model's price"),
    (["-r", "nosuchsession", "-p", "x"], {}, "nosuchsession"),
]


@pytest.mark.parametrize(("args", "env", "said"), CHECKS, ids=[" ".join(a) or "(none)" for a, _, _ in CHECKS])
def test_each_check_of_the_flags_is_one_clean_line(
    args: list[str],
    env: dict[str, str],
    said: str,
    endpoint: FakeServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code, out, err = run(args, monkeypatch, capsys)
    assert code == 2, err
    assert out == "" and said in err and err.startswith("kimicode: ") and "Traceback" not in err
    assert endpoint.requests == []  # nothing reached the model


def test_a_broken_config_file_stops_before_anything_starts(
    endpoint: FakeServer, workspace: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (workspace / ".kimicode").mkdir()
    (workspace / ".kimicode" / "config.toml").write_text("[defaults\n")
    code, _, err = run(["-p", "x", "--trust-workspace"], monkeypatch, capsys)
    assert code == 2 and "config.toml" in err and "Traceback" not in err


def test_the_prompt_comes_from_the_flag_with_piped_input_or_from_stdin(
    endpoint: FakeServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    endpoint.add(Reply(content="one"), Reply(content="two"))
    assert run(["-p", "-"], monkeypatch, capsys, stdin="from stdin\n") == (0, "one\n", "")
    assert endpoint.requests[0].body["messages"][-1]["content"] == "from stdin\n"
    code, out, _ = run(
        [
            "-p",
            "the task",
            "--output-format",
            "json",
            "--append-system-prompt",
            "Be brief.",
            "--no-session-persistence",
        ],
        monkeypatch,
        capsys,
    )
    assert code == 0 and json.loads(out)["result"] == "two"
    messages = endpoint.requests[1].body["messages"]
    assert messages[0]["content"].endswith("Be brief.") and messages[-1]["content"] == "the task"


def test_a_fork_in_its_own_tree_says_where_it_works(
    endpoint: FakeServer, workspace: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    endpoint.add(Reply(content="first"), Reply(content="second"))
    assert run(["-p", "start"], monkeypatch, capsys)[0] == 0
    code, out, err = run(["-c", "--fork", "--worktree", "-p", "go on"], monkeypatch, capsys)
    assert code == 0 and out == "second\n"
    assert "kimicode: forked into session " in err and "working in its own tree" in err
    assert [m["content"] for m in endpoint.requests[1].body["messages"] if m["role"] == "user"] == ["start", "go on"]


def test_piped_input_follows_the_prompt_and_another_directory_is_added(
    endpoint: FakeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    endpoint.add(Reply(content="ok"))
    (tmp_path / "extra").mkdir()
    read, write = os.pipe()
    os.write(write, b"the log\n")
    os.close(write)
    with os.fdopen(read) as piped:
        monkeypatch.setattr(sys, "argv", ["kimicode", "-p", "explain", "--add-dir", str(tmp_path / "extra")])
        monkeypatch.setattr(sys, "stdin", piped)
        with pytest.raises(SystemExit) as exit_info:
            run_app()
    assert exit_info.value.code == 0, capsys.readouterr().err
    assert endpoint.requests[0].body["messages"][-1]["content"] == "explain\n\nthe log\n"
    assert str(tmp_path / "extra") in endpoint.requests[0].body["messages"][0]["content"]


def test_a_session_resumed_from_elsewhere_works_in_its_own_workspace(
    endpoint: FakeServer,
    workspace: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    endpoint.add(Reply(content="first"), Reply(content="second"))
    code, out, _ = run(["-p", "start", "--output-format", "json"], monkeypatch, capsys)
    session_id = json.loads(out)["session_id"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    code, out, err = run(["-r", session_id, "-p", "go on", "--output-format", "json"], monkeypatch, capsys)
    assert code == 0, err
    assert json.loads(out)["session_id"] == session_id and json.loads(out)["result"] == "second"
    assert str(workspace) in endpoint.requests[1].body["messages"][0]["content"]
