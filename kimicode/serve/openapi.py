"""The OpenAPI 3.1 document, generated from the route table (`kimicode.serve.api.ROUTES`) and the pydantic
models of the bodies (`kimicode.serve.models`): a route exists in the document exactly when it exists in
the app, with the schema its handler validates against."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel

from kimicode.serve.api import ROUTES, Spec
from kimicode.serve.models import Problem

REF = "#/components/schemas/{model}"


def schema_ref(model: type[BaseModel], components: dict[str, Any]) -> dict[str, Any]:
    """A `$ref` to `model`'s schema, adding it (and the models it uses) to `components`."""
    schema = model.model_json_schema(ref_template=REF)
    for name, sub in schema.pop("$defs", {}).items():
        components[name] = sub
    components[model.__name__] = schema
    return {"$ref": REF.format(model=model.__name__)}


def operation(spec: Spec, components: dict[str, Any]) -> dict[str, Any]:
    doc = (spec.handler.__doc__ or "").strip()
    summary, _, description = doc.partition("\n")
    op: dict[str, Any] = {
        "operationId": spec.handler.__name__,
        "summary": summary or spec.path,
        "security": [{"bearer": []}],
    }
    if description.strip():
        op["description"] = description.strip()
    params = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in re.findall(r"{(\w+)}", spec.path)
    ]
    params += [
        {"name": name, "in": "query", "required": False, "schema": {"type": kind}, "description": text}
        for name, kind, text in spec.query
    ]
    if params:
        op["parameters"] = params
    if spec.body is not None:
        op["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": schema_ref(spec.body, components)}},
        }
    ok: dict[str, Any] = {"description": "success"}
    if spec.media == "text/event-stream":
        ok["content"] = {
            "text/event-stream": {
                "schema": {
                    "type": "string",
                    "description": (
                        "server-sent events; each `data` is a JSON object with a `type` named as in kimicode.events"
                    ),
                }
            }
        }
    elif spec.status != 204:
        schema = schema_ref(spec.answer, components) if spec.answer is not None else {"type": "object"}
        ok["content"] = {"application/json": {"schema": schema}}
    problem = {"description": "refused", "content": {"application/json": {"schema": schema_ref(Problem, components)}}}
    op["responses"] = {str(spec.status): ok, "400": problem, "401": problem, "404": problem, "409": problem}
    return op


def document(version: str) -> dict[str, Any]:
    """The OpenAPI 3.1 document of the API."""
    components: dict[str, Any] = {}
    paths: dict[str, Any] = {}
    for spec in ROUTES:
        paths.setdefault(spec.path, {})[spec.method.lower()] = operation(spec, components)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "kimicode serve",
            "version": version,
            "description": "kimicode's agent over HTTP: sessions, their events as server-sent events, "
            "approvals, interrupts, resume, fork, undo, branches. See docs/serve.md.",
        },
        "servers": [{"url": "/"}],
        "paths": paths,
        "components": {"schemas": components, "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
    }
