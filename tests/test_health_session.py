"""The poller's services follow its ZooKeeper session in gRPC health: a real node on a
real ZooKeeper, reached through a proxy that freezes the way a hung server or a cut
network does (``tests/support/zookeeper.ZkProxy``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from shardcron.coordinator.node import Node, NodeConfig
from shardcron.coordinator.sqlite.store import SqliteStore
from shardcron.coordinator.zk.coordination import ZkCoordination
from tests.support.local_node import SHARDS
from tests.support.waiting import until
from tests.support.zookeeper import ZkProxy

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
JOBS = "shardcron.v1.JobService"
WORKERS = "shardcron.v1.WorkerService"
POLLERS = "shardcron.v1.PollerService"
SESSION_TIMEOUT = 2.0


@dataclass
class ZkNode:
    node: Node
    coordination: ZkCoordination
    proxy: ZkProxy
    statuses: dict[str, int]  # the latest answer of Health/Check, per service

    async def refresh(self) -> dict[str, int]:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{self.node.port}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            for service in (JOBS, WORKERS, POLLERS):
                request = health_pb2.HealthCheckRequest(service=service)
                self.statuses[service] = (await stub.Check(request, timeout=10)).status
        return self.statuses

    async def until_workers(self, status: int) -> None:
        """Asks until WorkerService answers ``status`` (for 20 s at most)."""

        async def answered() -> bool:
            return (await self.refresh())[WORKERS] == status

        await until(answered, 20, f"WorkerService answering {status}", interval=0.05)

    async def cut_off(self) -> None:
        """Freezes ZooKeeper once the poller serves, and waits for its services to stop:
        the job API keeps serving on the store."""
        await self.until_workers(SERVING)
        self.proxy.freeze()
        await self.until_workers(NOT_SERVING)
        assert self.statuses == {JOBS: SERVING, WORKERS: NOT_SERVING, POLLERS: NOT_SERVING}


@pytest.fixture
async def zk_node(tmp_path: Path, zk_hosts: str) -> AsyncIterator[ZkNode]:
    proxy = ZkProxy(zk_hosts)
    coordination = ZkCoordination(
        proxy.hosts, node_id="p1", shard_count=SHARDS, session_timeout=SESSION_TIMEOUT
    )
    store = SqliteStore(tmp_path / "shardcron.db", shard_count=SHARDS)
    node = Node(store, coordination, NodeConfig(listen="127.0.0.1:0", node_id="p1"))
    await node.start()
    try:
        yield ZkNode(node=node, coordination=coordination, proxy=proxy, statuses={})
    finally:
        proxy.thaw()
        await node.stop()
        proxy.close()


async def test_poller_services_are_not_serving_while_the_zookeeper_session_is_suspended(
    zk_node: ZkNode,
) -> None:
    await zk_node.cut_off()
    zk_node.proxy.thaw()
    await zk_node.until_workers(SERVING)
    assert zk_node.statuses == dict.fromkeys((JOBS, WORKERS, POLLERS), SERVING)


async def test_poller_services_serve_again_in_the_session_that_replaces_a_lost_one(
    zk_node: ZkNode,
) -> None:
    await zk_node.cut_off()
    await asyncio.sleep(SESSION_TIMEOUT * 2)  # the server expires the session meanwhile
    zk_node.proxy.thaw()
    await until(lambda: zk_node.coordination.session_generation() > 0, what="a lost session")
    await zk_node.until_workers(SERVING)
    assert zk_node.statuses == dict.fromkeys((JOBS, WORKERS, POLLERS), SERVING)
