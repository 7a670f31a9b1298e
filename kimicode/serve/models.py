"""The request and response bodies of the HTTP API, as pydantic models: the handlers validate with them
and the OpenAPI document takes its schemas from them, so the two cannot disagree."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Mode = Literal["plan", "default", "accept-edits", "yolo"]


class Body(BaseModel):
    """Unknown fields are refused: a typo is an error, not a silently ignored setting."""

    model_config = ConfigDict(extra="forbid")


class CreateSession(Body):
    """A new session in `workspace`, or (`resume`) a saved one continued, or forked with `fork`."""

    workspace: str | None = Field(None, max_length=4096, description="absolute path of an existing directory")
    permission_mode: Mode | None = Field(None, description="default: the server's --permission-mode")
    model: str | None = Field(None, max_length=200)
    resume: str | None = Field(None, max_length=80, description="a saved session's id to continue")
    fork: bool = Field(False, description="with resume: continue a copy, leaving the saved one as it is")


class SendMessage(Body):
    """A message for the session: queued behind the running turn, or (`steer`) sent into it."""

    text: str = Field(..., min_length=1, max_length=1_000_000)
    steer: bool = Field(False, description="send into the running turn (after its current step's tool results)")


class Answer(Body):
    """The answer to a permission request."""

    decision: Literal["allow", "allow_always", "deny"]
    reason: str = Field("", max_length=2000, description="with deny: passed on to the model")


class ForkSession(Body):
    workspace: Literal["shared", "worktree", "copy"] = "shared"


class Undo(Body):
    """Undo turn `turn` and every turn after it (default: the last turn)."""

    turn: int | None = Field(None, ge=1)
    files: bool = True
    conversation: bool = True
    force: bool = False


class Explore(Body):
    """Run `text` in `n` branches at once, verify each with `verify`, apply the chosen one."""

    text: str = Field(..., min_length=1, max_length=1_000_000)
    n: int = Field(2, ge=2, le=8)
    verify: str | None = Field(None, max_length=10_000)
    pick: Literal["auto", "first-verified", "smallest", "cheapest"] = "auto"


class ChangeSettings(Body):
    permission_mode: Mode | None = None
    model: str | None = Field(None, max_length=200)


class Created(BaseModel):
    id: str
    workspace: str
    model: str
    permission_mode: str
    status: str


class Accepted(BaseModel):
    queued: int = Field(..., description="place in the queue (0: it runs now)")
    steered: bool = False


class Done(BaseModel):
    ok: bool
    detail: dict[str, Any] = Field(default_factory=dict)


class DiffText(BaseModel):
    diff: str


class SessionList(BaseModel):
    sessions: list[dict[str, Any]]
    saved: list[dict[str, Any]]


class SessionState(BaseModel):
    """Status, history, usage, cost, context and the rest of one session."""

    id: str
    workspace: str
    model: str
    permission_mode: str
    status: Literal["idle", "running", "waiting", "closed"]
    seq: int = Field(..., description="the last event's number: follow the events with ?after=seq")
    history: list[dict[str, Any]]
    usage: dict[str, int]
    cost: dict[str, Any]
    context: dict[str, Any]
    turn_records: list[dict[str, Any]]
    queue: list[dict[str, Any]]
    pending_permissions: list[dict[str, Any]]
    explorations: list[dict[str, Any]]
    turns: int
    queued: int
    title: str


class Problem(BaseModel):
    error: str
    status: int
