"""Hints of new runs from another node (``PollerService.NotifyRuns``): the receiving
poller acts only on what it reads from the store; a hint naming each run's job lets
it read the run under that job directly, and one naming none (an older sender) still
works. In a cluster (job copies go stale) the job of a run due past the job read
horizon is not read: the poller reads it as the run triggers."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from pathlib import Path

import grpc
import pytest

from shardcron.client.types import Job, Run, RunState
from shardcron.coordinator.ids import utcnow
from shardcron.coordinator.poller import PollerConfig
from shardcron.coordinator.router import PollerServiceServicer
from shardcron.coordinator.sqlite.store import SqliteStore
from shardcron.coordinator.store import JobStore, NewJob
from shardcron.v1 import cluster_pb2, cluster_pb2_grpc
from tests.support.store_builders import SHARDS, make_job, make_run


class HintedPoller:
    """The part of a Poller the servicer uses, recording the hints it is handed."""

    def __init__(self, store: JobStore) -> None:
        self.store = store
        self.config = PollerConfig()
        self.hints: list[tuple[list[Run], list[Job]]] = []

    def phase_of(self, run_id: str) -> None:
        return None

    def owns(self, shard: int) -> bool:
        return True

    def runs_created(self, runs: Sequence[Run], jobs: Sequence[Job] = ()) -> None:
        self.hints.append((list(runs), list(jobs)))


@pytest.fixture
async def hinted(tmp_path: Path) -> AsyncIterator[HintedPoller]:
    store = SqliteStore(tmp_path / "db", shard_count=SHARDS, bucket_seconds=60)
    await store.open()
    try:
        yield HintedPoller(store)
    finally:
        await store.close()


@pytest.fixture
async def stub(hinted: HintedPoller) -> AsyncIterator[cluster_pb2_grpc.PollerServiceStub]:
    server = grpc.aio.server()
    servicer = PollerServiceServicer(hinted)  # type: ignore[arg-type]
    cluster_pb2_grpc.add_PollerServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield cluster_pb2_grpc.PollerServiceStub(channel)
    await server.stop(None)


async def stored_runs(store: JobStore) -> tuple[Job, Job, Run, Run, Run]:
    """Two jobs, a PENDING run of each, and a SUCCEEDED run of the first."""
    job1, job2 = make_job(), make_job()
    r1, r2 = make_run(job1), make_run(job2)
    done = make_run(job1, fire_key="done", state=RunState.SUCCEEDED)
    await store.create_jobs([NewJob(job=job1, runs=[r1, done]), NewJob(job=job2, runs=[r2])])
    return job1, job2, r1, r2, done


def by_id(hints: list[tuple[list[Run], list[Job]]]) -> tuple[set[str], set[str]]:
    return {r.id for runs, _ in hints for r in runs}, {j.id for _, jobs in hints for j in jobs}


async def test_a_hint_naming_each_runs_job_hands_over_the_stored_pending_runs(
    hinted: HintedPoller, stub: cluster_pb2_grpc.PollerServiceStub
) -> None:
    job1, job2, r1, r2, done = await stored_runs(hinted.store)
    await stub.NotifyRuns(
        cluster_pb2.NotifyRunsRequest(
            run_ids=[r1.id, r2.id, done.id], job_ids=[job1.id, job2.id, job1.id]
        )
    )
    assert by_id(hinted.hints) == ({r1.id, r2.id}, {job1.id, job2.id})


async def test_a_hint_from_a_sender_naming_no_jobs_still_hands_over_the_runs(
    hinted: HintedPoller, stub: cluster_pb2_grpc.PollerServiceStub
) -> None:
    job1, job2, r1, r2, done = await stored_runs(hinted.store)
    await stub.NotifyRuns(cluster_pb2.NotifyRunsRequest(run_ids=[r1.id, r2.id, done.id]))
    assert by_id(hinted.hints) == ({r1.id, r2.id}, {job1.id, job2.id})


async def test_a_run_named_under_a_job_it_is_not_stored_under_is_ignored(
    hinted: HintedPoller, stub: cluster_pb2_grpc.PollerServiceStub
) -> None:
    job1, job2, r1, r2, _ = await stored_runs(hinted.store)
    await stub.NotifyRuns(
        cluster_pb2.NotifyRunsRequest(run_ids=[r1.id, r2.id], job_ids=[job2.id, job2.id])
    )
    assert by_id(hinted.hints) == ({r2.id}, {job2.id})


@pytest.mark.parametrize("named", [True, False])
async def test_in_a_cluster_the_job_of_a_run_due_past_the_job_read_horizon_is_not_read(
    hinted: HintedPoller, stub: cluster_pb2_grpc.PollerServiceStub, named: bool
) -> None:
    hinted.config = PollerConfig(
        job_cache_ttl=timedelta(seconds=1), lease_lead=timedelta(milliseconds=500)
    )
    now = utcnow()
    soon, later = make_job(), make_job()
    near = make_run(soon, due_at=now + timedelta(seconds=1))
    far = make_run(later, due_at=now + timedelta(seconds=10))
    await hinted.store.create_jobs([NewJob(job=soon, runs=[near]), NewJob(job=later, runs=[far])])
    runs = [near, far]
    await stub.NotifyRuns(
        cluster_pb2.NotifyRunsRequest(
            run_ids=[r.id for r in runs], job_ids=[r.job_id for r in runs] if named else []
        )
    )
    assert by_id(hinted.hints) == ({near.id, far.id}, {soon.id})


@pytest.mark.parametrize(
    ("job_ids", "details"),
    [
        (["j1"], "job_ids: one job id per run id"),
        (["j1", ""], "job_ids[1]: "),
    ],
)
async def test_a_hint_with_bad_job_ids_is_an_invalid_argument_naming_the_field(
    hinted: HintedPoller,
    stub: cluster_pb2_grpc.PollerServiceStub,
    job_ids: list[str],
    details: str,
) -> None:
    request = cluster_pb2.NotifyRunsRequest(run_ids=["r1", "r2"], job_ids=job_ids)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.NotifyRuns(request)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.details().startswith(details)
    assert hinted.hints == []
