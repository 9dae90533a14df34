"""A node: the server roles (api, coordinator, poller) wired on one store and one gRPC port,
and, when asked, the HTTP/JSON API and dashboard on another (``coordinator/http``).

``Node`` takes its parts ready-made (store, coordination, config) so the same
code serves ``shardcron dev`` (SQLite, local coordination) and a cluster node.
Start order matters: the store opens, the gRPC server listens, the poller
starts, and only then does coordination hand out shards. With ``tls`` every service
is served with TLS and calls to other nodes use it; without, a node refuses to listen
anywhere but loopback unless ``insecure`` (``shardcron.client.tls.check_listen``).
With an ``AuthSource`` every call is authenticated (``coordinator.auth``), and the
node's own calls to other nodes carry ``NodeConfig.node_token``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import uuid
from dataclasses import dataclass, field
from datetime import timedelta

import grpc

from shardcron.blobs.archives import ArchiveLimits
from shardcron.blobs.store import BlobStore
from shardcron.client.tls import ServerTls, check_listen
from shardcron.coordinator.api import JobsApi
from shardcron.coordinator.artifact_retention import (
    DEFAULT_GRACE,
    DEFAULT_INTERVAL,
    ArtifactSweeper,
)
from shardcron.coordinator.artifacts import Artifacts
from shardcron.coordinator.auth import AuthSource
from shardcron.coordinator.auth.file_quotas import quota_guard
from shardcron.coordinator.coordination import Assignment, Coordination
from shardcron.coordinator.http.server import HttpConfig, HttpServer, start_http
from shardcron.coordinator.http.services import Services
from shardcron.coordinator.metrics import Metrics, TimedStore, serve_metrics
from shardcron.coordinator.notify.hooks import NotifyHooks
from shardcron.coordinator.notify.owner_api import refresh_book
from shardcron.coordinator.notify.sender import NotifyConfig, Sender
from shardcron.coordinator.notify.settings import REFRESH, OwnerSettingsBook
from shardcron.coordinator.open_calls import CallLimits, LongCall, OpenCalls
from shardcron.coordinator.output_blobs import OutputBlobConfig, OutputBlobs
from shardcron.coordinator.poller import Poller, PollerConfig
from shardcron.coordinator.quotas import Quotas
from shardcron.coordinator.result_blobs import ResultBlobs
from shardcron.coordinator.retention import RetentionSweeper, sweep_interval
from shardcron.coordinator.router import ShardRouter
from shardcron.coordinator.run_waits import RunEndings
from shardcron.coordinator.service import (
    ClusterServiceServicer,
    JobServiceServicer,
    build_server,
)
from shardcron.coordinator.store import JobStore

log = logging.getLogger("shardcron.node")

ROLES = frozenset({"api", "coordinator", "poller"})


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeConfig:
    listen: str = "127.0.0.1:7400"
    advertise: str = ""  # host:port others use to reach this node; default derived from listen
    metrics_listen: str = ""  # "" = no /metrics endpoint
    http_listen: str = ""  # "" = no HTTP/JSON API and dashboard (needs the api role)
    http_allowed_hosts: tuple[str, ...] = ()  # Host names served beyond the node's own
    http_allowed_origins: tuple[str, ...] = ()  # page origins that may call beyond its own
    roles: frozenset[str] = ROLES
    node_id: str = field(default_factory=lambda: f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}")
    poller: PollerConfig = field(default_factory=PollerConfig)
    node_token: str = ""  # sent on calls to other nodes (a node principal's token)
    tls: ServerTls | None = None  # None = plaintext
    insecure: bool = False  # plaintext on an address that is not loopback, on purpose
    quotas: Quotas = field(default_factory=Quotas)  # per-owner limits (quotas.py)
    # long calls (follows, WaitRuns, worker streams) one principal may hold open
    call_limits: CallLimits = field(default_factory=CallLimits)
    # how runs' output goes to the blob store, when the node is given one
    output: OutputBlobConfig = field(default_factory=OutputBlobConfig)
    # how large a job's code archive may be, uploaded and unpacked (with a blob store)
    artifact_limits: ArchiveLimits = field(default_factory=ArchiveLimits)
    # an artifact no job refers to is deleted once this old (``artifact_retention``)
    artifact_grace: timedelta = DEFAULT_GRACE
    artifact_sweep_interval: timedelta = DEFAULT_INTERVAL
    notify: NotifyConfig = field(default_factory=NotifyConfig)  # webhook notifications


class Node:
    def __init__(
        self,
        store: JobStore,
        coordination: Coordination,
        config: NodeConfig,
        *,
        auth: AuthSource | None = None,
        blobs: BlobStore | None = None,
    ) -> None:
        """``blobs``: where runs' whole output goes (``output_blobs``) and jobs' code
        archives (``artifacts``); None: the job store keeps each run's tail alone, as
        its ``output_cap_bytes`` says, and no job may name an artifact."""
        unknown = config.roles - ROLES
        if unknown:
            raise ValueError(f"unknown roles: {', '.join(sorted(unknown))}")
        check_listen(config.listen, tls=config.tls is not None, insecure=config.insecure)
        self.config = config
        if config.http_listen:
            self.http_config().check()
        self.auth = auth  # None: every caller is trusted
        self.metrics = Metrics()
        self.open_calls = OpenCalls(config.call_limits)
        for kind in LongCall:
            self.metrics.long_calls.labels(kind.value).set_function(
                lambda kind=kind: self.open_calls.total(kind)
            )
        if auth is not None:
            auth.refusals.count_into(self.metrics.auth_refused)
        self.raw_store = store
        self.output_blobs = None if blobs is None else OutputBlobs(blobs, config.output)
        self.artifacts = None if blobs is None else Artifacts(blobs, config.artifact_limits)
        self.result_blobs = ResultBlobs(blobs)  # none kept without a blob store, and said
        self.store: JobStore = TimedStore(store, self.metrics)  # type: ignore[assignment]
        self.coordination = coordination
        self.poller: Poller | None = None
        self.notify_sender: Sender | None = None
        self.notify_book: OwnerSettingsBook | None = None
        self._notify_refresh: asyncio.Task[None] | None = None
        self.api: JobsApi | None = None
        self.router: ShardRouter | None = None
        self.retention: RetentionSweeper | None = None
        self.artifact_sweeper: ArtifactSweeper | None = None
        self._leader_watch: asyncio.Task[None] | None = None
        self._health_update: asyncio.Task[None] | None = None
        self.server: grpc.aio.Server | None = None
        self.port = 0
        self.metrics_port = 0
        self.http: HttpServer | None = None
        self.http_port = 0

    def http_config(self) -> HttpConfig:
        config = self.config
        return HttpConfig(
            listen=config.http_listen,
            tls=config.tls,
            insecure=config.insecure,
            advertise=config.advertise,
            allowed_hosts=config.http_allowed_hosts,
            allowed_origins=config.http_allowed_origins,
        )

    @property
    def address(self) -> str:
        if self.config.advertise:
            return self.config.advertise
        host = self.config.listen.rpartition(":")[0] or "127.0.0.1"
        if host in ("0.0.0.0", "[::]", ""):
            host = socket.gethostname()
        return f"{host}:{self.port}"

    async def start(self) -> None:
        tls = self.config.tls
        # read before anything opens: a certificate that cannot be read stops the start
        server_credentials = tls.server_credentials() if tls is not None else None
        peer_credentials = tls.peer_tls().credentials() if tls is not None else None
        await self.raw_store.open()
        if self.output_blobs is not None:
            await self.output_blobs.start()
        endings = RunEndings()
        notify = self.config.notify
        self.notify_book = book = OwnerSettingsBook(file_secrets=notify.secrets)
        await refresh_book(self.store, book, self.config.poller.secret_keys)
        if "poller" in self.config.roles:
            self.notify_sender = Sender(
                self.store,
                owns=lambda shard: self.poller is not None and self.poller.owns(shard),
                config=notify,
                metrics=self.metrics,
                secrets=book.secret,
            )
            self.poller = Poller(
                self.store,
                poller_id=self.config.node_id,
                config=self.config.poller,
                metrics=self.metrics,
                ownership_valid=self.coordination.ownership_valid,
                session_generation=self.coordination.session_generation,
                runs_ended=endings.ended,
                notify=NotifyHooks(made=self.notify_sender.made, owner_defaults=book.defaults),
            )
            self.coordination.subscribe(self.poller.on_assignment)
        self.router = ShardRouter(
            self.coordination,
            self.poller,
            self.raw_store.shard_count,
            peer_credentials,
            node_token=self.config.node_token,
        )
        if "api" in self.config.roles:
            self.api = JobsApi(
                self.store,
                self.router,
                self.metrics,
                endings=endings,
                served_here=self.poller.owns if self.poller else lambda shard: False,
                quotas=quota_guard(self.auth, self.config.quotas, self.store.count_jobs),
                keys=self.config.poller.secret_keys,
                place_within=self.config.poller.hint_horizon,
                output_blobs=self.output_blobs,
                artifacts=self.artifacts,
                notify_allow_private=notify.allow_private,
                notify_book=book,
            )
        self.server, self.port = build_server(
            self.config.listen,
            api=self.api,
            poller=self.poller,
            coordination=self.coordination,
            router=self.router,
            credentials=server_credentials,
            metrics=self.metrics,
            auth=self.auth,
            open_calls=self.open_calls,
            output_blobs=self.output_blobs,
            artifacts=self.artifacts,
            result_blobs=self.result_blobs,
        )
        if self.poller is not None:
            self.coordination.subscribe(self._follow_session)
        await self.server.start()
        if self.config.http_listen and self.api is not None:
            self.http = await start_http(
                self.http_config(),
                Services(
                    jobs=JobServiceServicer(self.api, self.open_calls),
                    cluster=ClusterServiceServicer(self.coordination, self.router),
                    auth=self.auth,
                ),
                on_refused=self.metrics.http_connections_refused.inc,
            )
            gate = self.http.gate
            self.metrics.http_connections.set_function(lambda: gate.open)
            self.http_port = self.http.port
        if self.config.metrics_listen:
            self.metrics_port = serve_metrics(self.metrics, self.config.metrics_listen)
        if self.poller is not None:
            self.poller.start()
        if self.notify_sender is not None:
            self.notify_sender.start()
            self._notify_refresh = asyncio.create_task(self._refresh_notify_settings())
        await self.coordination.start(
            poller_id=self.config.node_id if self.poller else None, poller_address=self.address
        )
        self._leader_watch = asyncio.create_task(self._watch_leadership())
        if self.raw_store.retention is not None:
            interval = sweep_interval(self.raw_store.retention)
            failures = self.metrics.retention_blob_failures
            self.retention = RetentionSweeper(
                self.store,
                interval=interval,
                blobs=None if self.output_blobs is None else self.output_blobs.store,
                on_blob_failure=lambda outcome: failures.labels(outcome=outcome).inc(),
                retention=self.raw_store.retention,
            )
            self.retention.start()
        if self.artifacts is not None and self.api is not None:
            self.artifact_sweeper = ArtifactSweeper(
                self.store,
                self.artifacts.store,
                grace=self.config.artifact_grace,
                interval=self.config.artifact_sweep_interval,
            )
            self.artifact_sweeper.start()
        await self.server.health.serving()  # type: ignore[attr-defined]
        log.info(
            "node %s serving on %s (roles: %s)",
            self.config.node_id,
            self.address,
            ",".join(sorted(self.config.roles)),
        )

    def _follow_session(self, assignment: Assignment) -> asyncio.Task[None] | None:
        """The poller's services are healthy while its session is (``health``). The
        task is returned, so the coordination waits for it before the next assignment."""
        if self.server is None:
            return None
        health = self.server.health  # type: ignore[attr-defined]
        self._health_update = asyncio.ensure_future(health.session_held(assignment.active))
        return self._health_update

    async def _watch_leadership(self) -> None:
        """Keeps the shardcron_is_leader gauge true to the coordination's view."""
        while True:
            try:
                view = await self.coordination.view()
                self.metrics.is_leader.set(1 if view.leader == self.config.node_id else 0)
            except Exception:
                self.metrics.is_leader.set(0)
            await asyncio.sleep(5)

    async def _refresh_notify_settings(self) -> None:
        """Owners' notification settings, read again every ``REFRESH`` (notify/settings)."""
        assert self.notify_book is not None
        while True:
            await asyncio.sleep(REFRESH.total_seconds())
            try:
                await refresh_book(self.store, self.notify_book, self.config.poller.secret_keys)
            except Exception as error:  # the settings held stay; read again next time
                log.warning("could not read the owners' notification settings: %s", error)

    async def stop(self, grace: float = 2.0) -> None:
        if self.retention is not None:
            await self.retention.stop()
        if self.artifact_sweeper is not None:
            await self.artifact_sweeper.stop()
        if self._leader_watch is not None:
            self._leader_watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._leader_watch
        if self.http is not None:
            await self.http.stop()
        if self.server is not None:
            await self.server.health.enter_graceful_shutdown()  # type: ignore[attr-defined]
        await self.coordination.stop()
        if self.poller is not None:
            await self.poller.stop()
        if self._notify_refresh is not None:
            self._notify_refresh.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._notify_refresh
        if self.notify_sender is not None:
            await self.notify_sender.stop()
        if self.server is not None:
            await self.server.stop(grace)
        if self.router is not None:
            await self.router.close()
        await self.result_blobs.stop()
        if self.output_blobs is not None:
            await self.output_blobs.stop()
        await self.raw_store.close()
