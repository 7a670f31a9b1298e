"""The sandbox shows the user's toolchain (an activated virtualenv outside the workspace, a pyenv-style
root, a pipx-style link on PATH) and hides the secrets below what it shows (issue 34, findings 5, 9, 10).

The virtualenvs are real (`python -m venv`) and hold a real pytest, copied from the running one; the
commands run in the real bwrap sandbox, admitted by `bash(pytest*)`-style rules in default mode."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import sent_tool_results

from kimicode.events import Notice
from kimicode.testing import FakeServer, Reply, ToolCall
from kimicode.tools.sandbox import probe

MakeAgent = Callable[..., Any]
STATUS = probe()
needs_bwrap = pytest.mark.skipif(not STATUS.available, reason=f"bubblewrap cannot run here: {STATUS.reason}")
_PURE = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "pygments", "py.py", "exceptiongroup", "tomli")


def make_venv(where: Path) -> Path:
    """A real virtualenv at `where` with a real pytest in it (its pure-Python packages copied from the
    running interpreter's, so no network is needed) and its `pytest` console script."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    site = next((where / "lib").glob("python3*/site-packages"))
    import _pytest

    source = Path(_pytest.__file__).parent.parent
    for name in _PURE:
        src = source / name
        if src.is_dir():
            shutil.copytree(src, site / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif src.is_file():
            shutil.copy2(src, site / name)
    script = where / "bin" / "pytest"
    script.write_text(f"#!{where}/bin/python\nimport sys\nfrom pytest import console_main\nsys.exit(console_main())\n")
    script.chmod(0o755)
    return where


@pytest.fixture(scope="module")
def venv_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_venv(tmp_path_factory.mktemp("template") / "venv")


def copy_venv(template: Path, where: Path) -> Path:
    """The template virtualenv at another place (its scripts name their interpreter by path)."""
    where.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(template, where, symlinks=True)
    for script in (where / "bin").iterdir():
        if script.is_file() and not script.is_symlink() and script.read_bytes().startswith(b"#!"):
            script.write_text(script.read_text().replace(str(template), str(where)))
    return where


@pytest.fixture
def user_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home directory of its own, with something private in it that the sandbox must not show."""
    home = tmp_path / "user"
    (home / "Documents").mkdir(parents=True)
    (home / "Documents" / "private.txt").write_text("private\n")
    monkeypatch.setenv("HOME", str(home))
    return home


def write_tests(workspace: Path) -> None:
    (workspace / "test_ok.py").write_text(
        "import os\n\ndef test_runs_in_the_sandbox():\n"
        "    assert not os.path.exists(os.path.expanduser('~/Documents'))  # the host's home is not shown\n"
    )


@needs_bwrap
@pytest.mark.slow
@pytest.mark.parametrize("layout", ["activated venv", "pyenv-style shims", "pipx-style link"])
def test_rule_admitted_pytest_runs_in_the_sandbox_with_the_users_environment(
    server: FakeServer,
    make_agent: MakeAgent,
    workspace: Path,
    user_home: Path,
    venv_template: Path,
    monkeypatch: pytest.MonkeyPatch,
    layout: str,
) -> None:
    """Finding 9: an allow rule must not make the user's test command vanish."""
    system = "/usr/bin:/bin"
    if layout == "activated venv":
        venv = copy_venv(venv_template, user_home / ".venvs" / "x")
        monkeypatch.setenv("VIRTUAL_ENV", str(venv))
        monkeypatch.setenv("PATH", f"{venv}/bin:{system}")
    elif layout == "pyenv-style shims":
        root = user_home / "pyenv-root"
        venv = copy_venv(venv_template, root / "versions" / "tools")
        shims = root / "shims"
        shims.mkdir()
        for name in ("pytest", "python"):
            shim = shims / name
            shim.write_text(f'#!/bin/sh\nexec "$PYENV_ROOT/versions/tools/bin/{name}" "$@"\n')
            shim.chmod(0o755)
        monkeypatch.setenv("PYENV_ROOT", str(root))
        monkeypatch.setenv("PATH", f"{shims}:{system}")
        monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    else:
        venv = copy_venv(venv_template, user_home / ".local" / "share" / "tools" / "pytest-env")
        links = user_home / "bin"
        links.mkdir()
        for name in ("pytest", "python"):
            (links / name).symlink_to(venv / "bin" / name)
        monkeypatch.setenv("PATH", f"{links}:{system}")
        monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    write_tests(workspace)
    server.add(
        Reply(
            tool_calls=[
                ToolCall("bash", {"command": "pytest -q -p no:cacheprovider test_ok.py"}),
                ToolCall("bash", {"command": "python -m pytest -q -p no:cacheprovider test_ok.py"}),
            ]
        ),
        Reply(content="ok"),
    )
    agent = make_agent(permission_mode="default", allow=["bash(pytest*)", "bash(python -m pytest*)"])
    assert agent.sandbox is not None
    agent.run_sync("run the tests")
    direct, module = sent_tool_results(server)
    assert "1 passed" in direct and direct.endswith("[exit code: 0]"), direct
    assert "1 passed" in module and module.endswith("[exit code: 0]"), module


@needs_bwrap
@pytest.mark.slow
def test_a_command_hidden_by_the_sandbox_gets_a_note_naming_the_setting(
    server: FakeServer,
    make_agent: MakeAgent,
    workspace: Path,
    user_home: Path,
    venv_template: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Finding 9: "command not found" (exit 127) and a hidden interpreter say the sandbox hid it, to the
    model and to the user (a warning Notice: on stderr in headless runs)."""
    other = copy_venv(venv_template, user_home / "envs" / "other")  # not activated, not on PATH
    (user_home / "deploy-tool").write_text("#!/bin/sh\necho deployed\n")
    (user_home / "deploy-tool").chmod(0o755)
    monkeypatch.setenv("PATH", f"/usr/bin:/bin:{user_home}")  # the home directory itself is never shown
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    server.add(
        Reply(
            tool_calls=[
                ToolCall("bash", {"command": "deploy-tool --dry-run"}),
                ToolCall("bash", {"command": f"{other}/bin/python -c 'print(1)'"}),
            ]
        ),
        Reply(content="ok"),
    )
    agent = make_agent(permission_mode="yolo")  # yolo skips the questions, not the sandbox
    events: list[Any] = []
    agent.on_event = events.append
    agent.run_sync("x")
    missing, interpreter = sent_tool_results(server)
    assert "[exit code: 127]" in missing and "command not found" in missing
    assert f"`deploy-tool` is {user_home}/deploy-tool on the host" in missing, missing
    assert "not visible in the sandbox" in missing and "~/.local/bin" in missing
    assert "[exit code: 127]" in interpreter and f"{other}/bin/python" in interpreter
    assert f"read({other}/**)" in interpreter, interpreter  # the setting that shows it
    notices = [e.text for e in events if isinstance(e, Notice) and e.level == "warning"]
    assert sum("sandbox blocked" in n for n in notices) == 2, notices


@needs_bwrap
def test_gits_credential_store_is_hidden_in_every_sandbox(
    server: FakeServer, make_agent: MakeAgent, user_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding 5: ~/.config/git is shown (git's configuration), its `credentials` file is not; nor is a
    secret file in a directory on PATH."""
    git = user_home / ".config" / "git"
    git.mkdir(parents=True)
    (git / "config").write_text("[user]\n\tname = Shown Name\n")
    (git / "credentials").write_text("https://me:ghp_GITCREDENTIAL@github.com\n")
    (user_home / ".git-credentials").write_text("https://me:ghp_HOMECREDENTIAL@github.com\n")
    tools = user_home / "tools"
    tools.mkdir()
    (tools / ".env").write_text("TOKEN=PATHDIR-SECRET\n")
    monkeypatch.setenv("PATH", f"{tools}:/usr/bin:/bin")
    read = "cat ~/.config/git/config ~/.config/git/credentials ~/.git-credentials ~/tools/.env 2>&1; true"
    for mode in ("yolo", "default"):  # workspace-write (yolo) and read-only (the read-only allowance)
        server.add(Reply(tool_calls=[ToolCall("bash", {"command": read})]), Reply(content="ok"))
        make_agent(permission_mode=mode, sandbox="workspace-write").run_sync("x")
        [result] = sent_tool_results(server)
        assert "Shown Name" in result, result
        assert "GITCREDENTIAL" not in result and "HOMECREDENTIAL" not in result and "PATHDIR-SECRET" not in result
