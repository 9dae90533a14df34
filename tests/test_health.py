"""gRPC health checking per service, and Health/List, through a real gRPC health client
against a real node; and ``grpc-health-probe`` where it is installed."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from shardcron.coordinator.coordination import LocalCoordination
from shardcron.coordinator.node import Node, NodeConfig
from shardcron.coordinator.service import build_server
from shardcron.coordinator.sqlite.store import SqliteStore
from tests.support.local_node import SHARDS, started_node

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
JOBS = "shardcron.v1.JobService"
WORKERS = "shardcron.v1.WorkerService"
POLLERS = "shardcron.v1.PollerService"
CLUSTER = "shardcron.v1.ClusterService"


async def status(channel: grpc.aio.Channel, service: str) -> int:
    stub = health_pb2_grpc.HealthStub(channel)
    reply = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
    return reply.status


async def listed(channel: grpc.aio.Channel) -> dict[str, int]:
    stub = health_pb2_grpc.HealthStub(channel)
    reply = await stub.List(health_pb2.HealthListRequest(), timeout=10)
    return {name: r.status for name, r in reply.statuses.items()}


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    async with started_node(tmp_path, "n1") as node:
        yield node


async def test_each_service_of_a_node_answers_its_own_health(node: Node) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{node.port}") as channel:
        for service in ("", JOBS, WORKERS, POLLERS, CLUSTER):
            assert await status(channel, service) == SERVING, service
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await status(channel, "shardcron.v1.NoSuchService")
        assert raised.value.code() == grpc.StatusCode.NOT_FOUND
        assert raised.value.details() == "service 'shardcron.v1.NoSuchService' is not served here"
        assert await listed(channel) == dict.fromkeys(
            ("", JOBS, WORKERS, POLLERS, CLUSTER), SERVING
        )


async def test_an_api_node_has_no_poller_services(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "shardcron.db", shard_count=SHARDS)
    coordination = LocalCoordination(tmp_path, shard_count=SHARDS, node_id="api")
    config = NodeConfig(listen="127.0.0.1:0", node_id="api", roles=frozenset({"api"}))
    node = Node(store, coordination, config)
    await node.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{node.port}") as channel:
            assert await listed(channel) == dict.fromkeys(("", JOBS, CLUSTER), SERVING)
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await status(channel, WORKERS)
            assert raised.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        await node.stop()


async def test_health_is_not_serving_before_the_node_started_nor_once_it_stops(
    tmp_path: Path,
) -> None:
    coordination = LocalCoordination(tmp_path, shard_count=SHARDS, node_id="c")
    server, port = build_server(
        "127.0.0.1:0", api=None, poller=None, coordination=coordination, router=None
    )
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            assert await listed(channel) == {"": NOT_SERVING, CLUSTER: NOT_SERVING}
            await server.health.serving()  # type: ignore[attr-defined]
            assert await listed(channel) == {"": SERVING, CLUSTER: SERVING}
            await server.health.enter_graceful_shutdown()  # type: ignore[attr-defined]
            assert await status(channel, CLUSTER) == NOT_SERVING
            assert await status(channel, "") == NOT_SERVING
    finally:
        await server.stop(None)


@pytest.mark.skipif(shutil.which("grpc-health-probe") is None, reason="grpc-health-probe absent")
async def test_grpc_health_probe_finds_the_job_service(node: Node) -> None:
    probe = await asyncio.to_thread(  # the node serves on this loop meanwhile
        subprocess.run,
        ["grpc-health-probe", f"-addr=127.0.0.1:{node.port}", f"-service={JOBS}"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert probe.returncode == 0, probe.stdout + probe.stderr
    assert "SERVING" in probe.stdout + probe.stderr
