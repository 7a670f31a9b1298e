"""Parallel branches of an agent given the caller's own model client (and session store)."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from branches_helpers import BUGGY, GOOD, VERIFY, WRONG, git_project
from helpers import MemoryStore

from kimicode import Agent, Completion, StreamEvent, UsageError
from kimicode.branches import all_records, load_record
from kimicode.branches.explore import resume_exploration


class FixingClient:
    """Each branch's first request writes app.py (WRONG for the first branch asked, GOOD after), then answers."""

    def __init__(self) -> None:
        self.contents = itertools.chain([WRONG], itertools.repeat(GOOD))
        self.requests = 0

    async def stream(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] = (),
        *,
        max_completion_tokens: int | None = None,
    ) -> AsyncIterator[StreamEvent]:
        self.requests += 1
        if messages[-1]["role"] == "user":
            args = json.dumps({"path": "app.py", "content": next(self.contents)})
            call = {
                "id": f"call_{self.requests}",
                "type": "function",
                "function": {"name": "write_file", "arguments": args},
            }
            yield Completion({"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls", None)
        else:
            yield Completion(
                {"role": "assistant", "content": "fixed"}, "stop", {"prompt_tokens": 100, "completion_tokens": 5}
            )

    async def aclose(self) -> None:
        pass


@pytest.mark.prepush
def test_explore_with_the_callers_client(workspace: Path, tmp_path: Path) -> None:
    git_project(workspace)
    client = FixingClient()
    parent = Agent(client=client, workspace=workspace, home=tmp_path / "home", permission_mode="accept-edits")

    async def go() -> Any:
        try:
            return await parent.explore("fix add", n=2, verify=VERIFY)
        finally:
            await parent.aclose()

    ex = asyncio.run(go())
    assert sorted(b.status for b in ex.branches) == ["failed", "verified"]
    assert ex.applied is not None and (workspace / "app.py").read_text() == GOOD
    assert client.requests == 4


class HangingClient(FixingClient):
    """Hangs on every branch's first request (the parent's own turn has none), until cancelled."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = 0

    async def stream(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] = (),
        *,
        max_completion_tokens: int | None = None,
    ) -> AsyncIterator[StreamEvent]:
        self.waiting += 1
        await asyncio.sleep(3600)
        yield Completion({"role": "assistant", "content": "never"}, "stop", None)


@pytest.mark.prepush
def test_branches_write_to_the_callers_store_and_an_interrupted_exploration_resumes_with_them(
    workspace: Path, tmp_path: Path
) -> None:
    git_project(workspace)
    store, home = MemoryStore(), tmp_path / "home"
    hanging = HangingClient()
    parent = Agent(client=hanging, session_store=store, workspace=workspace, home=home, permission_mode="accept-edits")

    async def interrupted() -> None:
        task = asyncio.create_task(parent.explore("fix add", n=2, verify=VERIFY))
        while hanging.waiting < 2:
            await asyncio.sleep(0.05)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        await parent.aclose()

    asyncio.run(interrupted())
    (rec,) = all_records(home)
    assert rec.status == "interrupted" and {b.status for b in rec.branches} == {"interrupted"}
    assert rec.notice is not None and "caller's own model client or session store" in rec.notice
    for b in rec.branches:  # each branch's log is in the caller's store, none under KIMICODE_HOME
        assert b.session_id in store.sessions and not (home / "sessions" / f"{b.session_id}.jsonl").exists()
    assert (workspace / "app.py").read_text() == BUGGY

    fixing = FixingClient()
    again = Agent.resume(
        parent.session_id,
        client=fixing,
        session_store=store,
        workspace=workspace,
        home=home,
        permission_mode="accept-edits",
    )

    async def resume() -> Any:
        try:
            return await resume_exploration(again, load_record(home, rec.id))
        finally:
            await again.aclose()

    done = asyncio.run(resume())
    assert sorted(b.status for b in done.branches) == ["failed", "verified"] and fixing.requests == 4
    assert done.applied is not None and (workspace / "app.py").read_text() == GOOD


def test_another_engine_refuses_the_callers_client_clearly(workspace: Path, tmp_path: Path) -> None:
    class Elsewhere:
        def run(self, parent: Any, record: Any, job: Any, branches: Any) -> Any:
            raise AssertionError("never reached")

    parent = Agent(client=FixingClient(), workspace=workspace, home=tmp_path / "home")

    async def go() -> None:
        try:
            await parent.explore("fix add", n=2, engine=Elsewhere())
        finally:
            await parent.aclose()

    with pytest.raises(UsageError, match="own model client or session store run in this process"):
        asyncio.run(go())
