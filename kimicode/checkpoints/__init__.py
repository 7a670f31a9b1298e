"""Workspace checkpoints: snapshots before each turn's first change, undo, rewind, diff (docs/checkpoints.md)."""

from kimicode.checkpoints.store import Changes, CheckpointError, CheckpointStore, Snapshot

__all__ = ["Changes", "CheckpointError", "CheckpointStore", "Snapshot"]
