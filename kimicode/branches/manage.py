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
from kimicode.session.store import SessionError, delete_session


def remove_branch(home: Path, rec: ExplorationRecord, b: Branch) -> list[str]:
    """Remove one branch entirely; returns what was done, one line each (the record is saved without it)."""
    done: list[str] = []
    overlay = bool(b.tree and b.tree.get("kind") == "overlay")
    try:
        done.append(remove_overlay_tree(home, b.tree or {}) if overlay else remove_branch_tree(b.tree))
    except (CheckpointError, OSError) as exc:
        done.append(f"could not remove branch {b.id}'s workspace: {exc}")
    if b.workspace:
        shutil.rmtree(store_dir(Path(home).expanduser().resolve(), Path(b.workspace)), ignore_errors=True)
    if b.session_id:
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
