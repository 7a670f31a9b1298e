"""What the environment makes visible (kimicode.permissions.toolchains): the user's toolchain, never the
home directory, private state, credential stores or kernel places, whatever PATH says."""

from __future__ import annotations

import os
from pathlib import Path

from kimicode.permissions.toolchains import environment_toolchains


def test_path_and_environments_are_shown_but_never_private_places(tmp_path: Path) -> None:
    home = tmp_path / "user"
    kc = home / ".kimicode"
    dirs = {
        name: home / name
        for name in ("bin", ".ssh/bin", ".kimicode/bin", "Documents", "envs/app", "base/bin", ".secrets-dir")
    }
    for d in dirs.values():
        d.mkdir(parents=True)
    (dirs["envs/app"] / "pyvenv.cfg").write_text(f"home = {dirs['base/bin']}\n")
    (dirs["Documents"] / "tool.sh").write_text("#!/bin/sh\n")
    (dirs["Documents"] / "notes.txt").write_text("private")
    (dirs[".secrets-dir"] / ".env").write_text("TOKEN=1")
    (dirs["bin"] / "tool").symlink_to(dirs["Documents"] / "tool.sh")
    (dirs["bin"] / "leak").symlink_to(dirs[".secrets-dir"] / ".env")
    path = os.pathsep.join(
        [
            str(dirs["bin"]),
            str(home),
            str(dirs[".ssh/bin"]),
            str(dirs[".kimicode/bin"]),
            "relative/bin",
            "/run/user",
            "/",
            "/usr/bin",
        ]
    )
    env = {"PATH": path, "VIRTUAL_ENV": str(dirs["envs/app"])}
    shown = environment_toolchains(str(home), str(kc), env)
    assert str(dirs["bin"]) in shown and str(dirs["envs/app"]) in shown
    assert str(home / "base") in shown  # the virtualenv's base interpreter's installation
    assert str(dirs["Documents"] / "tool.sh") in shown and str(dirs["Documents"]) not in shown  # the file alone
    for never in (
        home,
        dirs[".ssh/bin"],
        dirs[".kimicode/bin"],
        dirs[".secrets-dir"] / ".env",
        Path("/run/user"),
        Path("/"),
    ):
        assert str(never) not in shown, never
    assert not any(p.startswith("relative") for p in shown)
