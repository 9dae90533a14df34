"""Standard gRPC health checking with one status per service, and ``Health/List``.

A node answers ``Check``, ``Watch`` and ``List`` for the whole server (``""``) and for
each shardcron service it serves (``shardcron.v1.JobService`` on an api node,
``shardcron.v1.WorkerService`` and ``shardcron.v1.PollerService`` on a poller,
``shardcron.v1.ClusterService`` everywhere), so a load balancer or
``grpc-health-probe -service=shardcron.v1.JobService`` can pick the nodes that serve
what it needs. A service the node does not serve is NOT_FOUND, as the protocol says.

Every status is NOT_SERVING from the moment the server listens until the node has
started all its roles (``serving``), and again once it begins to stop
(``enter_graceful_shutdown``). grpcio-health-checking's asyncio servicer does not
implement ``List``; ``ServiceHealth`` adds it.
"""

from __future__ import annotations

from collections.abc import Iterable

import grpc
import grpc.aio
from grpc_health.v1 import health, health_pb2

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
# The protocol's bound: a server with more services answers RESOURCE_EXHAUSTED.
MAX_LISTED = 100


class ServiceHealth(health.aio.HealthServicer):
    """The health of the whole server and of each service in ``services``."""

    def __init__(self, services: Iterable[str]) -> None:
        super().__init__()
        self.services = ("", *sorted(set(services) - {""}))
        for name in self.services:
            self._server_status[name] = NOT_SERVING

    async def serving(self) -> None:
        """Every service, and the server, answer SERVING (the node has started)."""
        for name in self.services:
            await self.set(name, SERVING)

    async def Check(
        self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext
    ) -> health_pb2.HealthCheckResponse:
        status = self._server_status.get(request.service)
        if status is None:  # the base class says NOT_FOUND without saying what was asked
            await context.abort(
                grpc.StatusCode.NOT_FOUND, f"service {request.service!r} is not served here"
            )
        return health_pb2.HealthCheckResponse(status=status)

    async def List(
        self, request: health_pb2.HealthListRequest, context: grpc.aio.ServicerContext
    ) -> health_pb2.HealthListResponse:
        statuses = dict(self._server_status)  # a snapshot: the protocol does not ask more
        if len(statuses) > MAX_LISTED:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED, f"more than {MAX_LISTED} services"
            )
        return health_pb2.HealthListResponse(
            statuses={
                name: health_pb2.HealthCheckResponse(status=status)
                for name, status in statuses.items()
            }
        )
