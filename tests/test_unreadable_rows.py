"""Job and run rows this version cannot decode (issue 10, item 1c), met by a real
poller on SQLite and by a real node's api: the store skips them in reads of many
rows, so the poller never sees them and goes on serving every other owner without
a reset; a read of one by id answers FAILED_PRECONDITION naming the row."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta
from pathlib import Path

import grpc
import pytest

from shardcron.client.types import RunReason, RunState
from shardcron.coordinator.coordination import Assignment
from shardcron.coordinator.ids import utcnow
from shardcron.coordinator.metrics import TimedStore
from shardcron.coordinator.poller import Poller
from shardcron.coordinator.sqlite.store import SqliteStore
from shardcron.coordinator.store import NewJob
from shardcron.v1 import jobs_pb2, jobs_pb2_grpc, types_pb2, worker_pb2_grpc
from tests.support.bad_rows import spoil
from tests.support.lease_streams import connect, faults, final_run, lease_of, submit
from tests.support.local_node import sqlite_node
from tests.support.pollers import WAIT, PollerSetup
from tests.support.store_builders import SHARDS, make_job, make_run
from tests.support.waiting import until


@pytest.fixture
def poller_setup() -> PollerSetup:
    """A poller on the store as a node wraps it (bad rows counted), not started yet."""
    return PollerSetup(store=TimedStore, start=False)


def bad_rows_counted(poller: Poller) -> dict[str, float]:
    family = {"jobs": 0.0, "runs": 0.0}
    for metric in poller.metrics.registry.collect():
        for sample in metric.samples:
            if sample.name == "shardcron_store_bad_rows_total":
                family[sample.labels["table"]] = sample.value
    return family


async def test_an_unreadable_row_does_not_reset_the_poller(
    sqlite_store: SqliteStore,
    poller: Poller,
    stub: worker_pb2_grpc.WorkerServiceStub,
) -> None:
    """A job row with a spec that is not JSON and a run row with a state name from a
    newer version, both due, made get_jobs/get_runs raise on every scan: the poller
    reset over and over and no owner's run started. Now the store skips them: the
    other owner's job runs at once, resets stay 0, each bad row is counted once, and
    the run whose job is unreadable ends as one whose job is missing."""
    long_ago = utcnow() - timedelta(hours=1)  # past the grace a missing job row gets
    orphaned = dataclasses.replace(make_job("mallory"), created_at=long_ago)
    orphan = dataclasses.replace(make_run(orphaned, due_at=long_ago), created_at=long_ago)
    parked_job = dataclasses.replace(make_job("mallory"), created_at=long_ago)
    parked = dataclasses.replace(make_run(parked_job, due_at=long_ago), created_at=long_ago)
    await sqlite_store.create_jobs(
        [NewJob(job=orphaned, runs=[orphan]), NewJob(job=parked_job, runs=[parked])]
    )
    await spoil(sqlite_store, "jobs", orphaned.id, "spec", "{not json")
    await spoil(sqlite_store, "runs", parked.id, "state", "PARKED")

    poller.start()
    await poller.on_assignment(
        Assignment(epoch=1, fencing_epoch=1, shards=frozenset(range(SHARDS)), active=True)
    )
    worker = await connect(stub, "w1")
    submitted = asyncio.get_running_loop().time()
    _, victim = await submit(poller, "alice")
    await lease_of(worker, victim)
    waited = asyncio.get_running_loop().time() - submitted
    print(f"victim leased {waited:.3f} s after submission")
    assert waited < 5.0

    ended = await final_run(poller, orphan.id)
    assert (ended.state, ended.reason) == (RunState.CANCELLED, RunReason.JOB_DELETED)
    scanned = poller.turns
    # several more scans (a tenth of a second apart) meet both rows again
    await until(lambda: poller.turns >= scanned + 10, WAIT, "more turns")
    assert faults(poller) == {"resets": 0.0}
    assert bad_rows_counted(poller) == {"jobs": 1.0, "runs": 1.0}
    worker.cancel()


async def test_the_api_names_an_unreadable_job_and_lists_the_others(tmp_path: Path) -> None:
    """GetJob of a job whose row cannot be decoded gave INTERNAL, and ListJobs of its
    owner failed whole: now GetJob says which job cannot be read and why, and the
    listing holds the owner's other jobs."""
    node = sqlite_node(tmp_path, "n1")
    await node.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{node.port}")
    api, owner = jobs_pb2_grpc.JobServiceStub(channel), (("x-shardcron-owner", "alice"),)
    try:
        spec = types_pb2.JobSpec(
            name="j", task=types_pb2.Task(command=types_pb2.CommandTask(argv=["true"]))
        )
        spec.schedule.kind = types_pb2.SCHEDULE_KIND_AT  # not due while the test runs
        spec.schedule.at.FromDatetime(utcnow() + timedelta(days=1))
        jobs = [
            (await api.CreateJob(jobs_pb2.CreateJobRequest(spec=spec), metadata=owner)).job
            for _ in range(2)
        ]
        await spoil(node.raw_store, "jobs", jobs[0].id, "spec", "{not json")
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await api.GetJob(jobs_pb2.GetJobRequest(job_id=jobs[0].id), metadata=owner)
        assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert raised.value.details().startswith(f"job {jobs[0].id} cannot be read: ")
        listed = await api.ListJobs(jobs_pb2.ListJobsRequest(), metadata=owner)
        assert [j.id for j in listed.jobs] == [jobs[1].id]
        assert node.metrics.store_bad_rows.labels(table="jobs")._value.get() == 1.0
    finally:
        await channel.close()
        await node.stop()
