"""A service running many agents: kimicode's library beside the OpenAI Agents SDK, in one run.

N agents (200 by default) run concurrently on one event loop against a fake OpenAI-compatible server with
latency, each for several turns of one conversation; every turn calls a tool (`add`) and then answers, so a
turn is two requests. Each framework runs in a fresh interpreter of its own, and the server in a third
process, so the CPU counted is the framework's alone. Printed side by side:

- CPU per turn: the framework process's CPU time over the turns after the first, per agent-turn (ms);
- memory per agent: what the idle agents (their conversations included) hold after the last turn, traced with
  `tracemalloc` in a separate run of the same work (kB per agent);
- first-turn p50/p99 and later-turn p50: wall time of each agent's turn (s); the target is a first turn no
  slower than 1.2x the later ones (no per-agent client, pool or discovery to build);
- descriptors per agent: open file descriptors after the last turn, idle agents alive, per agent.

kimicode's agents are persisted (session logs in a temporary KIMICODE_HOME, the library's default); the Agents
SDK keeps its conversations in memory (`result.to_input_list()`), its idiomatic loop, with one shared
`AsyncOpenAI` client. The SDK is a bench-only dependency: `pip install openai-agents` (not a dependency of
kimicode); without it only kimicode's column is printed.

    python tests/bench/library.py [--agents 200] [--turns 3] [--latency 0.05]

Targets (issue 35): CPU <= 0.5x the SDK's, memory <= 1.0x, first-turn p50 <= 1.2x the later turns' p50.
Benchmarks are noisy on a shared machine: the load (`os.getloadavg`) is printed beside the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

SERVER = """
import json, sys, time
from kimicode.testing import FakeServer, Reply, ToolCall

latency = float(sys.argv[1])

def route(request):
    last = request.body["messages"][-1]
    if last["role"] == "user":
        return Reply(content=None, tool_calls=[ToolCall("add", {"a": 2, "b": 3})], first_delay=latency)
    return Reply(content="The sum is 5.", first_delay=latency)

with FakeServer([route] * int(sys.argv[2])) as server:
    print(server.base_url, flush=True)
    sys.stdin.read()  # until the bench closes it
"""

CHILD = r"""
import asyncio, gc, json, os, statistics, sys, time, tracemalloc

framework, url, home = sys.argv[1], sys.argv[2], sys.argv[6]
n, turns, trace = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
prompts = ["Add 2 and 3 with the tool.", "Again, please.", "Once more."]


def fds():
    return len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else -1


if framework == "kimicode":
    from kimicode import Agent, tool

    @tool
    def add(a: int, b: int) -> int:
        '''Add two integers.'''
        return a + b

    def make(i):
        return Agent(base_url=url, api_key="k", model="fake-model", tools=[add], home=home, workspace=home,
                     permission_mode="yolo", project_instructions=False)

    async def turn(agent, prompt):
        result = await agent.run(prompt)
        assert result.ok, result.error
        return agent

    async def close(agent):
        await agent.aclose()
else:
    from agents import Agent as SdkAgent, Runner, function_tool, set_tracing_disabled
    from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    import httpx2

    # kimicode's timeouts (its connect timeout is 15 s, the SDK's 5 s: 200 connects at once on a loaded machine)
    shared = AsyncOpenAI(base_url=url, api_key="k", timeout=httpx2.Timeout(300.0, connect=15.0))
    model = OpenAIChatCompletionsModel(model="fake-model", openai_client=shared)

    @function_tool
    def add(a: int, b: int) -> int:
        '''Add two integers.'''
        return a + b

    class Conversation:
        def __init__(self):
            self.agent = SdkAgent(name="assistant", instructions="You are a helpful assistant.", tools=[add],
                                  model=model)
            self.history = []

    def make(i):
        return Conversation()

    async def turn(conv, prompt):
        result = await Runner.run(conv.agent, conv.history + [{"role": "user", "content": prompt}])
        conv.history = result.to_input_list()
        return conv

    async def close(conv):
        pass


async def timed(agent, prompt):
    started = time.perf_counter()
    await turn(agent, prompt)
    return time.perf_counter() - started


async def main():
    warm = make(-1)  # imports and one-time setup out of the figures (one agent, one turn)
    await turn(warm, prompts[0])
    await close(warm)
    del warm
    gc.collect()
    if trace:
        tracemalloc.start()
    base_fds = fds()
    base_mem = tracemalloc.get_traced_memory()[0] if trace else 0
    agents = [make(i) for i in range(n)]
    first = await asyncio.gather(*(timed(a, prompts[0]) for a in agents))
    cpu0 = time.process_time()
    later = []
    for t in range(1, turns):
        later += await asyncio.gather(*(timed(a, prompts[t % len(prompts)]) for a in agents))
    cpu = time.process_time() - cpu0
    gc.collect()
    mem = tracemalloc.get_traced_memory()[0] - base_mem if trace else 0
    out = {
        "cpu_ms_per_turn": cpu * 1000 / max(1, n * (turns - 1)),
        "mem_kb_per_agent": mem / 1024 / n,
        "first_p50": statistics.median(first),
        "first_p99": sorted(first)[min(len(first) - 1, int(len(first) * 0.99))],
        "later_p50": statistics.median(later) if later else float("nan"),
        "fds_per_agent": (fds() - base_fds) / n,
    }
    for a in agents:
        await close(a)
    print(json.dumps(out))


asyncio.run(main())
"""


def run_child(framework: str, url: str, agents: int, turns: int, trace: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "KIMICODE_HOME": home}
        done = subprocess.run(
            [sys.executable, "-c", CHILD, framework, url, str(agents), str(turns), "1" if trace else "0", home],
            capture_output=True,
            text=True,
            env=env,
            timeout=1800,
        )
    if done.returncode != 0:
        raise RuntimeError(f"{framework} child failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def sdk_available() -> bool:
    try:
        import agents  # noqa: F401  # the OpenAI Agents SDK, bench-only
    except ImportError:
        return False
    return True


def measure(framework: str, url: str, agents: int, turns: int) -> dict[str, Any]:
    timing = run_child(framework, url, agents, turns, trace=False)
    timing["mem_kb_per_agent"] = run_child(framework, url, agents, turns, trace=True)["mem_kb_per_agent"]
    return timing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=200)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--latency", type=float, default=0.05, help="seconds before each answer's first byte")
    args = parser.parse_args()
    frameworks = ["kimicode"] + (["openai-agents"] if sdk_available() else [])
    requests = (args.agents + 1) * args.turns * 2 * 2 * len(frameworks) * 4  # retries included
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(args.latency), str(requests)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        load_before = os.getloadavg()
        started = time.monotonic()
        results = {name: measure(name, url, args.agents, args.turns) for name in frameworks}
        took = time.monotonic() - started
        load_after = os.getloadavg()
    finally:
        if server.stdin is not None:
            server.stdin.close()
        server.wait(timeout=30)
    print(
        f"{args.agents} concurrent agents x {args.turns} turns (a tool call and an answer each), "
        f"server latency {args.latency:g} s; load {load_before[0]:.1f} -> {load_after[0]:.1f}, {took:.0f} s"
    )
    rows = [
        ("CPU per turn (ms)", "cpu_ms_per_turn", "{:.2f}"),
        ("memory per agent (kB)", "mem_kb_per_agent", "{:.0f}"),
        ("first turn p50 (s)", "first_p50", "{:.2f}"),
        ("first turn p99 (s)", "first_p99", "{:.2f}"),
        ("later turns p50 (s)", "later_p50", "{:.2f}"),
        ("descriptors per agent", "fds_per_agent", "{:.2f}"),
    ]
    ratio = "        ratio" if len(frameworks) > 1 else ""
    print(f"{'':24}" + "".join(f"{name:>16}" for name in frameworks) + ratio)
    for label, key, fmt in rows:
        values = [results[name][key] for name in frameworks]
        line = f"{label:24}" + "".join(f"{fmt.format(v):>16}" for v in values)
        if len(values) > 1 and values[1]:
            line += f"{values[0] / values[1]:>12.2f}x"
        print(line)
    mine = results["kimicode"]
    print(f"kimicode first-turn p50 / later p50: {mine['first_p50'] / mine['later_p50']:.2f}x (target <= 1.2x)")
    if len(frameworks) == 1:
        print("(the OpenAI Agents SDK is not installed: `pip install openai-agents` for its column)")


if __name__ == "__main__":
    main()
