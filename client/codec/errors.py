"""Domain errors <-> gRPC status: the one table, both directions.

``ERROR_CODES`` maps each domain error to its gRPC status code; ``status_for`` is what
servers send for an exception (its message capped at ``limits.MAX_ERROR_MESSAGE``
characters, so that no echo of a long id or string can outgrow the gRPC trailer) and
``error_from_rpc`` is what clients raise for a failed call.
"""

from __future__ import annotations

import grpc

from shardcron.client.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    ShardcronError,
    StaleLease,
    Unauthenticated,
    Unavailable,
    VersionConflict,
)
from shardcron.client.limits import MAX_ERROR_MESSAGE, clip

__all__ = ["ERROR_CODES", "error_from_rpc", "status_for"]

ERROR_CODES: dict[type[ShardcronError], grpc.StatusCode] = {
    InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    NotFound: grpc.StatusCode.NOT_FOUND,
    VersionConflict: grpc.StatusCode.ABORTED,
    FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    StaleLease: grpc.StatusCode.FAILED_PRECONDITION,
    AlreadyExists: grpc.StatusCode.ALREADY_EXISTS,
    Unavailable: grpc.StatusCode.UNAVAILABLE,
    Unauthenticated: grpc.StatusCode.UNAUTHENTICATED,
    PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
    ResourceExhausted: grpc.StatusCode.RESOURCE_EXHAUSTED,
}

# Reverse of ERROR_CODES (the first class listed for a code wins), plus the codes the
# transport itself produces.
_ERRORS_BY_CODE: dict[grpc.StatusCode, type[ShardcronError]] = {}
for _cls, _code in ERROR_CODES.items():
    _ERRORS_BY_CODE.setdefault(_code, _cls)
_ERRORS_BY_CODE[grpc.StatusCode.DEADLINE_EXCEEDED] = Unavailable


def status_for(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """The status a server sends for ``exc``: the ``ERROR_CODES`` code and the error's
    message for domain errors (``"field: reason"`` for InvalidArgument); INTERNAL for
    anything that is not a ``ShardcronError``. The message is clipped to
    ``MAX_ERROR_MESSAGE`` characters."""
    code = grpc.StatusCode.INTERNAL
    message = f"internal error: {type(exc).__name__}: {exc}"
    for cls in type(exc).__mro__:
        if cls in ERROR_CODES:
            code, message = ERROR_CODES[cls], exc.message  # type: ignore[attr-defined]
            break
    else:
        if isinstance(exc, ShardcronError):
            code = getattr(grpc.StatusCode, exc.code, grpc.StatusCode.UNKNOWN)
            message = exc.message
    return code, clip(message, MAX_ERROR_MESSAGE)


def error_from_rpc(e: grpc.RpcError) -> ShardcronError:
    """The domain error for a failed call; ``.code`` is the status code's name.

    INVALID_ARGUMENT details ``"field: reason"`` become ``InvalidArgument(field, reason)``;
    DEADLINE_EXCEEDED and UNAVAILABLE become ``Unavailable``; codes with no domain class
    become a plain ``ShardcronError``.
    """
    code_fn = getattr(e, "code", None)
    details_fn = getattr(e, "details", None)
    code = (code_fn() if callable(code_fn) else None) or grpc.StatusCode.UNKNOWN
    details = (details_fn() if callable(details_fn) else None) or ""
    cls = _ERRORS_BY_CODE.get(code)
    err: ShardcronError
    if cls is InvalidArgument:
        field, sep, reason = details.partition(": ")
        err = InvalidArgument(field, reason) if sep else InvalidArgument("", details)
        if not sep:
            err.message = details
            err.args = (details,)
    elif cls is not None:
        err = cls(details or code.name)
    else:
        err = ShardcronError(details or code.name)
    err.code = code.name
    return err
