"""Smaller command-line items: clean usage errors for bad choices, and SIGTERM reported as "terminated"."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import command_env, kimicode_command

from kimicode.cli.app import run_app
from kimicode.testing import FakeServer, Reply


def run_in_process(
    args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["kimicode", *args])
    with pytest.raises(SystemExit) as exit_info:
        run_app()
    out = capsys.readouterr()
    code = exit_info.value.code
    return (code if isinstance(code, int) else 0), out.out, out.err


@pytest.mark.parametrize(
    ("args", "option", "valid"),
    [
        (["-p", "x", "--output-format", "yaml"], "--output-format", "'text', 'json', 'stream-json'"),
        (["-p", "x", "--permission-mode", "ask"], "--permission-mode", "'default', 'accept-edits', 'plan', 'yolo'"),
        (["-p", "x", "--thinking", "medium"], "--thinking", "'low', 'high', 'max'"),
        (["sessions", "export", "x", "--format", "html"], "--format", "'markdown', 'json'"),
        (["sessions", "list", "--origin", "ci"], "--origin", "'interactive', 'headless', 'library'"),
    ],
)
def test_a_bad_choice_names_the_valid_ones_without_pydantic_noise(
    args: list[str], option: str, valid: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_in_process(args, monkeypatch, capsys)
    assert code == 2
    assert out == ""
    assert f"Invalid value for '{option}'" in err and valid in err
    assert "Value error" not in err and "Traceback" not in err and "pydantic" not in err


@pytest.mark.prepush
def test_other_usage_errors_and_help_keep_their_exit_codes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_in_process(["--no-such-flag"], monkeypatch, capsys)[0] == 2
    assert run_in_process(["-p"], monkeypatch, capsys)[0] == 2
    code, out, _ = run_in_process(["--help"], monkeypatch, capsys)
    assert code == 0 and "--output-format" in out
    assert run_in_process(["-p", "x"], monkeypatch, capsys)[0] == 2  # no API key: a usage error
    code, _, err = run_in_process(["sessions", "show", "nope"], monkeypatch, capsys)
    assert code == 1 and "no session 'nope'" in err


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sig", "code", "said"), [(signal.SIGTERM, 143, "terminated by SIGTERM"), (signal.SIGINT, 130, "interrupted")]
)
def test_sigterm_says_terminated_and_exits_143(
    sig: signal.Signals, code: int, said: str, server: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    server.add(
        Reply(content="slow " * 400, chunk_size=5, chunk_delay=0.02),
        Reply(content="slow " * 400, chunk_size=5, chunk_delay=0.02),
    )
    for fmt in ("text", "json"):
        before = len(server.requests)
        proc = subprocess.Popen(
            [*kimicode_command(), "-p", "talk", "--output-format", fmt], env=command_env(tmp_path / "home", server),
            cwd=workspace, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        server.wait_for_requests(before + 1, timeout=15)
        time.sleep(0.3)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=15)
        assert proc.returncode == code, err
        if fmt == "text":
            assert err.splitlines()[-1].startswith(f"kimicode: {said}")
            assert "interrupted: interrupted" not in err
        else:
            result = json.loads(out)
            assert result["status"] == "interrupted"
            assert result["error"] == ("terminated by SIGTERM" if sig == signal.SIGTERM else "interrupted by user")
