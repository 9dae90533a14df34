"""A failed HTTP call: the gRPC status its failure maps to, as an HTTP status and a
JSON body ``{"code": "NOT_FOUND", "message": "...", "field": "..."}``.

Domain errors take their status from the one table (``client.codec.status_for``), so
HTTP and gRPC answer the same code and message; ``field`` names the bad input of an
INVALID_ARGUMENT (empty otherwise). A stale ``expectedVersion`` (ABORTED) is 412
Precondition Failed, the HTTP answer to a failed conditional write; a call the object's
state does not allow (FAILED_PRECONDITION, e.g. resuming a job that is not paused) is
409 Conflict. Refusals of the HTTP edge itself take the HTTP status that says what
they are: a body over its cap 413, a body that did not arrive in time 408, a write
that is not JSON 415 (``bodies``, ``origins``). Anything that is not a domain error is
logged and answered 500.
"""

from __future__ import annotations

import logging

import grpc
from aiohttp import web

from shardcron.client import codec
from shardcron.client.errors import InvalidArgument, ShardcronError
from shardcron.coordinator.http.bodies import BodyTimeout, BodyTooLarge
from shardcron.coordinator.http.caller import CallAborted
from shardcron.coordinator.http.origins import UnsupportedMediaType

log = logging.getLogger("shardcron.http")

HTTP_STATUS: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.FAILED_PRECONDITION: 409,
    grpc.StatusCode.ABORTED: 412,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}


# Errors of the HTTP edge whose HTTP status is more precise than their code's.
EDGE_STATUS: dict[type[Exception], int] = {
    BodyTooLarge: 413,
    BodyTimeout: 408,
    UnsupportedMediaType: 415,
}


def error_body(code: grpc.StatusCode, message: str, field: str = "") -> dict[str, str]:
    return {"code": code.name, "message": message, "field": field}


def error_response(e: BaseException, where: str) -> web.Response:
    """The answer to a call that raised ``e``; ``where`` names the operation in the log."""
    field = ""
    if isinstance(e, CallAborted):
        code, message = e.code, e.message
    elif isinstance(e, ShardcronError):
        code, message = codec.status_for(e)
        field = e.field if isinstance(e, InvalidArgument) else ""
    else:
        log.error("%s failed", where, exc_info=e)
        code, message = grpc.StatusCode.INTERNAL, f"internal error: {type(e).__name__}"
    status = EDGE_STATUS.get(type(e)) or HTTP_STATUS.get(code, 500)
    return web.json_response(error_body(code, message, field), status=status)
