"""Who an HTTP request calls as, and the servicer context that carries it.

``resolve_owner`` is the one place an HTTP request's headers become a caller, and it
reads nothing but the headers and the TLS connection, so a request is judged before
a byte of its body is read. On a node without an auth file the caller is the owner
named by ``x-shardcron-owner`` (default ``default``), as over gRPC. With one, the
request is judged by ``auth.authorize`` exactly as a gRPC call of the method the
route serves (``grpc_method``): the same ``authorization: Bearer TOKEN`` header, the
client certificate the TLS handshake verified, principals, roles and owners, so a
refusal is the same UNAUTHENTICATED (401) or PERMISSION_DENIED (403); the ``Caller``
is set for the request's task as the gRPC interceptor sets it for a call's, so the
servicers (``owner_of``, ``principal_of``) read it the same way. ``CallContext``
stands in for gRPC's servicer context, so the servicers of ``coordinator/service.py``
serve HTTP unchanged: it answers ``invocation_metadata`` with the owner the caller
resolved to, its ``abort`` raises ``CallAborted``, and ``send_initial_metadata`` (a
streaming call saying it has begun) sends the HTTP response's headers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

import grpc
from aiohttp import web

from shardcron.client.types import DEFAULT_OWNER, OWNER_HEADER
from shardcron.coordinator.auth import AuthSource, authorize
from shardcron.coordinator.auth.authorize import set_caller
from shardcron.coordinator.http.connections import peer_subjects
from shardcron.coordinator.validation import validate_owner

JOB_SERVICE = "shardcron.v1.JobService"
CLUSTER_SERVICE = "shardcron.v1.ClusterService"


def grpc_method(rpc: str) -> str:
    """The full gRPC name of the method a route calls (``GetStatus`` is ClusterService's,
    every other one JobService's)."""
    return f"/{CLUSTER_SERVICE if rpc == 'GetStatus' else JOB_SERVICE}/{rpc}"


def _lowered(headers: Mapping[str, str]) -> dict[str, str]:
    lowered: dict[str, str] = {}
    for key, value in headers.items():
        lowered.setdefault(key.lower(), value)
    return lowered


def resolve_owner(request: web.Request, rpc: str, auth: AuthSource | None) -> str:
    """The owner a request that calls ``rpc`` acts for; with ``auth`` its ``Caller`` is
    set for the request's task. Raises ``InvalidArgument`` (field ``x-shardcron-owner``)
    for an owner that is not a valid name, and with ``auth`` what ``authorize`` raises."""
    if auth is None:
        owner = request.headers.get(OWNER_HEADER)
        return DEFAULT_OWNER if owner is None else validate_owner(owner)
    subjects = peer_subjects(request.transport)
    caller = authorize(auth.table, grpc_method(rpc), _lowered(request.headers), subjects)
    set_caller(caller)
    return caller.owner


class CallAborted(Exception):
    """A servicer ended the call with a status (``context.abort``)."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class CallContext:
    """The part of ``grpc.aio.ServicerContext`` the servicers use, for one HTTP request;
    ``on_begin`` sends the response's headers (see the module docstring)."""

    def __init__(self, owner: str, on_begin: Callable[[], Awaitable[None]] | None = None) -> None:
        self.owner = owner
        self._on_begin = on_begin

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return ((OWNER_HEADER, self.owner),)

    def time_remaining(self) -> float | None:
        return None

    async def send_initial_metadata(self, _metadata: object = ()) -> None:
        if self._on_begin is not None:
            await self._on_begin()

    async def abort(self, code: grpc.StatusCode, details: str = "") -> None:
        raise CallAborted(code, details)
