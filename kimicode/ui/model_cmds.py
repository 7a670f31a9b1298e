"""`/model` (show, or switch after checking the id against the server's `GET /models` list, with the ids
completed as you type), `/model NAME --fresh` (a fork that starts the new model from a summary) and
`/prompt` (what the model is told)."""

from __future__ import annotations

import asyncio
import difflib
import threading
from typing import TYPE_CHECKING

from kimicode.config.endpoint import ConfigError
from kimicode.errors import KimicodeError
from kimicode.ui.console import endpoint_host
from kimicode.ui.format import tokens

if TYPE_CHECKING:
    from kimicode.ui.app import Session
    from kimicode.ui.completion import Choice

MODELS_TIMEOUT = 5.0
"""Seconds to wait for the server's list of models."""

_served: dict[str, list[str] | None] = {}
"""The ids each endpoint (by base URL) lists, None when it lists none; read once per process."""
_served_lock = threading.Lock()


def served_models(base_url: str, key: str) -> list[str] | None:
    """The model ids the endpoint lists (`GET /models`), or None when it cannot be reached or lists none."""
    with _served_lock:
        if base_url in _served:
            return _served[base_url]
    from kimicode.llm.discovery import fetch_models

    status, body, _ = fetch_models(base_url, key, MODELS_TIMEOUT)
    entries = body.get("data") if status == 200 and isinstance(body, dict) else None
    ids = [str(e["id"]) for e in entries if isinstance(e, dict) and e.get("id")] if isinstance(entries, list) else None
    with _served_lock:
        _served[base_url] = ids or None
    return ids or None


def model_choices(session: Session) -> list[Choice]:
    """Completions for `/model `: the configured models (`[models.NAME]`), then the ids the server lists."""
    agent = session.agent
    configured = list(agent.settings.config.models)
    served = served_models(agent.endpoint.base_url, agent.endpoint.api_key) or []
    out: list[Choice] = [(name, "configured") for name in configured]
    out.extend((i, "served") for i in served if i not in configured)
    return out


async def check_model(session: Session, name: str) -> tuple[bool, str]:
    """Whether the endpoint `name` would use lists its id: (usable, a note when it was not checked)."""
    from kimicode.config.settings import switch_model

    agent = session.agent
    try:
        endpoint, mc = switch_model(agent.settings, agent.endpoint, name)
    except (ConfigError, ValueError) as exc:
        return False, str(exc)
    ids = await asyncio.to_thread(served_models, endpoint.base_url, endpoint.api_key)
    host = endpoint_host(endpoint.base_url) or endpoint.base_url
    if ids is None:
        return True, f" (not checked: {host} does not list its models)"
    if mc.model in ids:
        return True, ""
    close = difflib.get_close_matches(mc.model, ids, n=3, cutoff=0.5)
    listed = ", ".join(close or ids[:8]) + ("" if close or len(ids) <= 8 else ", …")
    hint = "did you mean " if close else "it lists "
    return False, (
        f"{host} does not serve {mc.model!r} ({hint}{listed}); the model is unchanged. "
        f"/model {name} --force switches anyway."
    )


async def cmd_model(session: Session, arg: str) -> None:
    agent = session.agent
    if not arg:
        session.say(
            f"Model: {agent.endpoint.model} at {agent.endpoint.base_url} "
            f"(context window {tokens(agent.context_window)}). Change it with /model NAME (Tab completes ids)."
        )
        return
    name, *flags = arg.split()
    if not set(flags) <= {"--fresh", "--force"}:
        session.say(
            "/model NAME switches the model; /model NAME --fresh continues in a fork that starts the new "
            "model from a summary of this conversation; --force skips checking the server's list.",
            "yellow",
        )
        return
    note = ""
    if "--force" not in flags:
        usable, note = await check_model(session, name)
        if not usable:
            session.say(note, "yellow")
            return
    if "--fresh" in flags:
        await model_fresh(session, name)
        return
    try:
        agent.set_model(name)
    except (ConfigError, ValueError) as exc:
        session.say(f"Model unchanged: {exc}", "yellow")
        return
    session.say(f"Model set to {name} (context window {tokens(agent.context_window)}){note}.", "green")


async def model_fresh(session: Session, name: str) -> None:
    """`/model NAME --fresh`: a fork of the conversation on model NAME, compacted into a summary before its
    first answer; the original session is left as it is."""
    old = session.agent
    try:
        child = old.fork(model=name, on_switch="compact")
    except (KimicodeError, ValueError, RuntimeError, OSError) as exc:
        session.say(f"Could not fork: {exc}", "red")
        return
    await session.continue_in(child)
    session.say(
        f"Continuing in {child.session_id} on {name}, which starts from a summary of this conversation "
        f"at your next message. `kimicode -r {old.session_id}` goes back to the original.",
        "green",
    )


async def cmd_prompt(session: Session, arg: str) -> None:
    """`/prompt`: the system prompt and tool definitions the model gets, with token counts."""
    from kimicode.agent.sysprompt import PromptReport

    report = PromptReport.of_agent(session.agent)
    session.console.print(report.text(), highlight=False, markup=False)
