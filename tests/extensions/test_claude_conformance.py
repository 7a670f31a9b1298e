"""Conformance: every agent, skill, command and hook Claude Code would load from a plugin, kimicode loads.

Fixtures: `tests/fixtures/compat/claude-formats/` (written for kimicode, reproducing the formats of the
official claude-code repository's plugins: agents whose one-line `description` holds `Examples:
<example>Context: ...`, multi-line descriptions with blank lines and `<example>` blocks, skills named by a
display name, JSON-list `tools`, hooks with `if`/`asyncRewake`; see SOURCES.md) and the real files kept in
`tests/fixtures/compat/anthropics-*`."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import FIXTURES, run_app

from kimicode.extensions.agents import load_agents
from kimicode.extensions.frontmatter import split
from kimicode.extensions.places import Place
from kimicode.extensions.plugins import read_plugin
from kimicode.extensions.pluginscan import scan_plugin
from kimicode.extensions.skills import load_skills

FORMATS = FIXTURES / "compat" / "claude-formats"
REAL = FIXTURES / "compat" / "anthropics-claude-code" / "plugins"

EXPECTED = {  # what Claude Code loads from each fixture plugin
    "review-kit": {
        "agents": ["review-kit:gap-finder", "review-kit:style-checker"],
        "commands": ["/review-kit:review-all"],
        "skills": [],
        "hooks": 0,
    },
    "builder-kit": {
        "agents": ["builder-kit:checker", "builder-kit:maker"],
        "commands": ["/builder-kit:make-widget"],
        "skills": ["builder-kit:widget-design", "builder-kit:widget-rules"],
        "hooks": 0,
    },
    "explorer-kit": {"agents": ["explorer-kit:tracer"], "commands": [], "skills": [], "hooks": 0},
    "guard-hooks": {"agents": [], "commands": [], "skills": [], "hooks": 4},
    "loop-kit": {"agents": [], "commands": ["/loop-kit:commit", "/loop-kit:start-loop"], "skills": [], "hooks": 1},
    "style-kit": {"agents": [], "commands": [], "skills": ["style-kit:page-style"], "hooks": 0},
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_file_claude_code_loads_kimicode_loads(name: str) -> None:
    plugin = read_plugin(FORMATS / name)
    scan = scan_plugin(plugin)
    assert scan.problems == []
    want = EXPECTED[name]
    for kind in ("agents", "commands", "skills"):
        assert sorted(scan.loaded[kind]) == want[kind], kind
    assert len(plugin.hook_commands()) == want["hooks"]


@pytest.mark.parametrize("folder", sorted(p.name for p in REAL.iterdir()) if REAL.is_dir() else [])
def test_the_official_plugins_kept_here_load_whole(folder: str) -> None:
    assert scan_plugin(read_plugin(REAL / folder)).problems == []


def test_descriptions_keep_their_examples_and_display_names_stay_for_skills() -> None:
    agents = load_agents(
        [
            Place(FORMATS / "builder-kit" / "agents", "plugin", "builder-kit"),
            Place(FORMATS / "review-kit" / "agents", "plugin", "review-kit"),
        ]
    ).agents
    maker = agents["builder-kit:maker"]
    assert "make a widget" in maker.description and "<example>" in maker.description
    assert "I need something that counts clicks" in maker.description
    assert maker.tools == ("Write", "Read") and maker.model == "sonnet"
    assert agents["builder-kit:checker"].tools == ("Read", "Grep", "Glob", "Bash")
    checker_text = agents["builder-kit:checker"].description
    assert 'assistant: "I\'ll use the checker agent."' in checker_text  # an unknown `word:` line continues
    style = agents["review-kit:style-checker"]
    assert style.description.startswith("Use this agent when code was just written")
    assert "Examples:" in style.description
    assert style.model == "opus"
    gap = agents["review-kit:gap-finder"]
    assert gap.tool_names(["read_file", "grep", "bash"]) == (["read_file", "grep"], [])
    skills = load_skills([Place(FORMATS / "builder-kit" / "skills", "plugin", "builder-kit")]).skills
    design = skills["builder-kit:widget-design"]
    assert design.display_name == "Widget Design" and "design a widget" in design.description


@pytest.mark.parametrize(
    ("text", "key", "value"),
    [
        ("---\nname: a\ndescription: one: two: three\n---\nbody", "description", "one: two: three"),
        ("---\nname: a\ndescription: first line\n  second line\n---\nbody", "description", "first line second line"),
        ('---\ndescription: x: y\ntools: ["Read", "Grep"]\n---\nb', "tools", ["Read", "Grep"]),
        ("---\ndescription: x: y\ntools:\n  - Read\n  - Grep\n---\nb", "tools", ["Read", "Grep"]),
        ('---\ndescription: "quoted: yes"\nmodel: opus\n---\nb', "model", "opus"),
    ],
)
def test_lenient_front_matter_takes_the_rest_of_the_line(text: str, key: str, value: object) -> None:
    meta, body = split(text)
    got = meta[key]
    assert (" ".join(got.split()) if isinstance(got, str) else got) == value
    assert body.strip() in ("body", "b")


def test_front_matter_that_is_no_mapping_at_all_is_still_refused() -> None:
    from kimicode.extensions.frontmatter import FrontMatterError

    with pytest.raises(FrontMatterError):
        split("---\n- just\n- a list: [\n---\nbody")


def test_plugin_add_names_each_file_it_cannot_load(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Finding 2: an install that loses files says which and why (before, it exited 0 and listed them)."""
    import shutil

    source = tmp_path / "kit"
    shutil.copytree(FORMATS / "builder-kit", source)
    (source / "agents" / "broken.md").write_text("---\nname: broken\n---\nno description here\n")
    (source / "skills" / "empty-dir").mkdir()
    (source / "skills" / "empty-dir" / "notes.md").write_text("not a skill file\n")
    (source / "commands" / "bad name!.md").write_text("---\ndescription: x\n---\nbody\n")
    code, _out, err = run_app(["plugin", "add", str(source), "--yes"], capsys)
    assert code == 0, err
    assert "kimicode cannot load 3 of its files" in err
    assert "agents/broken.md: no `description`" in err
    assert "skills/empty-dir: a skill folder without SKILL.md" in err
    assert "commands/bad name!.md: not a command" in err
    assert "3 of its files will not load" in err
    code, _out, err = run_app(["plugin", "add", str(FORMATS / "review-kit"), "--yes"], capsys)
    assert code == 0 and "cannot load" not in err  # a whole plugin installs without a word of loss
