"""Workers and nodes under an auth file (issue 12, items 4-5), on a real in-process node
over gRPC: a worker id is its principal's, a worker pool takes only its owners' runs, and
node-to-node hints name ids that the poller reads from the store (a forged one does
nothing)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import grpc
import grpc.aio
import pytest

from shardcron.client.sdk import AsyncClient
from shardcron.client.types import HandlerTask, JobSpec, Schedule
from shardcron.coordinator.node import Node
from shardcron.v1 import cluster_pb2, cluster_pb2_grpc, worker_pb2, worker_pb2_grpc
from tests.support.auth import OTHER, OWN, TOKENS, auth_file_text, auth_node, bearer

WAIT = 30.0
NOOP = JobSpec(name="n", task=HandlerTask(name="noop"), schedule=Schedule.immediate())


@pytest.fixture
async def node(tmp_path) -> AsyncIterator[Node]:  # type: ignore[no-untyped-def]
    async with auth_node(tmp_path) as n:
        yield n


@pytest.fixture
async def channel(node: Node) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{node.port}") as ch:
        yield ch


def admin(node: Node, owner: str) -> AsyncClient:
    return AsyncClient(f"127.0.0.1:{node.port}", owner=owner, token=TOKENS["admin"])


async def connect(
    channel: grpc.aio.Channel, principal: str, worker_id: str, instance_id: str = "i1"
) -> grpc.aio.StreamStreamCall:
    call = worker_pb2_grpc.WorkerServiceStub(channel).Connect(metadata=bearer(principal))
    hello = worker_pb2.Hello(
        worker_id=worker_id, slots=10, handlers=["noop"], instance_id=instance_id
    )
    await call.write(worker_pb2.WorkerMessage(hello=hello))
    return call


async def next_of(call: grpc.aio.StreamStreamCall, kind: str) -> worker_pb2.PollerMessage:
    while True:
        msg = await asyncio.wait_for(call.read(), WAIT)
        assert msg is not grpc.aio.EOF, f"stream ended before a {kind}"
        if msg.WhichOneof("body") == kind:
            return msg


async def refused_with(call: grpc.aio.StreamStreamCall) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        while True:
            msg = await asyncio.wait_for(call.read(), WAIT)
            assert msg is not grpc.aio.EOF and msg.WhichOneof("body") != "welcome"
    return refused.value.code()


async def test_a_worker_id_is_bound_to_its_principal(channel: grpc.aio.Channel) -> None:
    first = await connect(channel, "worker", "w-bound")
    await next_of(first, "welcome")
    # another principal may not take the id over, nor speak for it once it is gone
    assert await refused_with(await connect(channel, "worker-b", "w-bound", "i2")) == (
        grpc.StatusCode.PERMISSION_DENIED
    )
    first.cancel()
    thief = await connect(channel, "worker-b", "w-bound", "i1")
    assert await refused_with(thief) == grpc.StatusCode.PERMISSION_DENIED
    # its own principal reconnects
    again = await connect(channel, "worker", "w-bound", "i1")
    await next_of(again, "welcome")
    again.cancel()


async def test_a_worker_pool_is_leased_only_its_owners_runs(
    node: Node, channel: grpc.aio.Channel
) -> None:
    pool_b = await connect(channel, "worker-b", "w-pool-b")
    await next_of(pool_b, "welcome")
    async with admin(node, OWN) as as_a, admin(node, OTHER) as as_b:
        theirs = [await as_a.create_job(NOOP.replace(name=f"a{i}")) for i in range(5)]
        ours = await as_b.create_job(NOOP)
        [ours_run] = (await as_b.list_runs(ours.id)).items
        leases = (await next_of(pool_b, "leases")).leases.leases
        assert [lease.run_id for lease in leases] == [ours_run.id]
        assert {lease.owner for lease in leases} == {OTHER}
        # a's runs wait, saying why
        [waiting] = (await as_a.list_runs(theirs[0].id)).items
        assert waiting.waiting_reason == f"no connected worker takes runs of owner {OWN}"
        # a worker of a's pool takes them
        pool_a = await connect(channel, "worker", "w-pool-a")
        taken: set[str] = set()
        while len(taken) < len(theirs):
            taken |= {lease.job_id for lease in (await next_of(pool_a, "leases")).leases.leases}
        assert taken == {j.id for j in theirs}
        pool_a.cancel()
    pool_b.cancel()


async def test_forged_hints_name_nothing_that_runs(node: Node, channel: grpc.aio.Channel) -> None:
    """NotifyRuns and JobChanged carried whole runs and jobs, and the poller ran the
    sender's copy: a forged hint made a node run a command that was never stored. They
    carry ids now, and the poller reads what they name from the store."""
    poller = cluster_pb2_grpc.PollerServiceStub(channel)
    as_node = bearer("node")
    await poller.NotifyRuns(cluster_pb2.NotifyRunsRequest(run_ids=["forged-run"]), metadata=as_node)
    await poller.JobChanged(cluster_pb2.JobChangedRequest(job_id="forged-job"), metadata=as_node)
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await poller.CancelRun(cluster_pb2.CancelRunRequest(run_id="forged-run"), metadata=as_node)
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as bad:
        await poller.NotifyRuns(cluster_pb2.NotifyRunsRequest(run_ids=[""]), metadata=as_node)
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "run_ids[0]" in (bad.value.details() or "")
    # nobody but a node may hint at all
    with pytest.raises(grpc.aio.AioRpcError) as denied:
        await poller.NotifyRuns(
            cluster_pb2.NotifyRunsRequest(run_ids=["forged-run"]), metadata=bearer("admin")
        )
    assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED

    # the first lease a worker of every owner gets is the one stored job's run
    anyone = await connect(channel, "worker-any", "w-any")
    await next_of(anyone, "welcome")
    async with admin(node, OWN) as as_a:
        job = await as_a.create_job(NOOP)
        [run] = (await as_a.list_runs(job.id)).items
        # a hint naming a stored run by id is read from the store: nothing changes
        await poller.NotifyRuns(cluster_pb2.NotifyRunsRequest(run_ids=[run.id]), metadata=as_node)
        leases = (await next_of(anyone, "leases")).leases.leases
        assert [(lease.run_id, lease.job_id) for lease in leases] == [(run.id, job.id)]
    anyone.cancel()


async def test_a_reload_that_removes_a_workers_principal_ends_its_stream(
    node: Node, channel: grpc.aio.Channel, tmp_path, caplog: pytest.LogCaptureFixture
) -> None:  # type: ignore[no-untyped-def]
    """A worker's stream is judged when it opens and lives for hours: without this, a
    principal taken out of the auth file kept receiving leases until it reconnected."""
    pool_b = await connect(channel, "worker-b", "w-revoked")
    await next_of(pool_b, "welcome")
    assert node.auth is not None
    (tmp_path / "auth.toml").write_text(auth_file_text(["admin", "worker"]))
    assert node.auth.reload()
    async with admin(node, OTHER) as as_b:
        await as_b.create_job(NOOP)
        assert await refused_with(pool_b) == grpc.StatusCode.PERMISSION_DENIED
    assert await refused_with(await connect(channel, "worker-b", "w-revoked")) == (
        grpc.StatusCode.UNAUTHENTICATED
    )
    # both refusals are audited: the stream ended by the reload, the reconnection
    refused = [
        json.loads(r.getMessage())
        for r in caplog.records
        if r.name == "shardcron.audit" and "peer" in r.getMessage()
    ]
    assert [(x["principal"], x["method"], x["outcome"]) for x in refused] == [
        ("worker-b", "/shardcron.v1.WorkerService/Connect", "PERMISSION_DENIED"),
        ("anonymous", "/shardcron.v1.WorkerService/Connect", "UNAUTHENTICATED"),
    ]
