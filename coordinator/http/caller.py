"""Who an HTTP request calls as, and the servicer context that carries it.

``resolve_caller`` is the one place an HTTP request's headers become a caller. On a
node without an auth file it is the owner named by ``x-shardcron-owner`` (default
``default``), as over gRPC. With one, the request is judged by ``auth.authorize``
exactly as a gRPC call of the method the route serves (``grpc_method``): the same
``authorization: Bearer TOKEN`` header, principals, roles and owners, so a refusal is
the same UNAUTHENTICATED (401) or PERMISSION_DENIED (403). ``CallContext`` stands in
for gRPC's servicer context, so the servicers of ``coordinator/service.py`` serve HTTP
unchanged: it answers ``invocation_metadata`` with the owner the caller resolved to,
and its ``abort`` raises ``CallAborted``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import grpc

from shardcron.client.types import DEFAULT_OWNER
from shardcron.coordinator.audit import ANONYMOUS
from shardcron.coordinator.auth import AuthSource, authorize
from shardcron.coordinator.auth.authorize import set_caller
from shardcron.coordinator.service import OWNER_KEY
from shardcron.coordinator.validation import validate_owner

JOB_SERVICE = "shardcron.v1.JobService"
CLUSTER_SERVICE = "shardcron.v1.ClusterService"


@dataclass(frozen=True, slots=True, kw_only=True)
class Caller:
    """Who a request acts for, and the principal behind it ("anonymous" without an
    auth file)."""

    owner: str
    principal: str = ANONYMOUS


def grpc_method(rpc: str) -> str:
    """The full gRPC name of the method a route calls (``GetStatus`` is ClusterService's,
    every other one JobService's)."""
    return f"/{CLUSTER_SERVICE if rpc == 'GetStatus' else JOB_SERVICE}/{rpc}"


def resolve_caller(headers: Mapping[str, str], rpc: str, auth: AuthSource | None) -> Caller:
    """The caller of a request with these headers that calls ``rpc``. Raises
    ``InvalidArgument`` (field ``x-shardcron-owner``) for an owner that is not a valid
    name, and with ``auth`` what ``authorize`` raises. With ``auth`` it also sets the
    authorized caller for the rest of the request's task (``current_caller()``), as
    the gRPC interceptor does for a call."""
    if auth is None:
        owner = headers.get(OWNER_KEY)
        return Caller(owner=DEFAULT_OWNER if owner is None else validate_owner(owner))
    lowered: dict[str, str] = {}
    for key, value in headers.items():
        lowered.setdefault(key.lower(), value)
    caller = authorize(auth.table, grpc_method(rpc), lowered)
    # what servicers read of their caller (current_caller: the principal a long call
    # counts against, the workers a status shows) is the same over both edges
    set_caller(caller)
    return Caller(owner=caller.owner, principal=caller.principal)


class CallAborted(Exception):
    """A servicer ended the call with a status (``context.abort``)."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class CallContext:
    """The part of ``grpc.aio.ServicerContext`` the servicers use, for one HTTP request."""

    def __init__(self, caller: Caller) -> None:
        self.caller = caller

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return ((OWNER_KEY, self.caller.owner),)

    async def abort(self, code: grpc.StatusCode, details: str = "") -> None:
        raise CallAborted(code, details)
