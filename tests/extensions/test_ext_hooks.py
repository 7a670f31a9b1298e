"""Hooks with Claude Code's protocol: every event's payload, every way of answering, matchers, timeouts,
parallel runs, fail-closed guards, and hooks in library and headless runs (the fake server is the model)."""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import FIXTURES, last_tool_result

from kimicode.events import Event, HookRan, Notice, PermissionDenied
from kimicode.testing import FakeServer, RecordedRequest, Reply, ToolCall

HOOK = FIXTURES / "hooks" / "hook.py"


def hook_cmd(mode: str = "ok") -> str:
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(HOOK))} {shlex.quote(mode)}"


def configure(home: Path, event: str, *entries: tuple[str, str, dict[str, Any]]) -> None:
    """Write `[[hooks.EVENT]]` groups (matcher, command, extra keys) into the user's config.toml."""
    home.mkdir(parents=True, exist_ok=True)
    lines = []
    for matcher, command, extra in entries:
        lines.append(f"[[hooks.{event}]]\nmatcher = {json.dumps(matcher)}")
        keys = "".join(f", {k} = {json.dumps(v)}" for k, v in extra.items())
        lines.append(f'hooks = [{{ type = "command", command = {json.dumps(command)}{keys} }}]')
    with (home / "config.toml").open("a", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")


def runs(workspace: Path) -> list[dict[str, Any]]:
    path = workspace / "hooks.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def bash_then_done(command: str) -> list[Any]:
    return [Reply(tool_calls=[ToolCall("bash", {"command": command}, id="call_1")]), Reply(content="done")]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def test_pre_tool_use_gets_claude_codes_payload_and_exit_2_blocks_with_stderr_told_to_the_model(
    make_agent: Callable[..., Any], server: FakeServer, workspace: Path, home: Path
) -> None:
    configure(home, "PreToolUse", ("Bash", hook_cmd("exit2"), {}))
    server.add(*bash_then_done("touch made"))
    events: list[Event] = []
    agent = make_agent(on_event=events.append, permission_mode="yolo")
    result = agent.run_sync("go")
    assert result.ok and not (workspace / "made").exists()
    [run] = runs(workspace)
    p = run["payload"]
    assert p["hook_event_name"] == "PreToolUse" and p["tool_name"] == "Bash"
    assert p["tool_input"]["command"] == "touch made" and p["tool_use_id"] == "call_1"
    assert p["session_id"] == agent.session_id and p["cwd"] == str(workspace)
    assert p["permission_mode"] == "bypassPermissions" and p["transcript_path"].endswith(".jsonl")
    assert run["project_dir"] == str(workspace)
    assert "refused by the test hook" in last_tool_result(server.requests[1])
    [hook] = [e for e in events if isinstance(e, HookRan)]
    assert (hook.hook_event, hook.outcome, hook.exit_code, hook.call_id) == ("PreToolUse", "deny", 2, "call_1")
    assert any(isinstance(e, PermissionDenied) and "refused by the test hook" in e.reason for e in events)
    assert result.permission_denials and result.permission_denials[0]["tool_name"] == "bash"
    log = [json.loads(x) for x in Path(p["transcript_path"]).read_text().splitlines()]
    assert any(r.get("type") == "hook" and r["outcome"] == "deny" and r["event"] == "PreToolUse" for r in log)


@pytest.mark.parametrize(
    ("answer", "mode", "rules", "runs_it"),
    [
        ({"permissionDecision": "allow"}, "default", {}, True),  # the mode would ask: the hook says yes
        ({"permissionDecision": "allow"}, "default", {"deny": ["bash(touch*)"]}, False),  # never over a deny
        ({"permissionDecision": "allow"}, "plan", {}, False),  # nor over the mode's refusal
        ({"permissionDecision": "allow"}, "default", {"ask": ["bash(touch*)"]}, False),  # nor a user's ask rule
        ({"permissionDecision": "deny", "permissionDecisionReason": "no touching"}, "yolo", {}, False),
        ({"permissionDecision": "ask"}, "yolo", {}, False),  # headless: nobody to ask
    ],
)
def test_permission_decisions_in_json(
    make_agent: Callable[..., Any],
    server: FakeServer,
    workspace: Path,
    home: Path,
    answer: dict[str, Any],
    mode: str,
    rules: dict[str, list[str]],
    runs_it: bool,
) -> None:
    out = json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse", **answer}})
    configure(home, "PreToolUse", ("", hook_cmd(f"json:{out}"), {}))
    server.add(*bash_then_done("touch made"))
    agent = make_agent(permission_mode=mode, headless=True, **{k: tuple(v) for k, v in rules.items()})
    agent.run_sync("go")
    assert (workspace / "made").exists() is runs_it
    if answer.get("permissionDecisionReason"):
        assert "no touching" in last_tool_result(server.requests[1])


def test_updated_input_is_validated_and_judged_again(
    make_agent: Callable[..., Any], server: FakeServer, workspace: Path, home: Path
) -> None:
    rewrite = {"permissionDecision": "allow", "updatedInput": {"command": "touch safe"}}
    good = json.dumps({"hookSpecificOutput": rewrite})
    configure(home, "PreToolUse", ("Bash", hook_cmd(f"json:{good}"), {}))
    server.add(*bash_then_done("touch bad"), *bash_then_done("touch bad"))
    agent = make_agent(deny=("bash(touch safe)",))
    agent.run_sync("go")
    assert not (workspace / "safe").exists() and not (workspace / "bad").exists()  # the rewrite hit a deny rule
    agent2 = make_agent()
    agent2.run_sync("go")
    assert (workspace / "safe").exists() and not (workspace / "bad").exists()


def test_updated_input_that_does_not_fit_the_tool_refuses(
    make_agent: Callable[..., Any], server: FakeServer, workspace: Path, home: Path
) -> None:
    bad = json.dumps({"hookSpecificOutput": {"permissionDecision": "allow", "updatedInput": {"cmd": 5}}})
    configure(home, "PreToolUse", ("Bash", hook_cmd(f"json:{bad}"), {}))
    server.add(*bash_then_done("touch made"))
    make_agent(permission_mode="yolo").run_sync("go")
    assert not (workspace / "made").exists()
    assert "does not fit the tool" in last_tool_result(server.requests[1])


def test_edit_tools_get_claude_names_and_file_path(
    make_agent: Callable[..., Any], server: FakeServer, workspace: Path, home: Path
) -> None:
    configure(home, "PreToolUse", ("Write|Edit", hook_cmd(), {}))
    configure(home, "PostToolUse", ("write_file", hook_cmd(), {}))
    server.add(Reply(tool_calls=[ToolCall("write_file", {"path": "a.txt", "content": "hi"})]), Reply(content="ok"))
    make_agent(permission_mode="yolo").run_sync("go")
    pre, post = runs(workspace)
    assert pre["payload"]["tool_name"] == "Write" and pre["payload"]["tool_input"]["file_path"] == "a.txt"
    assert post["payload"]["hook_event_name"] == "PostToolUse"
    assert post["payload"]["tool_response"]["is_error"] is False


@pytest.mark.parametrize(
    ("matcher", "matches"),
    [
        ("Bash", True),
        ("bash", True),
        ("Read|Bash", True),
        ("Ba.*", True),
        ("*", True),
        ("", True),
        ("Write", False),
        ("Bas", False),
        ("mcp__.*", False),
    ],
)
def test_matchers(
    make_agent: Callable[..., Any], server: FakeServer, workspace: Path, home: Path, matcher: str, matches: bool
) -> None:
    configure(home, "PreToolUse", (matcher, hook_cmd(), {}))
    server.add(*bash_then_done("true"))
    make_agent(permission_mode="yolo").run_sync("go")
    assert bool(runs(workspace)) is matches


def test_a_bad_matcher_is_a_config_error_naming_the_file(make_agent: Callable[..., Any], home: Path) -> None:
    from kimicode.config.endpoint import ConfigError

    configure(home, "PreToolUse", ("Bash(", hook_cmd(), {}))
    with pytest.raises(ConfigError, match=r"config\.toml: hooks\.PreToolUse\[0\]: matcher 'Bash\(' is not a valid"):
        make_agent()


@pytest.mark.prepush
def test_hooks_of_one_event_run_in_parallel(
    make_agent: Callable[..., Any], server: FakeServer, workspace: Path, home: Path
) -> None:
    configure(home, "PreToolUse", ("", hook_cmd("sleep:0.4"), {}), ("Bash", hook_cmd("sleep:0.41"), {}))
    server.add(*bash_then_done("true"))
    make_agent(permission_mode="yolo").run_sync("go")
    a, b = runs(workspace)
    assert a["start"] < b["end"] and b["start"] < a["end"]  # their runs overlap


def test_a_guard_that_times_out_fails_closed_and_one_that_was_not_written_to_block_fails_open(
    make_agent: Callable[..., Any], server: FakeServer, workspace: Path, home: Path
) -> None:
    configure(home, "PreToolUse", ("Bash", hook_cmd("sleep:5"), {"timeout": 0.3}))  # its script can exit 2
    server.add(*bash_then_done("touch made"))
    events: list[Event] = []
    make_agent(permission_mode="yolo", on_event=events.append).run_sync("go")
    assert not (workspace / "made").exists()
    assert "failed (timed out after 0.3 s); refused (fail closed)" in last_tool_result(server.requests[1])
    assert [e.outcome for e in events if isinstance(e, HookRan)] == ["refused"]

    (home / "config.toml").unlink()
    configure(home, "PreToolUse", ("Bash", "exit 1", {}))  # a crash, in a hook that never refuses
    server.add(*bash_then_done("touch made"))
    events.clear()
    make_agent(permission_mode="yolo", on_event=events.append).run_sync("go")
    assert (workspace / "made").exists()
    [notice] = [e for e in events if isinstance(e, Notice) and "hook" in e.text]
    assert "failed (exit code 1); the call went ahead" in notice.text and "\n" not in notice.text


@pytest.mark.parametrize("command", ["exit 127", "no-such-program-xyz", "python3 -c 'raise SystemExit(1)'"])
def test_on_error_block_refuses_any_failure(
    make_agent: Callable[..., Any], server: FakeServer, workspace: Path, home: Path, command: str
) -> None:
    configure(home, "PreToolUse", ("", command, {"on_error": "block"}))
    server.add(*bash_then_done("touch made"))
    make_agent(permission_mode="yolo").run_sync("go")
    assert not (workspace / "made").exists()
    assert "refused (fail closed)" in last_tool_result(server.requests[1])


def test_on_error_continue_lets_a_guard_fail_open(
    make_agent: Callable[..., Any], server: FakeServer, workspace: Path, home: Path
) -> None:
    configure(home, "PreToolUse", ("", hook_cmd("crash"), {"on_error": "continue"}))
    server.add(*bash_then_done("touch made"))
    make_agent(permission_mode="yolo").run_sync("go")
    assert (workspace / "made").exists()


def test_post_tool_use_context_and_block_reason_reach_the_model(
    make_agent: Callable[..., Any], server: FakeServer, workspace: Path, home: Path
) -> None:
    out = json.dumps(
        {
            "decision": "block",
            "reason": "lint failed: fix it",
            "hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "ran in CI mode"},
        }
    )
    configure(home, "PostToolUse", ("Bash", hook_cmd(f"json:{out}"), {}))
    server.add(*bash_then_done("echo hi"))
    make_agent(permission_mode="yolo").run_sync("go")
    seen = last_tool_result(server.requests[1])
    assert seen.startswith("hi") and "lint failed: fix it" in seen and "ran in CI mode" in seen
    [run] = runs(workspace)
    assert "hi" in run["payload"]["tool_response"]["content"]


def test_post_tool_use_failure_gets_the_error(
    make_agent: Callable[..., Any], server: FakeServer, workspace: Path, home: Path
) -> None:
    configure(home, "PostToolUseFailure", ("Read", hook_cmd(), {}))
    server.add(Reply(tool_calls=[ToolCall("read_file", {"path": "missing.txt"})]), Reply(content="ok"))
    make_agent().run_sync("go")
    [run] = runs(workspace)
    assert run["payload"]["tool_name"] == "Read" and "missing.txt" in run["payload"]["error"]


def test_user_prompt_submit_adds_context_or_blocks_the_prompt(
    make_agent: Callable[..., Any], server: FakeServer, workspace: Path, home: Path
) -> None:
    configure(home, "UserPromptSubmit", ("", hook_cmd("stdout:the sprint ends friday"), {}))
    server.add(Reply(content="ok"))
    make_agent().run_sync("plan the week")
    [run] = runs(workspace)
    assert run["payload"]["prompt"] == "plan the week"
    msgs = server.requests[0].body["messages"]
    text = msgs[-1]["content"]  # the hooks' context opens the prompt's own message; the user's words come last
    assert text.endswith("\n\nplan the week") and "the sprint ends friday" in text and msgs[-2]["role"] != "user"

    (home / "config.toml").unlink()
    block = json.dumps({"decision": "block", "reason": "no secrets"})
    configure(home, "UserPromptSubmit", ("", hook_cmd(f"json:{block}"), {}))
    before = len(server.requests)
    result = make_agent().run_sync("my password is hunter2")
    assert result.status == "error" and result.error_kind == "hook_blocked" and "no secrets" in str(result.error)
    assert len(server.requests) == before  # nothing was sent


def test_session_start_context_goes_into_the_first_request_and_session_end_runs_on_close(
    make_agent: Callable[..., Any], server: FakeServer, workspace: Path, home: Path
) -> None:
    ctx = json.dumps({"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": "branch: main"}})
    configure(home, "SessionStart", ("startup", hook_cmd(f"json:{ctx}"), {}))
    configure(home, "SessionEnd", ("", hook_cmd(), {}))
    server.add(Reply(content="one"), Reply(content="two"))
    agent = make_agent()
    agent.run_sync("first")
    assert "branch: main" in json.dumps(server.requests[0].body["messages"])
    start, end = runs(workspace)
    assert start["payload"]["source"] == "startup" and end["payload"]["hook_event_name"] == "SessionEnd"
    assert end["payload"]["reason"] == "exit"


def test_stop_hook_sends_the_model_back_once_then_sees_stop_hook_active(
    make_agent: Callable[..., Any], server: FakeServer, workspace: Path, home: Path
) -> None:
    script = workspace.parent / "stop.py"
    script.write_text(
        "import json, sys\np = json.load(sys.stdin)\n"
        "open(p['cwd'] + '/stops.txt', 'a').write(str(p['stop_hook_active']) + '\\n')\n"
        "if not p['stop_hook_active']:\n    print(json.dumps({'decision': 'block', 'reason': 'run the tests first'}))\n"
    )
    configure(home, "Stop", ("", f"{sys.executable} {script}", {}))
    server.add(Reply(content="finished"), Reply(content="tests pass, finished"))
    result = make_agent().run_sync("go")
    assert result.result == "tests pass, finished"
    assert (workspace / "stops.txt").read_text().split() == ["False", "True"]
    assert server.requests[1].body["messages"][-1]["content"] == "[Stop hook] run the tests first"


def test_continue_false_ends_the_turn(
    make_agent: Callable[..., Any], server: FakeServer, workspace: Path, home: Path
) -> None:
    out = json.dumps({"continue": False, "stopReason": "budget for today is spent"})
    configure(home, "PostToolUse", ("", hook_cmd(f"json:{out}"), {}))
    server.add(*bash_then_done("true"))
    result = make_agent(permission_mode="yolo").run_sync("go")
    assert result.status == "error" and result.error_kind == "hook_stopped"
    assert "budget for today is spent" in str(result.error) and len(server.requests) == 1


def test_permission_request_hooks_answer_the_question_and_notification_hooks_hear_of_it(
    make_agent: Callable[..., Any], server: FakeServer, workspace: Path, home: Path
) -> None:
    allow = json.dumps(
        {"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": {"behavior": "allow"}}}
    )
    configure(home, "PermissionRequest", ("Bash", hook_cmd(f"json:{allow}"), {}))
    server.add(*bash_then_done("touch made"))
    make_agent(headless=True).run_sync("go")  # default mode asks; the hook answers for the user
    assert (workspace / "made").exists()
    [run] = runs(workspace)
    assert run["payload"]["tool_name"] == "Bash"

    (home / "config.toml").unlink()
    (workspace / "hooks.jsonl").unlink()
    configure(home, "Notification", ("permission_prompt", hook_cmd(), {}))
    server.add(*bash_then_done("touch other"))
    asked: list[Any] = []
    make_agent(approve=lambda req: asked.append(req) or True).run_sync("go")
    [note] = runs(workspace)
    assert note["payload"]["notification_type"] == "permission_prompt" and "bash" in note["payload"]["message"]
    assert asked and (workspace / "other").exists()


def long_history(pairs: int = 30) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(pairs):
        out += [
            {"role": "user", "content": f"question {i}: " + "word " * 300},
            {"role": "assistant", "content": f"answer {i}: " + "text " * 300},
        ]
    return out


def test_pre_compact_runs_before_a_manual_compaction_summarises(
    make_agent: Callable[..., Any], server: FakeServer, workspace: Path, home: Path
) -> None:
    import asyncio

    configure(home, "PreCompact", ("manual", hook_cmd(), {}))
    assert asyncio.run(make_agent().compact("x")) is None and runs(workspace) == []  # nothing to compact
    server.add(Reply(content="## Goal\nkeep going\n## Done\n- questions answered"))
    agent = make_agent(messages=long_history())
    assert asyncio.run(agent.compact("keep the API notes")) is not None
    [run] = runs(workspace)
    assert run["payload"]["trigger"] == "manual" and run["payload"]["custom_instructions"] == "keep the API notes"


def test_pre_compact_runs_when_the_context_fills_up(
    make_agent: Callable[..., Any], server: FakeServer, workspace: Path, home: Path
) -> None:
    configure(home, "PreCompact", ("auto", hook_cmd(), {}))

    def answer(req: RecordedRequest) -> Reply:
        if "tools" not in req.body:  # a summary request (it may take several)
            return Reply(content="## Goal\nkeep going\n## Done\n- questions answered")
        return Reply(content="next")

    server.add(*[answer] * 8)
    events: list[Event] = []
    result = make_agent(messages=long_history(), context_window=24_000, on_event=events.append).run_sync("go on")
    assert result.ok, result.error
    [run] = runs(workspace)
    assert run["payload"]["trigger"] == "auto"
    assert any(isinstance(e, HookRan) and e.hook_event == "PreCompact" for e in events)


def test_subagents_run_subagent_stop_and_pre_tool_use_hooks(
    make_agent: Callable[..., Any], server: FakeServer, workspace: Path, home: Path
) -> None:
    configure(home, "SubagentStop", ("", hook_cmd(), {}))
    configure(home, "Stop", ("", hook_cmd(), {}))
    configure(home, "PreToolUse", ("Grep", hook_cmd(), {}))

    def answer(req: RecordedRequest) -> Reply:
        msgs = req.body["messages"]
        child = "You are a subagent" in msgs[0]["content"]
        if msgs[-1]["role"] == "user" and not msgs[-1]["content"].startswith("[context"):
            task = ToolCall("task", {"description": "d", "prompt": "p"})
            call = ToolCall("grep", {"pattern": "x"}) if child else task
            return Reply(tool_calls=[call])
        return Reply(content="child done" if child else "parent done")

    server.add(*[answer] * 4)
    make_agent().run_sync("go")
    assert [r["payload"]["hook_event_name"] for r in runs(workspace)] == ["PreToolUse", "SubagentStop", "Stop"]


def test_claude_code_settings_files_and_project_trust(
    make_agent: Callable[..., Any], server: FakeServer, workspace: Path, home: Path, tmp_path: Path
) -> None:
    claude = tmp_path / "claude-home"
    claude.mkdir()

    def settings(mode: str) -> dict[str, Any]:
        entry = {"type": "command", "command": hook_cmd(mode)}
        return {"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [entry]}]}}

    (claude / "settings.json").write_text(json.dumps(settings("user")))
    project = settings("proj")
    (workspace / ".claude").mkdir()
    (workspace / ".claude" / "settings.local.json").write_text(json.dumps(project))
    (workspace / ".kimicode").mkdir()
    (workspace / ".kimicode" / "config.toml").write_text(
        f'[[hooks.PreToolUse]]\nhooks = [{{ type = "command", command = {json.dumps(hook_cmd("projtoml"))} }}]\n'
    )
    server.add(*bash_then_done("true"), *bash_then_done("true"))
    events: list[Event] = []
    make_agent(permission_mode="yolo", on_event=events.append).run_sync("go")
    assert [r["mode"] for r in runs(workspace)] == ["user"]  # the untrusted project's hooks do not run
    assert any(isinstance(e, Notice) and "[hooks] ignored" in e.text for e in events)

    (workspace / "hooks.jsonl").unlink()
    home.mkdir(exist_ok=True)
    with (home / "config.toml").open("a") as fh:
        fh.write(f"[trust]\nworkspaces = [{json.dumps(str(workspace))}]\n")
    make_agent(permission_mode="yolo").run_sync("go")
    assert sorted(r["mode"] for r in runs(workspace)) == ["proj", "projtoml", "user"]


def test_unknown_events_and_prompt_hooks_are_reported_not_run(
    make_agent: Callable[..., Any], server: FakeServer, workspace: Path, home: Path, tmp_path: Path
) -> None:
    claude = tmp_path / "claude-home"
    claude.mkdir()
    data = {
        "hooks": {
            "Setup": [{"hooks": [{"type": "command", "command": "true"}]}],
            "Stop": [{"hooks": [{"type": "prompt", "prompt": "are we done?"}]}],
        }
    }
    (claude / "settings.json").write_text(json.dumps(data))
    server.add(Reply(content="ok"))
    events: list[Event] = []
    make_agent(on_event=events.append).run_sync("go")
    texts = [e.text for e in events if isinstance(e, Notice)]
    assert any("no Setup event" in t for t in texts) and any("type 'prompt' are not supported" in t for t in texts)


def test_headless_stream_json_shows_every_hook_run(
    server: FakeServer,
    workspace: Path,
    home: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from kimicode.cli.app import app

    configure(home, "PreToolUse", ("Bash", hook_cmd(), {}))
    configure(home, "PostToolUse", ("Bash", hook_cmd(), {}))
    monkeypatch.setenv("KIMI_API_KEY", "sk-test")
    monkeypatch.setenv("KIMI_BASE_URL", server.base_url)
    monkeypatch.setenv("KIMICODE_HOME", str(home))
    monkeypatch.chdir(workspace)
    server.add(*bash_then_done("true"))
    try:
        app(args=["-p", "go", "--output-format", "stream-json", "--yolo"], prog_name="kimicode", standalone_mode=False)
    except SystemExit:
        pass
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    hooks = [x for x in lines if x["type"] == "hook"]
    assert [(h["event"], h["outcome"], h["tool_use_id"]) for h in hooks] == [
        ("PreToolUse", "ok", "call_1"),
        ("PostToolUse", "ok", "call_1"),
    ]


def test_kimi_codes_flat_hooks_and_tool_names(
    make_agent: Callable[..., Any], server: FakeServer, workspace: Path, home: Path
) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        f'[[hooks]]\nevent = "PreToolUse"\nmatcher = "Shell"\ncommand = {json.dumps(hook_cmd("exit2"))}\n'
        f'timeout = 5\n[[hooks]]\nevent = "Stop"\ncommand = {json.dumps(hook_cmd())}\n'
    )
    server.add(*bash_then_done("touch made"))
    make_agent(permission_mode="yolo").run_sync("go")
    assert not (workspace / "made").exists()
    assert [r["payload"]["hook_event_name"] for r in runs(workspace)] == ["PreToolUse", "Stop"]


def test_a_hooks_value_of_the_wrong_shape_names_the_file(make_agent: Callable[..., Any], home: Path) -> None:
    from kimicode.config.endpoint import ConfigError

    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text('hooks = "rm -rf /"\n')
    with pytest.raises(ConfigError, match=r"config\.toml:1: hooks: must be a table of events"):
        make_agent()
    (home / "config.toml").write_text('[[hooks]]\nmatcher = "Bash"\ncommand = "x"\n')
    with pytest.raises(ConfigError, match=r"hooks\[0\]: each \[\[hooks\]\] entry needs `event`"):
        make_agent()


def test_hooks_get_the_users_environment_but_not_kimicodes_key(
    make_agent: Callable[..., Any],
    server: FakeServer,
    workspace: Path,
    home: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SLACK_TOKEN", "xoxb-for-the-notifier")
    monkeypatch.setenv("MY_COPY_OF_THE_KEY", "sk-test-secret-key")  # the key make_agent uses
    configure(home, "Stop", ("", "env > env.txt", {}))
    server.add(Reply(content="ok"))
    make_agent().run_sync("go")
    env = (workspace / "env.txt").read_text()
    assert "SLACK_TOKEN=xoxb-for-the-notifier" in env and "sk-test-secret-key" not in env


def test_a_session_with_hook_records_resumes(
    make_agent: Callable[..., Any], server: FakeServer, workspace: Path, home: Path
) -> None:
    from kimicode import Agent

    configure(home, "PreToolUse", ("", hook_cmd(), {}))
    server.add(*bash_then_done("true"), Reply(content="again"))
    first = make_agent(permission_mode="yolo")
    first.run_sync("go")
    again = Agent.resume(first.session_id, options=lambda ws: first.options)
    assert [m["role"] for m in again.messages] == [m["role"] for m in first.messages]
    assert again.run_sync("more").result == "again"


@pytest.mark.parametrize("command", ["head -c 30000000 /dev/zero", "exec 0<&-; sleep 0.1", "cat >/dev/null; exit 0"])
def test_a_flooding_or_deaf_hook_does_not_hold_up_the_call(
    make_agent: Callable[..., Any], server: FakeServer, workspace: Path, home: Path, command: str
) -> None:
    configure(home, "PostToolUse", ("", command, {}))
    (workspace / "big.txt").write_text("x" * 300_000)  # a payload larger than a pipe's buffer
    server.add(Reply(tool_calls=[ToolCall("read_file", {"path": "big.txt"})]), Reply(content="ok"))
    events: list[Event] = []
    assert make_agent(on_event=events.append).run_sync("go").ok
    [hook] = [e for e in events if isinstance(e, HookRan)]
    assert hook.outcome == "ok" and hook.exit_code == 0
