"""What hooks cost per tool call, beside a baseline with no hooks configured (issue 25: at most 5 ms per
call when none match).

    python tests/bench/hooks.py [ROUNDS]

Each round runs one turn against the fake server in which the model asks for CALLS read_file calls in one
step, then answers. Configurations: no hooks at all (baseline); twelve hooks over every event, none of
which matches read_file (PreToolUse/PostToolUse on `Bash|Write|Edit`, plus prompt, stop and session hooks
that run once per turn, not per call); and one PreToolUse hook that matches and runs `true` (what a real
hook process costs). Prints the median turn time and the difference to the baseline per tool call.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from kimicode import Agent, AgentOptions
from kimicode.testing import FakeServer, Reply, ToolCall

CALLS = 100

NONE_MATCH = """
[[hooks.PreToolUse]]
matcher = "Bash|Write|Edit"
hooks = [{ type = "command", command = "exit 2" }]
[[hooks.PreToolUse]]
matcher = "mcp__.*"
hooks = [{ type = "command", command = "exit 2" }]
[[hooks.PostToolUse]]
matcher = "Bash"
hooks = [{ type = "command", command = "true" }]
[[hooks.PostToolUseFailure]]
matcher = "Write"
hooks = [{ type = "command", command = "true" }]
[[hooks.PermissionRequest]]
matcher = "Bash"
hooks = [{ type = "command", command = "true" }]
[[hooks.Notification]]
matcher = "permission_prompt"
hooks = [{ type = "command", command = "true" }]
[[hooks.PreCompact]]
matcher = "auto"
hooks = [{ type = "command", command = "true" }]
[[hooks.SessionStart]]
matcher = "resume"
hooks = [{ type = "command", command = "true" }]
[[hooks.SubagentStop]]
hooks = [{ type = "command", command = "true" }]
[[hooks.SessionEnd]]
matcher = "clear"
hooks = [{ type = "command", command = "true" }]
[[hooks.UserPromptSubmit]]
matcher = "never-a-value"
hooks = [{ type = "command", command = "true" }]
[[hooks.Stop]]
matcher = "never-a-value"
hooks = [{ type = "command", command = "true" }]
"""
ONE_MATCH = """
[[hooks.PreToolUse]]
matcher = "Read"
hooks = [{ type = "command", command = "true" }]
"""


def make_agent(root: Path, server: FakeServer, config: str) -> Agent:
    home, ws = root / "home", root / "ws"
    home.mkdir(parents=True)
    ws.mkdir()
    (ws / "a.txt").write_text("hello\n")
    (home / "config.toml").write_text(config)
    options = AgentOptions.from_workspace(
        ws, home=home, base_url=server.base_url, api_key="k", model="kimi-k3", persist=False
    )
    return Agent(options)


def one_turn(agent: Agent, server: FakeServer) -> float:
    calls = [ToolCall("read_file", {"path": "a.txt", "offset": i + 1}) for i in range(CALLS)]
    server.add(Reply(tool_calls=calls), Reply(content="done"))
    start = time.perf_counter()
    result = agent.run_sync("read")
    elapsed = time.perf_counter() - start
    assert result.ok, result.error
    return elapsed


CONFIGS = (
    ("no hooks configured (baseline)", ""),
    ("12 hooks, none matching read_file", NONE_MATCH),
    ("1 PreToolUse hook matching (runs `true`)", ONE_MATCH),
)


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 9
    times: dict[str, list[float]] = {label: [] for label, _ in CONFIGS}
    with tempfile.TemporaryDirectory() as tmp, FakeServer() as server:
        os.environ["CLAUDE_CONFIG_DIR"] = str(Path(tmp) / "claude")  # not the machine's ~/.claude
        agents = {label: make_agent(Path(tmp) / str(i), server, config) for i, (label, config) in enumerate(CONFIGS)}
        for agent in agents.values():
            one_turn(agent, server)  # warm up: imports, the first connection
        for _ in range(rounds):  # interleaved, so that load changes hit every configuration alike
            for label, agent in agents.items():
                times[label].append(one_turn(agent, server))
        hooks = agents[CONFIGS[1][0]].extras.hooks
        assert hooks is not None
        n = 100_000
        start = time.perf_counter()
        for _ in range(n):  # what each call pays when nothing matches: the two lookups
            hooks.matching("PreToolUse", ("read_file", "Read"))
            hooks.matching("PostToolUse", ("read_file", "Read"))
        lookup_us = (time.perf_counter() - start) / n * 1e6
    base = statistics.median(times[CONFIGS[0][0]])
    print(f"{CALLS} read_file calls in one step, median of {rounds} interleaved turns (load {os.getloadavg()[0]:.1f})")
    print(f"{'configuration':<44} {'turn ms':>9} {'ms/call vs baseline':>20}")
    for label, _ in CONFIGS:
        t = statistics.median(times[label])
        delta = "" if t == base else f"{(t - base) * 1000 / CALLS:+.3f}"
        print(f"{label:<44} {t * 1000:>9.1f} {delta:>20}")
    print(f"the per-call lookup itself, with the 12 hooks configured: {lookup_us:.2f} µs")


if __name__ == "__main__":
    main()
