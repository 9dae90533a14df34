"""``shardcron dev``: every role in one process on the embedded SQLite store, with its
in-process workers beside the node.

With ``worker_command``, one of the two modules that see both the server roles
(``shardcron.coordinator``) and the worker (``shardcron.worker``)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import click

from shardcron.auth_options import auth_file_option, dev_auth, reload_on_sighup
from shardcron.blob_options import BlobOptions, blob_options
from shardcron.client.cli.tls_options import server_tls_options
from shardcron.client.errors import ShardcronError
from shardcron.client.tls import ServerTls
from shardcron.collector import tune_collector
from shardcron.coordinator.auth import AuthSource
from shardcron.coordinator.output_blobs import TAIL_BYTES, OutputBlobConfig
from shardcron.coordinator.poller import PollerConfig
from shardcron.coordinator.quotas import Quotas
from shardcron.coordinator.sealing import KeyRing
from shardcron.edge_options import EdgeOptions, edge_options
from shardcron.notify_options import notify_options
from shardcron.policy_options import inherit_env_option, store_policy_options
from shardcron.role_commands import (
    duration_option,
    lease_lead_option,
    setup_logging,
    until_signalled,
)
from shardcron.sandbox_options import check_private, sandbox_options
from shardcron.spool_options import output_spool_options

if TYPE_CHECKING:
    from shardcron.coordinator.node import Node
    from shardcron.coordinator.notify.sender import NotifyConfig
    from shardcron.worker.output_spool import OutputSpoolConfig
    from shardcron.worker.sandbox import SandboxConfig


@click.command()
@click.option(
    "--listen", default="127.0.0.1:7400", show_default=True, help="gRPC address to serve on."
)
@click.option(
    "--data-dir",
    default=lambda: os.environ.get("SHARDCRON_DATA_DIR", ".shardcron"),
    show_default=".shardcron",
    type=click.Path(file_okay=False),
    help="Where the embedded store keeps its files.",
)
@click.option(
    "--metrics-listen",
    default="127.0.0.1:9464",
    show_default=True,
    help="Prometheus /metrics address; '' = off.",
)
@click.option(
    "--http-listen",
    default="127.0.0.1:7480",
    show_default=True,
    help="HTTP/JSON API and dashboard address; '' = off.",
)
@click.option(
    "--workers", "worker_count", default=1, show_default=True, help="In-process workers (0 = none)."
)
@click.option("--slots", default=8, show_default=True, help="Slots per in-process worker.")
@click.option(
    "--handlers",
    "handler_modules",
    multiple=True,
    help="Import MODULE so its @handler functions register.",
)
@click.option(
    "--lease-ttl",
    default="10s",
    show_default=True,
    callback=duration_option,
    help="Lease time to live.",
)
@click.option(
    "--misfire-grace",
    default="5s",
    show_default=True,
    callback=duration_option,
    help="How late a fire may start before it counts as a misfire.",
)
@lease_lead_option("500ms")
@click.option("--shards", default=64, show_default=True, help="Shard count (fixed for a data dir).")
@edge_options
@notify_options
@auth_file_option
@server_tls_options
@store_policy_options
@inherit_env_option
@sandbox_options(dev=True)
@blob_options(dev=True)
@output_spool_options(dev=True)
@click.option("--log-level", default="info", show_default=True)
def dev(
    listen: str,
    data_dir: str,
    metrics_listen: str,
    http_listen: str,
    worker_count: int,
    slots: int,
    handler_modules: tuple[str, ...],
    lease_ttl: timedelta,
    misfire_grace: timedelta,
    lease_lead: timedelta,
    shards: int,
    auth_file: str | None,
    server_tls: ServerTls | None,
    insecure: bool,
    retention: timedelta | None,
    quota_file: Quotas,
    secret_keys: KeyRing | None,
    inherit_env: bool,
    log_level: str,
    edge: EdgeOptions,
    notify: NotifyConfig,
    sandbox: SandboxConfig,
    blobs: BlobOptions,
    output_spool: OutputSpoolConfig,
) -> None:
    """Run every role in one process on the embedded SQLite store."""
    from shardcron.coordinator.data_dir_lock import DataDirInUse, lock_data_dir

    setup_logging(log_level)
    if worker_count:  # its commands may run as other users: nothing secret of it readable
        check_private(
            sandbox,
            {"auth file": auth_file, "secrets key file": secret_keys and secret_keys.path},
        )
    auth, in_process_token = dev_auth(auth_file)
    poller = PollerConfig(
        lease_ttl=lease_ttl,
        heartbeat_interval=lease_ttl / 3,
        misfire_grace=misfire_grace,
        lease_lead=lease_lead,
        secret_keys=secret_keys,
    )
    # Before the store is opened: a second process on this directory would own every
    # shard too and run every run twice.
    try:
        data_dir_lock = lock_data_dir(Path(data_dir))
    except DataDirInUse as e:
        raise click.ClickException(f"cannot start: {e}") from e
    from shardcron.coordinator.coordination import LocalCoordination
    from shardcron.coordinator.node import Node, NodeConfig
    from shardcron.coordinator.sqlite.store import SqliteStore

    data = Path(data_dir)
    blob_store = blobs.store(data)
    if worker_count and (sandbox.run_as or sandbox.run_as_range):
        data.mkdir(parents=True, exist_ok=True)
        data.chmod(0o700)  # the store: none of the users commands run as may read it
    store = SqliteStore(
        data / "shardcron.db",
        shard_count=shards,
        retention=retention,
        writer_process=True,
        output_cap_bytes=TAIL_BYTES,  # beside the blob store's whole output
    )
    config = NodeConfig(
        listen=listen,
        metrics_listen=metrics_listen,
        http_listen=http_listen,
        node_id="dev",
        poller=poller,
        output=OutputBlobConfig(limit_bytes=blobs.output_limit),
        artifact_limits=blobs.artifact_limits,
        artifact_grace=blobs.artifact_grace,
        tls=server_tls,
        insecure=insecure,
        quotas=quota_file,
        http_allowed_hosts=edge.allowed_hosts,
        http_allowed_origins=edge.allowed_origins,
        call_limits=edge.call_limits,
        notify=notify,
    )
    tune_collector()
    try:
        node = Node(
            store,
            LocalCoordination(data, shard_count=shards, node_id="dev"),
            config,
            auth=auth,
            blobs=blob_store,
        )
        workers = InProcessWorkers(
            count=worker_count,
            slots=slots,
            handler_modules=list(handler_modules),
            token=in_process_token,
            inherit_env=inherit_env,
            sandbox=sandbox,
            output_spool=output_spool,
        )
        asyncio.run(_dev(node, auth, workers, data))
    except ShardcronError as e:
        raise click.ClickException(f"cannot start: {e.message}") from e
    finally:
        data_dir_lock.release()


@dataclass(frozen=True, slots=True, kw_only=True)
class InProcessWorkers:
    """The workers ``dev`` runs beside its node, and how they connect to it."""

    count: int
    slots: int
    handler_modules: list[str]
    token: str | None  # the in-process workers' own token, with an auth file
    inherit_env: bool
    sandbox: SandboxConfig  # how their commands are contained, and as whom they run
    # how much output each keeps on disk while the blob store is down: under DATA_DIR/spool
    output_spool: OutputSpoolConfig


async def _dev(node: Node, auth: AuthSource | None, spec: InProcessWorkers, data_dir: Path) -> None:
    """Serves ``node`` and runs the in-process workers until a signal."""
    from shardcron.worker import Worker, registry
    from shardcron.worker.artifacts import ArtifactCache
    from shardcron.worker.handlers import load_handler_modules
    from shardcron.worker.metrics import WorkerCollector

    config = node.config
    data_dir.mkdir(parents=True, exist_ok=True)
    load_handler_modules(spec.handler_modules)
    # the in-process workers connect as the node's own calls to other nodes do
    tls = config.tls
    credentials = tls.peer_tls().credentials() if tls is not None else None
    # one cache of jobs' code archives for every in-process worker, beside the data
    cache = ArtifactCache(
        spec.sandbox.artifact_cache or data_dir / "artifact-cache",
        spec.sandbox.artifact_cache_bytes,
    )
    workers = [
        Worker(
            "",  # the node's address, once it serves
            worker_id=f"dev-worker-{i}",
            slots=spec.slots,
            registry=registry,
            token=spec.token,
            credentials=credentials,
            inherit_env=spec.inherit_env,
            sandbox=spec.sandbox,
            artifacts=cache,
            output_spool=dataclasses.replace(
                spec.output_spool, directory=data_dir / "spool" / f"dev-worker-{i}"
            ),
        )
        for i in range(spec.count)
    ]
    try:  # before serving: a host that cannot contain them as asked stops the start
        for w in workers:
            w.sandbox.open()
    except ValueError as e:
        raise click.ClickException(f"cannot start: {e}") from e
    await node.start()
    reload_on_sighup(auth)
    for w in workers:
        w.target = node.address
    node.metrics.registry.register(WorkerCollector(lambda: workers))
    tasks = [asyncio.create_task(w.run()) for w in workers]
    served = ""
    if config.metrics_listen:
        host = config.metrics_listen.rpartition(":")[0]
        served = f", metrics on http://{host}:{node.metrics_port}/metrics"
    if config.http_listen:
        host = config.http_listen.rpartition(":")[0] or "127.0.0.1"
        scheme = "https" if tls is not None else "http"
        served += f", dashboard and HTTP API on {scheme}://{host}:{node.http_port}/"
    click.echo(f"shardcron dev: serving on {node.address} (data in {data_dir}){served}", err=True)
    try:
        await until_signalled()
    finally:
        click.echo("shardcron dev: stopping", err=True)
        for w in workers:
            await w.stop()
        for t in tasks:
            t.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        await node.stop()
