"""kimicode.procs: the /proc reading shared by the bash tool and the exit clean-up."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kimicode.procs import live_processes

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux)")


@linux
def test_this_process_is_listed_with_its_parent_and_group() -> None:
    table = live_processes()
    assert table[os.getpid()] == (os.getppid(), os.getpgrp())


@linux
def test_a_zombie_is_not_live_and_a_name_with_spaces_and_parens_is_read(tmp_path: Path) -> None:
    # a command name with ") " in it must not shift the fields (the name is cut at the last ')')
    odd = tmp_path / "x) 1 2 (y"
    odd.symlink_to(shutil.which("sleep") or "/bin/sleep")
    child = subprocess.Popen([str(odd), "30"])
    try:
        time.sleep(0.2)
        assert live_processes()[child.pid] == (os.getpid(), os.getpgrp())
        child.kill()
        time.sleep(0.2)  # not waited for yet: a zombie
        assert child.pid not in live_processes()
    finally:
        child.kill()
        child.wait()
