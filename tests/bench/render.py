"""CPU time to render a streamed Markdown answer: kimicode's streaming renderer vs re-rendering everything.

    python tests/bench/render.py [--max-baseline-kb N]

The answer (a mix of paragraphs, lists, code blocks and tables) is fed in deltas of 4-12 characters,
like a model's token stream. Both renderers write to a StringIO console of width 100 that behaves like
a colour terminal of 40 rows.

- baseline: `rich.markdown.Markdown(whole_text)` printed on every delta (what a naive live view does).
- ours, real clock: `MarkdownStream` as the terminal UI uses it; the open block is redrawn at most every
  0.1 s, and here the deltas arrive as fast as the CPU allows.
- ours, 100 deltas/s: the same, with a simulated clock advancing 10 ms per delta, i.e. the redraws a real
  stream at ~100 deltas per second would cause.
- ours, every delta: the open block re-rendered on every delta (no time limit): the worst case.

The baseline is quadratic, so it is only run up to `--max-baseline-kb` (default 10 KB: about 20 s).

A second table shows what reaches the terminal with the 100 deltas/s clock: the most rows the live region
(redrawn in place) ever took, how many writes and how many KB were sent. Run it with PYTHONPATH pointing at
another checkout to compare (issue 13, resize-safe rendering: before, the open block was redrawn whole,
up to a screen of full-width rows; after, only its last line's end, one short row).
"""

from __future__ import annotations

import argparse
import io
import random
import time

from rich.console import Console
from rich.markdown import Markdown

from kimicode.ui.render import LiveRegion, MarkdownStream

WIDTH = 100
HEIGHT = 40


def make_answer(size: int, seed: int = 7) -> str:
    """A deterministic Markdown document of about `size` characters."""
    rng = random.Random(seed)
    text = (
        "the agent reads files runs tests and edits code so that the build passes again while keeping "
        "every change small reviewable and well explained to the developer who asked for it"
    )
    words = text.split(" ")

    def sentence() -> str:
        n = rng.randint(6, 16)
        ws = [rng.choice(words) for _ in range(n)]
        if rng.random() < 0.3:
            ws[rng.randrange(n)] = f"`{rng.choice(words)}()`"
        if rng.random() < 0.3:
            ws[rng.randrange(n)] = f"**{rng.choice(words)}**"
        return " ".join(ws).capitalize() + "."

    blocks: list[str] = []
    total = 0
    i = 0
    while total < size:
        kind = i % 9
        if kind == 0:
            block = f"## Step {i // 9 + 1}: {rng.choice(words)} {rng.choice(words)}"
        elif kind in (1, 3, 5, 8):
            block = " ".join(sentence() for _ in range(rng.randint(2, 5)))
        elif kind == 2:
            block = "\n".join(f"- {sentence()}" for _ in range(rng.randint(3, 6)))
        elif kind == 4:
            body = "\n".join(
                f"def {rng.choice(words)}_{j}(x: int) -> int:\n    return x * {j}  # {rng.choice(words)}"
                for j in range(rng.randint(3, 8))
            )
            block = f"```python\n{body}\n```"
        elif kind == 6:
            rows = "\n".join(
                f"| `{rng.choice(words)}` | {rng.randint(1, 999)} | {rng.choice(words)} |"
                for _ in range(rng.randint(3, 6))
            )
            block = f"| name | count | note |\n|---|---:|---|\n{rows}"
        else:
            block = "\n".join(f"{j}. {sentence()}" for j in range(1, rng.randint(3, 5)))
        blocks.append(block)
        total += len(block) + 2
        i += 1
    return "\n\n".join(blocks)[:size]


def deltas(text: str, seed: int = 3) -> list[str]:
    rng = random.Random(seed)
    out: list[str] = []
    i = 0
    while i < len(text):
        n = rng.randint(4, 12)
        out.append(text[i : i + n])
        i += n
    return out


class Terminal(io.StringIO):
    """A console file that only counts what is written to it."""

    writes = 0
    chars = 0

    def write(self, s: str) -> int:
        self.writes += 1
        self.chars += len(s)
        return len(s)


def console() -> Console:
    return Console(
        file=Terminal(),
        width=WIDTH,
        height=HEIGHT,
        force_terminal=True,
        color_system="truecolor",
        legacy_windows=False,
    )


def run_ours(parts: list[str], mode: str, seen: dict[str, int] | None = None) -> tuple[float, int]:
    con = console()
    fake_now = [0.0]
    if mode == "real":
        stream = MarkdownStream(con, None)
    elif mode == "simulated":
        stream = MarkdownStream(con, None, clock=lambda: fake_now[0])
    else:
        stream = MarkdownStream(con, None, min_interval=0.0)
    live = LiveRegion(con.file, lambda: HEIGHT, lambda: [stream.live_text()])
    stream.live = live
    most = 0
    start = time.process_time()
    for part in parts:
        fake_now[0] += 0.010
        stream.feed(part)
        most = max(most, live.rows)
    stream.finish()
    took = time.process_time() - start
    if seen is not None:
        out = con.file
        assert isinstance(out, Terminal)
        seen.update(rows=most, writes=out.writes, chars=out.chars)
    return took, stream.redraws


def run_baseline(parts: list[str]) -> float:
    con = console()
    text = ""
    start = time.process_time()
    for part in parts:
        text += part
        con.file = io.StringIO()
        con.print(Markdown(text))
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-baseline-kb", type=int, default=10)
    parser.add_argument("--sizes", default="2,5,10,25,50,100,200", help="answer sizes in KB, comma-separated")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    run_ours(deltas(make_answer(5000)), "real")  # warm up imports and caches
    header = (
        f"{'size':>7} {'deltas':>7} │ {'baseline':>10} │ {'ours (real clock)':>19} │ "
        f"{'ours (100 deltas/s)':>21} │ {'ours (every delta)':>20}"
    )
    print("CPU seconds to render a streamed Markdown answer (console width 100)")
    print(header)
    print("─" * len(header))
    for kb in sizes:
        text = make_answer(kb * 1000)
        parts = deltas(text)
        base = f"{run_baseline(parts):9.2f}s" if kb <= args.max_baseline_kb else "   skipped"
        real, real_redraws = run_ours(parts, "real")
        sim, sim_redraws = run_ours(parts, "simulated")
        every, every_redraws = run_ours(parts, "every")
        print(
            f"{kb:>5}KB {len(parts):>7} │ {base:>10} │ {real:8.2f}s ({real_redraws:>5} rdw) │ "
            f"{sim:8.2f}s ({sim_redraws:>6} rdw) │ {every:7.2f}s ({every_redraws:>6} rdw)"
        )
    print(f"(baseline skipped above {args.max_baseline_kb} KB: it grows quadratically; rdw = open-block redraws)")
    print()
    print("What reaches the terminal (ours, 100 deltas/s)")
    header = f"{'size':>7} │ {'live rows at most':>17} │ {'writes':>8} │ {'KB written':>10}"
    print(header)
    print("─" * len(header))
    for kb in sizes:
        seen: dict[str, int] = {}
        run_ours(deltas(make_answer(kb * 1000)), "simulated", seen)
        print(f"{kb:>5}KB │ {seen['rows']:>17} │ {seen['writes']:>8} │ {seen['chars'] / 1000:>10.0f}")


if __name__ == "__main__":
    main()
