"""What the HTTP routes call: the node's servicers, in-process, as the request's caller.

A servicer method is called under its ``@rpc`` decorator (``__wrapped__``), so a domain
error reaches the HTTP edge as itself, with the field it names, instead of as a
status already sent; the context is ``caller.CallContext``, holding the caller that
``caller.resolve_caller`` found in the request's headers (judged against ``auth``, the
node's principals, when it has an auth file). The gRPC interceptors do not run here,
so a write (``audit.WRITES``) is audited here: one line, in the gRPC form, whatever its
outcome; a request whose credential is refused is audited as over gRPC, by the auth
source's ``refusals``, as the gRPC method the route serves.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from google.protobuf.message import Message

from shardcron.client import codec
from shardcron.client.errors import ShardcronError
from shardcron.coordinator.audit import WRITES, log_write
from shardcron.coordinator.auth import AuthSource, is_refusal
from shardcron.coordinator.http.caller import (
    CallAborted,
    CallContext,
    Caller,
    grpc_method,
    resolve_caller,
)
from shardcron.coordinator.service import ClusterServiceServicer, JobServiceServicer


def outcome_of(e: BaseException) -> str:
    """The status code's name a failed call is audited with."""
    if isinstance(e, CallAborted):
        return e.code.name
    if isinstance(e, ShardcronError):
        return codec.status_for(e)[0].name
    return "CANCELLED" if isinstance(e, asyncio.CancelledError) else "INTERNAL"


@dataclass(frozen=True, slots=True, kw_only=True)
class Services:
    """The servicers the routes call, as the node's gRPC server has them, and the
    node's principals (None: no auth file, every caller trusted)."""

    jobs: JobServiceServicer
    cluster: ClusterServiceServicer
    auth: AuthSource | None = None

    async def call(self, rpc: str, message: Message, request: web.Request) -> Any:
        """The unary method ``rpc`` (``JobService`` or ``ClusterService``) called with
        ``message`` as the request's caller; domain errors are raised, not aborted."""
        servicer: Any = self.cluster if rpc == "GetStatus" else self.jobs
        method = getattr(type(servicer), rpc).__wrapped__  # the method under ``@rpc``
        caller = self._caller(rpc, request)
        if rpc not in WRITES:
            return await method(servicer, message, CallContext(caller))
        response, outcome = None, "OK"
        try:
            response = await method(servicer, message, CallContext(caller))
            return response
        except BaseException as e:
            outcome = outcome_of(e)
            raise
        finally:
            log_write(
                principal=caller.principal,
                owner=caller.owner,
                method=rpc,
                messages=[message, response],
                outcome=outcome,
            )

    def stream(self, rpc: str, message: Message, request: web.Request) -> Any:
        """The streaming method ``rpc`` of ``JobService``: an async iterator of replies."""
        method = getattr(type(self.jobs), rpc).__wrapped__
        return method(self.jobs, message, CallContext(self._caller(rpc, request)))

    def _caller(self, rpc: str, request: web.Request) -> Caller:
        """The request's caller; a refused credential is audited, then raised."""
        try:
            return resolve_caller(request.headers, rpc, self.auth)
        except ShardcronError as e:
            if self.auth is not None and is_refusal(e):
                self.auth.refusals.refused(method=grpc_method(rpc), peer=request.remote, error=e)
            raise


Handler = Callable[[Services, web.Request, Any], Awaitable[web.StreamResponse]]
