"""A long kimicode session against a real llama-server, one process per turn, and the figures it produced.

Used by `test_llama_server.py` (which asserts on them) and `tests/bench/real_server.py` (which prints them).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .llama import LlamaServer, Relay

NOTES = "The launch code word is marmalade. Tests run with pytest; the docs live in docs/."


@dataclass
class Figures:
    """What one session showed, from the server's numbers and kimicode's session logs."""

    window: int
    turns: int = 0
    completed: int = 0
    tool_calls: int = 0
    refused: int = 0
    """Requests the server answered with an error (a context overflow, mostly)."""
    compactions: int = 0
    evaluated: list[int] = field(default_factory=list)
    """Prompt tokens the server evaluated per turn (all its requests; the rest came from its KV cache)."""
    prompts: list[int] = field(default_factory=list)
    """Prompt tokens per turn by the server's count (its last request of the turn)."""
    errors: list[tuple[str, float]] = field(default_factory=list)
    """(calibration source, |estimate - count| / count) of every answered request."""
    results: list[dict[str, Any]] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)

    def error_rate(self, sources: tuple[str, ...]) -> float | None:
        """Mean relative error of the estimate over the requests sent with these calibration sources."""
        picked = [e for s, e in self.errors if s in sources]
        return sum(picked) / len(picked) if picked else None


def turn_args(turn: int, session_id: str) -> list[str]:
    """Turn 1 starts the session; then `-c`, a `--resume ID` (turn 6) and a fork (turn 8) continue it."""
    prompt = f"Turn {turn}: read notes.txt and answer with the code word from it."
    if turn == 1:
        return ["-p", prompt]
    if turn == 6:
        return ["-p", prompt, "--resume", session_id]
    if turn == 8:
        return ["-p", prompt, "-c", "--fork"]
    return ["-p", prompt, "-c"]


def run_session(
    server: LlamaServer,
    workspace: Path,
    home: Path,
    *,
    turns: int = 10,
    max_tokens: int = 16,
    hide_counting: bool = False,
    extra: tuple[str, ...] = (),
) -> Figures:
    """`turns` turns of kimicode, each in its own process, each reading a file through a tool call."""
    (workspace / "notes.txt").write_text(NOTES + "\n")
    figures = Figures(server.window, turns)
    session_id = ""
    with Relay(server.root, tool_file="notes.txt", hide_counting=hide_counting) as relay:
        for turn in range(1, turns + 1):
            before = len(relay.exchanges)
            code, result, stderr = kimicode(
                [*turn_args(turn, session_id), "--max-tokens", str(max_tokens), *extra],
                base_url=relay.base_url,
                home=home,
                cwd=workspace,
            )
            session_id = result.get("session_id") or session_id
            figures.results.append(result)
            figures.stderr.append(stderr)
            mine = relay.exchanges[before:]
            figures.completed += int(code == 0 and result.get("status") == "success")
            figures.tool_calls += sum(e.tool_call for e in mine)
            figures.refused += sum(e.status != 200 for e in mine)
            figures.evaluated.append(sum(e.prompt_n for e in mine if e.status == 200))
            answered = [e for e in mine if e.status == 200 and not e.summary]
            figures.prompts.append(int(answered[-1].usage.get("prompt_tokens", 0)) if answered else 0)
    for records in session_records(home).values():
        figures.compactions += sum(r.get("type") == "compaction" for r in records)
        for r in records:
            if r.get("type") == "usage" and isinstance(r.get("estimate"), int) and r["estimate"] > 0:
                count = int(r["usage"].get("prompt_tokens") or 0)
                if count:
                    figures.errors.append((str(r.get("calibration")), abs(r["estimate"] - count) / count))
    return figures


def kimicode(
    args: list[str], *, base_url: str, home: Path, cwd: Path, timeout: float = 240
) -> tuple[int, dict[str, Any], str]:
    """Run the installed `kimicode -p ... --output-format json` against `base_url`: (exit code, result, stderr)."""
    script = Path(sys.executable).parent / "kimicode"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "kimicode"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI_", "MOONSHOT_", "OPENAI_", "KIMICODE_"))}
    env.update(OPENAI_API_KEY="none", OPENAI_BASE_URL=base_url, KIMICODE_HOME=str(home))
    run = subprocess.run(
        [*command, *args, "--model", "smollm2-135m", "--output-format", "json"],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    try:
        result = json.loads(run.stdout.strip().splitlines()[-1]) if run.stdout.strip() else {}
    except ValueError:
        result = {}
    return run.returncode, result, run.stderr


def session_records(home: Path) -> dict[str, list[dict[str, Any]]]:
    """Every session log under `home`, by session id."""
    out: dict[str, list[dict[str, Any]]] = {}
    for log in sorted((home / "sessions").rglob("*.jsonl")):
        out[log.stem] = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return out
