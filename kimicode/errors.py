"""Every exception kimicode raises on purpose, under one root: `except kimicode.KimicodeError`.

The classes keep the bases they had before the hierarchy existed (`SessionError` is still a
`ValueError`, a busy agent still raises a `RuntimeError`), so older `except` clauses keep working.
Failed model requests are `ModelError`s; constructing one picks the subclass from its `kind` and
HTTP status, so `except kimicode.RateLimitError` and `except LLMError` catch the same object.

This module imports nothing from kimicode: every layer may raise these.
"""

from __future__ import annotations

from typing import Any


class KimicodeError(Exception):
    """The root of every error kimicode raises on purpose (anything else is a bug)."""


class ConfigError(KimicodeError):
    """The configuration is unusable: no API key, a malformed config file, a bad setting."""


class SessionError(KimicodeError, ValueError):
    """A saved session cannot be used: unknown or ambiguous id, unreadable log, locked by another run."""


class CheckpointError(KimicodeError, RuntimeError):
    """A snapshot, restore or rewind that could not be done (nothing to rewind, files changed outside
    kimicode, a full disk, checkpoints disabled); `RestoreConflict` names the files."""


class ToolError(KimicodeError):
    """Raised by a tool to report a failure to the model as an error result (not a crash)."""


class ToolTimeout(ToolError):
    """A tool call ran longer than its timeout (`@tool(timeout=...)` or `Agent(tool_timeout=...)`)."""


class UsageError(KimicodeError, RuntimeError):
    """The library was called in a way that cannot work (e.g. `run_sync()` inside a running event loop)."""


class TurnError(KimicodeError):
    """Raised by `RunResult.raise_for_status()` for a turn that did not succeed and was not a model error.

    `result` is the `RunResult`; `status` its status (`max_turns`, `repeat_limit`, `interrupted`, or
    `error` for an internal failure).
    """

    def __init__(self, message: str, status: str, result: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.result = result


class ModelError(KimicodeError):
    """A failed model request. `kind` decides retries and the exit code; `message` is for humans.

    `kind` is one of `transient`, `auth`, `quota`, `context_length`, `bad_request`, `protocol`;
    `status` is the HTTP status when there was one; `retry_after` the seconds the server asked for.
    Constructing a ModelError (or `kimicode.llm.errors.LLMError`, its subclass) returns an instance of
    the class that matches the kind (see `error_class`): `except LLMError` and `except RateLimitError`
    catch the same object.
    """

    _specific = False  # True on the classes picked for a kind
    default_kind: str | None = None
    """The kind of `RateLimitError("message")`, made directly (ModelError itself needs one)."""
    default_status: int | None = None
    message: str
    kind: str
    status: int | None
    retry_after: float | None
    error_type: str | None

    def __new__(cls, *args: Any, **kwargs: Any) -> ModelError:
        if not cls.__dict__.get("_specific", False):
            kind = kwargs.get("kind", args[1] if len(args) > 1 else None)
            status = kwargs.get("status", args[2] if len(args) > 2 else None)
            target = error_class(str(kind), status if isinstance(status, int) else None)
            cls = cls if issubclass(cls, target) else (target if cls is ModelError else _both(cls, target))
        return super().__new__(cls)

    def __init__(
        self,
        message: str,
        kind: str | None = None,
        status: int | None = None,
        retry_after: float | None = None,
        error_type: str | None = None,
    ) -> None:
        if kind is None:
            kind = type(self).default_kind
            if kind is None:
                raise TypeError(
                    "ModelError(message, kind) needs a kind (transient, auth, quota, context_length, "
                    "bad_request, protocol), or use its subclass: RateLimitError(message), ..."
                )
            status = type(self).default_status if status is None else status
        super().__init__(message)
        self.message, self.kind, self.status = message, kind, status
        self.retry_after, self.error_type = retry_after, error_type

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, kind={self.kind!r}, status={self.status!r})"

    def __reduce__(self) -> tuple[Any, ...]:  # picklable across processes (e.g. a worker pool)
        root = next(c for c in type(self).__mro__ if not c.__dict__.get("_specific", False))
        args = (self.message, self.kind, self.status, self.retry_after, self.error_type)
        return (root, args, dict(self.__dict__))

    @property
    def transient(self) -> bool:
        """True when retrying the same request may succeed."""
        return self.kind == "transient"


_BOTH: dict[tuple[type, type], type] = {}


def _both(base: type[ModelError], kind_cls: type[ModelError]) -> type[ModelError]:
    """A subclass of `base` (e.g. LLMError) and of the class for the kind, made once per pair."""
    made = _BOTH.get((base, kind_cls))
    if made is None:
        made = type(kind_cls.__name__, (base, kind_cls), {"_specific": True, "__module__": base.__module__})
        _BOTH[(base, kind_cls)] = made
    return made


class AuthError(ModelError):
    """401/403: the key is missing, wrong, or not allowed to use this model."""

    _specific = True
    default_kind = "auth"


class QuotaError(ModelError):
    """The account's quota or balance is exhausted (not retried)."""

    _specific = True
    default_kind = "quota"


class RateLimitError(ModelError):
    """429 without a quota message: too many requests for now (retried after `retry_after`)."""

    _specific = True
    default_kind = "transient"
    default_status = 429


class ContextLengthError(ModelError):
    """The request is longer than the model's context window (the agent compacts and retries once)."""

    _specific = True
    default_kind = "context_length"


class ServerUnavailableError(ModelError):
    """The server failed, timed out, could not be reached, or broke the stream (retried)."""

    _specific = True
    default_kind = "transient"


class BadRequestError(ModelError):
    """The server refused the request as invalid (not retried)."""

    _specific = True
    default_kind = "bad_request"


class ProtocolError(ModelError):
    """The server answered something that is not a chat-completions stream."""

    _specific = True
    default_kind = "protocol"


_BY_KIND: dict[str, type[ModelError]] = {
    "auth": AuthError,
    "quota": QuotaError,
    "context_length": ContextLengthError,
    "bad_request": BadRequestError,
    "protocol": ProtocolError,
}


def error_class(kind: str, status: int | None = None) -> type[ModelError]:
    """The ModelError subclass for a kind (and status: a transient 429 is a RateLimitError)."""
    if kind == "transient":
        return RateLimitError if status == 429 else ServerUnavailableError
    return _BY_KIND.get(kind, ModelError)


class ErrorInfo(str):
    """Why a turn failed: the message (it *is* the string, so `result.error` reads as before) plus
    `kind` (as `error_kind`), the HTTP `status` and the server's `retry_after` seconds when known."""

    kind: str
    status: int | None
    retry_after: float | None
    error_type: str | None

    def __new__(
        cls,
        message: str,
        kind: str = "internal",
        status: int | None = None,
        retry_after: float | None = None,
        error_type: str | None = None,
    ) -> ErrorInfo:
        self = super().__new__(cls, message)
        self.kind = kind
        self.status = status
        self.retry_after = retry_after
        self.error_type = error_type
        return self

    def __getnewargs__(self) -> tuple[Any, ...]:  # type: ignore[override]
        return (str(self), self.kind, self.status, self.retry_after, self.error_type)

    @property
    def message(self) -> str:
        return str(self)

    def __repr__(self) -> str:
        return f"ErrorInfo({str(self)!r}, kind={self.kind!r}, status={self.status!r}, retry_after={self.retry_after!r})"

    @classmethod
    def of(cls, err: ModelError) -> ErrorInfo:
        return cls(err.message, err.kind, err.status, err.retry_after, err.error_type)

    def exception(self) -> KimicodeError:
        """The exception this failure corresponds to (a ModelError subclass for a model failure)."""
        if self.kind in ("internal", "hook"):
            return TurnError(str(self), "error")
        return ModelError(str(self), self.kind, self.status, self.retry_after, self.error_type)


__all__ = [
    "AuthError",
    "BadRequestError",
    "CheckpointError",
    "ConfigError",
    "ContextLengthError",
    "ErrorInfo",
    "KimicodeError",
    "ModelError",
    "ProtocolError",
    "QuotaError",
    "RateLimitError",
    "ServerUnavailableError",
    "SessionError",
    "ToolError",
    "ToolTimeout",
    "TurnError",
    "UsageError",
    "error_class",
]


def out_of_descriptors(exc: BaseException | None) -> str | None:
    """When `exc` (or what caused it) is the process running out of file descriptors (EMFILE, ENFILE): the
    sentence saying so and what to do; None otherwise. It must not read as an unreachable server or an
    unwritable home."""
    import errno

    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE):
            try:
                import resource

                limit = f" (the limit is {resource.getrlimit(resource.RLIMIT_NOFILE)[0]}: `ulimit -n`)"
            except (ImportError, OSError, ValueError):
                limit = ""
            return (
                f"this process has run out of file descriptors: too many open files{limit}. Close the agents "
                "no longer used (`await agent.aclose()`), or raise the limit"
            )
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None
