"""One-word answers per permission mode against a real llama-server (SmolLM2-135M): issue 35, finding 4.

    python tests/bench/modes_one_word.py [--runs 6] [--baseline main] [--ctx 4096]

"Reply with exactly one word: apple" (and five more words), each in its own `kimicode -p` process, in every
permission mode (default, accept-edits, plan, yolo), with this tree's code (AFTER) and with the code of the git
revision `--baseline` (BEFORE: extracted with `git archive` and put first on PYTHONPATH), against one server.
An answer is right when its words are exactly the word asked for (case and punctuation aside); an answer is
"about the mode note" when it mentions "permission" (the model answered kimicode's note, not the user).

BEFORE, the permission-mode note was a second user message after the prompt, and the model answered the note:
4/6 in default mode, 0/6 in accept-edits and yolo in the issue's run. The server samples (temperature as
llama-server's default), so figures move by a run or two between runs; the load is printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from real_server.llama import LlamaServer, unavailable

MODES = ("default", "accept-edits", "plan", "yolo")
WORDS = ("apple", "river", "green", "seven", "table", "cloud")
ROOT = Path(__file__).resolve().parents[2]


def baseline_tree(revision: str, into: Path) -> Path:
    """The code of `revision`, extracted (nothing of the worktree changes)."""
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def ask(tree: Path, base_url: str, home: Path, cwd: Path, mode: str, word: str) -> tuple[bool, str]:
    """One `kimicode -p` process with the code in `tree`: (right, the answer)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI_", "MOONSHOT_", "OPENAI_", "KIMICODE_"))}
    env.update(OPENAI_API_KEY="none", OPENAI_BASE_URL=base_url, KIMICODE_HOME=str(home), PYTHONPATH=str(tree))
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "kimicode",
            "-p",
            f"Reply with exactly one word: {word}",
            "--permission-mode",
            mode,
            "--model",
            "smollm2-135m",
            "--output-format",
            "json",
            "--max-tokens",
            "16",
        ],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    try:
        answer = str(json.loads(run.stdout.strip().splitlines()[-1]).get("result") or "")
    except (ValueError, IndexError):
        answer = f"(no result: {run.stderr.strip()[-200:]})"
    return re.findall(r"[a-z]+", answer.lower()) == [word], answer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=6, help="words asked per mode (at most 6)")
    parser.add_argument("--baseline", default="main", help="git revision whose code is BEFORE")
    parser.add_argument("--ctx", type=int, default=4096)
    args = parser.parse_args()
    if why := unavailable():
        print(f"skipped: {why}")
        return 0
    words = WORDS[: max(1, min(args.runs, len(WORDS)))]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        before = baseline_tree(args.baseline, (root / "before"))
        trees = {"BEFORE": before, "AFTER": ROOT}
        (root / "ws").mkdir()
        server = LlamaServer(args.ctx, log_dir=root / "logs").start()
        right: dict[tuple[str, str], int] = {}
        samples: dict[tuple[str, str], list[str]] = {}
        start = time.monotonic()
        try:
            for mode in MODES:
                for label, tree in trees.items():
                    home = root / f"home-{label}-{mode}"
                    answers = [ask(tree, server.base_url, home, root / "ws", mode, w) for w in words]
                    right[(label, mode)] = sum(ok for ok, _ in answers)
                    samples[(label, mode)] = [a for _, a in answers]
        finally:
            server.stop()
        load = os.getloadavg()[0]
        print(
            f"one-word answers right out of {len(words)}, SmolLM2-135M on llama-server -c {args.ctx} "
            f"(BEFORE = {args.baseline}; {time.monotonic() - start:.0f} s, load {load:.1f})"
        )
        print("| mode | right BEFORE | right AFTER | about the mode note BEFORE | about the mode note AFTER |")
        print("|---|---|---|---|---|")
        n = len(words)
        for mode in MODES:
            about = {label: sum("permission" in a.lower() for a in samples[(label, mode)]) for label in trees}
            print(
                f"| {mode} | {right[('BEFORE', mode)]}/{n} | {right[('AFTER', mode)]}/{n} | "
                f"{about['BEFORE']}/{n} | {about['AFTER']}/{n} |"
            )
        for (label, mode), answers in samples.items():
            print(f"{label:6} {mode:12} {answers}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
