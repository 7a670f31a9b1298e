"""The ASGI application of `kimicode serve`: the API routes, the page (`kimicode web`), behind the gate.

The page is three files shipped in the package (`static/`): plain HTML, CSS and JavaScript, no CDN, no
build step, served under a Content-Security-Policy that allows only this server (`'self'`), so it works
offline and no script from elsewhere can run in it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from importlib import resources

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from kimicode.serve.api import routes
from kimicode.serve.manager import ServeConfig, Sessions
from kimicode.serve.openapi import document
from kimicode.serve.security import MAX_BODY, Gate

STATIC = {
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
    "markdown.js": "text/javascript; charset=utf-8",
}
"""The page's files: only these names are served (no path is ever joined from a request)."""

PAGE_HEADERS = {
    "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}


def asset(name: str) -> bytes:
    return resources.files("kimicode.serve").joinpath("static", name).read_bytes()


async def page(request: Request) -> Response:
    return Response(asset("index.html"), media_type="text/html; charset=utf-8", headers=PAGE_HEADERS)


async def static(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in STATIC:
        return Response(b"not found", status_code=404, media_type="text/plain")
    return Response(asset(name), media_type=STATIC[name], headers=PAGE_HEADERS)


async def favicon(request: Request) -> Response:
    return Response(status_code=204)


def build_app(config: ServeConfig, token: str, hosts: frozenset[str], max_body: int = MAX_BODY) -> Gate:
    """The app behind its gate (`gate.app.state.sessions` holds the live sessions, closed at shutdown)."""
    from kimicode._version import __version__

    sessions = Sessions(config)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await sessions.close_all()

    inner = Starlette(
        routes=[
            *routes(),
            Route("/", page),
            Route("/index.html", page),
            Route("/favicon.ico", favicon),
            Route("/static/{name}", static),
        ],
        lifespan=lifespan,
    )
    inner.state.sessions = sessions
    inner.state.openapi = document(__version__)
    return Gate(inner, token, hosts, max_body)
