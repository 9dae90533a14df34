"""``WorkerService.ReadArtifact`` in front of a real poller on SQLite and a file blob
store, spoken to by raw gRPC stubs: a worker reads the artifact of a run only while a
stream of its own holds that run's lease, under that token, and only the digest the
run's job names. Another worker, a stale or forged token, another digest, a run that
ended: NOT_FOUND, and no byte."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import grpc

from shardcron.blobs.files import FileBlobStore
from shardcron.blobs.layout import artifact_key
from shardcron.client.types import CommandTask, JobSpec
from shardcron.coordinator.artifacts import Artifacts
from shardcron.coordinator.ids import utcnow
from shardcron.coordinator.poller import Poller
from shardcron.coordinator.store import NewJob
from shardcron.coordinator.worker_stream import WorkerStreamServicer
from shardcron.v1 import types_pb2, worker_pb2, worker_pb2_grpc
from tests.support.lease_streams import lease_of, next_of, result, serving
from tests.support.store_builders import make_job, make_run

ARCHIVE = b"not parsed here: any bytes stored as the owner's artifact " * 40000  # 2.3 MB
DIGEST = hashlib.sha256(ARCHIVE).hexdigest()


async def _connect(stub: worker_pb2_grpc.WorkerServiceStub, worker_id: str):  # type: ignore[no-untyped-def]
    call = stub.Connect()
    hello = worker_pb2.Hello(worker_id=worker_id, slots=1, runs_commands=True)
    await call.write(worker_pb2.WorkerMessage(hello=hello))
    await next_of(call, "welcome")
    return call


async def _read(
    stub: worker_pb2_grpc.WorkerServiceStub, run_id: str, token: int, sha256: str, worker: str
) -> bytes | grpc.StatusCode:
    request = worker_pb2.ReadArtifactRequest(
        run_id=run_id, fencing_token=token, sha256=sha256, worker_id=worker
    )
    try:
        chunks = [c async for c in stub.ReadArtifact(request, timeout=10)]
    except grpc.aio.AioRpcError as e:
        return e.code()
    assert chunks[0].size == len(ARCHIVE)
    assert all(len(c.data) <= 1 << 20 for c in chunks)
    return b"".join(c.data for c in chunks)


async def test_only_the_lease_holder_reads_the_artifact_its_job_names(
    poller: Poller, tmp_path: Path
) -> None:
    blobs = FileBlobStore(tmp_path / "blobs")
    await blobs.open()
    await blobs.put(artifact_key("alice", DIGEST), ARCHIVE)
    other = hashlib.sha256(b"other").hexdigest()
    await blobs.put(artifact_key("alice", other), b"other")
    servicer = WorkerStreamServicer(
        poller.submit, poller.may_lease, artifacts=(Artifacts(blobs), poller.artifact_of)
    )
    async with serving(servicer) as stub:
        holder = await _connect(stub, "w-holder")
        now = utcnow()
        spec = JobSpec(name="code", task=CommandTask(argv=("./run",), artifact=DIGEST))
        job = dataclasses.replace(make_job(spec=spec), created_at=now, updated_at=now)
        run = dataclasses.replace(make_run(job, due_at=now), created_at=now)
        await poller.store.create_jobs([NewJob(job=job, runs=[run])])
        poller.runs_created([run], [job])
        lease = await lease_of(holder, run)
        assert lease.task.command.artifact == DIGEST  # the lease says what to fetch
        thief = await _connect(stub, "w-thief")
        token = lease.fencing_token

        assert await _read(stub, run.id, token, DIGEST, "w-holder") == ARCHIVE
        not_found = grpc.StatusCode.NOT_FOUND
        assert await _read(stub, run.id, token, DIGEST, "w-thief") == not_found
        assert await _read(stub, run.id, token + 1, DIGEST, "w-holder") == not_found
        assert await _read(stub, run.id, token, other, "w-holder") == not_found  # not its job's
        assert await _read(stub, "nope", token, DIGEST, "w-holder") == not_found

        await holder.write(result(lease, types_pb2.RUN_STATE_SUCCEEDED))
        await next_of(holder, "acks")
        assert await _read(stub, run.id, token, DIGEST, "w-holder") == not_found  # ended
        holder.cancel()
        thief.cancel()
    await blobs.close()


async def test_a_node_without_a_blob_store_serves_no_artifact(poller: Poller) -> None:
    async with serving(WorkerStreamServicer(poller.submit, poller.may_lease)) as stub:
        assert await _read(stub, "r", 1, DIGEST, "w") == grpc.StatusCode.NOT_FOUND
