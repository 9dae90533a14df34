"""Every RPC a node serves, called as each role, for its own owner and for another, against
a real in-process node with an auth file: the status each gets (issue 12, items 2-5).

The expected cells are written out here by hand from the issue's roles, not derived from
``coordinator/auth/permissions.py``, so the table there is checked, not restated. "own"
calls act for owner ``a`` (the header names it) on ``a``'s objects; "other" calls name
owner ``b`` on ``b``'s objects. Allowed calls are made so that they succeed (OK); refused
ones get PERMISSION_DENIED, and calls without a credential UNAUTHENTICATED. The matrix
observed is printed (``pytest -s``) for the record.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from google.protobuf import descriptor_pool
from google.protobuf.duration_pb2 import Duration
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from shardcron.client import codec
from shardcron.client.types import HandlerTask, JobSpec, Schedule
from shardcron.coordinator.auth import METHOD_ACCESS
from shardcron.coordinator.node import Node
from shardcron.v1 import (
    cluster_pb2,
    cluster_pb2_grpc,
    jobs_pb2,
    jobs_pb2_grpc,
    worker_pb2,
    worker_pb2_grpc,
)
from tests.support.auth import OTHER, OWN, TOKENS, auth_node

ROLES = ["admin", "writer", "reader", "worker", "node", "none"]
OK, DENIED, UNAUTH = "OK", "PERMISSION_DENIED", "UNAUTHENTICATED"
NO_BLOBS = "FAILED_PRECONDITION"
SPEC = JobSpec(
    name="m",
    task=HandlerTask(name="noop"),
    schedule=Schedule.cron_expr("0 0 1 1 *"),
)

# --- what each role may do, by kind of method: (own owner, other owner) ------------------
WRITE = {"admin": (OK, OK), "writer": (OK, DENIED)}
READ = {"admin": (OK, OK), "writer": (OK, DENIED), "reader": (OK, DENIED)}
STATUS = {"admin": (OK, OK), "writer": (OK, OK), "reader": (OK, OK)}
WORKER = {"admin": (OK, OK), "worker": (OK, OK)}
NODE = {"node": (OK, OK)}
PUBLIC = {role: (OK, OK) for role in ROLES}
# past the permission check, a node without a blob store keeps no artifacts, and no run
# is leased to anyone: what answers then is the servicer
NO_BLOBS, NO_LEASE = "FAILED_PRECONDITION", "NOT_FOUND"
UPLOAD = {"admin": (NO_BLOBS, NO_BLOBS), "writer": (NO_BLOBS, DENIED)}
READ_ARTIFACT = {"admin": (NO_LEASE, NO_LEASE), "worker": (NO_LEASE, NO_LEASE)}


@dataclass
class Objects:
    """A fresh job of one owner with one PENDING run (no worker ever takes it)."""

    job: Any
    run_id: str


@dataclass
class Stubs:
    jobs: jobs_pb2_grpc.JobServiceStub
    cluster: cluster_pb2_grpc.ClusterServiceStub
    poller: cluster_pb2_grpc.PollerServiceStub
    worker: worker_pb2_grpc.WorkerServiceStub
    health: health_pb2_grpc.HealthStub
    reflection: reflection_pb2_grpc.ServerReflectionStub


Call = Callable[[Stubs, tuple[tuple[str, str], ...], Objects], Awaitable[Any]]


async def _drain(stream: Any) -> None:
    async for _ in stream:
        pass


async def _connect(s: Stubs, md: Any, o: Objects) -> None:
    call = s.worker.Connect(metadata=md)
    worker_id = f"w-{hashlib.sha256(repr(md).encode()).hexdigest()[:8]}-{o.run_id[-6:]}"
    await call.write(worker_pb2.WorkerMessage(hello=worker_pb2.Hello(worker_id=worker_id, slots=1)))
    first = await call.read()
    call.cancel()
    assert first.WhichOneof("body") == "welcome"


async def _first(stream: Any) -> None:
    async for _ in stream:
        break
    stream.cancel()


async def _reflect(s: Stubs, md: Any, o: Objects) -> None:
    async def requests() -> AsyncIterator[reflection_pb2.ServerReflectionRequest]:
        yield reflection_pb2.ServerReflectionRequest(list_services="")

    await _first(s.reflection.ServerReflectionInfo(requests(), metadata=md))


def _spec() -> Any:
    return codec.job_spec_to_proto(SPEC)


CALLS: dict[str, tuple[dict[str, tuple[str, str]], Call]] = {
    "/shardcron.v1.JobService/CreateJob": (
        WRITE,
        lambda s, md, o: s.jobs.CreateJob(jobs_pb2.CreateJobRequest(spec=_spec()), metadata=md),
    ),
    "/shardcron.v1.JobService/CreateJobs": (
        WRITE,
        lambda s, md, o: s.jobs.CreateJobs(
            jobs_pb2.CreateJobsRequest(jobs=[jobs_pb2.CreateJobRequest(spec=_spec())]), metadata=md
        ),
    ),
    "/shardcron.v1.JobService/GetJob": (
        READ,
        lambda s, md, o: s.jobs.GetJob(jobs_pb2.GetJobRequest(job_id=o.job.id), metadata=md),
    ),
    "/shardcron.v1.JobService/ListJobs": (
        READ,
        lambda s, md, o: s.jobs.ListJobs(jobs_pb2.ListJobsRequest(), metadata=md),
    ),
    "/shardcron.v1.JobService/UpdateJob": (
        WRITE,
        lambda s, md, o: s.jobs.UpdateJob(
            jobs_pb2.UpdateJobRequest(
                job_id=o.job.id, expected_version=o.job.version, spec=_spec()
            ),
            metadata=md,
        ),
    ),
    "/shardcron.v1.JobService/PauseJob": (
        WRITE,
        lambda s, md, o: s.jobs.PauseJob(jobs_pb2.JobRef(job_id=o.job.id), metadata=md),
    ),
    "/shardcron.v1.JobService/ResumeJob": (
        WRITE,
        lambda s, md, o: s.jobs.ResumeJob(jobs_pb2.JobRef(job_id=o.job.id), metadata=md),
    ),
    "/shardcron.v1.JobService/RunJobNow": (
        WRITE,
        lambda s, md, o: s.jobs.RunJobNow(jobs_pb2.JobRef(job_id=o.job.id), metadata=md),
    ),
    "/shardcron.v1.JobService/DeleteJob": (
        WRITE,
        lambda s, md, o: s.jobs.DeleteJob(jobs_pb2.DeleteJobRequest(job_id=o.job.id), metadata=md),
    ),
    "/shardcron.v1.JobService/PreviewFires": (
        READ,
        lambda s, md, o: s.jobs.PreviewFires(
            jobs_pb2.PreviewFiresRequest(job_id=o.job.id, count=2), metadata=md
        ),
    ),
    "/shardcron.v1.JobService/ListRuns": (
        READ,
        lambda s, md, o: s.jobs.ListRuns(jobs_pb2.ListRunsRequest(job_id=o.job.id), metadata=md),
    ),
    "/shardcron.v1.JobService/GetRun": (
        READ,
        lambda s, md, o: s.jobs.GetRun(jobs_pb2.GetRunRequest(run_id=o.run_id), metadata=md),
    ),
    "/shardcron.v1.JobService/CancelRun": (
        WRITE,
        lambda s, md, o: s.jobs.CancelRun(jobs_pb2.GetRunRequest(run_id=o.run_id), metadata=md),
    ),
    "/shardcron.v1.JobService/WaitRun": (
        READ,
        lambda s, md, o: s.jobs.WaitRun(
            jobs_pb2.WaitRunRequest(run_id=o.run_id, timeout=Duration(nanos=50_000_000)),
            metadata=md,
        ),
    ),
    "/shardcron.v1.JobService/ReadRunOutput": (
        READ,
        lambda s, md, o: _drain(
            s.jobs.ReadRunOutput(jobs_pb2.ReadRunOutputRequest(run_id=o.run_id), metadata=md)
        ),
    ),
    # a node without a blob store keeps no result files: a caller allowed through hears so
    "/shardcron.v1.JobService/ReadRunResult": (
        {"admin": (NO_BLOBS, NO_BLOBS), "writer": (NO_BLOBS, DENIED), "reader": (NO_BLOBS, DENIED)},
        lambda s, md, o: _drain(
            s.jobs.ReadRunResult(
                jobs_pb2.ReadRunResultRequest(run_id=o.run_id, name="a.txt"), metadata=md
            )
        ),
    ),
    "/shardcron.v1.JobService/ListDeadLetters": (
        READ,
        lambda s, md, o: s.jobs.ListDeadLetters(jobs_pb2.ListDeadLettersRequest(), metadata=md),
    ),
    "/shardcron.v1.JobService/GetOverview": (
        READ,
        lambda s, md, o: s.jobs.GetOverview(jobs_pb2.OverviewRequest(), metadata=md),
    ),
    "/shardcron.v1.JobService/ListDeliveries": (
        READ,
        lambda s, md, o: s.jobs.ListDeliveries(jobs_pb2.ListDeliveriesRequest(), metadata=md),
    ),
    "/shardcron.v1.JobService/GetNotifySettings": (
        READ,
        lambda s, md, o: s.jobs.GetNotifySettings(jobs_pb2.GetNotifySettingsRequest(), metadata=md),
    ),
    "/shardcron.v1.JobService/SetNotifyDefaults": (
        WRITE,
        lambda s, md, o: s.jobs.SetNotifyDefaults(jobs_pb2.SetNotifyDefaultsRequest(), metadata=md),
    ),
    "/shardcron.v1.JobService/SetNotifySecret": (
        WRITE,
        lambda s, md, o: s.jobs.SetNotifySecret(
            jobs_pb2.SetNotifySecretRequest(secret=""), metadata=md
        ),
    ),
    "/shardcron.v1.JobService/ReplayDeadLetters": (
        WRITE,
        lambda s, md, o: s.jobs.ReplayDeadLetters(
            jobs_pb2.DeadLettersRequest(job_id=o.job.id), metadata=md
        ),
    ),
    "/shardcron.v1.JobService/DropDeadLetters": (
        WRITE,
        lambda s, md, o: s.jobs.DropDeadLetters(
            jobs_pb2.DeadLettersRequest(job_id=o.job.id), metadata=md
        ),
    ),
    "/shardcron.v1.ClusterService/GetStatus": (
        STATUS,
        lambda s, md, o: s.cluster.GetStatus(cluster_pb2.GetStatusRequest(), metadata=md),
    ),
    "/shardcron.v1.JobService/UploadArtifact": (
        UPLOAD,
        lambda s, md, o: s.jobs.UploadArtifact(
            iter([jobs_pb2.UploadArtifactRequest(size=1, data=b"x")]), metadata=md
        ),
    ),
    "/shardcron.v1.WorkerService/Connect": (WORKER, _connect),
    "/shardcron.v1.WorkerService/ReadArtifact": (
        READ_ARTIFACT,
        lambda s, md, o: _drain(
            s.worker.ReadArtifact(
                worker_pb2.ReadArtifactRequest(run_id=o.run_id, fencing_token=1, sha256="0" * 64),
                metadata=md,
            )
        ),
    ),
    "/shardcron.v1.PollerService/NotifyRuns": (
        NODE,
        lambda s, md, o: s.poller.NotifyRuns(
            cluster_pb2.NotifyRunsRequest(run_ids=[o.run_id]), metadata=md
        ),
    ),
    "/shardcron.v1.PollerService/CancelRun": (
        NODE,
        lambda s, md, o: s.poller.CancelRun(
            cluster_pb2.CancelRunRequest(run_id=o.run_id), metadata=md
        ),
    ),
    "/shardcron.v1.PollerService/CancelJobRuns": (
        NODE,
        lambda s, md, o: s.poller.CancelJobRuns(
            cluster_pb2.CancelJobRunsRequest(job_id=o.job.id), metadata=md
        ),
    ),
    "/shardcron.v1.PollerService/JobChanged": (
        NODE,
        lambda s, md, o: s.poller.JobChanged(
            cluster_pb2.JobChangedRequest(job_id=o.job.id), metadata=md
        ),
    ),
    "/shardcron.v1.PollerService/GetPollerStatus": (
        NODE,
        lambda s, md, o: s.poller.GetPollerStatus(cluster_pb2.GetStatusRequest(), metadata=md),
    ),
    "/shardcron.v1.PollerService/WaitingReasons": (
        NODE,
        lambda s, md, o: s.poller.WaitingReasons(
            cluster_pb2.WaitingReasonsRequest(run_ids=[o.run_id]), metadata=md
        ),
    ),
    "/shardcron.v1.PollerService/GetOverviewPart": (
        NODE,
        lambda s, md, o: s.poller.GetOverviewPart(
            cluster_pb2.OverviewPartRequest(owner=o.job.owner), metadata=md
        ),
    ),
    "/grpc.health.v1.Health/Check": (
        PUBLIC,
        lambda s, md, o: s.health.Check(health_pb2.HealthCheckRequest(), metadata=md),
    ),
    "/grpc.health.v1.Health/Watch": (
        PUBLIC,
        lambda s, md, o: _first(s.health.Watch(health_pb2.HealthCheckRequest(), metadata=md)),
    ),
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": (
        {role: (OK, OK) for role in ROLES if role != "none"},
        _reflect,
    ),
}


# in the table (public) but not implemented by grpcio-health-checking's servicer: UNKNOWN
NOT_IMPLEMENTED = frozenset({"/grpc.health.v1.Health/List"})


def expected(method: str, role: str) -> tuple[str, str]:
    allowed, _ = CALLS[method]
    if role in allowed:
        return allowed[role]
    return (UNAUTH, UNAUTH) if role == "none" else (DENIED, DENIED)


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    async with auth_node(tmp_path, ["admin", "writer", "reader", "worker", "node"]) as n:
        yield n


@pytest.fixture
async def stubs(node: Node) -> AsyncIterator[Stubs]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{node.port}") as channel:
        yield Stubs(
            jobs=jobs_pb2_grpc.JobServiceStub(channel),
            cluster=cluster_pb2_grpc.ClusterServiceStub(channel),
            poller=cluster_pb2_grpc.PollerServiceStub(channel),
            worker=worker_pb2_grpc.WorkerServiceStub(channel),
            health=health_pb2_grpc.HealthStub(channel),
            reflection=reflection_pb2_grpc.ServerReflectionStub(channel),
        )


def metadata(role: str, owner: str) -> tuple[tuple[str, str], ...]:
    headers = [("x-shardcron-owner", owner)]
    if role != "none":
        headers.append(("authorization", f"Bearer {TOKENS[role]}"))
    return tuple(headers)


async def fresh(s: Stubs, owner: str, *, paused: bool) -> Objects:
    """A new job of ``owner`` (paused when asked) with one PENDING run, made as the admin."""
    md = metadata("admin", owner)
    created = await s.jobs.CreateJob(jobs_pb2.CreateJobRequest(spec=_spec()), metadata=md)
    job = codec.job_from_proto(created.job)
    run = await s.jobs.RunJobNow(jobs_pb2.JobRef(job_id=job.id), metadata=md)
    if paused:
        job = codec.job_from_proto(
            await s.jobs.PauseJob(jobs_pb2.JobRef(job_id=job.id), metadata=md)
        )
    return Objects(job=job, run_id=run.id)


async def observe(s: Stubs, method: str, role: str, owner: str) -> str:
    _, call = CALLS[method]
    objects = await fresh(s, owner, paused=method.endswith("/ResumeJob"))
    try:
        await call(s, metadata(role, owner), objects)
    except grpc.aio.AioRpcError as e:
        return e.code().name
    return OK


async def test_every_role_gets_what_its_role_allows_for_its_own_and_another_owner(
    stubs: Stubs, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = []
    wrong = []
    for method in CALLS:
        cells = []
        for role in ROLES:
            got = (
                await observe(stubs, method, role, OWN),
                await observe(stubs, method, role, OTHER),
            )
            cells.append(f"{got[0]}/{got[1]}")
            if got != expected(method, role):
                wrong.append((method, role, got, expected(method, role)))
        rows.append((method, cells))
    with capsys.disabled():
        print_matrix(rows)
    assert wrong == []


def print_matrix(rows: list[tuple[str, list[str]]]) -> None:
    short = {"OK": "OK", DENIED: "DENIED", UNAUTH: "UNAUTH"}
    width = max(len(m) for m, _ in rows)
    print(f"\nrole x method: own owner / other owner ({OWN} / {OTHER})")
    print(f"{'method':<{width}}  " + "  ".join(f"{r:<13}" for r in ROLES))
    for method, cells in rows:
        shown = ["/".join(short.get(c, c) for c in cell.split("/")) for cell in cells]
        print(f"{method:<{width}}  " + "  ".join(f"{c:<13}" for c in shown))


async def test_every_method_served_is_in_the_permission_table_and_the_matrix(
    node: Node, stubs: Stubs
) -> None:
    async def requests() -> AsyncIterator[reflection_pb2.ServerReflectionRequest]:
        yield reflection_pb2.ServerReflectionRequest(list_services="")

    call = stubs.reflection.ServerReflectionInfo(requests(), metadata=metadata("admin", OWN))
    answer = await call.read()
    call.cancel()
    served = []
    pool = descriptor_pool.Default()
    for service in answer.list_services_response.service:
        descriptor = pool.FindServiceByName(service.name)
        served += [f"/{service.name}/{m.name}" for m in descriptor.methods]
    assert served and "/shardcron.v1.PollerService/NotifyRuns" in served
    assert sorted(m for m in served if m not in METHOD_ACCESS) == []
    assert sorted(m for m in served if m not in CALLS and m not in NOT_IMPLEMENTED) == []
    assert sorted(METHOD_ACCESS) == sorted([*CALLS, *NOT_IMPLEMENTED])


async def test_an_owner_header_is_not_needed_and_another_owners_ids_are_not_found(
    stubs: Stubs,
) -> None:
    theirs = await fresh(stubs, OTHER, paused=False)
    as_writer = (("authorization", f"Bearer {TOKENS['writer']}"),)
    with pytest.raises(grpc.aio.AioRpcError) as hidden:
        await stubs.jobs.GetJob(jobs_pb2.GetJobRequest(job_id=theirs.job.id), metadata=as_writer)
    assert hidden.value.code() == grpc.StatusCode.NOT_FOUND
    created = await stubs.jobs.CreateJob(
        jobs_pb2.CreateJobRequest(spec=_spec()), metadata=as_writer
    )
    assert created.job.owner == OWN
