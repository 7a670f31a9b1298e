"""The first ACP `session/prompt` against the same prompt through `kimicode -p` (issue 26: within 1.2x).

    python tests/bench/acp.py [N]

Both answer one prompt from the fake server (one scripted reply, no tools). Timed, median and minimum over
N runs (after one discarded warm-up each; the two interleaved, alternating which goes first, so load
changes hit both):
- `-p`: from spawning `kimicode -p PROMPT` until its answer is on stdout (and until it exits);
- ACP, what an editor waits for: from spawning `kimicode acp` through `initialize` and `session/new` until
  the first `session/prompt` answers; and that prompt alone (request to response).
Every run is checked: the answer arrives and exactly one chat request carrying the prompt reached the server.
"""

from __future__ import annotations

import asyncio
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# this file is named like the SDK's package: run as a script, its own directory must not shadow `acp`
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from acp import PROTOCOL_VERSION, spawn_agent_process, text_block  # noqa: E402
from acp.schema import ClientCapabilities, FileSystemCapabilities  # noqa: E402

from kimicode.testing import FakeServer, Reply  # noqa: E402

PROMPT = "say hello"
REPLY = "hello from the fake server"
TARGET = 1.2


class Editor:
    """The least an editor does: collect the streamed text."""

    def __init__(self) -> None:
        self.text = ""

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if update.session_update == "agent_message_chunk":
            self.text += update.content.text

    async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the benchmark's prompt needs no permission")


def command() -> list[str]:
    script = Path(sys.executable).parent / "kimicode"
    return [str(script)] if script.exists() else [sys.executable, "-m", "kimicode"]


def environment(server: FakeServer, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI_", "MOONSHOT_", "OPENAI_", "KIMICODE_"))}
    env.update(KIMI_API_KEY="sk-bench", KIMI_BASE_URL=server.base_url, KIMI_MODEL="kimi-k3", KIMICODE_HOME=str(home))
    return env


def check(server: FakeServer, before: int) -> None:
    if len(server.requests) != before + 1 or PROMPT not in str(server.requests[-1].body):
        raise SystemExit(f"benchmark run invalid: {len(server.requests) - before} requests reached the server")


def children_cpu() -> float:
    """CPU seconds (user + system) of the child processes waited for so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def headless(server: FakeServer, env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(seconds to the answer on stdout, seconds to exit)."""
    before = len(server.requests)
    server.add(Reply(content=REPLY))
    start = time.perf_counter()
    proc = subprocess.Popen(
        [*command(), "-p", PROMPT],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    answered = time.perf_counter() - start
    proc.wait(60)
    exited = time.perf_counter() - start
    if line.strip() != REPLY or proc.returncode != 0:
        raise SystemExit(f"kimicode -p did not answer: {line!r} (exit {proc.returncode})")
    check(server, before)
    return answered, exited


async def acp_once(server: FakeServer, env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(seconds from spawn to the first prompt's answer, seconds of that prompt alone)."""
    before = len(server.requests)
    server.add(Reply(content=REPLY))
    editor = Editor()
    start = time.perf_counter()
    async with spawn_agent_process(
        editor, *command(), "acp", env=env, cwd=cwd, transport_kwargs={"stderr": subprocess.DEVNULL}
    ) as (conn, _):
        caps = ClientCapabilities(fs=FileSystemCapabilities(read_text_file=True, write_text_file=True))
        await conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=caps)
        session = await conn.new_session(cwd=str(cwd), mcp_servers=[])
        asked = time.perf_counter()
        done = await conn.prompt(session_id=session.session_id, prompt=[text_block(PROMPT)])
        end = time.perf_counter()
    if done.stop_reason != "end_turn" or editor.text != REPLY:
        raise SystemExit(f"kimicode acp did not answer: {done.stop_reason} {editor.text!r}")
    check(server, before)
    return end - start, end - asked


def summary(name: str, samples: list[float]) -> str:
    return f"  {name:<44} median {statistics.median(samples):6.3f} s   min {min(samples):6.3f} s"


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    with FakeServer() as server, tempfile.TemporaryDirectory() as tmp:
        ws, home = Path(tmp) / "ws", Path(tmp) / "home"
        ws.mkdir()
        env = environment(server, home)
        headless(server, env, ws)  # warm-up: bytecode written, caches filled
        asyncio.run(acp_once(server, env, ws))
        p_answer: list[float] = []
        p_exit: list[float] = []
        a_first: list[float] = []
        a_prompt: list[float] = []
        p_cpu: list[float] = []
        a_cpu: list[float] = []
        for i in range(runs):
            order = [0, 1] if i % 2 == 0 else [1, 0]
            for which in order:
                cpu = children_cpu()
                if which == 0:
                    answered, exited = headless(server, env, ws)
                    p_answer.append(answered)
                    p_exit.append(exited)
                    p_cpu.append(children_cpu() - cpu)
                else:
                    first, alone = asyncio.run(acp_once(server, env, ws))
                    a_first.append(first)
                    a_prompt.append(alone)
                    a_cpu.append(children_cpu() - cpu)
    print(f"one prompt, one scripted answer, {runs} runs each (interleaved) after a warm-up")
    print(summary("kimicode -p: spawn -> answer on stdout", p_answer))
    print(summary("kimicode -p: spawn -> exit", p_exit))
    print(summary("kimicode acp: spawn -> first session/prompt answered", a_first))
    print(summary("kimicode acp: the first session/prompt alone", a_prompt))
    print(summary("kimicode -p: CPU of the whole run", p_cpu))
    print(summary("kimicode acp: CPU of the whole run", a_cpu))
    ratio = statistics.median(a_first) / statistics.median(p_answer)
    verdict = "within" if ratio <= TARGET else "over"
    print(
        f"  ratio acp first prompt / -p answer: {ratio:.2f}x ({verdict} the {TARGET}x target); "
        f"CPU ratio {statistics.median(a_cpu) / statistics.median(p_cpu):.2f}x; load {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
