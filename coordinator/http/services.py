"""What the HTTP routes call: the node's servicers, in-process, as the request's caller.

A servicer method is called under its ``@rpc`` decorator (``__wrapped__``), so a domain
error reaches the HTTP edge as itself, with the field it names, instead of as a
status already sent; the context is ``caller.CallContext``, holding the owner that
``caller.resolve_owner`` found in the request's headers (judged against ``auth``, the
node's principals, when it has an auth file). The gRPC interceptors do not run here,
so their work is done here in the same terms:

- a refused credential is counted and audited by the auth source's ``refusals``, as
  the gRPC method the route serves;
- a write (``audit.WRITES``) is audited: one line, in the gRPC form, whatever its
  outcome (``audit.log_write``), and one for a write refused before it reached its
  servicer (``refused_write``);
- the owner's ``max_request_bytes`` is checked on the request as gRPC would receive it
  (``check_size``: ``QuotaGuard.check_request``, the one check of both edges).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from google.protobuf.message import Message

from shardcron.client import codec
from shardcron.client.errors import ShardcronError
from shardcron.client.types import OWNER_HEADER
from shardcron.coordinator.audit import WRITES, log_refused_write, log_write, owner_named
from shardcron.coordinator.auth import AuthSource, is_refusal
from shardcron.coordinator.http.caller import (
    CallAborted,
    CallContext,
    grpc_method,
    resolve_owner,
)
from shardcron.coordinator.quotas import QuotaGuard
from shardcron.coordinator.service import (
    ClusterServiceServicer,
    JobServiceServicer,
    principal_of,
)


def outcome_of(e: BaseException) -> str:
    """The status code's name a failed call is audited with."""
    if isinstance(e, CallAborted):
        return e.code.name
    if isinstance(e, ShardcronError):
        return codec.status_for(e)[0].name
    return "CANCELLED" if isinstance(e, asyncio.CancelledError) else "INTERNAL"


@dataclass(frozen=True, slots=True, kw_only=True)
class Services:
    """The servicers the routes call, as the node's gRPC server has them, the node's
    principals (None: no auth file, every caller trusted) and its quotas."""

    jobs: JobServiceServicer
    cluster: ClusterServiceServicer
    auth: AuthSource | None = None

    @property
    def quotas(self) -> QuotaGuard:
        return self.jobs.api.quotas

    def owner(self, rpc: str, request: web.Request) -> str:
        """The owner ``request`` acts for when it calls ``rpc``, from its headers alone;
        a refused credential is audited, then raised."""
        try:
            return resolve_owner(request, rpc, self.auth)
        except ShardcronError as e:
            if self.auth is not None and is_refusal(e):
                self.auth.refusals.refused(method=grpc_method(rpc), peer=request.remote, error=e)
            else:  # e.g. a malformed owner header
                self.refused_write(rpc, request, e)
            raise

    def check_size(self, owner: str, message: Message) -> None:
        """``max_request_bytes``: ``message`` as gRPC would receive it."""
        self.quotas.check_request(owner, message.ByteSize())

    async def call(self, rpc: str, message: Message, request: web.Request) -> Any:
        """The unary method ``rpc`` (``JobService`` or ``ClusterService``) called with
        ``message`` as the request's caller; domain errors are raised, not aborted."""
        servicer: Any = self.cluster if rpc == "GetStatus" else self.jobs
        method = getattr(type(servicer), rpc).__wrapped__  # the method under ``@rpc``
        context = CallContext(self.owner(rpc, request))
        if rpc not in WRITES:
            return await method(servicer, message, context)
        response, outcome, reason = None, "OK", ""
        try:
            response = await method(servicer, message, context)
            return response
        except BaseException as e:
            outcome, reason = outcome_of(e), getattr(e, "message", "")
            raise
        finally:
            log_write(
                principal=principal_of(),
                owner=context.owner,
                method=rpc,
                messages=[message, response],
                outcome=outcome,
                reason=reason,
            )

    def stream(
        self,
        rpc: str,
        message: Message,
        request: web.Request,
        on_begin: Callable[[], Awaitable[None]] | None = None,
    ) -> AsyncIterator[Any]:
        """The streaming method ``rpc`` of ``JobService``: an async iterator of replies;
        ``on_begin`` runs when the servicer says the stream has begun."""
        method = getattr(type(self.jobs), rpc).__wrapped__
        return method(self.jobs, message, CallContext(self.owner(rpc, request), on_begin))  # type: ignore[no-any-return]

    def refused_write(
        self,
        rpc: str,
        request: web.Request,
        error: ShardcronError,
        *,
        owner: str | None = None,
        message: Message | None = None,
    ) -> None:
        """Audits a write refused before it reached its servicer, for anything but its
        credential (``owner`` had that audited): ``owner`` is the one it was judged to
        act for, if it got that far."""
        if rpc not in WRITES:
            return
        log_refused_write(
            method=rpc,
            error=error,
            principal=principal_of(),
            owner=owner if owner is not None else owner_named(request.headers.get(OWNER_HEADER)),
            messages=[message],
        )


Handler = Callable[[Services, web.Request, Any], Awaitable[web.StreamResponse]]
