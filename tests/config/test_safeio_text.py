"""`safeio.read_small_text`: the one lenient reader of small text files (extension files, the trust question's
view of a project's config): None for what cannot be read as a small regular file, and never a hang."""

from __future__ import annotations

import os
from pathlib import Path

from kimicode.safeio import read_small_text


def test_small_text_or_none(tmp_path: Path) -> None:
    (tmp_path / "ok.md").write_text("hello\n")
    assert read_small_text(tmp_path / "ok.md", 100) == "hello\n"
    (tmp_path / "bad.md").write_bytes(b"caf\xe9\n")
    assert read_small_text(tmp_path / "bad.md", 100) == "caf\ufffd\n"  # undecodable bytes replaced
    (tmp_path / "big.md").write_text("x" * 101)
    assert read_small_text(tmp_path / "big.md", 100) is None
    assert read_small_text(tmp_path / "missing.md", 100) is None
    assert read_small_text(tmp_path, 100) is None  # a directory
    os.mkfifo(tmp_path / "fifo.md")  # nobody writes to it: opening it must not wait
    assert read_small_text(tmp_path / "fifo.md", 100) is None
    (tmp_path / "link.md").symlink_to(tmp_path / "ok.md")
    assert read_small_text(tmp_path / "link.md", 100) == "hello\n"  # a link to a regular file is read
