"""An exploration on disk: the prompt, the verify command, each branch's state, the choice.

One JSON file per exploration, `KIMICODE_HOME/branches/<id>.json` (0600, in a 0700 directory), rewritten
atomically (temporary file, fsync, rename) whenever a branch changes state, so an interrupted exploration
is found again by `kimicode branches list` and resumed from it. Branch ids are `<exploration id>-<k>`;
`k` counts the branches of the parent session (its git branches are `kimicode/branch-<session>-<k>`).
"""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from kimicode.errors import UsageError

FINISHED = ("verified", "failed", "done", "error", "crashed")
"""Branch states that a resume keeps (the others, `pending`, `running`, `verifying`, `interrupted`, run again)."""


@dataclass
class Branch:
    """One attempt: its session, workspace, how its turn ended, what the verify command said, what it cost."""

    id: str
    k: int
    model: str | None = None
    thinking: str | None = None
    session_id: str | None = None
    workspace: str | None = None
    """Where the branch worked (its git worktree or copy)."""
    tree: dict[str, Any] | None = None
    """The tree as `kimicode.checkpoints.forks.ForkTree.record()` describes it (for removal)."""
    status: str = "pending"
    """pending, running, verifying, verified, failed (verify did not pass), done (no verify command),
    error (the turn failed, or the branch could not be created), crashed, interrupted."""
    turn_status: str | None = None
    error: str | None = None
    verified: bool | None = None
    verify_exit: int | None = None
    """The verify command's exit code; None when it did not run or was killed (see `verify_timed_out`)."""
    verify_timed_out: bool = False
    verify_output: str = ""
    """The last lines of the verify command's output."""
    changes: dict[str, list[str]] | None = None
    changed_lines: int = 0
    """Lines added plus lines removed (what `smallest` compares)."""
    before: str | None = None
    after: str | None = None
    """The branch's first and last checkpoints (commits in its workspace's checkpoint store)."""
    cost_usd: float | None = None
    usage: dict[str, int] = field(default_factory=dict)
    steps: int = 0
    started_at: float | None = None
    finished_at: float | None = None

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    @property
    def cached_share(self) -> float:
        """The share of the branch's prompt tokens the server's prefix cache served."""
        prompt = self.usage.get("prompt_tokens", 0)
        return round(self.usage.get("cached_tokens", 0) / prompt, 4) if prompt else 0.0

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["cached_share"] = self.cached_share
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Branch:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def result(self) -> dict[str, Any]:
        """The branch as the json result shows it."""
        return {
            "id": self.id,
            "status": self.status,
            "verified": self.verified,
            "verify_exit": self.verify_exit,
            "verify_timed_out": self.verify_timed_out,
            "changes": self.changes,
            "changed_lines": self.changed_lines,
            "cost_usd": round(self.cost_usd, 6) if self.cost_usd is not None else None,
            "session_id": self.session_id,
            "workspace": self.workspace,
            "model": self.model,
            "thinking": self.thinking,
            "turn_status": self.turn_status,
            "error": self.error,
            "cached_share": self.cached_share,
            "steps": self.steps,
            "duration_ms": int((self.finished_at - self.started_at) * 1000)
            if self.finished_at and self.started_at
            else None,
        }


@dataclass
class ExplorationRecord:
    """Everything about one exploration that must survive the process."""

    id: str
    parent_session: str
    workspace: str
    prompt: str
    n: int
    verify: str | None = None
    verify_timeout: float = 600.0
    pick: str = "auto"
    base_messages: int = 0
    """How many messages the parent had when the branches forked (their turn starts after them)."""
    status: str = "running"
    """running, done, no_verified (a verify command was given and no branch passed it), interrupted, error."""
    chosen: str | None = None
    reason: str = ""
    applied: str | None = None
    applied_turn: int | None = None
    """The parent's checkpoint turn that applied the chosen branch (undone by `kimicode undo`)."""
    judge_cost_usd: float | None = None
    notice: str | None = None
    """Why the branches are full checkouts instead of overlays (None when they are overlays, or asked for)."""
    created_at: float = field(default_factory=time.time)
    branches: list[Branch] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["branches"] = [b.to_dict() for b in self.branches]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExplorationRecord:
        names = {f.name for f in fields(cls)}
        rec = cls(**{k: v for k, v in data.items() if k in names and k != "branches"})
        rec.branches = [Branch.from_dict(b) for b in data.get("branches") or [] if isinstance(b, dict)]
        return rec

    def branch(self, branch_id: str) -> Branch:
        for b in self.branches:
            if b.id == branch_id:
                return b
        raise UsageError(f"exploration {self.id} has no branch {branch_id!r}")

    def save(self, home: Path) -> Path:
        """Write the record atomically, private to the user."""
        folder = branches_dir(home)
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = folder / f"{self.id}.json"
        tmp = folder / f".{self.id}.{os.getpid()}.tmp"
        data = json.dumps(self.to_dict(), indent=1).encode()  # ASCII: file names that are not UTF-8 round-trip
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return path


def branches_dir(home: Path) -> Path:
    return Path(home).expanduser() / "branches"


def new_exploration_id() -> str:
    return secrets.token_hex(4)


def load_record(home: Path, exploration_id: str) -> ExplorationRecord:
    path = branches_dir(home) / f"{exploration_id}.json"
    try:
        data = json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        raise UsageError(f"no exploration {exploration_id!r} (kimicode branches list shows them)") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None
    return ExplorationRecord.from_dict(data)


def all_records(home: Path) -> list[ExplorationRecord]:
    """Every exploration recorded under `home`, oldest first (unreadable files are skipped)."""
    out: list[ExplorationRecord] = []
    folder = branches_dir(home)
    if not folder.is_dir():
        return out
    for path in folder.glob("*.json"):
        try:
            out.append(ExplorationRecord.from_dict(json.loads(path.read_text("utf-8"))))
        except (OSError, ValueError, TypeError):
            continue
    return sorted(out, key=lambda r: r.created_at)


def find(home: Path, ident: str) -> tuple[ExplorationRecord, Branch | None]:
    """The exploration and branch named by `ident`: an exploration id, a branch id (`<exploration>-<k>`),
    a branch's session id, or a unique prefix of one of them."""
    if not ident:
        raise UsageError("give an exploration or branch id (kimicode branches list shows them)")
    hits: list[tuple[ExplorationRecord, Branch | None]] = []
    for rec in all_records(home):
        if rec.id == ident:
            return rec, None
        for b in rec.branches:
            if ident in (b.id, b.session_id):
                return rec, b
        if rec.id.startswith(ident):
            hits.append((rec, None))
        hits.extend((rec, b) for b in rec.branches if b.id.startswith(ident) or (b.session_id or "").startswith(ident))
    if len(hits) == 1:
        return hits[0]
    if not hits:
        raise UsageError(f"no exploration or branch {ident!r} (kimicode branches list shows them)")
    raise UsageError(f"{ident!r} is ambiguous: " + ", ".join(b.id if b else r.id for r, b in hits[:6]))


def next_k(home: Path, parent_session: str) -> int:
    """The next branch number of a session (its git branches never clash with earlier explorations')."""
    used = [b.k for r in all_records(home) if r.parent_session == parent_session for b in r.branches]
    return max(used, default=0) + 1


def remove_record(home: Path, exploration_id: str) -> None:
    (branches_dir(home) / f"{exploration_id}.json").unlink(missing_ok=True)
