"""The OpenAPI 3.1 document of the HTTP API, generated, never written by hand.

Paths, parameters and answers come from the route table (``routes.ROUTES``); every
schema comes from the proto descriptors, field by field, in the canonical JSON
mapping: lowerCamelCase names, enums by name, 64-bit integers as strings (numbers
are accepted too), ``Timestamp`` as RFC 3339, ``Duration`` as seconds with an ``s``,
bytes as base64, maps as objects. A proto change is an API document change, with
nothing to keep in step by hand.
"""

from __future__ import annotations

import re
from typing import Any

from google.protobuf import descriptor_pool
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from shardcron.coordinator.http.routes import ROUTES, Route

ERROR_SCHEMA = "Error"
_WELL_KNOWN: dict[str, dict[str, Any]] = {
    "google.protobuf.Timestamp": {"type": "string", "format": "date-time"},
    "google.protobuf.Duration": {"type": "string", "pattern": r"^-?[0-9]+(\.[0-9]+)?s$"},
}
_INT64 = {
    FieldDescriptor.TYPE_INT64,
    FieldDescriptor.TYPE_UINT64,
    FieldDescriptor.TYPE_SINT64,
    FieldDescriptor.TYPE_FIXED64,
    FieldDescriptor.TYPE_SFIXED64,
}
_INT32 = {
    FieldDescriptor.TYPE_INT32,
    FieldDescriptor.TYPE_UINT32,
    FieldDescriptor.TYPE_SINT32,
    FieldDescriptor.TYPE_FIXED32,
    FieldDescriptor.TYPE_SFIXED32,
}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


class _Schemas:
    """The component schemas, one per message reached from the routes."""

    def __init__(self) -> None:
        self.components: dict[str, Any] = {}

    def message(self, descriptor: Descriptor) -> dict[str, Any]:
        name = descriptor.full_name
        if name in _WELL_KNOWN:
            return dict(_WELL_KNOWN[name])
        if name not in self.components:
            self.components[name] = {}  # placed first: a message may refer to itself
            self.components[name] = {
                "type": "object",
                "properties": {f.json_name: self.field(f) for f in descriptor.fields},
            }
        return _ref(name)

    def field(self, field: FieldDescriptor) -> dict[str, Any]:
        message = field.message_type
        if message is not None and message.GetOptions().map_entry:
            value = message.fields_by_name["value"]
            return {"type": "object", "additionalProperties": self.scalar(value)}
        item = self.scalar(field)
        return {"type": "array", "items": item} if field.is_repeated else item

    def scalar(self, field: FieldDescriptor) -> dict[str, Any]:
        if field.message_type is not None:
            return self.message(field.message_type)
        if field.enum_type is not None:
            return {"type": "string", "enum": [v.name for v in field.enum_type.values]}
        t = field.type
        if t in _INT64:
            return {"type": ["string", "integer"], "format": "int64"}
        if t in _INT32:
            return {"type": "integer", "format": "int32"}
        if t == FieldDescriptor.TYPE_BOOL:
            return {"type": "boolean"}
        if t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
            return {"type": "number"}
        if t == FieldDescriptor.TYPE_BYTES:
            return {"type": "string", "contentEncoding": "base64"}
        return {"type": "string"}


def _field_named(route: Route, name: str) -> FieldDescriptor:
    assert route.request is not None
    wanted = route.aliases.get(name, name)
    for f in route.request.DESCRIPTOR.fields:
        if f.json_name == wanted:
            return f
    raise KeyError(f"{route.operation}: {name} is not a field of {route.request.__name__}")


def _parameters(route: Route, schemas: _Schemas) -> list[dict[str, Any]]:
    params = [
        {"name": n, "in": "path", "required": True, "schema": schemas.field(_field_named(route, n))}
        for n in re.findall(r"{(\w+)}", route.path)
    ]
    params += [
        {"name": n, "in": "query", "schema": schemas.field(_field_named(route, n))}
        for n in route.query
    ]
    params += [
        {"name": n, "in": "query", "description": meaning, "schema": {"type": "string"}}
        for n, meaning in route.extra_query.items()
    ]
    return params


def _referred(schema: Any) -> list[str]:
    """The component names a hand-composed schema refers to."""
    if isinstance(schema, dict):
        ref = schema.get("$ref", "")
        own = [ref.rpartition("/")[2]] if ref.startswith("#/components/schemas/") else []
        return own + [n for v in schema.values() for n in _referred(v)]
    if isinstance(schema, list):
        return [n for v in schema for n in _referred(v)]
    return []


def _operation(route: Route, schemas: _Schemas) -> dict[str, Any]:
    if route.schema:
        answer = dict(route.schema)
        for name in _referred(answer):
            schemas.message(descriptor_pool.Default().FindMessageTypeByName(name))
    else:
        assert route.response is not None, route.operation
        answer = schemas.message(route.response.DESCRIPTOR)
    content: dict[str, Any] = {route.content: {"schema": answer}}
    if route.operation == "readRunOutput":
        content["text/event-stream"] = {"schema": {"type": "string"}}
        content["text/plain"] = {"schema": {"type": "string"}}
    op: dict[str, Any] = {
        "operationId": route.operation,
        "summary": route.summary,
        "parameters": _parameters(route, schemas),
        "responses": {
            str(route.status): {"description": "OK", "content": content},
            "default": {
                "description": "The gRPC status of the failure, as an HTTP status",
                "content": {"application/json": {"schema": _ref(ERROR_SCHEMA)}},
            },
        },
    }
    if route.octets:
        op["requestBody"] = {
            "required": True,
            "content": {"application/octet-stream": {"schema": {"type": "string"}}},
        }
    if route.body and route.request is not None:
        op["requestBody"] = {
            "required": route.body_required,
            "content": {"application/json": {"schema": schemas.message(route.request.DESCRIPTOR)}},
        }
    return op


def openapi_document(server_url: str = "/") -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``ROUTES``."""
    schemas = _Schemas()
    paths: dict[str, dict[str, Any]] = {}
    for route in ROUTES:
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(route, schemas)
    schemas.components[ERROR_SCHEMA] = {
        "type": "object",
        "required": ["code", "message"],
        "properties": {
            "code": {"type": "string", "description": "the gRPC status code's name"},
            "message": {"type": "string"},
            "field": {"type": "string", "description": "the bad input, for INVALID_ARGUMENT"},
        },
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "shardcron",
            "version": "v1",
            "description": "Jobs and runs over HTTP/JSON: the JobService of the gRPC API,"
            " with the same owner scoping (the x-shardcron-owner header) and errors.",
        },
        "servers": [{"url": server_url}],
        # a node with an auth file needs the bearer token; one without, nothing
        "security": [{"bearerToken": []}, {}],
        "paths": paths,
        "components": {
            "schemas": dict(sorted(schemas.components.items())),
            "parameters": {},
            "securitySchemes": {
                "bearerToken": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "A principal's token from the node's auth file, as"
                    " over gRPC: same roles and owners; 401 without a known one, 403 for"
                    " a call its role or owners do not allow.",
                }
            },
        },
    }
