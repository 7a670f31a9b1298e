"""`Exploration`: what `agent.explore` returns: the branches, the choice, and `apply`.

Applying a branch is one checkpointed change of the parent's workspace: the branch's snapshots are
fetched into the parent's checkpoint store and the changed files restored from them (staged, then
renamed into place: a full disk changes nothing), as one turn of the parent session, so `/undo` and
`kimicode undo` take it back. The branch's messages of the turn are appended to the parent's history
as they are, so the session continues from the chosen branch's history byte for byte.
"""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path
from typing import Any

from kimicode.branches.record import Branch, ExplorationRecord
from kimicode.checkpoints.session import RestoreConflict
from kimicode.checkpoints.store import CheckpointError, CheckpointStore
from kimicode.errors import UsageError


class RunsLaterFiles(UsageError):
    """A branch changes files that a program outside any sandbox runs later (`kimicode.permissions.runslater`):
    applying would carry them into the workspace unasked, so it waits for an explicit yes."""

    def __init__(self, branch: str, files: list[tuple[str, str]]) -> None:
        self.files = files
        shown = "; ".join(f"{name} ({why})" for name, why in files[:10])
        super().__init__(
            f"branch {branch} changes files that run later outside any sandbox, not applied unasked: "
            f"{shown}. Look at them (kimicode branches diff {branch}), then apply with "
            "--allow-runs-later (Exploration.apply(..., runs_later=True))"
        )


class Exploration:
    """The outcome of an exploration (see docs/branches.md)."""

    def __init__(self, record: ExplorationRecord, parent: Any, agents: dict[str, Any] | None = None) -> None:
        self.record = record
        self.parent = parent
        self._agents = dict(agents or {})

    @property
    def id(self) -> str:
        return self.record.id

    @property
    def status(self) -> str:
        """`done`, `no_verified` (a verify command was given and no branch passed it), `interrupted`, `error`."""
        return self.record.status

    @property
    def branches(self) -> list[Branch]:
        return self.record.branches

    @property
    def chosen(self) -> Branch | None:
        return self.record.branch(self.record.chosen) if self.record.chosen else None

    @property
    def reason(self) -> str:
        return self.record.reason

    @property
    def applied(self) -> Branch | None:
        return self.record.branch(self.record.applied) if self.record.applied else None

    @property
    def cost_usd(self) -> float | None:
        """What the whole exploration cost (every branch and the judge): the cost of the finished task."""
        costs = [b.cost_usd for b in self.branches if b.cost_usd is not None]
        if self.record.judge_cost_usd is not None:
            costs.append(self.record.judge_cost_usd)
        return sum(costs) if costs else None

    @property
    def cost_per_verified_usd(self) -> float | None:
        """The total cost divided by the branches that passed the verify command (None when none did)."""
        verified = sum(1 for b in self.branches if b.verified)
        total = self.cost_usd
        return total / verified if verified and total is not None else None

    def diff(self, branch: Branch | str, color: bool = False) -> str:
        """The branch's changes as a unified diff ("" when it changed nothing)."""
        b = self.record.branch(branch) if isinstance(branch, str) else branch
        return branch_diff(Path(self.parent.home), b, color=color)

    def open(self, branch: Branch | str) -> Path:
        """The branch's files in a real directory (see `open_branch`)."""
        b = self.record.branch(branch) if isinstance(branch, str) else branch
        return open_branch(Path(self.parent.home), self.record, b)

    def answer(self, branch: Branch | str) -> str:
        """The branch's last answer (its final assistant text), "" when it has none."""
        b = self.record.branch(branch) if isinstance(branch, str) else branch
        agent = self._agents.get(b.id)
        try:
            history = (
                list(agent.messages) if agent is not None else _branch_messages(Path(self.parent.home), self.record, b)
            )
        except (UsageError, ValueError, OSError):
            return ""
        for message in reversed(history[self.record.base_messages :]):
            if message.get("role") == "assistant" and isinstance(message.get("content"), str) and message["content"]:
                return str(message["content"])
        return ""

    def to_dict(self) -> dict[str, Any]:
        """The json result's `branches`, `chosen` and costs."""
        total, per = self.cost_usd, self.cost_per_verified_usd
        return {
            "exploration": self.id,
            "exploration_status": self.status,
            "branches": [b.result() for b in self.branches],
            "chosen": self.record.chosen,
            "chosen_reason": self.reason,
            "applied": self.record.applied,
            "verify": self.record.verify,
            "cost_usd_total": round(total, 6) if total is not None else None,
            "cost_usd_per_verified": round(per, 6) if per is not None else None,
            "notice": self.record.notice,
        }

    async def apply(
        self, branch: Branch | str | None = None, *, force: bool = False, runs_later: bool = False
    ) -> Branch:
        """Apply `branch` (default: the chosen one) to the parent's workspace and continue its history.

        Raises UsageError when there is nothing to apply or the session moved on, and RestoreConflict
        (naming the files) when files the branch changed were changed in the workspace since it forked,
        unless `force`, and RunsLaterFiles when it changes files that run later, unless `runs_later`."""
        import asyncio

        b = self.chosen if branch is None else self.record.branch(branch) if isinstance(branch, str) else branch
        if b is None:
            raise UsageError(f"exploration {self.id} chose no branch ({self.reason}); name one to apply")
        agent = self._agents.get(b.id)
        messages = list(agent.messages) if agent is not None else None
        await asyncio.to_thread(apply_branch, self.parent, self.record, b, messages, force=force, runs_later=runs_later)
        return b


def branch_diff(home: Path, b: Branch, color: bool = False) -> str:
    if not (b.before and b.after and b.workspace):
        return ""
    store = CheckpointStore(home, Path(b.workspace))
    if not store.has(b.after):
        raise UsageError(f"branch {b.id}'s checkpoints are gone (its workspace store was pruned or removed)")
    return store.diff(b.before, b.after, color=color)


def open_branch(home: Path, rec: ExplorationRecord, b: Branch) -> Path:
    """Where to look at a branch's files. A worktree or copy branch: its workspace. An overlay branch (whose
    workspace is empty outside the branches' process): a git worktree on branch `kimicode/branch-<session>-<k>`
    (a plain directory outside git) holding its last checkpoint, made on the first call
    (kimicode/branches/overlay.py `open_tree`); `kimicode branches rm` removes it with the branch."""
    from kimicode.branches.overlay import open_tree

    tree = b.tree or {}
    if tree.get("kind") != "overlay":
        if not b.workspace or not Path(b.workspace).is_dir():
            raise UsageError(f"branch {b.id} has no workspace")
        return Path(b.workspace)
    snapshot = b.after or b.before or _base_commit(tree)
    if not snapshot:
        raise UsageError(f"branch {b.id} has no checkpoint to open")
    path, _made = open_tree(home, tree, snapshot)
    if not tree.get("opened"):  # recorded, so that `kimicode branches rm` removes it with its git branch
        tree["opened"] = str(Path(str(tree["root"])) / "open")
        b.tree = tree
        rec.save(home)
    return path


def _base_commit(tree: dict[str, Any]) -> str | None:
    try:
        return (Path(str(tree.get("base") or "")) / "commit").read_text().strip() or None
    except OSError:
        return None


def _branch_messages(home: Path, rec: ExplorationRecord, b: Branch) -> list[dict[str, Any]]:
    from kimicode.session.store import load_session

    if not b.session_id:
        raise UsageError(f"branch {b.id} never started")
    return load_session(home, b.session_id).messages


def _check_can_apply(parent: Any, rec: ExplorationRecord, b: Branch) -> None:
    if parent.busy:
        raise UsageError("cannot apply a branch while a turn is running")
    if parent.session_id != rec.parent_session:
        raise UsageError(f"exploration {rec.id} belongs to session {rec.parent_session}")
    cps = parent.checkpoints
    if cps is None:
        raise UsageError("applying a branch needs checkpoints ([checkpoints] enabled = true)")
    if rec.applied:
        live = [e for e in cps.entries if e.kind == "turn" and e.turn == rec.applied_turn and not e.undone]
        if live or rec.applied_turn is None:
            raise UsageError(
                f"branch {rec.applied} of exploration {rec.id} is applied already (undo it first: kimicode undo)"
            )
    if b.status not in ("verified", "failed", "done"):
        raise UsageError(f"branch {b.id} did not finish its turn (status {b.status}); nothing to apply")
    if len(parent.messages) != rec.base_messages:
        raise UsageError(
            f"session {parent.session_id} moved on since exploration {rec.id} forked "
            f"({len(parent.messages)} messages, the branches started from {rec.base_messages})"
        )


def runs_later_changes(parent: Any, paths: list[str]) -> list[tuple[str, str]]:
    """The changed `paths` (relative to the parent's workspace) that run later, each with the reason."""
    import os

    root = Path(os.path.realpath(parent.workspace))
    found = []
    for rel in paths:
        why = parent.policy.config(Path(os.path.realpath(root / rel)))
        if why is None and root / rel != Path(os.path.normpath(root / rel)):
            why = "its path leaves the workspace"
        if why is not None:
            found.append((rel, why))
    return found


def _restore_files(parent: Any, store: CheckpointStore, b: Branch, paths: list[str]) -> None:
    """Checkpoint the workspace (as a turn's first change does), then bring in the branch's files; the turn
    begun for the apply is ended when either fails."""
    cps = parent.checkpoints
    warning = cps.before_change()
    if cps.current is not None and cps.current.before is None:
        cps.end_turn()
        raise CheckpointError(f"cannot checkpoint the workspace before applying: {warning}")
    try:
        assert b.after is not None
        store.restore(b.after, paths, f"apply branch {b.id}", f"{parent.session_id}/{cps.turns}-apply")
    except CheckpointError:
        cps.end_turn()
        raise


def _add_turn(parent: Any, rec: ExplorationRecord, b: Branch, turn: list[dict[str, Any]]) -> None:
    """The branch's turn appended to the parent's history and log, with the turn's end record."""
    for message in turn:
        parent.messages.append(copy.deepcopy(message))
        if parent.log is not None:
            parent.log.message(parent.messages[-1])
    if parent.log is not None:
        parent.log.append(
            {
                "type": "turn_end",
                "status": "success",
                "steps": b.steps,
                "branch": b.id,
                "exploration": rec.id,
                "usage": dict(parent.usage),
            }
        )


def apply_branch(
    parent: Any,
    rec: ExplorationRecord,
    b: Branch,
    messages: list[dict[str, Any]] | None,
    *,
    force: bool = False,
    runs_later: bool = False,
) -> None:
    """See `Exploration.apply`; `messages` is the branch's history when it ran in this process."""
    _check_can_apply(parent, rec, b)
    home = Path(parent.home)
    history = messages if messages is not None else _branch_messages(home, rec, b)
    turn = history[rec.base_messages :]
    cps = parent.checkpoints
    paths = sorted({p for ps in (b.changes or {}).values() for p in ps})
    later = runs_later_changes(parent, paths)
    if later and not runs_later:
        raise RunsLaterFiles(b.id, later)
    store: CheckpointStore = cps.store
    if paths:
        assert b.before and b.after and b.workspace
        now = store.snapshot(f"before applying branch {b.id} (check)")
        _fetch(store, CheckpointStore(home, Path(b.workspace)), parent.session_id, b)
        conflicts = sorted(set(store.changes(b.before, now.id).paths()) & set(paths))
        if conflicts and not force:
            raise RestoreConflict(conflicts)
    cps.begin_turn(rec.prompt, len(parent.messages))
    entry = cps.current
    if paths:
        _restore_files(parent, store, b, paths)
    _add_turn(parent, rec, b, turn)
    cps.end_turn()
    parent.context.used = parent.context.estimate(parent.messages, parent.tools.schemas())
    rec.applied, rec.applied_turn = b.id, entry.turn if entry is not None else None
    _note_links(parent, rec, b, paths)
    rec.save(home)
    if parent.log is not None:
        parent.log.sync()


def _note_links(parent: Any, rec: ExplorationRecord, b: Branch, paths: list[str]) -> None:
    """Say which applied files are symbolic links pointing outside the workspace (a warning, and the
    exploration's notice): not refused, since a link is data until something follows it, but never silent."""
    links = _links_outside(Path(parent.workspace), paths)
    if links:
        text = f"applied branch {b.id} brings symbolic links pointing outside the workspace: {', '.join(links[:10])}"
        rec.notice = f"{rec.notice}; {text}" if rec.notice else text
        with contextlib.suppress(Exception):
            parent.notify(text, "warning")


def _links_outside(workspace: Path, paths: list[str]) -> list[str]:
    """The applied `paths` that are symbolic links resolving outside `workspace` (`name -> target`)."""
    import os

    root = os.path.realpath(workspace)
    out = []
    for rel in paths:
        path = workspace / rel
        if path.is_symlink():
            real = os.path.realpath(path)
            if real != root and not real.startswith(root.rstrip("/") + "/"):
                out.append(f"{rel} -> {os.readlink(path)}")
    return out


def _fetch(store: CheckpointStore, source: CheckpointStore, session_id: str, b: Branch) -> None:
    """Copy the branch's two snapshots (and the objects they need) into the parent's store, under refs of
    the parent session (dropped with it by `sessions rm`)."""
    if not source.has(b.after or ""):
        raise UsageError(f"branch {b.id}'s checkpoints are gone (its workspace store was pruned or removed)")
    for name, commit in (("before", b.before), ("after", b.after)):
        assert commit
        ref = f"refs/kimicode/{session_id}/branch-{b.k}-{name}"
        with source.locked():
            source.git("update-ref", f"refs/kimicode/export/{b.id}-{name}", commit)
        with store.locked():
            store.git(
                "fetch",
                "-q",
                "--no-tags",
                "--no-write-fetch-head",
                str(source.git_dir),
                f"+refs/kimicode/export/{b.id}-{name}:{ref}",
            )
