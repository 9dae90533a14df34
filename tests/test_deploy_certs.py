"""The certificates ``make cluster`` makes with openssl (``deploy.certs``, the README's
commands) work: a node serves mTLS with them, the cluster's health wait, its user's
client and a worker's certificate connect, and a second ``up`` keeps the CA."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from deploy.certs import make_certs
from deploy.cluster import client_env, node_tls_args, wait_serving
from shardcron.client.cli.tls_options import server_tls_options
from shardcron.client.sdk import AsyncClient
from shardcron.client.tls import ServerTls
from shardcron.coordinator.coordination import LocalCoordination
from shardcron.coordinator.node import Node, NodeConfig
from shardcron.coordinator.sqlite.store import SqliteStore

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


def node_tls_from_args(args: list[str]) -> ServerTls:
    """What ``shardcron node`` makes of the flags ``deploy.cluster`` gives it."""
    import click

    @click.command()
    @server_tls_options
    def parse(server_tls: ServerTls | None, insecure: bool) -> ServerTls | None:
        return server_tls

    tls = parse.main(args, standalone_mode=False)
    assert isinstance(tls, ServerTls)
    return tls


async def test_the_cluster_certificates_serve_mtls(tmp_path: Path) -> None:
    state = tmp_path / "cluster"
    tls = make_certs(state / "tls", clients=("worker", "client"))
    server_tls = node_tls_from_args(node_tls_args(tls))
    assert server_tls.client_ca is not None
    store = SqliteStore(tmp_path / "shardcron.db", shard_count=4)
    node = Node(
        store,
        LocalCoordination(tmp_path, shard_count=4, node_id="certs"),
        NodeConfig(listen="127.0.0.1:0", node_id="certs", tls=server_tls),
    )
    await node.start()
    try:
        target = f"localhost:{node.port}"
        await asyncio.to_thread(wait_serving, target, state, 30)
        env = client_env(state)
        for cert, key in (
            (env["SHARDCRON_TLS_CERT"], env["SHARDCRON_TLS_KEY"]),
            (tls / "worker.crt", tls / "worker.key"),
        ):
            async with AsyncClient(
                target, tls_ca=env["SHARDCRON_TLS_CA"], tls_cert=cert, tls_key=key
            ) as client:
                assert (await client.list_jobs()).items == []
    finally:
        await node.stop()


def test_a_second_make_keeps_the_ca_and_adds_what_is_missing(tmp_path: Path) -> None:
    tls = make_certs(tmp_path / "tls", clients=("client",))
    ca = (tls / "ca.crt").read_bytes()
    make_certs(tmp_path / "tls", clients=("client", "worker"))
    assert (tls / "ca.crt").read_bytes() == ca
    assert (tls / "worker.crt").exists()
    assert (tls / "ca.key").stat().st_mode & 0o077 == 0
    assert not list(tls.glob("*.csr")) and not list(tls.glob("*.ext"))
