"""``shardcron node``: a cluster node on ZooKeeper and Cassandra, running the roles it
is given (the production entry point)."""

from __future__ import annotations

import asyncio
import socket
from datetime import timedelta
from typing import TYPE_CHECKING

import click

from shardcron.auth_options import auth_file_option, node_auth, node_token_option, reload_on_sighup
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
from shardcron.policy_options import store_policy_options
from shardcron.role_commands import (
    cassandra_options,
    duration_option,
    lease_lead_option,
    setup_logging,
    until_signalled,
)

if TYPE_CHECKING:
    from shardcron.coordinator.node import Node
    from shardcron.coordinator.notify.sender import NotifyConfig


@click.command()
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
