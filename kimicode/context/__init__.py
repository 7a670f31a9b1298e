"""The context window: token accounting, the input budget, flood protection, pruning and compaction.

`manager.ContextManager` ties them together for the agent; `tokens` counts offline, `accounting`
anchors estimates on the server's usage, `output` caps tool results, `prune` and `compact` make room,
and `replay` rebuilds a logged history including those edits.
"""
