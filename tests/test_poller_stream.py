"""The lease stream's edge (coordinator/worker_stream.py) in front of a real poller on
SQLite, spoken to by raw gRPC stubs: what one stream sends touches no other stream."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import grpc
import pytest

from shardcron.coordinator.coordination import Assignment
from shardcron.coordinator.ids import utcnow
from shardcron.coordinator.metrics import Metrics
from shardcron.coordinator.poller import Poller, PollerConfig
from shardcron.coordinator.sqlite.store import SqliteStore
from shardcron.coordinator.store import NewJob
from shardcron.coordinator.worker_stream import WorkerStreamServicer
from shardcron.v1 import types_pb2, worker_pb2, worker_pb2_grpc
from tests.support.store_builders import SHARDS, make_job, make_run

WAIT = 30.0


@pytest.fixture
async def poller(tmp_path: Path) -> AsyncIterator[Poller]:
    store = SqliteStore(tmp_path / "db", shard_count=SHARDS, bucket_seconds=60)
    await store.open()
    p = Poller(
        store,
        poller_id="p1",
        config=PollerConfig(scan_interval=timedelta(milliseconds=100)),
        metrics=Metrics(),
    )
    p.start()
    await p.on_assignment(
        Assignment(epoch=1, fencing_epoch=1, shards=frozenset(range(SHARDS)), active=True)
    )
    try:
        yield p
    finally:
        await p.stop()
        await store.close()


@contextlib.asynccontextmanager
async def serving(
    servicer: WorkerStreamServicer,
) -> AsyncIterator[worker_pb2_grpc.WorkerServiceStub]:
    """A stub of ``servicer`` served on a free port."""
    server = grpc.aio.server()
    worker_pb2_grpc.add_WorkerServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield worker_pb2_grpc.WorkerServiceStub(channel)
    finally:
        await channel.close()
        await server.stop(None)


@pytest.fixture
async def stub(poller: Poller) -> AsyncIterator[worker_pb2_grpc.WorkerServiceStub]:
    async with serving(WorkerStreamServicer(poller.submit, poller.may_lease)) as served:
        yield served


def hello(worker_id: str) -> worker_pb2.WorkerMessage:
    return worker_pb2.WorkerMessage(
        hello=worker_pb2.Hello(worker_id=worker_id, slots=1, handlers=["noop"])
    )


async def read(call):  # type: ignore[no-untyped-def]
    return await asyncio.wait_for(call.read(), WAIT)


async def next_of(call, kind: str) -> worker_pb2.PollerMessage:  # type: ignore[no-untyped-def]
    while True:
        msg = await read(call)
        assert msg is not grpc.aio.EOF, f"stream ended before a {kind}"
        if msg.WhichOneof("body") == kind:
            return msg


async def test_a_malformed_worker_message_ends_only_its_stream(
    poller: Poller, stub: worker_pb2_grpc.WorkerServiceStub, caplog: pytest.LogCaptureFixture
) -> None:
    """A message the codec refuses used to reach the poller's rules and fail its turn,
    which made the poller forget and reload everything it held: one worker's bad
    message disturbed every run of every shard. Now it ends that stream alone."""
    good = stub.Connect()
    await good.write(hello("w-good"))
    await next_of(good, "welcome")
    now = utcnow()
    job = dataclasses.replace(make_job(), created_at=now, updated_at=now)
    run = dataclasses.replace(make_run(job, due_at=now), created_at=now)
    await poller.store.create_jobs([NewJob(job=job, runs=[run])])
    poller.runs_created([run], [job])
    [lease] = (await next_of(good, "leases")).leases.leases
    assert lease.run_id == run.id

    bad = stub.Connect()
    await bad.write(hello("w-bad"))
    await next_of(bad, "welcome")
    result = worker_pb2.RunResult(  # a reason this poller does not know
        run_id=run.id,
        fencing_token=lease.fencing_token,
        state=types_pb2.RUN_STATE_SUCCEEDED,
        reason=999,
    )
    with caplog.at_level(logging.WARNING, logger="shardcron"):
        await bad.write(worker_pb2.WorkerMessage(results=worker_pb2.Results(results=[result])))
        with pytest.raises(grpc.aio.AioRpcError) as ended:
            while await read(bad) is not grpc.aio.EOF:
                pass
        assert ended.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "results.results[0].reason" in (ended.value.details() or "")

        # the good stream's lease is held as before: renewed, and its result accepted
        ref = worker_pb2.LeaseRef(run_id=run.id, fencing_token=lease.fencing_token)
        await good.write(worker_pb2.WorkerMessage(heartbeat=worker_pb2.Heartbeat(leases=[ref])))
        [renewal] = (await next_of(good, "renewals")).renewals.renewals
        assert (renewal.run_id, renewal.ok) == (run.id, True)
        done = worker_pb2.RunResult(
            run_id=run.id, fencing_token=lease.fencing_token, state=types_pb2.RUN_STATE_SUCCEEDED
        )
        await good.write(worker_pb2.WorkerMessage(results=worker_pb2.Results(results=[done])))
        [ack] = (await next_of(good, "acks")).acks.acks
        assert ack.accepted
    assert not [r for r in caplog.records if "turn failed" in r.getMessage()]
    stored = (await poller.store.get_runs([run.id]))[run.id]
    assert stored.state.value == "SUCCEEDED"
    good.cancel()


async def test_the_first_message_must_be_a_hello_with_a_worker_id(
    stub: worker_pb2_grpc.WorkerServiceStub,
) -> None:
    call = stub.Connect()
    await call.write(worker_pb2.WorkerMessage(hello=worker_pb2.Hello(slots=1)))
    with pytest.raises(grpc.aio.AioRpcError) as ended:
        await read(call)
    assert ended.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert ended.value.details() == "hello: the first message must be a Hello with a worker_id"
