"""The HTTP API's routes (Starlette). Each route is declared once in `ROUTES`, with its body and answer
models: the app is built from that table and so is the OpenAPI document (kimicode/serve/openapi.py)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from kimicode.serve import models as m
from kimicode.serve.manager import RequestProblem, Sessions
from kimicode.serve.session import Job, QueueFull
from kimicode.serve.wire import dumps

Handler = Callable[[Request], Awaitable[Response]]


@dataclass(frozen=True)
class Spec:
    """One route: what it takes and answers (for the app and the OpenAPI document)."""

    method: str
    path: str
    handler: Handler
    status: int = 200
    body: type[BaseModel] | None = None
    answer: type[BaseModel] | None = None
    query: tuple[tuple[str, str, str], ...] = ()
    """(name, JSON type, description) of the query parameters."""
    media: str = "application/json"


class Json(JSONResponse):
    def render(self, content: Any) -> bytes:
        return dumps(content).encode()


def problem(status: int, message: str) -> Response:
    return Json({"error": message, "status": status}, status_code=status, headers={"cache-control": "no-store"})


async def parse(request: Request, model: type[BaseModel]) -> Any:
    raw = await request.body()
    try:
        data = json.loads(raw or b"{}")
    except (ValueError, UnicodeDecodeError):
        raise RequestProblem("the body is not JSON") from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        details = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors())
        raise RequestProblem(details[:2000], 422) from None


def sessions_of(request: Request) -> Sessions:
    sessions: Sessions = request.app.state.sessions
    return sessions


# -- handlers ------------------------------------------------------------------------------------------


async def list_all(request: Request) -> Response:
    """The live sessions, and the saved ones (newest first) that can be resumed."""
    from kimicode import list_sessions

    sessions = sessions_of(request)
    saved = await asyncio.to_thread(list_sessions, sessions.home())
    return Json(
        {
            "sessions": [s.summary() for s in sessions.live.values()],
            "saved": [
                {
                    "id": i.id,
                    "workspace": i.workspace,
                    "model": i.model,
                    "turns": i.turns,
                    "updated": i.updated.isoformat(),
                    "first_prompt": i.first_prompt[:200],
                    "origin": i.origin,
                    "live": i.id in sessions.live,
                }
                for i in saved[:100]
            ],
        }
    )


async def create(request: Request) -> Response:
    """Start a session in a workspace (or resume a saved one); returns its id."""
    body = await parse(request, m.CreateSession)
    sessions = sessions_of(request)
    if body.resume is not None:
        if body.workspace is not None:
            raise RequestProblem("resume takes the workspace from the session log; do not give workspace")
        session = sessions.resume(body.resume, body.permission_mode, body.model, fork=body.fork)
    else:
        if body.fork:
            raise RequestProblem("fork is for resume; fork a live session with POST /sessions/{id}/fork")
        session = sessions.create(body.workspace, body.permission_mode, body.model)
    return Json(session.summary(), status_code=201)


async def state(request: Request) -> Response:
    """Status, history, usage, cost, context, turns, queue and open permission requests."""
    session = sessions_of(request).get(request.path_params["id"])
    return Json(session.state())


async def close(request: Request) -> Response:
    """Close a live session (its log stays; resume it later)."""
    await sessions_of(request).close(request.path_params["id"])
    return Response(status_code=204)


async def send(request: Request) -> Response:
    """Queue a message (a turn runs for it when the session is free), or steer the running turn."""
    session = sessions_of(request).get(request.path_params["id"])
    body = await parse(request, m.SendMessage)
    if body.steer and session.steer(body.text):
        return Json({"queued": 0, "steered": True}, status_code=202)
    try:
        place = session.submit(Job("prompt", body.text))
    except QueueFull as exc:
        raise RequestProblem(str(exc), 429) from None
    return Json({"queued": place, "steered": False}, status_code=202)


async def events(request: Request) -> Response:
    """The session's events as server-sent events; `after=SEQ` replays the kept ones after SEQ first."""
    session = sessions_of(request).get(request.path_params["id"])
    after_arg = request.query_params.get("after")
    if after_arg is not None and not after_arg.isdigit():
        raise RequestProblem("after must be an event number")
    after = int(after_arg) if after_arg is not None else None

    async def stream() -> AsyncIterator[bytes]:
        yield b": kimicode events\n\n"
        for pending in list(session.approver.pending.values()):  # questions asked before this client came
            if after is None:
                yield f"data: {dumps(pending.as_event())}\n\n".encode()
        async for item in session.hub.follow(after):
            if item is None:
                yield b": ping\n\n"
            else:
                yield f"id: {item[0]}\ndata: {item[1]}\n\n".encode()

    return StreamingResponse(
        stream(), media_type="text/event-stream", headers={"cache-control": "no-store", "x-accel-buffering": "no"}
    )


async def answer(request: Request) -> Response:
    """Answer a permission request: allow (once), allow_always (the engine's rule for it), deny."""
    session = sessions_of(request).get(request.path_params["id"])
    body = await parse(request, m.Answer)
    if not session.approver.answer(request.path_params["request_id"][:64], body.decision, body.reason):
        raise RequestProblem("no such open permission request (answered already, or never asked)", 404)
    return Json({"ok": True, "detail": {"decision": body.decision}})


async def pending(request: Request) -> Response:
    """The permission requests waiting for an answer."""
    session = sessions_of(request).get(request.path_params["id"])
    return Json({"pending": [p.as_event() for p in session.approver.pending.values()]})


async def interrupt(request: Request) -> Response:
    """Stop the running turn; its open permission requests are refused; queued messages stay."""
    session = sessions_of(request).get(request.path_params["id"])
    return Json({"ok": session.interrupt(), "detail": {}})


async def fork(request: Request) -> Response:
    """A new live session with a copy of this one's conversation."""
    sessions = sessions_of(request)
    session = sessions.get(request.path_params["id"])
    body = await parse(request, m.ForkSession)
    if session.status != "idle":
        raise RequestProblem("fork a session while it is idle", 409)
    return Json(sessions.fork(session, body.workspace).summary(), status_code=201)


async def undo(request: Request) -> Response:
    """Undo the last turn (or turn N and every later one): files and conversation, as `/undo`."""
    session = sessions_of(request).get(request.path_params["id"])
    body = await parse(request, m.Undo)
    if session.status != "idle" or session.inbox:
        raise RequestProblem("undo while the session is idle (interrupt it first)", 409)
    done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    session.submit(Job("undo", args=body.model_dump(), done=done))
    return Json({"ok": True, "detail": await done})


async def explore(request: Request) -> Response:
    """Queue an exploration: the prompt in N branches, verified, the chosen one applied."""
    session = sessions_of(request).get(request.path_params["id"])
    body = await parse(request, m.Explore)
    args = {"n": body.n, "verify": body.verify, "pick": body.pick}
    try:
        place = session.submit(Job("explore", body.text, args))
    except QueueFull as exc:
        raise RequestProblem(str(exc), 429) from None
    return Json({"queued": place, "steered": False}, status_code=202)


async def diff(request: Request) -> Response:
    """The files this session changed, as one unified diff (one turn's with `turn=N`)."""
    session = sessions_of(request).get(request.path_params["id"])
    turn_arg = request.query_params.get("turn")
    if turn_arg is not None and not turn_arg.isdigit():
        raise RequestProblem("turn must be a number")
    try:
        text = await asyncio.to_thread(session.diff, int(turn_arg) if turn_arg else None)
    except LookupError as exc:
        raise RequestProblem(str(exc), 404) from None
    return Json({"diff": text})


async def settings(request: Request) -> Response:
    """Change the permission mode (never past the server's limit) or the model."""
    sessions = sessions_of(request)
    session = sessions.get(request.path_params["id"])
    body = await parse(request, m.ChangeSettings)
    if body.permission_mode is not None:
        session.agent.set_permission_mode(sessions.mode(body.permission_mode))
    if body.model is not None:
        session.agent.set_model(body.model)
    return Json(session.summary())


async def openapi(request: Request) -> Response:
    """This document."""
    return Json(request.app.state.openapi)


ROUTES: tuple[Spec, ...] = (
    Spec("GET", "/openapi.json", openapi),
    Spec("GET", "/sessions", list_all, answer=m.SessionList),
    Spec("POST", "/sessions", create, 201, m.CreateSession, m.Created),
    Spec("GET", "/sessions/{id}", state, answer=m.SessionState),
    Spec("DELETE", "/sessions/{id}", close, 204),
    Spec("POST", "/sessions/{id}/messages", send, 202, m.SendMessage, m.Accepted),
    Spec(
        "GET",
        "/sessions/{id}/events",
        events,
        query=(("after", "integer", "replay the kept events after this number first"),),
        media="text/event-stream",
    ),
    Spec("GET", "/sessions/{id}/permissions", pending),
    Spec("POST", "/sessions/{id}/permissions/{request_id}", answer, 200, m.Answer, m.Done),
    Spec("POST", "/sessions/{id}/interrupt", interrupt, answer=m.Done),
    Spec("POST", "/sessions/{id}/fork", fork, 201, m.ForkSession, m.Created),
    Spec("POST", "/sessions/{id}/undo", undo, 200, m.Undo, m.Done),
    Spec("POST", "/sessions/{id}/explore", explore, 202, m.Explore, m.Accepted),
    Spec("GET", "/sessions/{id}/diff", diff, answer=m.DiffText, query=(("turn", "integer", "one turn's changes"),)),
    Spec("POST", "/sessions/{id}/settings", settings, 200, m.ChangeSettings, m.Created),
)


def guarded(handler: Handler) -> Handler:
    """The handler with kimicode's errors as JSON problems (never a traceback to the client)."""

    async def run(request: Request) -> Response:
        from kimicode import CheckpointError, ConfigError, SessionError, UsageError

        try:
            return await handler(request)
        except RequestProblem as exc:
            return problem(exc.status, str(exc))
        except SessionError as exc:
            busy = type(exc).__name__ == "SessionBusyError"
            return problem(409 if busy else 404, str(exc))
        except (ConfigError, ValueError, TypeError) as exc:
            return problem(400, str(exc))
        except (UsageError, CheckpointError) as exc:
            return problem(409, str(exc))

    run.__doc__ = handler.__doc__
    return run


def routes() -> list[Route]:
    return [Route(s.path, guarded(s.handler), methods=[s.method]) for s in ROUTES]
