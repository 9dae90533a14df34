"""What the HTTP routes call: the node's servicers, in-process, as the request's caller.

A servicer method is called under its ``@rpc`` decorator (``__wrapped__``), so a domain
error reaches the HTTP edge as itself, with the field it names, instead of as a
status already sent; the context is ``caller.CallContext``, holding the caller that
``caller.resolve_caller`` found in the request's headers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from google.protobuf.message import Message

from shardcron.coordinator.http.caller import CallContext, resolve_caller
from shardcron.coordinator.service import ClusterServiceServicer, JobServiceServicer


@dataclass(frozen=True, slots=True, kw_only=True)
class Services:
    """The servicers the routes call, as the node's gRPC server has them."""

    jobs: JobServiceServicer
    cluster: ClusterServiceServicer

    async def call(self, rpc: str, message: Message, request: web.Request) -> Any:
        """The unary method ``rpc`` (``JobService`` or ``ClusterService``) called with
        ``message`` as the request's caller; domain errors are raised, not aborted."""
        servicer: Any = self.cluster if rpc == "GetStatus" else self.jobs
        method = getattr(type(servicer), rpc).__wrapped__  # the method under ``@rpc``
        return await method(servicer, message, CallContext(resolve_caller(request.headers)))

    def stream(self, rpc: str, message: Message, request: web.Request) -> Any:
        """The streaming method ``rpc`` of ``JobService``: an async iterator of replies."""
        method = getattr(type(self.jobs), rpc).__wrapped__
        return method(self.jobs, message, CallContext(resolve_caller(request.headers)))


Handler = Callable[[Services, web.Request, Any], Awaitable[web.StreamResponse]]
