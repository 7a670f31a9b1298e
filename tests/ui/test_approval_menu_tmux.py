"""Issue 36, finding 7 (polish): with `kimicode "PROMPT"` the reasoning was sometimes drawn over the approval
menu, hiding its first options. The real `kimicode` in tmux against the fake server: the model streams its
reasoning and then asks for a bash command that needs approval; every option of the menu stays on screen."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from helpers import kimicode_command, terminal_env
from terminals import Tmux

from kimicode.testing import FakeServer, Reply, ToolCall

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (.ci/run installs it)"),
]

REASONING = "".join(f"Step {i}: I look at the files and think about what to run next.\n" for i in range(12))
OPTIONS = ("1. Yes", "2. Yes, and don't ask again", "3. Yes, and don't ask again for commands", "4. No")


def test_the_approval_menu_is_whole_after_streamed_reasoning(
    server: FakeServer, tmp_path: Path, workspace: Path
) -> None:
    """The reasoning arrives in many small pieces with the tool call right behind them, in one read: the agent
    asks for approval before the terminal has drawn the reasoning it queued (the race the report saw 1 run in 2;
    here it happens every time on main). On main the late reasoning lines were drawn over the
    question and its first options; now they are held until the question is answered."""
    server.add(
        Reply(reasoning=REASONING, tool_calls=[ToolCall("bash", {"command": "touch asked.txt"})], chunk_size=5),
        Reply(content="All-done-END."),
    )
    env = terminal_env(tmp_path / "home", server)
    term = Tmux([*kimicode_command(), "--sandbox", "off", "run it"], env, workspace, cols=120, rows=40)
    try:
        term.wait("without a reason) (n)", 40)  # the menu's last line (on main the reasoning overwrote the rest)
        time.sleep(1.0)  # whatever the terminal still had to draw of the turn, drawn by now
        settled = term.screen()
        assert all(option in settled for option in OPTIONS), settled
        below = settled.split("Run this command?", 1)[1]
        assert "Step" not in below, settled  # nothing of the reasoning drawn over or under the menu
        term.keys("1")
        term.wait(lambda screen: "All-done-END." in screen and term.at_prompt(screen), 40)
        history = term.history()
    finally:
        term.close()
    assert (workspace / "asked.txt").exists()
    assert "Step 11" in history  # the reasoning was shown (after the answer at the latest), not lost
