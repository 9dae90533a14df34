"""The poller and a run whose job row is not in the store yet.

Cassandra writes a create in steps (the runs, their due rows, then the job row), so a
poller scanning its shards can meet a run before its job. That run must wait for its
job, not be cancelled as if the job were deleted: the create may still succeed and
be acknowledged. A run whose job never appears (its create failed) is cancelled once
it is old enough. Shown here on SQLite by writing the run first, by hand.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from store_contract import make_job, make_run

from shardcron.client.schedule import next_fire
from shardcron.client.types import RunReason, RunState, Schedule
from shardcron.coordinator import fires
from shardcron.coordinator.coordination import Assignment
from shardcron.coordinator.ids import utcnow
from shardcron.coordinator.metrics import Metrics
from shardcron.coordinator.poller import Phase, Poller, PollerConfig
from shardcron.coordinator.sqlite_store import SqliteStore
from shardcron.coordinator.store import NewJob

SHARDS = 8


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    s = SqliteStore(tmp_path / "db", shard_count=SHARDS, bucket_seconds=60)
    await s.open()
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
async def poller(store: SqliteStore) -> AsyncIterator[Poller]:
    p = Poller(
        store,
        poller_id="p1",
        # as in a cluster: the recent past is re-read (no hint comes from another node)
        config=PollerConfig(
            scan_interval=timedelta(milliseconds=100),
            recheck_interval=timedelta(milliseconds=200),
        ),
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


async def until(pred, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    end = asyncio.get_running_loop().time() + timeout
    while not pred():
        assert asyncio.get_running_loop().time() < end, "timed out"
        await asyncio.sleep(0.02)


async def test_a_run_met_before_its_job_row_waits_for_it(
    store: SqliteStore, poller: Poller
) -> None:
    now = utcnow()
    job = dataclasses.replace(make_job(), created_at=now, updated_at=now)
    run = dataclasses.replace(make_run(job, due_at=now), created_at=now)
    await store.commit(runs=[run], due=[run])  # the job row has not landed yet
    await asyncio.sleep(1.0)  # due, scanned and triggered a few times meanwhile
    stored = (await store.get_runs([run.id]))[run.id]
    assert stored.state == RunState.PENDING, stored
    await store.create_jobs([NewJob(job=job)])  # now it lands
    # admitted, waiting for a worker (there is none)
    await until(lambda: run.id in poller._slots and poller._slots[run.id].phase == Phase.READY)
    assert (await store.get_runs([run.id]))[run.id].state == RunState.PENDING


async def test_a_run_whose_job_never_came_is_cancelled_once_old(
    store: SqliteStore, poller: Poller
) -> None:
    now = utcnow()
    job = make_job()  # never created
    old = now - timedelta(minutes=5)
    run = dataclasses.replace(make_run(job, due_at=now), created_at=old)
    await store.commit(runs=[run], due=[run])

    async def final() -> None:
        while not (await store.get_runs([run.id]))[run.id].state.is_final:
            await asyncio.sleep(0.05)

    await asyncio.wait_for(final(), 5)
    stored = (await store.get_runs([run.id]))[run.id]
    assert (stored.state, stored.reason) == (RunState.CANCELLED, RunReason.JOB_DELETED)


async def test_a_fire_later_than_the_jobs_recorded_next_fire_carries_the_schedule_on(
    store: SqliteStore, poller: Poller
) -> None:
    """A poller froze between writing the next fire's run and the job's progress naming
    it: the run of that fire must still be treated as the schedule's current fire, or
    the cron would stop there."""
    schedule = Schedule.cron_expr("* * * * * *")
    now = utcnow()
    first = next_fire(schedule, now - timedelta(seconds=3))
    assert first is not None
    second = next_fire(schedule, first.at)
    assert second is not None
    base = make_job()
    job = dataclasses.replace(
        base,
        spec=base.spec.replace(schedule=schedule),
        schedule_version=1,
        next_fire_at=first.at,  # the progress naming `second` never landed
        next_fire_key=first.key,
        created_at=now,
        updated_at=now,
    )
    await store.create_jobs([NewJob(job=job)])
    run = fires.make_run(job, second, shard_count=SHARDS, now=now)
    await store.commit(runs=[run], due=[run])

    async def moved_on() -> None:
        while (await store.get_job(job.owner, job.id)).next_fire_at in (first.at, None):
            await asyncio.sleep(0.05)

    await asyncio.wait_for(moved_on(), 5)
    stored = await store.get_job(job.owner, job.id)
    assert stored.next_fire_at is not None and stored.next_fire_at > second.at
