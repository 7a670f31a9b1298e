"""The OpenAPI document is generated from the route table: it validates as OpenAPI 3.1, lists every route
the app answers, and its request schemas are the ones the handlers validate with."""

from __future__ import annotations

import re

from openapi_spec_validator import validate
from starlette.routing import Route

from kimicode.serve.api import ROUTES, routes
from kimicode.serve.client import ServeClient, ServeClientError
from kimicode.serve.server import ThreadedServer


def test_the_document_validates_and_lists_every_route(client: ServeClient, live: ThreadedServer) -> None:
    doc = client.openapi()
    assert doc["openapi"] == "3.1.0"
    validate(doc)
    listed = {(method.upper(), path) for path, item in doc["paths"].items() for method in item}
    served = {
        (method, route.path)
        for route in routes()
        if isinstance(route, Route)
        for method in (route.methods or ())
        if method != "HEAD"
    }
    assert listed == served == {(s.method, s.path) for s in ROUTES}
    for needed in [
        ("GET", "/openapi.json"),
        ("GET", "/sessions"),
        ("POST", "/sessions"),
        ("GET", "/sessions/{id}"),
        ("POST", "/sessions/{id}/messages"),
        ("GET", "/sessions/{id}/events"),
        ("POST", "/sessions/{id}/permissions/{request_id}"),
        ("POST", "/sessions/{id}/interrupt"),
    ]:
        assert needed in listed
    for path, item in doc["paths"].items():
        for op in item.values():
            names = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
            assert names == set(re.findall(r"{(\w+)}", path))
            assert op["security"] == [{"bearer": []}]


def test_request_schemas_are_what_the_server_enforces(client: ServeClient, live: ThreadedServer) -> None:
    doc = client.openapi()
    create = doc["components"]["schemas"]["CreateSession"]
    assert create["additionalProperties"] is False
    assert set(create["properties"]) == {"workspace", "permission_mode", "model", "resume", "fork"}
    answer = doc["components"]["schemas"]["Answer"]
    assert answer["properties"]["decision"]["enum"] == ["allow", "allow_always", "deny"]
    try:
        client.request("POST", "/sessions", {"workspace": "/", "colour": "blue"})
    except ServeClientError as exc:
        assert exc.status == 422 and "colour" in exc.message
    else:
        raise AssertionError("an unknown field was accepted")
