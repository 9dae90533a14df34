"""The ``shardcron`` program: the user CLI plus the commands that run roles.

This is the one module that sees both the server roles (``shardcron.coordinator``)
and the worker (``shardcron.worker``): ``dev`` runs every role in one process on
the embedded store, ``worker`` runs a worker against a node.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import socket
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import click

from shardcron import auth_options
from shardcron.auth_options import (
    auth_file_option,
    dev_auth,
    node_auth,
    node_token_option,
    reload_on_sighup,
    worker_token_file_option,
    worker_token_option,
)
from shardcron.blob_options import BlobOptions, blob_options
from shardcron.client.cli import cli
from shardcron.client.cli.state import CliState
from shardcron.client.cli.tls_options import client_tls_options, server_tls_options
from shardcron.client.errors import ShardcronError
from shardcron.client.tls import ClientTls, ServerTls
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
    cassandra_options,
    duration_option,
    lease_lead_option,
    parse_labels,
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


@cli.command()
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


@cli.command("worker")
@click.option(
    "--target",
    "worker_target",
    envvar="SHARDCRON_TARGET",
    default="127.0.0.1:7400",
    show_default=True,
    help="A node's address, or several comma-separated: one stream to each poller "
    "(ignored with --zk).",
)
@click.option(
    "--zk", default=None, envvar="SHARDCRON_ZK", help="ZooKeeper hosts: find every poller there."
)
@click.option(
    "--cluster",
    "cluster_name",
    default="default",
    show_default=True,
    help="Cluster name in ZooKeeper.",
)
@click.option("--id", "worker_id", default=None, help="Worker id (default: host-pid).")
@click.option("--slots", default=8, show_default=True)
@click.option("--label", "labels", multiple=True, help="KEY=VALUE advertised to the scheduler.")
@click.option("--cpu", "cpu_millis", default=0, help="CPU millicores advertised.")
@click.option("--memory", "memory_mb", default=0, help="Memory in MB advertised.")
@click.option(
    "--handlers",
    "handler_modules",
    multiple=True,
    help="Import MODULE so its @handler functions register.",
)
@click.option("--no-commands", is_flag=True, help="Serve handlers only, never run command jobs.")
@worker_token_option
@worker_token_file_option
@client_tls_options
@click.option(
    "--metrics-listen", default="", help="Prometheus /metrics address (host:port); '' = off."
)
@inherit_env_option
@sandbox_options(dev=False)
@output_spool_options(dev=False)
@click.option("--log-level", default="info", show_default=True)
def worker_cmd(
    worker_target: str,
    zk: str | None,
    cluster_name: str,
    worker_id: str | None,
    slots: int,
    labels: tuple[str, ...],
    cpu_millis: int,
    memory_mb: int,
    handler_modules: tuple[str, ...],
    no_commands: bool,
    worker_token: str,
    worker_token_file: str | None,
    client_tls: ClientTls,
    metrics_listen: str,
    inherit_env: bool,
    log_level: str,
    sandbox: SandboxConfig,
    output_spool: OutputSpoolConfig,
) -> None:
    """Run a worker that takes leases from a node, or from every poller of a cluster (--zk)."""
    setup_logging(log_level)
    if not client_tls.enabled:
        # `shardcron --tls-ca FILE worker` means the same as `shardcron worker --tls-ca FILE`
        root = click.get_current_context().find_object(CliState)
        client_tls = root.tls if root is not None else client_tls
    try:
        credentials = client_tls.credentials()
    except ShardcronError as e:
        raise click.ClickException(f"cannot start: {e.message}") from e
    from shardcron.worker import Worker, registry
    from shardcron.worker.handlers import load_handler_modules

    load_handler_modules(list(handler_modules))
    addresses: list[str] = []
    label_map = parse_labels(labels)
    if not no_commands:  # its commands may run as other users: its token unreadable to them
        check_private(sandbox, {"token file": worker_token_file, "TLS key": client_tls.key})
    token = auth_options.worker_token(worker_token, worker_token_file)
    try:
        worker = Worker(
            (lambda: list(addresses)) if zk else worker_target,
            worker_id=worker_id,
            slots=slots,
            labels=label_map,
            registry=registry,
            runs_commands=not no_commands,
            cpu_millis=cpu_millis,
            memory_mb=memory_mb,
            token=token,
            credentials=credentials,
            inherit_env=inherit_env,
            sandbox=sandbox,
            output_spool=output_spool,
        )
    except ShardcronError as e:  # a --label or --id past what a node takes
        raise click.ClickException(f"cannot start: {e.message}") from e
    if not no_commands:
        try:
            worker.sandbox.open()
        except ValueError as e:
            raise click.ClickException(f"cannot start: {e}") from e

    async def main() -> None:
        coordination = None
        if zk:
            from shardcron.coordinator.coordination import Member
            from shardcron.coordinator.zk import ZkCoordination

            coordination = ZkCoordination(
                zk, cluster=cluster_name, node_id=f"worker-{worker.worker_id}", roles=set()
            )
            await coordination.start(poller_id=None, poller_address="")

            def follow_pollers(members: list[Member]) -> None:
                # called on this loop: the worker opens and drops streams at once
                addresses[:] = [m.address for m in members]
                worker.targets_changed()

            coordination.watch_pollers(follow_pollers)
            info = {
                "slots": slots,
                "labels": label_map,
                "cpu_millis": cpu_millis,
                "memory_mb": memory_mb,
            }
            await coordination.register_worker(worker.worker_id, "", info)
        if metrics_listen:
            from shardcron.client.exposition import serve_metrics
            from shardcron.worker.metrics import worker_registry

            port = serve_metrics(worker_registry(lambda: [worker]), metrics_listen)
            host = metrics_listen.rpartition(":")[0] or "127.0.0.1"
            click.echo(f"shardcron worker: metrics on http://{host}:{port}/metrics", err=True)
        task = asyncio.create_task(worker.run())
        where = (
            f"the pollers of cluster {cluster_name!r} in ZooKeeper {zk}" if zk else worker_target
        )
        click.echo(f"shardcron worker {worker.worker_id}: connecting to {where}", err=True)
        await until_signalled()
        await worker.stop()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        if coordination is not None:
            await coordination.stop()

    tune_collector()
    asyncio.run(main())


@cli.command()
@click.option(
    "--roles", default="api,coordinator,poller", show_default=True, help="Roles this node runs."
)
@click.option("--zk", required=True, envvar="SHARDCRON_ZK", help="ZooKeeper hosts (host:port,...).")
@click.option(
    "--cluster",
    "cluster_name",
    default="default",
    show_default=True,
    help="Cluster name in ZooKeeper.",
)
@cassandra_options
@click.option(
    "--consistency", default="QUORUM", show_default=True, help="Cassandra consistency level."
)
@click.option(
    "--listen", default="127.0.0.1:7400", show_default=True, help="gRPC address to serve on."
)
@click.option(
    "--advertise", default="", help="host:port others reach this node at (default: --listen)."
)
@click.option("--node-id", default=None, help="Unique node id (default: host-port).")
@click.option("--metrics-listen", default="", help="Prometheus /metrics address; '' = off.")
@click.option("--http-listen", default="", help="HTTP/JSON API and dashboard address; '' = off.")
@click.option("--shards", default=64, show_default=True, help="Shard count (fixed for a cluster).")
@click.option(
    "--session-timeout", default=6.0, show_default=True, help="ZooKeeper session timeout, seconds."
)
@click.option("--lease-ttl", default="10s", show_default=True, callback=duration_option)
@click.option("--misfire-grace", default="5s", show_default=True, callback=duration_option)
@lease_lead_option("1s")
@edge_options
@notify_options
@auth_file_option
@node_token_option
@server_tls_options
@store_policy_options
@blob_options(dev=False)
@click.option("--log-level", default="info", show_default=True)
def node(
    roles: str,
    zk: str,
    cluster_name: str,
    cassandra: str,
    keyspace: str,
    consistency: str,
    listen: str,
    advertise: str,
    node_id: str | None,
    metrics_listen: str,
    http_listen: str,
    shards: int,
    session_timeout: float,
    lease_ttl: timedelta,
    misfire_grace: timedelta,
    lease_lead: timedelta,
    auth_file: str | None,
    node_token: str,
    server_tls: ServerTls | None,
    insecure: bool,
    retention: timedelta | None,
    quota_file: Quotas,
    secret_keys: KeyRing | None,
    log_level: str,
    edge: EdgeOptions,
    notify: NotifyConfig,
    blobs: BlobOptions,
) -> None:
    """Run a cluster node on ZooKeeper and Cassandra (the production entry point)."""
    setup_logging(log_level)
    auth = node_auth(auth_file, node_token)
    role_set = frozenset(r.strip() for r in roles.split(",") if r.strip())
    poller = PollerConfig(
        lease_ttl=lease_ttl,
        heartbeat_interval=lease_ttl / 3,
        misfire_grace=misfire_grace,
        lease_lead=lease_lead,
        secret_keys=secret_keys,
        job_cache_ttl=timedelta(seconds=1),
        recheck_interval=timedelta(seconds=2),
        hint_grace=timedelta(seconds=2),
        # a crowded instant is leased further ahead than on dev: a cluster poller
        # shares the machine with the store and other nodes, and its turns take longer
        crowd_lead_per_run=timedelta(milliseconds=1),
    )
    node_id = node_id or f"{socket.gethostname()}-{listen.rpartition(':')[2]}"
    from shardcron.coordinator.cassandra.store import CassandraStore
    from shardcron.coordinator.node import Node, NodeConfig
    from shardcron.coordinator.store import DEFAULT_OUTPUT_CAP_BYTES
    from shardcron.coordinator.zk import ZkCoordination

    blob_store = blobs.store()

    store = CassandraStore(
        [h.strip() for h in cassandra.split(",")],
        keyspace=keyspace,
        consistency=consistency,
        shard_count=shards,
        create_schema=False,  # `shardcron store init` creates it, once
        retention=retention,
        # beside a blob store, which keeps the whole output, the job store keeps its tail
        output_cap_bytes=DEFAULT_OUTPUT_CAP_BYTES if blob_store is None else TAIL_BYTES,
    )
    coordination = ZkCoordination(
        zk,
        cluster=cluster_name,
        node_id=node_id,
        shard_count=shards,
        session_timeout=session_timeout,
        roles=set(role_set & {"coordinator", "poller"}),
    )
    config = NodeConfig(
        listen=listen,
        advertise=advertise,
        metrics_listen=metrics_listen,
        http_listen=http_listen,
        roles=role_set,
        node_id=node_id,
        poller=poller,
        node_token=node_token,
        tls=server_tls,
        insecure=insecure,
        quotas=quota_file,
        http_allowed_hosts=edge.allowed_hosts,
        http_allowed_origins=edge.allowed_origins,
        call_limits=edge.call_limits,
        output=OutputBlobConfig(limit_bytes=blobs.output_limit),
        artifact_limits=blobs.artifact_limits,
        artifact_grace=blobs.artifact_grace,
        notify=notify,
    )
    tune_collector()
    try:
        node_ = Node(store, coordination, config, auth=auth, blobs=blob_store)
    except ShardcronError as e:
        raise click.ClickException(f"cannot start: {e.message}") from e
    asyncio.run(_node(node_, auth))


async def _node(node: Node, auth: AuthSource | None) -> None:
    """Serves ``node`` until a signal."""
    config = node.config
    try:
        await node.start()
    except ShardcronError as e:
        raise click.ClickException(f"cannot start: {e.message}") from e
    reload_on_sighup(auth)
    roles = ",".join(sorted(config.roles))
    click.echo(
        f"shardcron node {config.node_id}: serving on {node.address} (roles: {roles})", err=True
    )
    try:
        await until_signalled()
    finally:
        click.echo(f"shardcron node {config.node_id}: stopping", err=True)
        await node.stop()


@cli.group()
def store() -> None:
    """The Cassandra schema."""


@store.command("init")
@cassandra_options
@click.option("--replication-factor", default=1, show_default=True, help="SimpleStrategy factor.")
@click.option("--shards", default=64, show_default=True, help="Shard count (fixed for a cluster).")
def store_init(cassandra: str, keyspace: str, replication_factor: int, shards: int) -> None:
    """Create the keyspace and tables (or check them); safe to run again."""
    from shardcron.coordinator.cassandra.store import init_schema

    version = asyncio.run(
        init_schema(
            [h.strip() for h in cassandra.split(",")],
            keyspace=keyspace,
            replication={"class": "SimpleStrategy", "replication_factor": replication_factor},
            shard_count=shards,
        )
    )
    click.echo(f"keyspace {keyspace}: schema version {version}")


def main() -> None:
    cli(prog_name="shardcron")


if __name__ == "__main__":
    main()
