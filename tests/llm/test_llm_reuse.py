"""HTTP connection reuse: a stream read to its end gives its connection back to the pool, a batch's tasks
share one pool and one window discovery, and the per-process caches behind them stay correct."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from kimicode.batch import run
from kimicode.context.accounting import TokenAccountant
from kimicode.context.tokens import EstimateCounter
from kimicode.llm.client import ChatClient, ClientConfig, Completion, new_http_client, share_connections
from kimicode.testing import FakeServer, RecordedRequest, Reply, ToolCall

USER = [{"role": "user", "content": "hi"}]


def client_for(server: FakeServer) -> ChatClient:
    return ChatClient(ClientConfig(base_url=server.base_url, api_key="sk-test", model="kimi-k3", retry_base_delay=0.01))


async def one_request(client: ChatClient) -> Completion:
    last: Any = None
    async for event in client.stream(USER):
        last = event
    assert isinstance(last, Completion)
    return last


def test_sequential_requests_of_one_client_use_one_connection() -> None:
    with FakeServer([Reply(content=f"answer {i}") for i in range(6)]) as server:

        async def go() -> list[str]:
            client = client_for(server)
            try:
                return [(await one_request(client)).message["content"] for _ in range(6)]
            finally:
                await client.aclose()

        answers = asyncio.run(go())
        assert answers == [f"answer {i}" for i in range(6)]
        assert len(server.requests) == 6
        assert server.connections_opened == 1


def test_a_stream_left_early_does_not_break_the_next_request() -> None:
    with FakeServer([Reply(content="x" * 400, chunk_size=4), Reply(content="second")]) as server:

        async def go() -> str:
            client = client_for(server)
            try:
                async for _ in client.stream(USER):
                    break  # the consumer leaves mid-stream: that connection is closed, not pooled
                return str((await one_request(client)).message["content"])
            finally:
                await client.aclose()

        assert asyncio.run(go()) == "second"


def test_clients_created_in_a_shared_context_share_one_pool_their_owner_closes() -> None:
    with FakeServer([Reply(content=f"c{i}") for i in range(4)]) as server:

        async def go() -> list[str]:
            http = new_http_client()
            ctx = share_connections(http)

            async def task() -> str:
                client = client_for(server)
                try:
                    return str((await one_request(client)).message["content"])
                finally:
                    await client.aclose()  # leaves the shared pool open for the next client

            out = [await asyncio.create_task(task(), context=ctx) for _ in range(4)]
            assert not http.is_closed
            await http.aclose()
            return out

        assert asyncio.run(go()) == ["c0", "c1", "c2", "c3"]
        assert server.connections_opened == 1
    outside = ChatClient(ClientConfig(base_url="http://127.0.0.1:9/v1", api_key="k", model="m"))
    asyncio.run(outside.aclose())  # outside a shared context: the loop's pool, borrowed at the first request


def test_clients_outside_a_shared_context_share_the_loops_pool_the_last_one_closes() -> None:
    """A service's agents on one loop: one pool, warm for each client; closed when the last client closes."""
    with FakeServer([Reply(content=f"c{i}") for i in range(6)]) as server:

        async def go() -> list[str]:
            clients = [client_for(server) for _ in range(3)]
            out = [str((await one_request(c)).message["content"]) for c in clients]
            for c in clients:
                await c.aclose()
            again = client_for(server)  # a new pool (the old one was closed): one new connection
            try:
                out.append(str((await one_request(again)).message["content"]))
            finally:
                await again.aclose()
            return out

        assert asyncio.run(go()) == ["c0", "c1", "c2", "c3"]
        assert server.connections_opened == 2


def test_a_batch_shares_connections_and_asks_for_the_window_once(tmp_path: Path) -> None:
    def script(req: RecordedRequest) -> Reply:
        if req.body["messages"][-1]["role"] == "user":
            return Reply(tool_calls=[ToolCall("read_file", {"path": "missing.txt"})])
        return Reply(content="done")

    tasks = [{"id": f"t{i}", "prompt": f"p{i}"} for i in range(8)]
    with FakeServer([script] * 16) as server:

        async def go() -> list[str]:
            return [
                r.status
                async for r in run(
                    tasks,
                    concurrency=2,
                    root=tmp_path / "b",
                    base_url=server.base_url,
                    api_key="sk-test",
                    model="kimi-k3",
                    retry_base_delay=0.01,
                )
            ]

        assert asyncio.run(go()) == ["success"] * 8
        assert server.other_requests.count("GET /v1/models") == 1
        # 16 chat requests from 8 agents: at most one connection per concurrent task (plus discovery's own)
        assert server.connections_opened <= 3


def test_tools_count_is_cached_by_value_and_follows_a_changed_schema() -> None:
    counter = EstimateCounter()
    function: dict[str, Any] = {"name": "f", "description": "d", "parameters": {"type": "object"}}
    schema: dict[str, Any] = {"type": "function", "function": function}
    acc = TokenAccountant(counter)
    first = acc.raw_total([], [schema])
    assert first == counter.count(acc._tools([schema])[0]) > 0
    again = TokenAccountant(counter)
    assert again.raw_total([], [dict(schema)]) == first  # a fresh, equal list: the same count
    function["description"] = "a much longer description of what the tool does, word after word"
    assert again.raw_total([], [schema]) > first  # changed in place: counted again, not served stale


def test_the_fake_server_sends_small_events_without_nagle_delay() -> None:
    import socket
    import time

    with FakeServer() as server, socket.create_connection(("127.0.0.1", server.port)):
        assert server._server is not None
        deadline = time.monotonic() + 5
        while not server._server.connections and time.monotonic() < deadline:
            time.sleep(0.01)
        accepted = list(server._server.connections)
        assert len(accepted) == 1 and server.connections_opened == 1
        # without TCP_NODELAY each SSE event could wait ~40 ms for the client's delayed ACK
        assert accepted[0].getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
