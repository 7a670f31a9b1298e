"""Resume and fork: build an Agent from a saved session (`Agent.resume`, `Agent.fork`, `-c`, `-r`, `--fork`).

A resumed session keeps its id, so its log grows in place and the prompt cache key stays the same.
A fork gets a new id and a new log holding a copy of the history; the original is never written.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kimicode.events import Notice
from kimicode.session.store import SessionError, load_session

if TYPE_CHECKING:
    from kimicode.agent.core import Agent

_FIXED = ("messages", "session_id")


def model_warning(session_id: str, recorded: str, current: str) -> str:
    """The warning shown when a session continues with another model than the one it was recorded with."""
    return (
        f"session {session_id} was recorded with model {recorded} and continues with {current}: its reasoning "
        f"history came from another model, which can lower the quality of the answers "
        f"(resume with --model {recorded} to keep it consistent)"
    )


def resume_agent(
    cls: type[Agent], session_id: str, *, fork: bool = False, fork_workspace: str = "shared", **kwargs: Any
) -> Agent:
    """Load `session_id` and return an Agent continuing it (see `Agent.resume`); a fork gets its own
    working tree when `fork_workspace` is `worktree` or `copy` (kimicode.checkpoints.forks)."""
    for name in _FIXED:
        if name in kwargs:
            raise TypeError(f"Agent.resume() takes {name} from the session log; do not pass {name}=")
    if kwargs.get("system_prompt") is not None or kwargs.get("append_system_prompt") is not None:
        raise ValueError("a resumed session keeps its recorded system prompt (do not pass system_prompt=)")
    loaded = load_session(kwargs.get("home"), session_id)
    settings = loaded.settings
    if kwargs.get("model") is None and not os.environ.get("KIMI_MODEL") and loaded.model:
        kwargs["model"] = loaded.model
    if kwargs.get("thinking") is None and settings.get("thinking") in ("low", "high", "max"):
        kwargs["thinking"] = settings["thinking"]
    if kwargs.get("workspace") is None:
        recorded = settings.get("workspace")
        if isinstance(recorded, str) and recorded:
            if not Path(recorded).is_dir():
                raise SessionError(
                    f"the workspace of session {loaded.session_id} no longer exists ({recorded}); "
                    "pass another workspace to resume it there"
                )
            kwargs["workspace"] = recorded
    history = loaded.messages or None  # an empty log gets a fresh system prompt
    if fork:
        from kimicode.checkpoints.forks import fork_tree

        new_id, tree = fork_tree(fork_workspace, Path(kwargs.get("workspace") or "."), kwargs.get("home"))
        if tree is not None:
            kwargs["workspace"] = tree.workspace
        agent = cls(**kwargs, session_id=new_id, messages=copy.deepcopy(history) if history else None)
        agent._log_settings("fork", forked_from=loaded.session_id, **({"fork_tree": tree.record()} if tree else {}))
    else:
        agent = cls(**kwargs, session_id=loaded.session_id, messages=history)
        if agent.log is not None:  # one writer per session: a second process is refused (session/lock.py)
            agent.log.acquire()
        if agent.log is not None and history is not None:
            for record in loaded.repair_records():  # synthetic results for calls a crash left open
                agent.log.append(record)
        agent._log_settings("resume")
        if loaded.repaired:
            calls = f"{loaded.repaired} tool call{'s' if loaded.repaired != 1 else ''}"
            agent._notices.append(Notice(f"the session was cut off: {calls} without a result marked interrupted"))
    recorded_model = loaded.model
    current = agent.endpoint.model
    if recorded_model and recorded_model != current and any(m.get("role") == "assistant" for m in agent.messages):
        agent.resume_warning = model_warning(loaded.session_id, recorded_model, current)
        agent._notices.append(Notice(agent.resume_warning, "warning"))
    restore_window(agent, loaded.records, record=fork)
    agent.context.used = agent.context.estimate(agent.messages, agent.tools.schemas())
    return agent


def restore_window(agent: Agent, records: list[dict[str, Any]], *, record: bool = False) -> None:
    """Keep the window a server showed in this session (its last `context_window` record), unless the
    model or endpoint changed since it was learnt."""
    learnt: int | None = None
    for rec in records:
        if rec.get("type") == "settings" and rec.get("reason") == "model":
            learnt = None  # learnt for another model
        elif rec.get("type") == "context_window" and isinstance(rec.get("window"), int):
            learnt = rec["window"]
    settings = [r for r in records if r.get("type") in ("meta", "settings")]
    same = not settings or (
        settings[-1].get("model") in (None, agent.endpoint.model)
        and settings[-1].get("base_url") in (None, agent.endpoint.base_url)
    )
    if learnt and same:
        agent.context.learn_window(learnt, record=record)


def fork_agent(agent: Agent, **overrides: Any) -> Agent:
    """A copy of `agent`'s conversation in a new session (see `Agent.fork`)."""
    worker = agent._worker
    if worker is not None and not worker.done():
        raise RuntimeError("cannot fork while a turn is running")
    for name in _FIXED:
        if name in overrides:
            raise TypeError(f"fork() copies {name} from the agent; do not pass {name}=")
    opts = dict(agent._init_args)
    default_tools = opts.get("tools") is None
    extra = opts.get("extra_tools") or ()
    opts.update(
        model=agent.endpoint.model,
        base_url=agent.endpoint.base_url,
        api_key=agent.endpoint.api_key,
        workspace=agent.workspace,
        # the default set is built afresh, so tools bound to an agent (its todo list) are the child's own
        tools=None if default_tools else list(agent.tools),
        extra_tools=list(extra) if isinstance(extra, list | tuple) else (),
        permission_mode=agent.permission_mode,
        approve=agent.approve,
        thinking=agent.thinking,
        context_window=agent.context_window,
        on_event=agent.on_event,
        home=agent.home,
        persist=agent.log is not None,
        system_prompt=None,
        append_system_prompt=None,
    )
    opts.update(overrides)
    opts["session_id"] = None
    tree = None
    if isinstance(overrides.get("workspace"), str) and overrides["workspace"] in ("worktree", "copy", "shared"):
        from kimicode.checkpoints.forks import fork_tree  # agent.fork(workspace="worktree"): its own tree

        opts["session_id"], tree = fork_tree(overrides["workspace"], agent.workspace, agent.home)
        opts["workspace"] = tree.workspace if tree is not None else agent.workspace
    opts["messages"] = copy.deepcopy(agent.messages)
    child = type(agent)(**opts)
    if "tools" not in overrides:  # the parent's tools as they are now (added, removed), in its order
        own = {t.name: t for t in child.tools}
        for name in child.tools.names:
            child.tools.remove(name)
        for t in agent.tools:
            twin = own.get(t.name)  # the child's own copy of a tool built for each agent (same name and schema)
            same = twin is not None and twin.description == t.description and twin.parameters == t.parameters
            child.tools.add(twin if twin is not None and same else t)
    child._log_settings("fork", forked_from=agent.session_id, **({"fork_tree": tree.record()} if tree else {}))
    if agent.context.server_limit:  # what the server showed holds for the copy too
        child.context.learn_window(agent.context.server_limit)
    child.context.used = agent.context.used
    return child
