"""Start-up and one-answer latency, side by side in one run: `python -c pass`, `kimicode --version`,
`--help`, then the one-answer headless run (`kimicode -p hi` against the fake server) beside a plain script
making the same request with the `openai` SDK (the floor: issue 24's targets are `--version` within 1.5x
of `python -c pass` and the headless run within 1.2x of that script) and, with `--kimi-code PATH`, Kimi
Code's own (`kimi --quiet -p hi`) against the same fake server, with the ratio against issue 12's target
(kimicode <= 0.6x Kimi Code).

    python tests/bench/startup.py [N] [--kimi-code PATH]

Kimi Code is Moonshot's CLI, `kimi-cli` on PyPI (Python >= 3.13; 1.51.0 is the last release that
runs, later ones only print a notice). Install it outside the project, e.g.
`python3.13 -m venv /tmp/kimi-ref && /tmp/kimi-ref/bin/pip install kimi-cli==1.51.0`, then pass
`--kimi-code /tmp/kimi-ref/bin/kimi`.

Each figure is the median and the minimum over N runs after one warm-up run that is discarded; the
two tools' one-answer runs are interleaved (alternating which goes first) so load changes hit both,
and their CPU time (user + system) is printed too, the steadier figure on a shared machine.
Bytecode may be written (PYTHONDONTWRITEBYTECODE is dropped) so that, as when installed, both tools
run compiled modules after the warm-up. Every one-answer run is checked: exit code 0, the fake reply
on stdout, exactly its one scripted reply consumed and a request carrying the prompt seen by the
server. A run that fails a check stops the benchmark with the reason (exit code 1) rather than
printing a time for a run that did not answer.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kimicode.testing import FakeServer, Reply

PROMPT = "hi"
REPLY = "hello from the fake server"
TARGET = 0.6
VERSION_TARGET = 1.5
"""`kimicode --version` against `python -c pass` (issue 24)."""
FLOOR_TARGET = 1.2
"""`kimicode -p hi` against the plain `openai` SDK script making the same request (issue 24)."""
OPENAI_SCRIPT = """
import os, sys
from openai import OpenAI
client = OpenAI(base_url=os.environ["KIMI_BASE_URL"], api_key=os.environ["KIMI_API_KEY"])
stream = client.chat.completions.create(model="kimi-k3", messages=[{"role": "user", "content": sys.argv[1]}],
                                        stream=True)
for chunk in stream:
    if chunk.choices and chunk.choices[0].delta.content:
        sys.stdout.write(chunk.choices[0].delta.content)
print()
"""
"""The floor: the same request, streamed and printed, with nothing around it."""
RUN_TIMEOUT = 120.0
HOW_TO_COMPARE = (
    "Kimi Code not measured: pass --kimi-code PATH (its `kimi` executable; `pip install kimi-cli==1.51.0` "
    f"in a Python 3.13 venv) for the side-by-side ratio against the {TARGET:.1f}x target."
)


class BenchFailure(Exception):
    """A run that did not do what is being timed (no answer, wrong answer, no request)."""


@dataclass
class Contender:
    """One command timed for the one-answer run, with its own environment and its samples."""

    name: str
    cmd: list[str]
    env: dict[str, str]
    times: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)


def kimicode() -> list[str]:
    script = Path(sys.executable).parent / "kimicode"
    if script.exists():
        return [str(script)]
    found = shutil.which("kimicode")
    return [found] if found else [sys.executable, "-m", "kimicode"]


def text_of(content: Any) -> str:
    """A message's text, whether `content` is a string or a list of parts (as Kimi Code sends it)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def carries_prompt(body: Any) -> bool:
    """Whether a recorded chat request has the benchmark's prompt in a user message."""
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list):
        return False
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    return any(PROMPT in text_of(m.get("content")).split() for m in users)


def tail(text: str, limit: int = 600) -> str:
    text = text.strip()
    return text if len(text) <= limit else "…" + text[-limit:]


def one_answer(server: FakeServer, who: Contender, cwd: str) -> tuple[float, float]:
    """Wall and CPU time (user + system, the process and its children) of one headless one-answer run of
    `who`, checking it really got the fake server's reply."""
    if server.remaining:
        raise BenchFailure(f"the fake server's script has {server.remaining} unserved item(s) before {who.name}")
    before = len(server.requests)
    server.add(Reply(reasoning="ok", content=REPLY))
    cpu_before = children_cpu()
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            who.cmd,
            env=who.env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise BenchFailure(f"{who.name} did not finish within {RUN_TIMEOUT:.0f} s") from exc
    except OSError as exc:
        raise BenchFailure(f"{who.name} could not be started: {exc}") from exc
    took = time.perf_counter() - start
    cpu = children_cpu() - cpu_before
    seen = server.requests[before:]
    problem = None
    if proc.returncode != 0:
        problem = f"exit code {proc.returncode}"
    elif REPLY not in proc.stdout:
        problem = f"stdout lacks the fake reply {REPLY!r}"
    elif not seen:
        problem = "the fake server saw no request (the answer did not come from it)"
    elif server.remaining:
        problem = "the scripted reply was never served"
    elif not any(carries_prompt(r.body) for r in seen):
        problem = f"no request to the fake server carried the prompt {PROMPT!r}"
    if problem:
        raise BenchFailure(
            f"{who.name}: {problem}\n  command: {' '.join(who.cmd)}\n"
            f"  stdout: {tail(proc.stdout) or '(empty)'}\n  stderr: {tail(proc.stderr) or '(empty)'}"
        )
    return took, cpu


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def wall(cmd: list[str], env: dict[str, str], cwd: str) -> float:
    start = time.perf_counter()
    subprocess.run(
        cmd,
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
        timeout=RUN_TIMEOUT,
    )
    return time.perf_counter() - start


def sampled(run: Callable[[], float], runs: int) -> list[float]:
    """`runs` timings of `run` after one discarded warm-up."""
    run()
    return [run() for _ in range(runs)]


def interleaved(server: FakeServer, contenders: list[Contender], runs: int, cwd: str) -> None:
    """One warm-up round (discarded), then `runs` rounds, alternating which contender goes first."""
    for round_no in range(runs + 1):
        order = contenders if round_no % 2 == 0 else contenders[::-1]
        for who in order:
            took, cpu = one_answer(server, who, cwd)
            if round_no:
                who.times.append(took)
                who.cpu.append(cpu)


def ms(secs: float) -> str:
    return f"{secs * 1000:9.1f} ms"


def kimi_code(path: str, base_url: str, base_env: dict[str, str], home: str) -> Contender:
    """Kimi Code pointed at the fake server through `--config` (an OpenAI-compatible `kimi` provider)."""
    config = {
        "default_model": "bench",
        "models": {"bench": {"provider": "fake", "model": "kimi-k3", "max_context_size": 262144}},
        "providers": {"fake": {"type": "kimi", "base_url": base_url, "api_key": "bench"}},
    }
    env = {k: v for k, v in base_env.items() if k != "PYTHONPATH"}  # kimicode's checkout is not its business
    env.update(KIMI_SHARE_DIR=str(Path(home) / ".kimi"), KIMI_DISABLE_TELEMETRY="1", KIMI_CLI_NO_AUTO_UPDATE="1")
    return Contender("kimi --quiet -p", [path, "--quiet", "--config", json.dumps(config), "-p", PROMPT], env)


def version_of(path: str, env: dict[str, str]) -> str:
    try:
        proc = subprocess.run(
            [path, "--version"],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BenchFailure(f"--kimi-code {path}: `--version` failed: {exc}") from exc
    if proc.returncode != 0:
        raise BenchFailure(f"--kimi-code {path}: `--version` exited {proc.returncode}: {tail(proc.stderr)}")
    return proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "unknown version"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="?", type=int, default=15, help="timed runs per figure (default 15)")
    parser.add_argument("--kimi-code", metavar="PATH", help="Kimi Code's `kimi` executable, to run side by side")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error(f"runs must be at least 1, got {args.runs}")
    if args.kimi_code is not None:
        path = shutil.which(args.kimi_code) if os.sep not in args.kimi_code else args.kimi_code
        if not path or not os.path.isfile(path) or not os.access(path, os.X_OK):
            parser.error(f"--kimi-code {args.kimi_code}: not an executable file")
        args.kimi_code = os.path.abspath(path)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    runs: int = args.runs
    home = tempfile.mkdtemp(prefix="kimicode-bench-")
    workspace = tempfile.mkdtemp(prefix="kimicode-bench-ws-")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI_", "MOONSHOT_", "OPENAI_", "KIMICODE_"))}
    # An installed tool runs from compiled bytecode (pip compiles Kimi Code's); with PYTHONDONTWRITEBYTECODE
    # set, a source checkout of kimicode would be recompiled on every run and time the compiler instead.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(HOME=home, KIMICODE_HOME=str(Path(home) / ".kimicode"))
    try:
        with FakeServer() as server:
            run_env = dict(env, KIMI_API_KEY="bench", KIMI_BASE_URL=server.base_url)
            contenders = [
                Contender("kimicode -p", [*kimicode(), "-p", PROMPT], run_env),
                Contender("openai SDK script", [sys.executable, "-c", OPENAI_SCRIPT, PROMPT], run_env),
            ]
            version = ""
            if args.kimi_code:
                kimi = kimi_code(args.kimi_code, server.base_url, env, home)
                version = version_of(args.kimi_code, kimi.env)
                contenders.append(kimi)
            starts = [
                ("python -c pass", sampled(lambda: wall([sys.executable, "-c", "pass"], env, workspace), runs)),
                ("kimicode --version", sampled(lambda: wall([*kimicode(), "--version"], env, workspace), runs)),
                ("kimicode --help", sampled(lambda: wall([*kimicode(), "--help"], env, workspace), runs)),
            ]
            interleaved(server, contenders, runs, workspace)
    except (BenchFailure, subprocess.CalledProcessError) as exc:
        print(f"startup bench FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(workspace, ignore_errors=True)

    base = statistics.median(starts[0][1])
    print(f"wall time over {runs} runs (one warm-up run discarded)      median          min")
    for name, times in starts:
        med = statistics.median(times)
        print(f"  {name:<44} {ms(med)} {ms(min(times))}   {med / base:5.2f}x python")
    version_ratio = statistics.median(starts[1][1]) / base
    print(
        f"  kimicode --version / python -c pass: {version_ratio:.2f}x; target <= {VERSION_TARGET:.1f}x: "
        f"{'met' if version_ratio <= VERSION_TARGET else 'MISSED'}"
    )
    print(
        f"one-answer headless run, prompt {PROMPT!r}, same fake server"
        + (", interleaved:" if len(contenders) > 1 else ":")
    )
    for who in contenders:
        print(
            f"  {who.name + ' ' + PROMPT:<44} {ms(statistics.median(who.times))} {ms(min(who.times))}"
            f"   CPU {ms(statistics.median(who.cpu)).strip()} median"
        )
    print(
        f"  checked: all {(runs + 1) * len(contenders)} runs (warm-ups included) printed the fake reply "
        "and the fake server saw their request"
    )
    ours, floor = contenders[:2]
    over = statistics.median(ours.times) / statistics.median(floor.times)
    print(
        f"  kimicode -p / openai SDK script: median {over:.2f}x, min {min(ours.times) / min(floor.times):.2f}x, "
        f"CPU {statistics.median(ours.cpu) / statistics.median(floor.cpu):.2f}x; target <= {FLOOR_TARGET:.1f}x: "
        f"{'met' if over <= FLOOR_TARGET else 'MISSED'}"
    )
    if len(contenders) == 2:
        print(HOW_TO_COMPARE)
        return 0
    theirs = contenders[2]
    ratio = statistics.median(ours.times) / statistics.median(theirs.times)
    best = min(ours.times) / min(theirs.times)
    cpu_ratio = statistics.median(ours.cpu) / statistics.median(theirs.cpu)
    verdict = "met" if ratio <= TARGET else "MISSED"
    print(
        f"  kimicode / Kimi Code ({version}): median {ratio:.2f}x, min {best:.2f}x, CPU {cpu_ratio:.2f}x; "
        f"target <= {TARGET:.1f}x: {verdict}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
