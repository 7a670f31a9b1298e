"""The end-of-batch summary (by status, slowest tasks, most expensive tasks), also `kimicode batch report`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import IO, Any

from kimicode.batch.results import TaskResult


def summarize(results: Iterable[TaskResult]) -> dict[str, Any]:
    """Counts by status, totals, and the slowest / most expensive tasks, as plain data (stream-json uses it)."""
    items = list(results)
    by_status = Counter(r.status for r in items)
    costs = [r.cost_usd for r in items if r.cost_usd is not None]
    return {
        "tasks": len(items),
        "by_status": dict(sorted(by_status.items(), key=lambda kv: (-kv[1], kv[0]))),
        "tokens": {
            "prompt": sum(r.usage.get("prompt_tokens", 0) for r in items),
            "completion": sum(r.usage.get("completion_tokens", 0) for r in items),
            "cached": sum(r.usage.get("cached_tokens", 0) for r in items),
        },
        "cost_usd": round(sum(costs), 6) if costs else None,
        "unpriced": len(items) - len(costs),
        "retried": sum(1 for r in items if r.attempts > 1),
        "duration_ms": sum(r.duration_ms for r in items),
        "slowest": [(r.id, r.duration_ms) for r in sorted(items, key=lambda r: -r.duration_ms)[:5]],
        "most_expensive": [
            (r.id, r.cost_usd) for r in sorted(items, key=lambda r: -(r.cost_usd or 0))[:5] if r.cost_usd
        ],
    }


def _tokens(n: int) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n / 1e3:.1f}k" if n >= 1e3 else str(n)


def _secs(ms: int) -> str:
    s = ms / 1000
    return f"{s / 60:.1f}m" if s >= 120 else f"{s:.1f}s"


def print_summary(results: Iterable[TaskResult], out: IO[str], *, color: bool = False) -> dict[str, Any]:
    """Print the summary tables to `out`; return the summary data."""
    from rich.console import Console
    from rich.table import Table

    items = list(results)
    data = summarize(items)
    console = Console(file=out, force_terminal=color, no_color=not color, width=100, highlight=False)
    if not items:
        console.print("no results")
        return data
    table = Table(title=f"{data['tasks']} tasks", title_justify="left")
    for col in ("status", "tasks", "tokens in", "tokens out", "cost"):
        table.add_column(col, justify="left" if col == "status" else "right")
    for status, count in data["by_status"].items():
        group = [r for r in items if r.status == status]
        costs = [r.cost_usd for r in group if r.cost_usd is not None]
        table.add_row(
            status,
            str(count),
            _tokens(sum(r.usage.get("prompt_tokens", 0) for r in group)),
            _tokens(sum(r.usage.get("completion_tokens", 0) for r in group)),
            f"${sum(costs):.4f}" if costs else "-",
        )
    total = data["cost_usd"]
    table.add_row(
        "total",
        str(data["tasks"]),
        _tokens(data["tokens"]["prompt"]),
        _tokens(data["tokens"]["completion"]),
        f"${total:.4f}" if total is not None else "-",
        style="bold",
    )
    console.print(table)
    slow = Table(title="slowest", title_justify="left")
    slow.add_column("task")
    slow.add_column("time", justify="right")
    for rid, ms in data["slowest"]:
        slow.add_row(rid, _secs(ms))
    console.print(slow)
    if data["most_expensive"]:
        dear = Table(title="most expensive", title_justify="left")
        dear.add_column("task")
        dear.add_column("cost", justify="right")
        for rid, cost in data["most_expensive"]:
            dear.add_row(rid, f"${cost:.4f}")
        console.print(dear)
    if data["unpriced"] and data["unpriced"] < data["tasks"]:
        console.print(f"{data['unpriced']} tasks had no known price (not in the cost)")
    failed = [r for r in items if r.status != "success"]
    for r in failed[:10]:
        console.print(f"{r.id}: {r.status}: {(r.error or '').splitlines()[0] if r.error else ''}")
    if len(failed) > 10:
        console.print(f"... and {len(failed) - 10} more not successful")
    return data
