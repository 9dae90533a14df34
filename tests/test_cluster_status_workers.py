"""The workers a cluster status lists (issue 32): a tenant sees only the workers of its
own pools, and one reply stays small however many workers connect with however large a
Hello. Before, 300 worker streams of large Hellos made GetStatus fail
RESOURCE_EXHAUSTED for every tenant, and every tenant saw every pool's workers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import grpc
import grpc.aio
import pytest

from shardcron.client import codec
from shardcron.client.sdk import AsyncClient
from shardcron.client.types import HandlerTask, JobSpec, RunState, Schedule, WorkerInfo
from shardcron.coordinator.node import Node
from shardcron.coordinator.status_workers import (
    LISTED_WORKER_BYTES,
    MAX_LISTED_HANDLERS,
    MAX_LISTED_WORKERS,
    listed,
)
from shardcron.v1 import cluster_pb2, cluster_pb2_grpc
from shardcron.worker import Worker
from shardcron.worker.handlers import HandlerRegistry
from tests.support.auth import OTHER, TOKENS, auth_node, bearer
from tests.support.waiting import until
from tests.support.worker_streams import WAIT, WIDE_HANDLERS, WIDE_LABELS, first_of, open_stream

PER_POOL = 100
POOLS = {"worker": ("a",), "worker-b": ("b",), "worker-any": ("*",)}
REPLY_BOUND = 1_000_000  # bytes: far below gRPC's 4 MiB default


@pytest.fixture
async def crowded(tmp_path: Path) -> AsyncIterator[tuple[Node, grpc.aio.Channel]]:
    """A node with an auth file and 300 workers connected, 100 of each pool (owner a,
    owner b, every owner), each saying as much of itself as a Hello may."""
    async with (
        auth_node(tmp_path, http=True) as node,
        grpc.aio.insecure_channel(f"127.0.0.1:{node.port}") as channel,
    ):
        calls = [
            await open_stream(
                channel,
                f"{principal}-{i:03d}",
                principal=principal,
                labels=WIDE_LABELS,
                handlers=WIDE_HANDLERS,
            )
            for principal in POOLS
            for i in range(PER_POOL)
        ]
        assert set(await asyncio.gather(*(first_of(c) for c in calls))) == {"welcome"}
        yield node, channel
        for call in calls:
            call.cancel()


async def status_as(channel: grpc.aio.Channel, principal: str) -> cluster_pb2.ClusterStatus:
    stub = cluster_pb2_grpc.ClusterServiceStub(channel)
    return await stub.GetStatus(cluster_pb2.GetStatusRequest(), metadata=bearer(principal))


def pools_of(status: cluster_pb2.ClusterStatus | cluster_pb2.PollerStatus) -> set[tuple[str, ...]]:
    return {tuple(w.owners) for w in status.workers}


async def test_a_tenant_sees_its_own_pools_workers_in_a_small_reply(
    crowded: tuple[Node, grpc.aio.Channel],
) -> None:
    node, channel = crowded
    reader = await status_as(channel, "reader")  # owner a
    assert reader.ByteSize() < REPLY_BOUND
    assert pools_of(reader) <= {("a",), ("*",)}
    assert not [w.id for w in reader.workers if w.id.startswith("worker-b-")]
    # everything it may see is listed or counted: pool a's and every owner's
    assert len(reader.workers) + reader.workers_omitted == 2 * PER_POOL
    assert 0 < len(reader.workers) < 2 * PER_POOL
    assert [w.id for w in reader.workers] == sorted(w.id for w in reader.workers)
    for w in reader.workers:
        assert len(w.handlers) == MAX_LISTED_HANDLERS
        assert w.handlers_omitted == len(WIDE_HANDLERS) - MAX_LISTED_HANDLERS
        assert len(w.labels) == len(WIDE_LABELS)
    # an admin sees every pool, as bounded
    admin = await status_as(channel, "admin")
    assert admin.ByteSize() < REPLY_BOUND
    assert len(admin.workers) + admin.workers_omitted == 3 * PER_POOL
    # a writer of owners a and b sees both pools
    both = await status_as(channel, "writer-ab")
    assert len(both.workers) + both.workers_omitted == 3 * PER_POOL
    # over HTTP, the same tenant sees the same workers
    url = f"http://127.0.0.1:{node.http_port}/v1/cluster"
    headers = {"authorization": f"Bearer {TOKENS['reader']}"}
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as reply:
        assert reply.status == 200
        body = await reply.json()
    assert [w["id"] for w in body["workers"]] == [w.id for w in reader.workers]
    assert body["workersOmitted"] == reader.workers_omitted


async def test_a_poller_lists_for_another_node_only_whom_it_is_asked_for(
    crowded: tuple[Node, grpc.aio.Channel],
) -> None:
    """GetPollerStatus, node to node, is filtered and bounded the same way."""
    _, channel = crowded
    poller = cluster_pb2_grpc.PollerServiceStub(channel)
    of_b = await poller.GetPollerStatus(
        cluster_pb2.PollerStatusRequest(owners=["b", "*"]), metadata=bearer("node")
    )
    assert of_b.ByteSize() < REPLY_BOUND
    assert pools_of(of_b) <= {("b",), ("*",)}
    assert len(of_b.workers) + of_b.workers_omitted == 2 * PER_POOL
    every = await poller.GetPollerStatus(cluster_pb2.PollerStatusRequest(), metadata=bearer("node"))
    assert every.ByteSize() < REPLY_BOUND
    assert len(every.workers) + every.workers_omitted == 3 * PER_POOL


async def test_another_owners_job_runs_while_the_crowd_is_connected(
    crowded: tuple[Node, grpc.aio.Channel],
) -> None:
    node, channel = crowded
    target = f"127.0.0.1:{node.port}"
    worker = Worker(
        target,
        worker_id="real-b",
        registry=HandlerRegistry(builtins=True),
        token=TOKENS["worker-b"],
    )
    running = asyncio.create_task(worker.run())
    try:
        await until(lambda: worker.connected, WAIT, "the real worker's Welcome")
        async with AsyncClient(target, owner=OTHER, token=TOKENS["admin"]) as client:
            spec = JobSpec(name="b", task=HandlerTask(name="noop"), schedule=Schedule.immediate())
            job = await client.create_job(spec)
            [run] = (await client.list_runs(job.id)).items
            statuses = await asyncio.gather(*(status_as(channel, "reader") for _ in range(10)))
            assert (await client.wait_run(run.id, timeout=WAIT)).state == RunState.SUCCEEDED
        assert all(s.ByteSize() < REPLY_BOUND for s in statuses)
    finally:
        await worker.stop()
        await running


def info(worker_id: str, owners: tuple[str, ...], **fields: object) -> WorkerInfo:
    return WorkerInfo(
        id=worker_id,
        address="10.0.0.1:5000",
        slots_total=4,
        slots_used=0,
        owners=owners,
        connected_at=datetime(2026, 1, 1, tzinfo=UTC),
        **fields,  # type: ignore[arg-type]
    )


def test_listed_by_id_up_to_a_count_and_a_size() -> None:
    small = [info(f"w-{i:05d}", ("a",)) for i in range(MAX_LISTED_WORKERS + 7)]
    shown, omitted = listed(reversed(small), None)
    assert [w.id for w in shown] == [w.id for w in small[:MAX_LISTED_WORKERS]]
    assert omitted == 7
    wide = [info(f"w-{i:03d}", ("a",), labels=WIDE_LABELS) for i in range(100)]
    shown, omitted = listed(wide, frozenset({"a"}), omitted=3)
    size = sum(codec.worker_info_to_proto(w).ByteSize() for w in shown)
    assert 0 < len(shown) < 100 and size <= LISTED_WORKER_BYTES
    assert omitted == 100 - len(shown) + 3
    # whose a caller sees: its owners' pools and every owner's; a pool not said, no one's
    mixed = [info("a", ("a",)), info("b", ("b",)), info("any", ("*",)), info("old", ())]
    assert [w.id for w in listed(mixed, frozenset({"a"}))[0]] == ["a", "any"]
    assert listed(mixed, frozenset({"a"}))[1] == 0  # what it may not see is not counted
    assert [w.id for w in listed(mixed, None)[0]] == ["a", "any", "b", "old"]
