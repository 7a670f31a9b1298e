"""A small typed client for `kimicode serve` (httpx), for scripts and tests.

    client = ServeClient.start_line('{"url": "http://127.0.0.1:8123", "token": "..."}')
    sid = client.create("/path/to/project", permission_mode="default")
    client.send(sid, "Run the tests and fix what fails.")
    for event in client.events(sid):
        if event["type"] == "PermissionRequested":
            client.answer(sid, event["request_id"], "allow")
        elif event["type"] == "TurnFinished":
            break

Errors come back as `ServeClientError` with the server's status and message.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any, Literal

import httpx2 as httpx

Decision = Literal["allow", "allow_always", "deny"]


class ServeClientError(Exception):
    """The server refused a request: `status` and its message (status 0: the server could not be reached)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


class ServeClient:
    """One server's API. `url` and `token` are what `kimicode serve` printed on its first line."""

    def __init__(self, url: str, token: str, *, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.http = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx.Timeout(timeout, read=None),
            trust_env=False,
        )

    @classmethod
    def start_line(cls, line: str, **kwargs: Any) -> ServeClient:
        """A client from the server's first line of stdout."""
        data = json.loads(line)
        return cls(data["url"], data["token"], **kwargs)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> ServeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(
        self, method: str, path: str, body: dict[str, Any] | None = None, params: dict[str, Any] | None = None
    ) -> Any:
        """One call; the decoded JSON answer (None for 204). Raises ServeClientError when refused."""
        try:
            response = self.http.request(method, path, json=body, params=params)
        except httpx.TransportError as exc:  # nothing answers there (any more): said as a refusal, status 0
            raise ServeClientError(0, f"cannot reach the server at {self.url}: {exc}") from None
        if response.status_code >= 400:
            try:
                message = str(response.json().get("error", response.text))
            except ValueError:
                message = response.text
            raise ServeClientError(response.status_code, message)
        return response.json() if response.status_code != 204 and response.content else None

    # -- the API ---------------------------------------------------------------------------------------

    def openapi(self) -> dict[str, Any]:
        return dict(self.request("GET", "/openapi.json"))

    def sessions(self) -> dict[str, Any]:
        """`{"sessions": [live ...], "saved": [resumable ...]}`."""
        return dict(self.request("GET", "/sessions"))

    def create(self, workspace: str, *, permission_mode: str | None = None, model: str | None = None) -> str:
        """A new session in `workspace`; its id."""
        body = {"workspace": workspace, "permission_mode": permission_mode, "model": model}
        return str(self.request("POST", "/sessions", {k: v for k, v in body.items() if v is not None})["id"])

    def resume(self, session_id: str, *, fork: bool = False, permission_mode: str | None = None) -> str:
        """A saved session continued (or a copy of it with `fork`); the live session's id."""
        body: dict[str, Any] = {"resume": session_id, "fork": fork}
        if permission_mode is not None:
            body["permission_mode"] = permission_mode
        return str(self.request("POST", "/sessions", body)["id"])

    def state(self, session_id: str) -> dict[str, Any]:
        """Status, history, usage, cost, context, turns, queue and open permission requests."""
        return dict(self.request("GET", f"/sessions/{session_id}"))

    def send(self, session_id: str, text: str, *, steer: bool = False) -> dict[str, Any]:
        """Queue a message (or steer the running turn); `{"queued": place, "steered": bool}`."""
        return dict(self.request("POST", f"/sessions/{session_id}/messages", {"text": text, "steer": steer}))

    def answer(self, session_id: str, request_id: str, decision: Decision, reason: str = "") -> None:
        self.request(
            "POST", f"/sessions/{session_id}/permissions/{request_id}", {"decision": decision, "reason": reason}
        )

    def pending(self, session_id: str) -> list[dict[str, Any]]:
        return list(self.request("GET", f"/sessions/{session_id}/permissions")["pending"])

    def interrupt(self, session_id: str) -> bool:
        return bool(self.request("POST", f"/sessions/{session_id}/interrupt")["ok"])

    def fork(self, session_id: str, workspace: str = "shared") -> str:
        return str(self.request("POST", f"/sessions/{session_id}/fork", {"workspace": workspace})["id"])

    def undo(
        self,
        session_id: str,
        turn: int | None = None,
        *,
        files: bool = True,
        conversation: bool = True,
        force: bool = False,
    ) -> dict[str, Any]:
        body = {"turn": turn, "files": files, "conversation": conversation, "force": force}
        return dict(self.request("POST", f"/sessions/{session_id}/undo", body)["detail"])

    def explore(
        self, session_id: str, text: str, *, n: int = 2, verify: str | None = None, pick: str = "auto"
    ) -> dict[str, Any]:
        body = {"text": text, "n": n, "verify": verify, "pick": pick}
        return dict(self.request("POST", f"/sessions/{session_id}/explore", body))

    def diff(self, session_id: str, turn: int | None = None) -> str:
        params = {"turn": turn} if turn is not None else None
        return str(self.request("GET", f"/sessions/{session_id}/diff", params=params)["diff"])

    def settings(
        self, session_id: str, *, permission_mode: str | None = None, model: str | None = None
    ) -> dict[str, Any]:
        body = {k: v for k, v in {"permission_mode": permission_mode, "model": model}.items() if v is not None}
        return dict(self.request("POST", f"/sessions/{session_id}/settings", body))

    def close_session(self, session_id: str) -> None:
        self.request("DELETE", f"/sessions/{session_id}")

    # -- events ----------------------------------------------------------------------------------------

    def events(self, session_id: str, after: int | None = None) -> Iterator[dict[str, Any]]:
        """The session's events as they come (server-sent events, decoded); runs until the server ends the
        stream or the caller stops iterating. A stream the server cut off because this reader fell behind
        (`Overflow`) is reopened after the last event received, so nothing kept is missed."""
        while True:
            last = None
            for event in self._stream(session_id, after):
                if event.get("type") == "Overflow":
                    last = int(event["after"])
                    break
                yield event
            if last is None:
                return
            after = last

    def _stream(self, session_id: str, after: int | None) -> Iterator[dict[str, Any]]:
        params = {"after": after} if after is not None else None
        with self.http.stream("GET", f"/sessions/{session_id}/events", params=params) as response:
            if response.status_code >= 400:
                response.read()
                raise ServeClientError(response.status_code, response.text)
            data: list[str] = []
            for line in response.iter_lines():
                if line.startswith("data:"):
                    data.append(line[5:].removeprefix(" "))
                elif not line and data:
                    yield json.loads("\n".join(data))
                    data = []

    def until(
        self,
        session_id: str,
        stop: Callable[[dict[str, Any]], bool],
        *,
        after: int | None = None,
        on_event: Callable[[dict[str, Any]], None] | None = None,
    ) -> list[dict[str, Any]]:
        """Follow the events until `stop(event)` is true; every event seen, that one last."""
        seen: list[dict[str, Any]] = []
        for event in self.events(session_id, after=after):
            seen.append(event)
            if on_event is not None:
                on_event(event)
            if stop(event):
                break
        return seen

    def run(
        self, session_id: str, text: str, *, decide: Callable[[dict[str, Any]], Decision] | None = None
    ) -> list[dict[str, Any]]:
        """Send `text` and follow the session until its turn ends (TurnFinished), answering each permission
        request with `decide(request)` (default: deny); the events of the turn."""
        after = self.state(session_id)["seq"]
        self.send(session_id, text)

        def on_event(event: dict[str, Any]) -> None:
            if event["type"] == "PermissionRequested":
                self.answer(session_id, event["request_id"], decide(event) if decide else "deny")

        return self.until(session_id, lambda e: e["type"] == "TurnFinished", after=after, on_event=on_event)


def answers(url: str, token: str) -> bool:
    """True when a server at `url` accepts `token` (a state file left by a stopped server does not)."""
    try:
        with ServeClient(url, token, timeout=3) as client:
            client.sessions()
        return True
    except (httpx.HTTPError, ServeClientError, OSError, ValueError):
        return False
