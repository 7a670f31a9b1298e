"""`kimicode attach [SESSION_ID] [--url URL]`: follow a session of a running `kimicode serve` from this terminal.

The server is the running one `KIMICODE_HOME/serve.json` names (as `kimicode web` finds it), or `--url` (its
token then from `KIMICODE_SERVE_TOKEN`: a token on the command line would show in `ps`). The session is the
one named (an id or a unique prefix; a saved session not live in the server is resumed there), or the
server's only live session. Routed by entry.py before the main application loads.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import threading
from typing import IO, Annotated, Any, cast

import typer

from kimicode.cli.attach import Follower, LineWriter, pump
from kimicode.serve.client import ServeClient, ServeClientError

TOKEN_ENV = "KIMICODE_SERVE_TOKEN"


class AttachError(Exception):
    """No server or session to attach to (exit 2, this message)."""


def server(url: str | None) -> tuple[str, str]:
    """The server's URL and token: `--url` with `KIMICODE_SERVE_TOKEN`, else the running server's state."""
    from kimicode.config.endpoint import kimicode_home
    from kimicode.config.serve_state import read_state, state_path

    home = kimicode_home()
    state = read_state(home)
    token = os.environ.get(TOKEN_ENV)
    if url is not None:
        url = url.rstrip("/")
        if token is None and state is not None and str(state["url"]).rstrip("/") == url:
            token = str(state["token"])
        if not token:
            raise AttachError(f"no token for {url}: set {TOKEN_ENV} to the token `kimicode serve` printed")
        return url, token
    if state is None:
        raise AttachError(
            f"no running `kimicode serve` ({state_path(home)} is missing): start one with "
            "`kimicode serve` or `kimicode web`, or name one with --url"
        )
    return str(state["url"]), token or str(state["token"])


def _the_live_one(live: list[str]) -> str:
    """The only live session; a clear error when there are none or several."""
    if len(live) == 1:
        return live[0]
    if not live:
        raise AttachError(
            "the server has no live session: start one in the page (`kimicode web`) or name a "
            "saved one: kimicode attach ID"
        )
    raise AttachError(
        "the server has several live sessions; name one: " + ", ".join(f"kimicode attach {i}" for i in live)
    )


def _matching(ids: list[str], wanted: str) -> list[str]:
    """The id `wanted` names exactly, else those it is the start of."""
    return [i for i in ids if i == wanted] or [i for i in ids if i.startswith(wanted)]


def choose_session(client: ServeClient, wanted: str | None) -> str:
    """The live session `wanted` names (an id or a unique prefix; a saved one is resumed in the server), or
    the only live one."""
    listing = client.sessions()
    live = [str(s["id"]) for s in listing.get("sessions") or []]
    if wanted is None:
        return _the_live_one(live)
    found = _matching(live, wanted)
    if len(found) == 1:
        return found[0]
    if len(found) > 1:
        raise AttachError(f"{wanted!r} is the start of several live sessions: {', '.join(found)}")
    found = _matching([str(s["id"]) for s in listing.get("saved") or []], wanted)
    if len(found) != 1:
        raise AttachError(
            f"no session {wanted!r} in the server at {client.url}" + (f" (live: {', '.join(live)})" if live else "")
        )
    sys.stderr.write(f"kimicode attach: resuming saved session {found[0]} in the server\n")
    return client.resume(found[0])


def attach_command(
    session: Annotated[
        str | None, typer.Argument(metavar="SESSION_ID", help="The session (default: the only one).")
    ] = None,
    url: Annotated[
        str | None, typer.Option("--url", help=f"The server (default: the running one; its token from {TOKEN_ENV}).")
    ] = None,
    reasoning: Annotated[bool, typer.Option("--reasoning", help="Show the model's reasoning as it streams.")] = False,
) -> None:
    """Follow a session of the running `kimicode serve` in this terminal, beside the page (docs/serve.md)."""
    try:
        address, token = server(url)
        client = ServeClient(address, token)
        session_id = choose_session(client, session)
    except (AttachError, ServeClientError) as exc:
        sys.stderr.write(f"kimicode attach: {exc.message if isinstance(exc, ServeClientError) else exc}\n")
        raise typer.Exit(2) from None
    raise typer.Exit(asyncio.run(follow(client, ServeClient(address, token), session_id, reasoning)))


def make_console() -> Any:
    from rich.console import Console

    from kimicode.ui.console import plain_output

    plain = plain_output()
    return Console(
        file=cast(IO[str], LineWriter()),
        width=shutil.get_terminal_size().columns,
        force_terminal=not plain,
        color_system=None if plain else "auto",
        highlight=False,
        emoji=False,
        markup=False,
    )


class Screen:
    """The attached terminal: the follower under a prompt_toolkit prompt, the events handed to it on the loop
    from the reader thread."""

    def __init__(self, follower: Follower, stream: ServeClient) -> None:
        from prompt_toolkit import PromptSession

        self.follower, self.stream = follower, stream
        self.loop = asyncio.get_running_loop()
        # the line typed is erased once sent: the server's TurnStarted (or Queued) says it, for every client
        self.prompt: PromptSession[str] = PromptSession(key_bindings=keys(follower), erase_when_done=True)
        self.gone: list[str] = []
        """Why the events stopped, when not because the session closed (the server stopped, the link broke)."""

    def ended(self, reason: str | None) -> None:
        if reason is not None:
            self.gone.append(reason)
        if self.prompt.app.is_running:
            self.prompt.app.exit(exception=EOFError())

    def arrived(self, event: dict[str, Any]) -> None:
        self.follower.handle(event)
        if self.follower.closed:
            self.ended(None)
        elif self.prompt.app.is_running:
            self.prompt.app.invalidate()  # the prompt says whether a question is open

    def deliver(self, event: dict[str, Any]) -> None:
        """From the reader thread."""
        self.loop.call_soon_threadsafe(self.arrived, event)

    def read(self, after: int) -> None:
        reason = pump(self.stream, self.follower.session_id, after, self.deliver)
        if reason is not None:
            self.loop.call_soon_threadsafe(self.ended, reason)

    async def run(self, after: int) -> None:
        """Read lines until Ctrl-D, /exit, the session's end or the server's."""
        threading.Thread(target=self.read, args=(after,), name="kimicode-attach-events", daemon=True).start()
        while not self.follower.closed and not self.gone:
            try:
                line = await self.prompt.prompt_async(self.follower.prompt)
            except (EOFError, KeyboardInterrupt):
                return
            if not self.follower.submit(line):
                return


async def follow(client: ServeClient, stream: ServeClient, session_id: str, reasoning: bool) -> int:
    """Follow the session under a prompt until Ctrl-D, /exit or the session's end; the exit code (1 when the
    server went away)."""
    from prompt_toolkit.patch_stdout import patch_stdout

    follower = Follower(client, session_id, make_console(), show_reasoning=reasoning)
    screen = Screen(follower, stream)
    with patch_stdout(raw=True):
        try:
            after = follower.open()
        except ServeClientError as exc:
            sys.stderr.write(f"kimicode attach: {exc.message}\n")
            return 2
        await screen.run(after)
    stream.close()
    for reason in screen.gone:
        sys.stderr.write(f"kimicode attach: {reason}\n")
    if not screen.gone:
        goes_on = " (closed)" if follower.closed else f"; the session goes on in the server ({client.url})"
        sys.stderr.write(f"kimicode attach: detached from {session_id}{goes_on}\n")
    client.close()
    return 1 if screen.gone else 0


def keys(follower: Follower) -> Any:
    """Ctrl-C: clear the line, or (on an empty line) interrupt the running turn; Ctrl-S: steer with the line."""
    from prompt_toolkit.key_binding import KeyBindings

    bindings = KeyBindings()

    @bindings.add("c-c")
    def _interrupt(event: Any) -> None:
        buffer = event.app.current_buffer
        if buffer.text:
            buffer.reset()
        else:
            follower.interrupt()

    @bindings.add("c-s")
    def _steer(event: Any) -> None:
        buffer = event.app.current_buffer
        text = buffer.text
        buffer.reset()
        follower.steer(text.strip())

    return bindings


def run_attach(args: list[str]) -> None:
    """`kimicode attach ARGS` without loading the main application."""
    app = typer.Typer(
        add_completion=False,
        rich_markup_mode=None,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.command()(attach_command)
    app(args=args, prog_name="kimicode attach")
