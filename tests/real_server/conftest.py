"""Fixtures of the real-server tier: one `llama-server` per window and slot configuration, shared by a module."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from llama import LlamaServer, unavailable

REASON = unavailable()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.real_server)
            item.add_marker(pytest.mark.slow)
            if REASON:
                item.add_marker(pytest.mark.skip(reason=REASON))


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
