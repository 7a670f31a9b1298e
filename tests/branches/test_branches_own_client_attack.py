"""Hostile or failing parts of the caller's own (`Agent(client=, session_store=)`) under parallel branches."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from branches_helpers import GOOD, VERIFY, explore_and_close, git_project

from kimicode import Agent, Completion, StreamEvent, UsageError
from kimicode.session.log import SessionWriteError


class Client:
    """Each branch's first request writes app.py GOOD, then answers; the `fail`-th first request raises."""

    def __init__(self, fail: int | None = None) -> None:
        self.fail, self.firsts, self.requests = fail, 0, 0

    async def stream(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] = (),
        *,
        max_completion_tokens: int | None = None,
    ) -> AsyncIterator[StreamEvent]:
        self.requests += 1
        if messages[-1]["role"] == "user":
            self.firsts += 1
            if self.firsts == self.fail:
                raise RuntimeError("the caller's client broke")
            args = json.dumps({"path": "app.py", "content": GOOD})
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
def test_a_client_that_raises_in_one_branch_fails_that_branch_only(workspace: Path, tmp_path: Path) -> None:
    git_project(workspace)
    parent = Agent(client=Client(fail=1), workspace=workspace, home=tmp_path / "home", permission_mode="accept-edits")
    ex = asyncio.run(explore_and_close(parent, n=2, verify=VERIFY))
    statuses = sorted(b.status for b in ex.branches)
    assert statuses[1] == "verified" and statuses[0] in ("error", "crashed"), [(b.status, b.error) for b in ex.branches]
    broken = next(b for b in ex.branches if b.status != "verified")
    assert "the caller's client broke" in str(broken.error)
    assert ex.applied is not None and (workspace / "app.py").read_text() == GOOD


class BrokenStore:
    """The caller's store: a branch's session (any but the parent's) cannot be appended to."""

    def __init__(self, after: int) -> None:
        self.sessions: dict[str, list[dict[str, Any]]] = {}
        self.parent: str | None = None
        self.after = after

    def append(self, session_id: str, record: dict[str, Any]) -> None:
        kept = len(self.sessions.get(session_id, []))
        if self.parent is not None and session_id != self.parent and kept >= self.after:
            raise OSError(28, "No space left on device")
        self.sessions.setdefault(session_id, []).append(record)

    def load(self, session_id: str) -> list[dict[str, Any]]:
        return list(self.sessions.get(session_id, []))


@pytest.mark.parametrize("after", [0, 3, 6])
def test_a_store_that_refuses_the_branches_records_never_reports_them_verified(
    workspace: Path, tmp_path: Path, after: int
) -> None:
    git_project(workspace)
    store = BrokenStore(after)
    parent = Agent(
        client=Client(),
        session_store=store,
        workspace=workspace,
        home=tmp_path / "home",
        permission_mode="accept-edits",
    )
    store.parent = parent.session_id
    try:
        ex = asyncio.run(explore_and_close(parent, n=2, verify=VERIFY))
    except SessionWriteError as exc:  # a branch's log could not be kept at its fork: said of the caller's store
        assert after < 6 and "the session store could not keep a record of session" in str(exc), exc
        return
    assert ex.record.status == "no_verified"
    for b in ex.branches:  # the store failed during each branch's turn: an error, never verified
        assert b.status == "error" and "the session store could not keep a record" in str(b.error), b


def test_overlay_workspaces_with_the_callers_client_are_refused_saying_why(workspace: Path, tmp_path: Path) -> None:
    git_project(workspace)
    parent = Agent(client=Client(), workspace=workspace, home=tmp_path / "home", permission_mode="accept-edits")
    with pytest.raises(UsageError, match="caller's own model client or session store"):
        asyncio.run(explore_and_close(parent, n=2, workspace="overlay"))
    assert not (tmp_path / "home" / "worktrees").exists() or not any((tmp_path / "home" / "worktrees").iterdir())


@pytest.mark.prepush
def test_a_judge_model_with_the_callers_client_never_leaves_this_process(workspace: Path, tmp_path: Path) -> None:
    """The judge is a fork of the parent: with a caller's client it asks that client (no request elsewhere)."""
    git_project(workspace)
    client = Client()
    parent = Agent(
        client=client,
        workspace=workspace,
        home=tmp_path / "home",
        permission_mode="accept-edits",
        base_url="http://127.0.0.1:9/v1",
        api_key="sk-unused-0000000000",
    )
    ex = asyncio.run(explore_and_close(parent, n=2, verify=VERIFY, judge_model="judge-model"))
    assert ex.applied is not None and (workspace / "app.py").read_text() == GOOD
    assert client.requests > 4 and "the judge failed" not in str(ex.record.reason), ex.record.reason


@pytest.mark.prepush
def test_apply_later_and_after_a_restart_with_the_callers_client_and_store(workspace: Path, tmp_path: Path) -> None:
    from kimicode.branches import load_record
    from kimicode.branches.exploration import Exploration

    git_project(workspace)
    home = tmp_path / "home"
    parent = Agent(client=Client(fail=1), workspace=workspace, home=home, permission_mode="accept-edits")
    ex = asyncio.run(explore_and_close(parent, n=2, verify=VERIFY, apply=False))
    good = next(b for b in ex.branches if b.status == "verified")
    bad = next(b for b in ex.branches if b.status != "verified")
    assert ex.applied is None and (workspace / "app.py").read_text() != GOOD

    later = Agent.resume(
        parent.session_id, client=Client(), workspace=workspace, home=home, permission_mode="accept-edits"
    )

    async def apply() -> None:
        try:
            again = Exploration(load_record(home, ex.record.id), later, {})
            with pytest.raises(UsageError, match="did not finish its turn"):
                await again.apply(bad)
            assert (workspace / "app.py").read_text() != GOOD
            await again.apply(good)
        finally:
            await later.aclose()

    asyncio.run(apply())
    assert (workspace / "app.py").read_text() == GOOD
