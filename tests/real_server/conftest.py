"""Fixtures of the real-server tier: one `llama-server` per window and slot configuration, shared by a module."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from .llama import LlamaServer


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[int, int], LlamaServer]]:
    """`llama(ctx, parallel)`: a running server with that configuration, started once for the module."""
    started: dict[tuple[int, int], LlamaServer] = {}
    logs = tmp_path_factory.mktemp("llama-logs")

    def get(ctx: int, parallel: int = 1) -> LlamaServer:
        if (ctx, parallel) not in started:
            started[(ctx, parallel)] = LlamaServer(ctx, parallel, logs).start()
        return started[(ctx, parallel)]

    yield get
    for server in started.values():
        server.stop()
