"""Configuration as typed sections (kimicode/config/sections.py): one declaration per key with its default,
bounds and the direction an untrusted project may move it; the untrusted allowlist generated from it;
no table read outside kimicode/config/."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from helpers import ROOT, write

from kimicode.config.endpoint import ConfigError
from kimicode.config.sections import STRICTNESS, Config, direction, reference
from kimicode.config.settings import SCHEMA, load_settings
from kimicode.testing import FakeServer, Reply


def toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list):
        return "[" + ", ".join(toml(v) for v in value) + "]"
    return repr(value)


def leaf_keys() -> list[tuple[str, ...]]:
    """Every key of the schema (a table of named tables as one entry named `x`)."""
    out: list[tuple[str, ...]] = []

    def walk(node: Any, path: tuple[str, ...]) -> None:
        for name, sub in node.items():
            here = (*path, "x" if name == "*" else name)
            if isinstance(sub, dict):
                walk(sub, here)
            else:
                out.append(here)

    walk(SCHEMA, ())
    return out


def sample(keypath: tuple[str, ...]) -> Any:
    """A valid value for the key (within its bounds)."""
    node: Any = SCHEMA
    for part in keypath:
        node = node.get(part, node.get("*"))
    if isinstance(node, tuple):
        return node[0]
    return {"str": "x", "int": 3, "number": 0.5, "bool": True, "list[str]": ["x"], "list": [], "hooks": []}[node]


def project_toml(keypath: tuple[str, ...], value: Any) -> str:
    return (
        f"[{'.'.join(keypath[:-1])}]\n{keypath[-1]} = {toml(value)}\n"
        if len(keypath) > 1
        else f"{keypath[0]} = {toml(value)}\n"
    )


# -- the allowlist, generated from the declarations -----------------------------------------------------------

IGNORED = [k for k in leaf_keys() if direction(k) is None and k[0] not in ("trust", "auth")]
LIMITS = [k for k in leaf_keys() if direction(k) in ("lower", "higher")]


@pytest.mark.parametrize("keypath", IGNORED, ids=".".join)
def test_a_key_without_a_direction_is_ignored_from_an_untrusted_project_and_named(
    keypath: tuple[str, ...], tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    write(ws / ".kimicode" / "config.toml", project_toml(keypath, sample(keypath)))
    settings = load_settings(ws, tmp_path / "home")
    node: Any = settings.data
    for part in keypath[:-1]:
        node = node.get(part, {})
    assert keypath[-1] not in node, settings.data
    (notice,) = settings.ignored
    labels = [".".join(keypath)] + [f"[{'.'.join(keypath[:i])}]" for i in range(1, len(keypath))]
    assert any(label in notice for label in labels), notice
    assert "not trusted" in notice and "[trust] workspaces" in notice and "--trust-workspace" in notice


@pytest.mark.parametrize("keypath", LIMITS, ids=".".join)
def test_a_limit_moves_only_the_tightening_way(keypath: tuple[str, ...], tmp_path: Path) -> None:
    """Yours at 10: the project may go to 5 (lower) or 20 (higher) and not the other way."""
    tight, loose = (5, 20) if direction(keypath) == "lower" else (20, 5)
    home, ws = tmp_path / "home", tmp_path / "ws"
    write(home / "config.toml", project_toml(keypath, 10))
    for value, applies in ((tight, True), (loose, False)):
        write(ws / ".kimicode" / "config.toml", project_toml(keypath, value))
        settings = load_settings(ws, home)
        node: Any = settings.data
        for part in keypath:
            node = node[part]
        assert node == (value if applies else 10), (keypath, value)
        assert bool(settings.ignored) is not applies
        if not applies:
            assert f"{'.'.join(keypath)} = {value} ignored" in settings.ignored[0]


@pytest.mark.parametrize(
    ("text", "key", "applied"),
    [
        ("[checkpoints]\nenabled = false\n", "checkpoints.enabled", True),  # the case: undo stays on
        ("[checkpoints]\nenabled = true\n", "checkpoints.enabled", True),
        ("[checkpoints]\nauto_prune = true\n", "checkpoints.auto_prune", None),
        ("[checkpoints]\nauto_prune = false\n", "checkpoints.auto_prune", False),
        ("[sandbox]\nnetwork = true\n", "sandbox.network", None),
        ('[agent]\nscope = "strict"\n', "agent.scope", "strict"),
        ('[defaults]\nthinking = "max"\n', "defaults.thinking", None),
        ('[subagents]\ntools = ["bash"]\n', "subagents.tools", None),
    ],
)
def test_switches_and_choices_from_an_untrusted_project(tmp_path: Path, text: str, key: str, applied: Any) -> None:
    ws = tmp_path / "ws"
    write(ws / ".kimicode" / "config.toml", text)
    settings = load_settings(ws, tmp_path / "home")
    section, name = key.split(".")
    assert getattr(getattr(settings.config, section), name) == (
        applied if applied is not None else getattr(getattr(Config(), section), name)
    )
    project_value = text.split("= ")[1].strip()
    if applied is None or (str(applied).lower() != project_value.strip('"')):
        (notice,) = settings.ignored
        assert key in notice and "ignored" in notice


def test_one_notice_names_every_ignored_key_and_how_to_trust(tmp_path: Path) -> None:
    ws, home = tmp_path / "ws", tmp_path / "home"
    write(
        ws / ".kimicode" / "config.toml",
        '[defaults]\nmodel = "theirs"\nmax_turns = 3\n[checkpoints]\nenabled = false\n'
        '[providers.p]\nbase_url = "http://127.0.0.1:9/v1"\n[context]\ntokenizer = "/dev/zero"\n',
    )
    settings = load_settings(ws, home)
    (notice,) = settings.ignored
    for named in ("defaults.model", "checkpoints.enabled = false", "[providers]", "context.tokenizer"):
        assert named in notice, notice
    assert str(home / "config.toml") in notice and "--trust-workspace" in notice
    assert settings.config.defaults.max_turns == 3  # a lower limit is a tightening: it applies
    assert settings.config.checkpoints.enabled is True


def test_a_trusted_project_applies_whole_and_names_what_loosens(tmp_path: Path) -> None:
    ws, home = tmp_path / "ws", tmp_path / "home"
    write(home / "config.toml", f'[trust]\nworkspaces = ["{ws}"]\n[defaults]\nmax_turns = 10\n')
    write(
        ws / ".kimicode" / "config.toml",
        '[defaults]\nmax_turns = 99\nmodel = "theirs"\n[checkpoints]\nenabled = false\n',
    )
    settings = load_settings(ws, home)
    assert settings.config.defaults.max_turns == 99 and settings.config.defaults.model == "theirs"
    assert settings.config.checkpoints.enabled is False
    (notice,) = settings.ignored
    assert "defaults.max_turns = 99 applies" in notice and "checkpoints.enabled = false applies" in notice
    assert "defaults.model" not in notice  # no direction: not a loosening of yours, just the project's choice


def test_an_untrusted_project_cannot_turn_off_undo_in_the_agent(
    make_agent: Any, workspace: Path, server: FakeServer
) -> None:
    """`[checkpoints] enabled = false` from a cloned repository used to apply silently."""
    write(workspace / ".kimicode" / "config.toml", "[checkpoints]\nenabled = false\n")
    events: list[Any] = []
    agent = make_agent(on_event=events.append)
    assert agent.checkpoints is not None
    server.add(Reply(content="ok"))
    agent.run_sync("hi")
    assert any("checkpoints.enabled = false ignored" in getattr(e, "text", "") for e in events)


def test_the_stricter_scales_cover_every_choice() -> None:
    for key, scale in STRICTNESS.items():
        section, name = key.split(".")
        field = Config.model_fields[section].annotation.model_fields[name]  # type: ignore[union-attr]
        assert set(scale) == set(SCHEMA[section][name]), (key, field)


# -- bounds, resolved once ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[defaults]\nmax_turns = 0\n", ":2: defaults.max_turns: input should be greater than or equal to 1"),
        ("\n[context]\nprune_threshold = 1.5\n", ":3: context.prune_threshold: input should be less than or equal"),
        ("[mcp]\ntool_timeout = -1\n", ":2: mcp.tool_timeout: input should be greater than 0"),
        ("[models.m]\ncontext_window = 0\n", ":2: models.m.context_window: input should be greater"),
    ],
)
def test_a_value_out_of_its_bounds_names_file_line_and_key(tmp_path: Path, text: str, needle: str) -> None:
    write(tmp_path / "home" / "config.toml", text)
    with pytest.raises(ConfigError) as info:
        load_settings(tmp_path, tmp_path / "home")
    assert str(tmp_path / "home" / "config.toml") in str(info.value) and needle in str(info.value)


def test_defaults_come_from_the_declarations(tmp_path: Path) -> None:
    config = load_settings(tmp_path, tmp_path / "home").config
    assert config.context.tool_output_cap_tokens == 25_000 and config.mcp.tool_timeout == 300.0
    assert config.images.max_side == 2048 and config.checkpoints.enabled and config.subagents.max_turns == 50


def test_the_documented_table_is_the_declarations() -> None:
    doc = (ROOT / "docs" / "configuration.md").read_text()
    start = doc.index("<!-- generated from kimicode/config/sections.py")
    block = doc[doc.index("\n", start) + 1 : doc.index("<!-- end of the generated table -->")]
    rows = ["| key | type (bounds) | default | from an untrusted project |", "|---|---|---|---|"]
    rows += [f"| `{k}` | {t} | {d} | {u} |" for k, t, d, u in reference()]
    assert block == "\n".join(rows) + "\n", "regenerate the table in docs/configuration.md from reference()"


# -- nothing outside config/ reads a table --------------------------------------------------------------------------


TOML_PARSERS = ("tomllib", "tomli", "toml", "tomlkit", "rtoml", "pytomlpp")


def config_reads(package: Path) -> list[str]:
    """Where a module outside `package`/config reads configuration itself: a table (`settings.table("a")`,
    `settings.data`, `settings.get("a.b")`) or the files (a TOML parser imported: the configuration files are
    parsed once, in kimicode/config/, and read from `Settings`)."""
    offenders = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package)
        if rel.parts[0] == "config":
            continue
        recorded = rel.parts[0] == "session"  # a session log's recorded settings are its own tables
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if recorded and not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            if isinstance(node, ast.Attribute):
                owner = node.value
                owner_name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
                if owner_name in ("settings", "config") and node.attr in ("table", "data"):
                    offenders.append(f"{rel}:{node.lineno} {owner_name}.{node.attr}")
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
                and node.args[0].value.split(".")[0] in SCHEMA
                and "." in node.args[0].value
            ):
                offenders.append(f"{rel}:{node.lineno} .get({node.args[0].value!r})")
            elif isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                offenders += [f"{rel}:{node.lineno} import {n}" for n in names if n.split(".")[0] in TOML_PARSERS]
    return offenders


@pytest.mark.prepush
def test_no_configuration_table_is_read_outside_the_config_package() -> None:
    """`settings.get("a.b")`, `settings.table("a")` and `settings.data` belong to kimicode/config/: the rest reads
    the typed sections (`settings.config.context.max_tokens`), so each default and bound is written once; and
    no module outside it parses a configuration file again (ui/notify.py, the hooks and the trust question did)."""
    assert config_reads(ROOT / "kimicode") == []


def test_the_config_read_check_finds_each_kind(tmp_path: Path) -> None:
    write(tmp_path / "config" / "settings.py", "import tomllib\n")  # the one place that parses
    write(tmp_path / "ui" / "notify.py", "import tomllib\ndef f(home):\n    return tomllib.loads(home.read_text())\n")
    write(tmp_path / "ui" / "other.py", "from tomli import loads\nimport tomlkit.api as t\n")
    write(tmp_path / "session" / "replay.py", "import tomllib\ndef f(settings):\n    return settings.data\n")
    write(
        tmp_path / "agent" / "x.py",
        "def f(settings):\n    return settings.table('context'), "
        "settings.config.data, settings.get('context.max_tokens')\n",
    )
    assert sorted(config_reads(tmp_path)) == [
        "agent/x.py:2 .get('context.max_tokens')",
        "agent/x.py:2 config.data",
        "agent/x.py:2 settings.table",
        "session/replay.py:1 import tomllib",
        "ui/notify.py:1 import tomllib",
        "ui/other.py:1 import tomli",
        "ui/other.py:2 import tomlkit.api",
    ]
