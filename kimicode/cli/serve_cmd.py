"""`kimicode serve` (the HTTP API, docs/serve.md) and `kimicode web` (the same server and its page in a browser).

Both load the ASGI stack (Starlette, uvicorn) only when they run: `kimicode -p` and `import kimicode` never
import it (entry.py routes these commands before the main application is loaded).
"""

from __future__ import annotations

import json
import sys
import threading
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from kimicode.config.choices import EFFORTS, PERMISSION_MODES, SANDBOX_MODES

Thinking = StrEnum("Thinking", [(v, v) for v in EFFORTS])  # type: ignore[misc]
Mode = StrEnum("Mode", [(v.replace("-", "_"), v) for v in PERMISSION_MODES])  # type: ignore[misc]
Sandbox = StrEnum("Sandbox", [(v.replace("-", "_"), v) for v in SANDBOX_MODES])  # type: ignore[misc]


def serve_command(
    host: Annotated[
        str, typer.Option("--host", help="Address to listen on (loopback unless --allow-remote).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port (0: a free one, named on stdout).")] = 0,
    allow_remote: Annotated[
        bool, typer.Option("--allow-remote", help="Allow a --host other machines can reach.")
    ] = False,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option("--allowed-host", metavar="NAME", help="Another Host name this server answers to (repeatable)."),
    ] = None,
    root: Annotated[
        list[Path] | None,
        typer.Option("--root", metavar="DIR", help="Workspaces must be inside one of these directories (repeatable)."),
    ] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="Default model (env KIMI_MODEL).")] = None,
    base_url: Annotated[str | None, typer.Option("--base-url", help="Endpoint (env KIMI_BASE_URL).")] = None,
    thinking: Annotated[Thinking | None, typer.Option("--thinking", help="Reasoning effort.")] = None,
    permission_mode: Annotated[
        Mode | None, typer.Option("--permission-mode", help="Sessions' mode when a request names none.")
    ] = None,
    max_permission_mode: Annotated[
        Mode, typer.Option("--max-permission-mode", help="The widest mode a request may ask for.")
    ] = "yolo",  # type: ignore[assignment]
    allow: Annotated[list[str] | None, typer.Option("--allow", metavar="RULE", help="Allow rule (repeatable).")] = None,
    deny: Annotated[list[str] | None, typer.Option("--deny", metavar="RULE", help="Deny rule (repeatable).")] = None,
    sandbox: Annotated[Sandbox | None, typer.Option("--sandbox", help="How bash is confined.")] = None,
    max_turns: Annotated[int | None, typer.Option("--max-turns", min=1, help="Model steps per message.")] = None,
    max_body: Annotated[int, typer.Option("--max-body", min=1024, help="Largest request body in bytes.")] = 1024 * 1024,
) -> None:
    """Serve kimicode over HTTP: sessions, events (SSE), approvals, resume, fork, undo (docs/serve.md).

    The first line on stdout is {"url": ..., "token": ...}; every request carries Authorization: Bearer TOKEN.
    """
    raise typer.Exit(_serve(locals(), browser=False))


def web_command(
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port (0: a free one).")] = 0,
    no_open: Annotated[bool, typer.Option("--no-open", help="Print the page's address instead of opening it.")] = False,
    root: Annotated[
        list[Path] | None,
        typer.Option("--root", metavar="DIR", help="Workspaces must be inside one of these directories (repeatable)."),
    ] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="Default model (env KIMI_MODEL).")] = None,
    permission_mode: Annotated[
        Mode | None, typer.Option("--permission-mode", help="Sessions' mode when none is chosen.")
    ] = None,
    max_permission_mode: Annotated[
        Mode, typer.Option("--max-permission-mode", help="The widest mode the page may ask for.")
    ] = "yolo",  # type: ignore[assignment]
) -> None:
    """Open kimicode's page in your browser: attach to the running `kimicode serve`, or start one here."""
    from kimicode.config.endpoint import kimicode_home
    from kimicode.config.serve_state import read_state
    from kimicode.serve.client import answers

    found = read_state(kimicode_home())
    if found is not None and answers(found["url"], found["token"]):
        _open(f"{found['url']}/#token={found['token']}", no_open)
        return
    raise typer.Exit(_serve({**locals(), "host": "127.0.0.1"}, browser=not no_open, show=no_open))


def _open(url: str, print_only: bool) -> None:
    if print_only:
        sys.stderr.write(f"kimicode web: {url}\n")
        return
    import webbrowser

    if not webbrowser.open(url):
        sys.stderr.write(f"kimicode web: open {url} in a browser\n")


class _Announce:
    """stdout for the server's first line; `kimicode web` also opens the page once the line is out."""

    def __init__(self, browser: bool, show: bool) -> None:
        self.browser, self.show = browser, show

    def write(self, text: str) -> int:
        sys.stdout.write(text)
        line = text.strip()
        if line.startswith("{"):
            data = json.loads(line)
            url = f"{data['url']}/#token={data['token']}"
            if self.browser or self.show:
                threading.Thread(target=_open, args=(url, self.show), daemon=True).start()
        return len(text)

    def flush(self) -> None:
        sys.stdout.flush()


def _serve(values: dict[str, Any], *, browser: bool, show: bool = False) -> int:
    from kimicode.serve.manager import ServeConfig
    from kimicode.serve.server import ServeError, run

    def value(name: str) -> Any:
        v = values.get(name)
        return v.value if isinstance(v, StrEnum) else v

    settings = {
        "model": value("model"),
        "base_url": value("base_url"),
        "thinking": value("thinking"),
        "permission_mode": value("permission_mode"),
        "allow": tuple(values.get("allow") or ()),
        "deny": tuple(values.get("deny") or ()),
        "sandbox": value("sandbox"),
        "max_turns": value("max_turns"),
    }
    settings = {k: v for k, v in settings.items() if v not in (None, ())}
    max_mode = value("max_permission_mode") or "yolo"
    config = ServeConfig(
        settings=settings, roots=tuple(Path(r).expanduser() for r in values.get("root") or ()), max_mode=str(max_mode)
    )
    try:
        return run(
            config,
            host=values.get("host") or "127.0.0.1",
            port=int(values.get("port") or 0),
            allow_remote=bool(values.get("allow_remote")),
            allowed_host=tuple(values.get("allowed_host") or ()),
            max_body=int(values.get("max_body") or 1024 * 1024),
            out=_Announce(browser, show),
        )
    except ServeError as exc:
        sys.stderr.write(f"kimicode serve: {exc}\n")
        return 2
    except KeyboardInterrupt:
        return 130


def run_serve(args: list[str]) -> None:
    """`kimicode serve|web ARGS` without loading the main application."""
    app = typer.Typer(
        add_completion=False,
        rich_markup_mode=None,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.command()(serve_command if args[:1] == ["serve"] else web_command)
    app(args=args[1:], prog_name=f"kimicode {args[0]}")
