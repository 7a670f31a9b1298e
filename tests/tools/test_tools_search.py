"""Tests for the glob and grep tools: ripgrep chooses the files, globs are gitignore-style patterns
(pathspec), and without ripgrep both tools say how to get it back."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from kimicode.tools.base import Tool, ToolContext, ToolError, ToolResult
from kimicode.tools.search import GLOB, GREP, GlobSelector, expand_braces, find_ripgrep


@pytest.fixture(autouse=True)
def _ripgrep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KIMICODE_NO_RIPGREP", raising=False)
    assert find_ripgrep() is not None, "the ripgrep wheel is a dependency; rg must be installed"


def call(tool: Tool, args: dict[str, Any], workspace: Path) -> ToolResult:
    async def invoke() -> ToolResult | str:
        return await tool.fn(args, ToolContext(workspace=workspace))

    result = asyncio.run(invoke())
    assert isinstance(result, ToolResult)
    return result


def write(path: Path, content: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A small project exercising ignore rules, hidden files, binary files and path ordering."""
    ws = tmp_path / "proj"
    files: dict[str, str | bytes] = {
        ".gitignore": "# build output\n*.log\n!keep.log\nbuild/\n/dist\nsecret*.txt\n",
        ".ignore": "generated/\n",
        "README.md": "# Demo\nHello world\n",
        "main.py": "import os\n\nprint('hello')\n",
        "keep.log": "hello from the kept log\n",
        "debug.log": "hello from an ignored log\n",
        "secret1.txt": "hello secret\n",
        "scratch.tmp": "hello scratch at the root\n",
        "build/out.py": "hello = 1\n",
        "dist/bundle.py": "hello = 2\n",
        "generated/gen.py": "hello = 3\n",
        "src/.gitignore": "*.tmp\n",
        "src/scratch.tmp": "hello scratch in src\n",
        "src/dist/kept.py": "hello = 'an unanchored dist'\n",
        "src/app.py": "def main():\n    return 'Hello'\n\n\ndef helper():\n    return 42\n",
        "src/a-b.py": "x = 'hello dash'\n",
        "src/a/inner.py": "y = 'HELLO inner'\n",
        "docs/guide.md": "Guide\nline two\nhello guide\nline four\nline five\nline six\nhello again\n",
        "docs/api/ref.md": "API reference\n",
        ".hidden/h.py": "hello hidden\n",
        ".env": "TOKEN=hello\n",
        "image.bin": b"\x89PNG\r\n\x1a\n\x00\x00hello binary\n",
    }
    for rel, content in files.items():
        write(ws / rel, content)
    return ws


# --------------------------------------------------------------------------------------------------
# glob


def test_glob_lists_files_respecting_ignore_files_sorted_by_path(project: Path) -> None:
    out = call(GLOB, {"pattern": "*"}, project).content.splitlines()
    assert out == [
        "README.md",
        "docs/api/ref.md",
        "docs/guide.md",
        "image.bin",
        "keep.log",
        "main.py",
        "scratch.tmp",
        "src/a/inner.py",
        "src/a-b.py",
        "src/app.py",
        "src/dist/kept.py",
    ]


def test_glob_nested_gitignore_applies_only_below_its_directory(project: Path) -> None:
    assert call(GLOB, {"pattern": "**/*.tmp"}, project).content.splitlines() == ["scratch.tmp"]


def test_glob_negation_and_override_precedence(project: Path) -> None:
    everything = call(GLOB, {"pattern": "**"}, project).content.splitlines()
    assert "keep.log" in everything  # `!keep.log` re-includes it
    assert "debug.log" not in everything
    # A glob only narrows what ignore rules let through (a raw `rg --glob` override would not).
    assert call(GLOB, {"pattern": "*.log"}, project).content.splitlines() == ["keep.log"]
    assert call(GLOB, {"pattern": ".env"}, project).content.startswith("No files match")
    assert call(GLOB, {"pattern": "!*.md", "path": "docs"}, project).content.startswith("No files match")
    assert call(GLOB, {"pattern": "!src"}, project).content.splitlines()[-4:] == [
        "image.bin",
        "keep.log",
        "main.py",
        "scratch.tmp",
    ]
    # Naming a hidden or ignored directory as the path searches it.
    assert call(GLOB, {"pattern": "*", "path": ".hidden"}, project).content == ".hidden/h.py"
    assert call(GLOB, {"pattern": "*", "path": "build"}, project).content == "build/out.py"
    assert call(GLOB, {"pattern": "*.py", "path": "."}, project).content.splitlines() == [
        "main.py",
        "src/a/inner.py",
        "src/a-b.py",
        "src/app.py",
        "src/dist/kept.py",
    ]


def test_glob_patterns_with_slash_are_anchored_at_the_search_path(project: Path) -> None:
    assert call(GLOB, {"pattern": "src/*.py"}, project).content.splitlines() == ["src/a-b.py", "src/app.py"]
    assert call(GLOB, {"pattern": "*.py", "path": "src"}, project).content.splitlines() == [
        "src/a/inner.py",
        "src/a-b.py",
        "src/app.py",
        "src/dist/kept.py",
    ]
    assert call(GLOB, {"pattern": "a/*.py", "path": "src"}, project).content == "src/a/inner.py"
    assert call(GLOB, {"pattern": "./src/a/*.py"}, project).content == "src/a/inner.py"


def test_glob_outside_workspace_shows_absolute_paths(project: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    write(other / "x.txt", "x")
    out = call(GLOB, {"pattern": "*.txt", "path": str(other)}, project).content
    assert out == str((other / "x.txt").resolve())


def test_glob_caps_results_and_says_how_many_matched(tmp_path: Path) -> None:
    for i in range(1005):
        write(tmp_path / "many" / f"f{i:04d}.txt", "")
    lines = call(GLOB, {"pattern": "*.txt"}, tmp_path).content.splitlines()
    assert len(lines) == 1001
    assert lines[0] == "many/f0000.txt"
    assert lines[999] == "many/f0999.txt"
    assert "1000 of 1005" in lines[-1]


def test_glob_errors_are_clear(project: Path) -> None:
    with pytest.raises(ToolError, match="invalid glob"):
        call(GLOB, {"pattern": "{a,b"}, project)
    with pytest.raises(ToolError, match="invalid glob"):
        call(GLOB, {"pattern": "[z-a]"}, project)
    with pytest.raises(ToolError, match="path not found"):
        call(GLOB, {"pattern": "*", "path": "nope"}, project)
    with pytest.raises(ToolError, match="directory"):
        call(GLOB, {"pattern": "*", "path": "main.py"}, project)
    with pytest.raises(ToolError, match="pattern"):
        call(GLOB, {"pattern": "  "}, project)


def test_glob_no_match_is_a_normal_result(project: Path) -> None:
    result = call(GLOB, {"pattern": "*.rs"}, project)
    assert not result.is_error
    assert result.content.startswith("No files match")


GLOB_CASES = {
    "**": 11,
    "*.py": ["main.py", "src/a/inner.py", "src/a-b.py", "src/app.py", "src/dist/kept.py"],
    "**/a/*": ["src/a/inner.py"],
    "*.{py,md}": 8,
    "*.{md,{log,bin}}": ["README.md", "docs/api/ref.md", "docs/guide.md", "image.bin", "keep.log"],
    "?ain.py": ["main.py"],
    "docs/*/*.md": ["docs/api/ref.md"],
    # like .gitignore, a pattern without `/` matches any component: `docs/` and `src/a/` match `[a-m]*`
    "[a-m]*": [
        "docs/api/ref.md",
        "docs/guide.md",
        "image.bin",
        "keep.log",
        "main.py",
        "src/a/inner.py",
        "src/a-b.py",
        "src/app.py",
        "src/dist/kept.py",
    ],
    "[!a-r]*.py": "No files match",
    "[!a-m]*": [
        "README.md",
        "docs/api/ref.md",
        "scratch.tmp",
        "src/a/inner.py",
        "src/a-b.py",
        "src/app.py",
        "src/dist/kept.py",
    ],
    "!*.py": ["README.md", "docs/api/ref.md", "docs/guide.md", "image.bin", "keep.log", "scratch.tmp"],
    "src/": ["src/a/inner.py", "src/a-b.py", "src/app.py", "src/dist/kept.py"],
    "/main.py": ["main.py"],
    "a\\-b.py": ["src/a-b.py"],
    "\\{x\\}.txt": "No files match",
}


@pytest.mark.parametrize("pattern", list(GLOB_CASES))
def test_glob_patterns(project: Path, pattern: str) -> None:
    expected = GLOB_CASES[pattern]
    out = call(GLOB, {"pattern": pattern}, project).content
    if isinstance(expected, int):
        assert len(out.splitlines()) == expected, out
    elif isinstance(expected, str):
        assert out.startswith(expected)
    else:
        assert out.splitlines() == expected


def test_glob_inside_git_repositories(tmp_path: Path) -> None:
    ws = tmp_path / "repo"
    write(ws / ".git" / "info" / "exclude", "*.local\n")
    write(ws / ".gitignore", "*.dat\nvendor/lib/skip.txt\n")
    write(ws / "a.dat", "")
    write(ws / "a.local", "")
    write(ws / "a.txt", "")
    # A nested repository: the parent's .gitignore stops at its root, .ignore files do not.
    write(ws / "vendor" / "lib" / ".git" / "HEAD", "ref: refs/heads/main\n")
    write(ws / "vendor" / "lib" / "x.dat", "")
    write(ws / "vendor" / "lib" / "skip.txt", "")
    write(ws / "vendor" / "lib" / "y.txt", "")
    write(ws / "sub" / ".ignore", "*.txt\n")
    write(ws / "sub" / ".rgignore", "!keep.txt\n")
    write(ws / "sub" / "keep.txt", "")
    write(ws / "sub" / "drop.txt", "")
    out = call(GLOB, {"pattern": "*"}, ws).content.splitlines()
    assert out == ["a.txt", "sub/keep.txt", "vendor/lib/skip.txt", "vendor/lib/x.dat", "vendor/lib/y.txt"]
    assert call(GLOB, {"pattern": "*", "path": "vendor"}, ws).content.splitlines() == out[2:]


@pytest.mark.parametrize(
    ("glob", "path", "expected"),
    [
        ("*.log", "a/b/c.log", True),
        ("!*.log", "a/b/c.log", False),
        ("!*.log", "a/b/c.py", True),
        ("src/*.py", "src/a.py", True),
        ("src/*.py", "src/x/a.py", False),  # `*` does not cross `/`
        ("a/**/b", "a/x/y/b", True),
        ("a/**/b", "a/b", True),
        ("!build", "build/deep/x.o", False),  # an excluded directory excludes what is below it
        ("f[0-9].txt", "f7.txt", True),
        ("f?.txt", "f/.txt", False),
        ("*.{jpg,png}", "img/x.png", True),
        ("{src,lib}/**/*.{c,h}", "lib/x/y.h", True),
        ("{src,lib}/**/*.{c,h}", "bin/x/y.h", False),
    ],
)
def test_glob_selector_semantics(glob: str, path: str, expected: bool) -> None:
    assert GlobSelector(glob).accepts(path) is expected


def test_brace_expansion_is_bounded_and_escapable() -> None:
    assert expand_braces("a{b,c{d,e}}f") == ["abf", "acdf", "acef"]
    assert expand_braces("\\{a,b\\}") == ["\\{a,b\\}"]
    assert expand_braces("{,x}y") == ["y", "xy"]
    with pytest.raises(ValueError, match="alternatives"):
        expand_braces("{a,b,c,d}" * 5)  # 4**5 patterns
    for bad in ("{a,b", "[abc", "[z-a]", "!", "!  "):
        with pytest.raises(ValueError):
            GlobSelector(bad)


def test_without_ripgrep_both_tools_say_how_to_get_it(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KIMICODE_NO_RIPGREP", "1")
    for tool, args in ((GLOB, {"pattern": "*"}), (GREP, {"pattern": "hello"})):
        with pytest.raises(ToolError, match=r"ripgrep \(rg\) is not available.*reinstall kimicode"):
            call(tool, args, project)


def test_an_rg_that_cannot_run_is_a_clear_error(project: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = tmp_path / "bin" / "rg"
    write(fake, "not an executable format")
    fake.chmod(0o755)
    monkeypatch.setattr("kimicode.tools.search.find_ripgrep", lambda: str(fake))
    with pytest.raises(ToolError, match="cannot run ripgrep"):
        call(GREP, {"pattern": "hello"}, project)


# --------------------------------------------------------------------------------------------------
# grep


def test_grep_files_mode(project: Path) -> None:
    out = call(GREP, {"pattern": "hello"}, project).content.splitlines()
    assert out == [
        "docs/guide.md",
        "keep.log",
        "main.py",
        "scratch.tmp",
        "src/a-b.py",
        "src/dist/kept.py",
    ]


def test_grep_content_mode_format(project: Path) -> None:
    out = call(GREP, {"pattern": "return", "output_mode": "content"}, project).content
    assert out == "src/app.py:2:    return 'Hello'\nsrc/app.py:6:    return 42"


def test_grep_count_mode(project: Path) -> None:
    out = call(GREP, {"pattern": "hello|line", "output_mode": "count", "glob": "*.md"}, project).content
    assert out == "docs/guide.md:6"


def test_grep_context_lines_and_separators(project: Path) -> None:
    args = {"pattern": "hello", "output_mode": "content", "context": 1, "path": "docs"}
    assert call(GREP, args, project).content.splitlines() == [
        "docs/guide.md-2-line two",
        "docs/guide.md:3:hello guide",
        "docs/guide.md-4-line four",
        "--",
        "docs/guide.md-6-line six",
        "docs/guide.md:7:hello again",
    ]
    args = {"pattern": "^def", "output_mode": "content", "context": 1, "glob": "*.py"}
    assert call(GREP, args, project).content.splitlines() == [
        "src/app.py:1:def main():",
        "src/app.py-2-    return 'Hello'",
        "--",
        "src/app.py-4-",
        "src/app.py:5:def helper():",
        "src/app.py-6-    return 42",
    ]


def test_grep_ignore_case(project: Path) -> None:
    args: dict[str, Any] = {"pattern": "HELLO", "glob": "*.py"}
    assert call(GREP, args, project).content == "src/a/inner.py"
    args["ignore_case"] = True
    assert call(GREP, args, project).content.splitlines() == [
        "main.py",
        "src/a/inner.py",
        "src/a-b.py",
        "src/app.py",
        "src/dist/kept.py",
    ]


def test_grep_glob_filter_and_path(project: Path) -> None:
    assert call(GREP, {"pattern": "hello", "glob": "*.md"}, project).content == "docs/guide.md"
    assert call(GREP, {"pattern": "hello", "glob": "!*.md", "path": "docs"}, project).content.startswith("No matches")
    assert call(GREP, {"pattern": "return", "path": "src/app.py", "output_mode": "count"}, project).content == (
        "src/app.py:2"
    )


def test_grep_head_limit_caps_output(project: Path) -> None:
    lines = call(GREP, {"pattern": "hello", "output_mode": "content", "head_limit": 2}, project).content
    assert lines.splitlines()[:2] == ["docs/guide.md:3:hello guide", "docs/guide.md:7:hello again"]
    assert "capped at 2 of 7 lines" in lines.splitlines()[2]
    with pytest.raises(ToolError, match="head_limit"):
        call(GREP, {"pattern": "x", "head_limit": 0}, project)


def test_grep_invalid_regex_is_a_tool_error(project: Path) -> None:
    with pytest.raises(ToolError, match="invalid regex"):
        call(GREP, {"pattern": "foo(bar"}, project)
    with pytest.raises(ToolError, match=r"(?i)look-around"):
        call(GREP, {"pattern": "foo(?=bar)"}, project)


def test_grep_skips_binary_and_ignored_files(project: Path) -> None:
    out = call(GREP, {"pattern": "hello", "output_mode": "count"}, project).content
    for absent in ("image.bin", "debug.log", "secret1.txt", "build/", "dist/bundle", "generated/", ".env"):
        assert absent not in out
    assert "keep.log:1" in out


def test_grep_explicit_paths_are_searched_even_if_hidden_or_ignored(project: Path) -> None:
    assert call(GREP, {"pattern": "hello", "path": ".hidden"}, project).content == ".hidden/h.py"
    assert call(GREP, {"pattern": "hello", "path": "debug.log"}, project).content == "debug.log"
    binary = call(GREP, {"pattern": "hello", "path": "image.bin"}, project).content
    assert binary.startswith("No matches") and "binary file" in binary


def test_grep_no_match_and_long_lines(project: Path) -> None:
    result = call(GREP, {"pattern": "zzz-nothing"}, project)
    assert not result.is_error
    assert result.content.startswith("No matches")
    write(project / "long.txt", "start " + "x" * 2000 + "\n")
    out = call(GREP, {"pattern": "start", "output_mode": "content"}, project).content
    assert out == "long.txt:1:start " + "x" * 494 + " […]"


def test_grep_matches_before_a_late_nul_byte_like_ripgrep(tmp_path: Path) -> None:
    # ripgrep reports matches from the 64 KB blocks before the one holding the first NUL byte.
    lines = [f"line {i:05d}\n" for i in range(12_000)]
    data = "".join(lines).encode()
    write(tmp_path / "late.bin", data[:100_000] + b"\x00" + data[100_000:])
    write(tmp_path / "early.bin", b"line 1\n\x00line 2\n")
    out = call(GREP, {"pattern": "line 0000[0-2]|line 1[01]", "output_mode": "content"}, tmp_path).content
    assert out == "late.bin:1:line 00000\nlate.bin:2:line 00001\nlate.bin:3:line 00002"
    assert call(GREP, {"pattern": "line", "output_mode": "count"}, tmp_path).content.startswith("No matches")


GREP_CASES: list[dict[str, Any]] = [
    {"pattern": "hello"},
    {"pattern": "hello", "output_mode": "content"},
    {"pattern": "hello", "output_mode": "count"},
    {"pattern": "(?i)hello", "output_mode": "content", "context": 2},
    {"pattern": "hello", "output_mode": "content", "context": 1, "ignore_case": True},
    {"pattern": r"\bdef\s+\w+", "output_mode": "content"},
    {"pattern": "^$", "output_mode": "count"},
    {"pattern": "[[:upper:]]{2,}", "output_mode": "content"},
    {"pattern": r"(?<q>['\"])\w+", "output_mode": "content", "glob": "src/**"},
    {"pattern": "line", "output_mode": "content", "context": 3, "head_limit": 4},
    {"pattern": ".", "output_mode": "count", "path": "src"},
    {"pattern": "hello", "glob": "*.{md,log}"},
    {"pattern": "e", "output_mode": "content", "path": "docs/guide.md", "context": 1},
]


@pytest.mark.parametrize("args", GREP_CASES, ids=[str(i) for i in range(len(GREP_CASES))])
def test_grep_cases_find_something(project: Path, args: dict[str, Any]) -> None:
    out = call(GREP, args, project).content
    assert not out.startswith("No matches")
    assert ".hidden" not in out and "debug.log" not in out and "build/" not in out


def test_grep_on_tricky_files(tmp_path: Path) -> None:
    write(tmp_path / "bom.txt", b"\xef\xbb\xbfhello bom\n")
    write(tmp_path / "utf16.txt", "hello utf16\n".encode("utf-16"))
    write(tmp_path / "crlf.txt", b"hello crlf\r\nsecond\r\n")
    write(tmp_path / "nonl.txt", "no newline hello")
    big_line = "hello " + "y" * 200_000 + "\n"  # grows ripgrep's buffer for the files after it
    write(tmp_path / "a_big.txt", big_line + "hello after\n")
    mixed = "".join(f"hello {i}\n" for i in range(20_000)).encode()
    write(tmp_path / "b_mixed.bin", mixed[:150_000] + b"\x00" + mixed[150_000:])
    for mode in ("files", "content", "count"):
        out = call(GREP, {"pattern": "hello", "output_mode": mode}, tmp_path).content
        assert "bom.txt" in out and "utf16.txt" in out
    out = call(GREP, {"pattern": "hello", "output_mode": "content", "context": 2}, tmp_path).content
    assert "crlf.txt:1:hello crlf\n" in out
    assert "nonl.txt:1:no newline hello" in out
