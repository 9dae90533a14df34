"""``shardcron worker``: a worker that takes leases from a node, or from every poller of
a cluster it finds in ZooKeeper (``--zk``), and its metrics port."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

import click

from shardcron import auth_options
from shardcron.auth_options import worker_token_file_option, worker_token_option
from shardcron.client.cli.state import CliState
from shardcron.client.cli.tls_options import client_tls_options
from shardcron.client.errors import ShardcronError
from shardcron.client.tls import ClientTls
from shardcron.collector import tune_collector
from shardcron.policy_options import inherit_env_option
from shardcron.role_commands import parse_labels, setup_logging, until_signalled
from shardcron.sandbox_options import check_private, sandbox_options
from shardcron.spool_options import output_spool_options

if TYPE_CHECKING:
    from shardcron.worker.output_spool import OutputSpoolConfig
    from shardcron.worker.sandbox import SandboxConfig


@click.command("worker")
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
