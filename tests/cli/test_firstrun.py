"""First run without a key: the options are explained, the key is read hidden and stored in the user's
config.toml (mode 0600) without ever being echoed, and kimicode then uses it (a key variable still wins)."""

from __future__ import annotations

import io
import re
import stat
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import command_env

from kimicode.cli.firstrun import check_key, ensure_key, first_run, store_key
from kimicode.config.endpoint import ConfigError, MissingKeyError
from kimicode.config.settings import load_settings, resolve_model

KEY = "sk-first-run-0123456789abcdef"


def answers(*replies: str | type[BaseException]) -> Iterator[str]:
    for reply in replies:
        if isinstance(reply, type):
            raise reply()
        yield reply


def asker(*replies: str | type[BaseException]) -> tuple[list[str], object]:
    prompts: list[str] = []
    it = answers(*replies)

    def ask(prompt: str) -> str:
        prompts.append(prompt)
        return next(it)

    return prompts, ask


def test_paste_a_key_and_it_is_used(tmp_path: Path, workspace: Path) -> None:
    home = tmp_path / "home"
    out = io.StringIO()
    prompts, ask = asker(f"  {KEY}  \n")
    assert first_run(home, out=out, ask=ask)  # type: ignore[arg-type]
    text = out.getvalue()
    assert KEY not in text  # never echoed
    for option in ("KIMI_API_KEY", "MOONSHOT_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL", str(home / "config.toml")):
        assert option in text
    assert prompts == ["API key (input hidden, Enter to skip): "]
    config = home / "config.toml"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert tomllib.loads(config.read_text())["auth"]["api_key"] == KEY
    endpoint, _ = resolve_model(load_settings(workspace, home), env={})
    assert endpoint.api_key == KEY and endpoint.key_source == "config.toml"
    assert KEY not in repr(endpoint)
    # a key variable wins over the stored key; so does an explicit argument
    endpoint, _ = resolve_model(load_settings(workspace, home), env={"KIMI_API_KEY": "sk-env-key-123456"})
    assert endpoint.api_key == "sk-env-key-123456" and endpoint.key_source == "KIMI_API_KEY"
    endpoint, _ = resolve_model(
        load_settings(workspace, home), env={"OPENAI_API_KEY": "none", "OPENAI_BASE_URL": "http://localhost:1/v1"}
    )
    assert endpoint.key_source == "OPENAI_API_KEY"


def test_existing_config_is_kept(tmp_path: Path, workspace: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    config = home / "config.toml"
    config.write_text('[defaults]\nmodel = "kimi-k3"\n[models."kimi-k3"]\ncontext_window = 500000')  # no newline
    config.chmod(0o644)
    key = 'sk-with"quote\\and-backslash'
    store_key(home, key)
    data = tomllib.loads(config.read_text())
    assert data["defaults"]["model"] == "kimi-k3" and data["models"]["kimi-k3"]["context_window"] == 500000
    assert data["auth"]["api_key"] == key
    assert stat.S_IMODE(config.stat().st_mode) == 0o600  # it holds a secret now
    load_settings(workspace, home)  # the schema accepts the result
    assert [p.name for p in home.iterdir()] == ["config.toml"]  # no temporary file left behind


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ('[auth]\napi_key = ""\n', "already has an [auth] table"),
        ("this is = = not toml", "cannot add the key"),
    ],
)
def test_a_file_that_cannot_be_extended_is_left_alone(tmp_path: Path, content: str, said: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(content)
    with pytest.raises(ConfigError, match=re.escape(said)) as info:
        store_key(home, KEY)
    assert KEY not in str(info.value)
    assert (home / "config.toml").read_text() == content


def test_a_symlinked_config_is_not_written_through(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    dotfiles = tmp_path / "dotfiles-repo" / "kimicode.toml"
    dotfiles.parent.mkdir()
    dotfiles.write_text("[defaults]\n")
    (home / "config.toml").symlink_to(dotfiles)
    out = io.StringIO()
    _, ask = asker(KEY)
    assert not first_run(home, out=out, ask=ask)  # type: ignore[arg-type]
    assert "symbolic link" in out.getvalue() and KEY not in out.getvalue()
    assert dotfiles.read_text() == "[defaults]\n" and (home / "config.toml").is_symlink()


@pytest.mark.parametrize(
    ("replies", "stored"),
    [
        (("",), False),  # Enter skips
        ((EOFError,), False),  # Ctrl-D
        ((KeyboardInterrupt,), False),  # Ctrl-C
        (("sk short", KEY), True),  # a typo, then the key
        (("ключ-ключ-ключ", "a\tbc", "x y z w v u"), False),  # three bad tries
    ],
)
def test_skipping_and_retrying(tmp_path: Path, replies: tuple[str | type[BaseException], ...], stored: bool) -> None:
    home = tmp_path / "home"
    out = io.StringIO()
    _, ask = asker(*replies)
    assert first_run(home, out=out, ask=ask) is stored  # type: ignore[arg-type]
    assert (home / "config.toml").exists() is stored
    text = out.getvalue()
    for reply in replies:
        if isinstance(reply, str) and reply:
            assert reply not in text  # not even a wrong key is echoed
    if not stored:
        assert "No key stored" in text


def test_check_key() -> None:
    assert check_key(KEY) is None
    assert check_key("sk 123456789") and check_key("sk-1234567\x1b[2J") and check_key("")
    assert check_key("sk-123") is None  # short: the server judges it (issue 36, finding 7)


def test_a_short_key_is_asked_about_at_the_server(tmp_path: Path) -> None:
    import io

    from kimicode.cli.firstrun import ask_and_store

    asked: list[str] = []
    home = tmp_path / "home"
    home.mkdir()

    def verify(key: str) -> tuple[bool, str]:
        asked.append(key)
        return True, "accepted"

    assert ask_and_store(home, out=io.StringIO(), ask=lambda _: "abc123", verify=verify)
    assert asked == ["abc123"] and tomllib.loads((home / "config.toml").read_text())["auth"]["api_key"] == "abc123"


def test_ensure_key_asks_only_when_there_is_none(
    tmp_path: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("KIMI_API_KEY", "sk-env-key-123456")
    out = io.StringIO()
    assert (
        ensure_key(workspace, home, model=None, base_url=None, out=out, ask=lambda p: pytest.fail("asked"))
        and out.getvalue() == ""
    )
    monkeypatch.delenv("KIMI_API_KEY")
    asked: list[str] = []
    assert ensure_key(
        workspace, home, model=None, base_url=None, out=out, ask=lambda prompt: asked.append(prompt) or KEY
    )
    assert len(asked) == 1
    assert (home / "config.toml").exists() and KEY not in out.getvalue()
    with pytest.raises(MissingKeyError):
        resolve_model(load_settings(workspace, tmp_path / "other-home"), env={})


@pytest.mark.slow
def test_the_terminal_asks_and_never_echoes(tmp_path: Path, workspace: Path) -> None:
    pexpect = pytest.importorskip("pexpect")
    from helpers import kimicode_command

    home = tmp_path / "home"
    env = command_env(home, TERM="xterm")
    cmd = kimicode_command()
    child = pexpect.spawn(
        cmd[0], cmd[1:], env=env, cwd=str(workspace), encoding="utf-8", timeout=20, dimensions=(30, 100)
    )
    child.expect("Enter to skip")
    child.sendline(KEY)
    child.expect("Key stored in")
    seen = child.before + child.after
    child.expect("›")  # the session opened with the stored key
    child.send("/exit\r")
    child.expect(pexpect.EOF, timeout=20)
    seen += child.before
    assert KEY not in seen
    assert stat.S_IMODE((home / "config.toml").stat().st_mode) == 0o600
    assert tomllib.loads((home / "config.toml").read_text())["auth"]["api_key"] == KEY


@pytest.mark.prepush
def test_config_show_never_prints_the_stored_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from kimicode.cli.app import app

    store_key(tmp_path / "home", KEY)
    monkeypatch.chdir(tmp_path)
    for args in (["config", "show"], ["config", "show", "--json"], ["doctor", "--timeout", "0.2", "--json"]):
        result = CliRunner().invoke(app, args, env={"KIMI_BASE_URL": "http://127.0.0.1:9/v1"})
        assert KEY not in result.output, args
        assert "config.toml" in result.output
