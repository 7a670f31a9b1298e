"""Resume and fork: build an Agent from a saved session (`Agent.resume`, `Agent.fork`, `-c`, `-r`, `--fork`).

A resumed session keeps its id, so its log grows in place and the prompt cache key stays the same.
A fork gets a new id and a new log holding a copy of the history; the original is never written.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kimicode import errors
from kimicode.agent.builder import check_collaborators, switch_policy
from kimicode.agent.options import AgentOptions, derived_options, option_names
from kimicode.agent.switch import replay_authors
from kimicode.config.choices import EFFORTS
from kimicode.context.accounting import REASONING_FIELDS
from kimicode.session.log import LoadedSession, load_records, stored_records
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


COLLABORATORS = ("tools", "extra_tools", "approve", "on_event", "client", "session_store")
"""Agent arguments that are not settings: passed to the constructor as they are."""


def split_arguments(kwargs: dict[str, Any], base: AgentOptions, where: str) -> tuple[AgentOptions, dict[str, Any]]:
    """(`base` with the settings of `kwargs` applied, the collaborators of `kwargs`); TypeError for an unknown
    name or one that `where` takes from elsewhere."""
    for name in _FIXED:
        if name in kwargs:
            raise TypeError(f"{where} takes {name} from the session; do not pass {name}=")
    collaborators = {k: kwargs.pop(k) for k in COLLABORATORS if k in kwargs}
    return base.replace(**kwargs), collaborators


def load_stored(store: Any, home: Any, session_id: str) -> LoadedSession:
    """The session `session_id` from the caller's store (its exact id), else from `KIMICODE_HOME/sessions`
    (the id or a unique prefix of it)."""
    if store is None:
        return load_session(home, session_id)
    check_collaborators(None, store)
    records = stored_records(store, session_id)
    if not records:
        raise SessionError(
            f"no session {session_id!r} in the session store {type(store).__name__}: "
            "give an id the store has records for"
        )
    return load_records(session_id, checked_records(store, session_id, records))


def checked_records(store: Any, session_id: str, records: Any) -> list[dict[str, Any]]:
    """What a caller's `store.load(session_id)` returned, when it is a session kimicode can continue: a list
    of the dict records `append` was given whose messages make a history; else a SessionError naming the
    store and what is wrong (not an AttributeError from deep inside the replay)."""
    from kimicode.agent.history import check_history
    from kimicode.session.log import repair_history
    from kimicode.session.replay import replay

    where = f"the session store {type(store).__name__} returned for session {session_id!r}"
    if isinstance(records, str | bytes | dict) or not isinstance(records, Iterable):
        raise SessionError(f"{where} a {type(records).__name__}: load() returns the list of records append() got")
    records = list(records)
    for i, record in enumerate(records):
        if not isinstance(record, dict):
            raise SessionError(f"{where} a {type(record).__name__} as record {i}: records are the dicts append() got")
    history = replay(records)
    for i, message in enumerate(history):
        calls = message.get("tool_calls")
        if calls is not None and not (isinstance(calls, list) and all(isinstance(c, dict) for c in calls)):
            raise SessionError(f"{where} a history whose message {i} has tool_calls that are not a list of calls")
    repair_history(history)  # what resuming does to calls a crash left open
    try:
        check_history(history)
    except errors.UsageError as exc:
        raise SessionError(f"{where} records that do not make a valid history: {exc}") from None
    return copy.deepcopy(records)  # the agent's history is its own: neither changes the other


def _resumed_workspace(loaded: LoadedSession, explicit: Any, given: AgentOptions | None) -> Path:
    """Where a resumed session runs: the `workspace=` given, else the recorded one (which must still exist),
    else the options' (or the current directory)."""
    if explicit is not None:
        return Path(explicit)
    recorded = loaded.settings.get("workspace")
    if isinstance(recorded, str) and recorded:
        if not Path(recorded).is_dir():
            raise SessionError(
                f"the workspace of session {loaded.session_id} no longer exists ({recorded}); "
                "pass another workspace to resume it there"
            )
        return Path(recorded)
    return given.workspace if given is not None else Path(".")


def _switch_from_recorded_model(agent: Agent, loaded: LoadedSession) -> None:
    """A session recorded with another model than the agent's: apply the switch policy to its history and
    warn (in the library's words for a library caller) unless nothing from the other model is kept."""
    recorded_model = loaded.model
    current = agent.endpoint.model
    if not (recorded_model and recorded_model != current and any(m.get("role") == "assistant" for m in agent.messages)):
        return
    policy = switch_policy(agent.options, agent.model_config, agent.profile)
    what = agent.apply_switch(recorded_model, policy)
    reasoned = any(m.get(f) for m in agent.messages if m.get("role") == "assistant" for f in REASONING_FIELDS)
    if policy != "keep" or reasoned:  # no reasoning kept, nothing from another model to warn about
        agent.resume_warning = (
            model_warning(loaded.session_id, recorded_model, current)
            if policy == "keep"
            else f"session {loaded.session_id} was recorded with model {recorded_model}. {what}"
        )
        if agent.origin == "library":  # as the Notice says it (agent/outgoing.py)
            from kimicode.agent.outgoing import library_words

            agent.resume_warning = library_words(agent.resume_warning, option_names())
        agent.notify(agent.resume_warning, "warning")


def resume_agent(
    cls: type[Agent],
    session_id: str,
    *,
    fork: bool = False,
    fork_workspace: str = "shared",
    options: AgentOptions | Callable[[Path], AgentOptions] | None = None,
    **kwargs: Any,
) -> Agent:
    """Load `session_id` and return an Agent continuing it (see `Agent.resume`); a fork gets its own
    working tree when `fork_workspace` is `worktree` or `copy` (kimicode.checkpoints.forks).

    The settings are `options` with the keyword settings applied; `options` may also be a function of
    the workspace (the command line's `AgentOptions.from_workspace`), called once the workspace is known:
    a `workspace=` argument, else the recorded one. The model and effort default to the recorded ones.
    """
    for name in _FIXED:
        if name in kwargs:
            raise TypeError(f"Agent.resume() takes {name} from the session log; do not pass {name}=")
    explicit_workspace = kwargs.pop("workspace", None)
    given = options if isinstance(options, AgentOptions) else None
    home = kwargs.get("home", given.home if given is not None else None)
    loaded = load_stored(kwargs.get("session_store"), home, session_id)
    logged = loaded.settings  # what the session log recorded (not configuration)
    workspace = _resumed_workspace(loaded, explicit_workspace, given)
    base = given if given is not None else options(workspace) if callable(options) else AgentOptions()
    opts, collaborators = split_arguments(kwargs, base, "Agent.resume()")
    if opts.system_prompt is not None or opts.append_system_prompt is not None:
        raise ValueError("a resumed session keeps its recorded system prompt (do not pass system_prompt=)")
    changes: dict[str, Any] = {}
    if opts.model is None and not os.environ.get("KIMI_MODEL") and loaded.model:
        changes["model"] = loaded.model
    if opts.thinking is None and logged.get("thinking") in EFFORTS:
        changes["thinking"] = logged["thinking"]
    history = loaded.messages or None  # an empty log gets a fresh system prompt
    if fork:
        from kimicode.checkpoints.forks import fork_tree

        new_id, tree = fork_tree(fork_workspace, workspace, opts.home)
        if tree is not None:
            workspace = tree.workspace
        opts = opts.replace(**changes, workspace=workspace, session_id=new_id)
        agent = cls(opts, messages=copy.deepcopy(history) if history else None, **collaborators)
        agent.record_settings("fork", forked_from=loaded.session_id, **({"fork_tree": tree.record()} if tree else {}))
    else:
        opts = opts.replace(**changes, workspace=workspace, session_id=loaded.session_id)
        agent = cls(opts, messages=history, **collaborators)
        if agent.log is not None:  # one writer per session: a second process is refused (session/lock.py)
            agent.log.acquire()
        if agent.log is not None and history is not None:
            for record in loaded.repair_records():  # synthetic results for calls a crash left open
                agent.log.append(record)
        agent.record_settings("resume")
        if loaded.repaired:
            calls = f"{loaded.repaired} tool call{'s' if loaded.repaired != 1 else ''}"
            agent.notify(f"the session was cut off: {calls} without a result marked interrupted")
    agent.switches.authorship.adopt(agent.messages, replay_authors(loaded.records))
    _switch_from_recorded_model(agent, loaded)
    agent.parts.restore_window(loaded.records, record=fork)
    restore_usage(agent, loaded.records)
    agent.context.used = agent.context.estimate(agent.messages, agent.tools.schemas())
    return agent


def restore_usage(agent: Agent, records: list[dict[str, Any]]) -> None:
    """The session's token totals as its last `turn_end` recorded them: `usage` and `total_cost` go on from
    there (a fork copies them too: its history cost what it cost)."""
    ended = next((r for r in reversed(records) if r.get("type") == "turn_end"), None)
    totals = ended.get("usage") if ended is not None else None
    if isinstance(totals, dict):
        for key, value in totals.items():
            if key in agent.usage and isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                agent.usage[key] = value


def fork_agent(agent: Agent, **overrides: Any) -> Agent:
    """A copy of `agent`'s conversation in a new session (see `Agent.fork`)."""
    if agent.busy:
        raise errors.UsageError("cannot fork while a turn is running: wait for it, or interrupt() it first")
    tree_kind = overrides.get("workspace")
    if isinstance(tree_kind, str) and tree_kind in ("worktree", "copy", "shared"):
        del overrides["workspace"]
    else:
        tree_kind = None
    base = derived_options(agent, persist=agent.log is not None)
    collaborators: dict[str, Any] = {
        # the default set is built afresh, so tools bound to an agent (its todo list) are the child's own
        "tools": None if agent.extras.default_tools else list(agent.tools),
        "approve": agent.approve,
        "on_event": agent.on_event,
        "client": agent.parts.client.given,  # the caller's own client and store serve the fork too
        "session_store": agent.log.store if agent.log is not None else None,
    }
    opts, given = split_arguments(overrides, base, "fork()")
    collaborators.update(given)
    tree = None
    if tree_kind is not None:  # agent.fork(workspace="worktree"): its own tree
        from kimicode.checkpoints.forks import fork_tree

        session_id, tree = fork_tree(tree_kind, agent.workspace, agent.home)
        opts = opts.replace(session_id=session_id, workspace=tree.workspace if tree is not None else agent.workspace)
    child = type(agent)(opts, messages=copy.deepcopy(agent.messages), **collaborators)
    child.parts.client.borrowed = "client" not in given  # the parent's client: closed by the parent, not the fork
    child.switches.authorship.adopt(child.messages, [agent.switches.authorship.author(m) for m in agent.messages])
    if "tools" not in given:  # the parent's tools as they are now (added, removed), in its order
        own = {t.name: t for t in child.tools}
        for name in child.tools.names:
            child.tools.remove(name)
        for t in agent.tools:
            twin = own.get(t.name)  # the child's own copy of a tool built for each agent (same name and schema)
            same = twin is not None and twin.description == t.description and twin.parameters == t.parameters
            child.tools.add(twin if twin is not None and same else t)
    child.record_settings("fork", forked_from=agent.session_id, **({"fork_tree": tree.record()} if tree else {}))
    if agent.context.server_limit:  # what the server showed holds for the copy too
        child.context.learn_window(agent.context.server_limit)
    if agent.context.accountant.calibrated:  # and what its counts taught
        child.context.calibration_record = agent.context.calibration_state()
    child.context.used = agent.context.used
    if child.endpoint.model != agent.endpoint.model:  # fork(model=...): a switch like set_model's
        child.notify(child.apply_switch(agent.endpoint.model))
    return child
