"""Standard gRPC health checking with one status per service, and ``Health/List``.

A node answers ``Check``, ``Watch`` and ``List`` for the whole server (``""``) and for
each shardcron service it serves (``shardcron.v1.JobService`` on an api node,
``shardcron.v1.WorkerService`` and ``shardcron.v1.PollerService`` on a poller,
``shardcron.v1.ClusterService`` everywhere), so a load balancer or
``grpc-health-probe -service=shardcron.v1.JobService`` can pick the nodes that serve
what it needs. A service the node does not serve is NOT_FOUND, as the protocol says.

Every status is NOT_SERVING from the moment the server listens until the node has
started all its roles (``serving``), and again once it begins to stop
(``enter_graceful_shutdown``). In between, each status means:

- ``""``, ``ClusterService``, ``JobService``: the node is up and answers. They do not
  follow the store or ZooKeeper: a job call fails alone (UNAVAILABLE) while the store
  cannot be reached, and reads and writes go on through a lost session.
- ``WorkerService``, ``PollerService``: this node's poller holds its coordination
  session, so it serves its shards and leases their runs to the workers that stream
  to it. NOT_SERVING until its first active assignment, and while the session is
  suspended (the connection to ZooKeeper dropped: the poller leases nothing) or lost
  (its shards went with it); SERVING again once the coordination hands the poller an
  active assignment (``session_held`` is fed the ``active`` of every assignment), so
  a load balancer stops sending workers to a poller that cannot lease them anything.

grpcio-health-checking's asyncio servicer does not implement ``List``;
``ServiceHealth`` adds it.
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
# The services that serve only while the poller holds its coordination session.
SESSION_BOUND = frozenset({"shardcron.v1.WorkerService", "shardcron.v1.PollerService"})


class ServiceHealth(health.aio.HealthServicer):
    """The health of the whole server and of each service in ``services``."""

    def __init__(self, services: Iterable[str]) -> None:
        super().__init__()
        self.services = ("", *sorted(set(services) - {""}))
        for name in self.services:
            self._server_status[name] = NOT_SERVING
        self._started = False
        self._session_held = False  # until the poller's first active assignment

    def _status(self, name: str) -> int:
        held = self._session_held or name not in SESSION_BOUND
        return SERVING if self._started and held else NOT_SERVING

    async def serving(self) -> None:
        """Every service, and the server, answer SERVING (the node has started), but
        the poller's while its session is not held (see the module docstring)."""
        self._started = True
        for name in self.services:
            await self.set(name, self._status(name))

    async def session_held(self, held: bool) -> None:
        """Follows the poller's coordination session: ``held`` is the ``active`` of its
        latest assignment. Before ``serving`` it is only remembered."""
        if held == self._session_held:
            return
        self._session_held = held
        for name in self.services:
            if name in SESSION_BOUND:
                await self.set(name, self._status(name))

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
