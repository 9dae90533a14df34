"""A real poller's lease streams, spoken to by raw gRPC stubs as a worker would, and
what the tests read back of it (its runs in the store, its fault counters)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator

import grpc

from shardcron.client.types import Job, JobSpec, Run
from shardcron.coordinator.ids import utcnow
from shardcron.coordinator.poller import Poller
from shardcron.coordinator.store import NewJob
from shardcron.coordinator.worker_stream import WorkerStreamServicer
from shardcron.v1 import worker_pb2, worker_pb2_grpc
from tests.support.pollers import WAIT
from tests.support.store_builders import make_job, make_run
from tests.support.waiting import until


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


def hello(worker_id: str) -> worker_pb2.WorkerMessage:
    return worker_pb2.WorkerMessage(
        hello=worker_pb2.Hello(worker_id=worker_id, slots=1, handlers=["noop"])
    )


async def read(call):  # type: ignore[no-untyped-def]
    return await asyncio.wait_for(call.read(), WAIT)


async def next_of(call, kind: str) -> worker_pb2.PollerMessage:  # type: ignore[no-untyped-def]
    """The stream's next message of ``kind`` (those before it are passed over)."""
    while True:
        msg = await read(call)
        assert msg is not grpc.aio.EOF, f"stream ended before a {kind}"
        if msg.WhichOneof("body") == kind:
            return msg


async def connect(stub: worker_pb2_grpc.WorkerServiceStub, worker_id: str):  # type: ignore[no-untyped-def]
    """A stream that said Hello as ``worker_id`` and was welcomed."""
    call = stub.Connect()
    await call.write(hello(worker_id))
    await next_of(call, "welcome")
    return call


async def lease_of(call, run: Run) -> worker_pb2.LeaseGrant:  # type: ignore[no-untyped-def]
    """The lease of ``run`` the stream is sent (other leases are passed over)."""
    while True:
        for lease in (await next_of(call, "leases")).leases.leases:
            if lease.run_id == run.id:
                return lease


def result(lease: worker_pb2.LeaseGrant, state: int) -> worker_pb2.WorkerMessage:
    done = worker_pb2.RunResult(run_id=lease.run_id, fencing_token=lease.fencing_token, state=state)
    return worker_pb2.WorkerMessage(results=worker_pb2.Results(results=[done]))


async def submit(poller: Poller, owner: str, spec: JobSpec | None = None) -> tuple[Job, Run]:
    """A one-off job written straight into the store (no validation on the way), hinted."""
    now = utcnow()
    job = dataclasses.replace(make_job(owner, spec=spec), created_at=now, updated_at=now)
    run = dataclasses.replace(make_run(job, due_at=now), created_at=now)
    await poller.store.create_jobs([NewJob(job=job, runs=[run])])
    poller.runs_created([run], [job])
    return job, run


async def stored_run(poller: Poller, run_id: str) -> Run:
    return (await poller.store.get_runs([run_id]))[run_id]


async def final_run(poller: Poller, run_id: str) -> Run:
    """The run as stored, once it is final."""

    async def final() -> Run | None:
        run = await stored_run(poller, run_id)
        return run if run.state.is_final else None

    return await until(final, WAIT, f"run {run_id} final")


def faults(poller: Poller) -> dict[str, float]:
    """shardcron_poller_faults_total by where, and shardcron_poller_resets_total."""
    out: dict[str, float] = {}
    for family in poller.metrics.registry.collect():
        for sample in family.samples:
            if sample.name == "shardcron_poller_faults_total":
                out[sample.labels["where"]] = sample.value
            elif sample.name == "shardcron_poller_resets_total":
                out["resets"] = sample.value
    return out
