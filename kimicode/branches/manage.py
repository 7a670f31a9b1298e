"""Removing branches: their workspaces, git branches, session logs and checkpoint stores.

`kimicode branches rm`, and `kimicode sessions rm` of a session that explored (its branches go with it).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from kimicode.branches.overlay import remove_base, remove_overlay_tree
from kimicode.branches.record import Branch, ExplorationRecord, all_records, remove_record
from kimicode.branches.trees import remove_branch_tree
from kimicode.checkpoints.store import CheckpointError, store_dir
from kimicode.session.store import SessionError, delete_session, find_session, session_info


def remove_branch(home: Path, rec: ExplorationRecord, b: Branch) -> list[str]:
    """Remove one branch entirely; returns what was done, one line each (the record is saved without it).

    The record is data: only what it names inside kimicode's own directories (`KIMICODE_HOME/worktrees/
    branch-*`) and a session forked from the exploration's parent into that directory is removed, so a
    damaged record cannot point the removal at the user's files, the parent's checkpoints or another session."""
    done: list[str] = []
    overlay = bool(b.tree and b.tree.get("kind") == "overlay")
    root = _own_root(home, b)
    try:
        if b.tree and root is None:
            raise CheckpointError(f"refusing to remove {b.tree.get('root')}: not a kimicode branch's directory")
        done.append(remove_overlay_tree(home, b.tree or {}) if overlay else remove_branch_tree(b.tree))
    except (CheckpointError, OSError) as exc:
        done.append(f"could not remove branch {b.id}'s workspace: {exc}")
    if b.workspace and root is not None and Path(b.workspace).is_relative_to(root):
        shutil.rmtree(store_dir(Path(home).expanduser().resolve(), Path(b.workspace)), ignore_errors=True)
    if b.session_id and root is not None and _is_branch_session(home, rec, b.session_id, root):
        try:
            delete_session(home, b.session_id)
            done.append(f"deleted branch {b.id}'s session {b.session_id}")
        except (SessionError, OSError):
            pass
    rec.branches = [x for x in rec.branches if x.id != b.id]
    base = (b.tree or {}).get("base") if overlay else None
    if base and not any((x.tree or {}).get("base") == base for x in rec.branches):
        try:
            done.append(remove_base(home, b.tree or {}) or "")
        except (CheckpointError, OSError) as exc:
            done.append(f"could not remove exploration {rec.id}'s snapshot: {exc}")
    if rec.chosen == b.id:
        rec.chosen = None
    if rec.branches:
        rec.save(home)
    else:
        remove_record(home, rec.id)
    return done


def _own_root(home: Path, b: Branch) -> Path | None:
    """The branch's directory as its record names it, if it is one of kimicode's own (else None)."""
    root = Path(str((b.tree or {}).get("root") or ""))
    if root.parent != Path(home).expanduser().resolve() / "worktrees" or not root.name.startswith("branch-"):
        return None
    return root


def _is_branch_session(home: Path, rec: ExplorationRecord, session_id: str, root: Path) -> bool:
    """Whether `session_id` is a fork of the exploration's parent working in `root` (its log says so)."""
    try:
        info = session_info(find_session(home, session_id))
    except (SessionError, OSError):
        return False
    return info.forked_from == rec.parent_session and str((info.fork_tree or {}).get("root")) == str(root)


def remove_exploration(home: Path, rec: ExplorationRecord) -> list[str]:
    done: list[str] = []
    for b in list(rec.branches):
        done += remove_branch(home, rec, b)
    remove_record(home, rec.id)
    done.append(f"removed exploration {rec.id}")
    return done


def remove_for_session(home: Path, session_id: str) -> list[str]:
    """Remove every exploration (and its branches) of session `session_id`."""
    done: list[str] = []
    for rec in all_records(home):
        if rec.parent_session == session_id:
            done += remove_exploration(home, rec)
    return done
