"""The poller on its own, over a real SQLite store, with no worker connected.

A store left as a commit that landed only in part left it. Cassandra writes a commit
in steps (new runs, their due rows, jobs and progress, then the state changes of
existing runs), and a poller may die, freeze or fail between them. The next owner
of the shards then meets a store that is consistent but behind:
- a run before its job row: it must wait for its job, not be cancelled as if the job
  were deleted (the create may still succeed and be acknowledged); a run whose job
  never appears (its create failed) is cancelled once it is old enough;
- the next fire's run before the progress naming it: the cron must carry on;
- a retry before the end of the run it retries: when that run ends again, the retry
  stored already must not be written again, nor run a second time.
Shown here by writing the parts by hand.

The same for a hint that comes late: an api on another node tells the owner of the
shard about a new run, and the owner's scan may find, run and end that run before the
hint arrives with its PENDING copy. The run must not run again.

A poller held up longer than its recheck window (a store call queued behind a
burst of creates) must still find a run whose hint was lost, written meanwhile.

And a run with a starting deadline that waits for a slot is MISSED when the
deadline passes, even though no slot ever frees.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from shardcron.client.schedule import next_fire
from shardcron.client.types import Job, RetryPolicy, Run, RunReason, RunState, Schedule
from shardcron.coordinator import fires
from shardcron.coordinator.coordination import Assignment
from shardcron.coordinator.ids import utcnow
from shardcron.coordinator.metrics import Metrics
from shardcron.coordinator.poller import Phase, Poller, PollerConfig
from shardcron.coordinator.sqlite.store import SqliteStore
from shardcron.coordinator.store import NewJob
from tests.support.store_builders import make_job, make_run

SHARDS = 8
# How long a test waits for what it expects (about a second when the machine is idle;
# SQLite's fsyncs can stall for seconds while other servers write): not a speed check.
WAIT = 30.0


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    s = SqliteStore(tmp_path / "db", shard_count=SHARDS, bucket_seconds=60)
    await s.open()
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
def lease_ttl() -> timedelta:
    return PollerConfig().lease_ttl


@pytest.fixture
def recheck_window() -> timedelta:
    return PollerConfig().recheck_window


@pytest.fixture
async def poller(
    store: SqliteStore, lease_ttl: timedelta, recheck_window: timedelta
) -> AsyncIterator[Poller]:
    p = Poller(
        store,
        poller_id="p1",
        # as in a cluster: the recent past is re-read (no hint comes from another node)
        config=PollerConfig(
            scan_interval=timedelta(milliseconds=100),
            recheck_interval=timedelta(milliseconds=200),
            recheck_window=recheck_window,
            lease_ttl=lease_ttl,
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


async def until(pred, timeout: float = WAIT) -> None:  # type: ignore[no-untyped-def]
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

    await asyncio.wait_for(final(), WAIT)
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

    await asyncio.wait_for(moved_on(), WAIT)
    stored = await store.get_job(job.owner, job.id)
    assert stored.next_fire_at is not None and stored.next_fire_at > second.at


def _taken_over(job: Job) -> tuple[Run, Run]:
    """A run leased by an earlier owner (its lease over), and the retry that owner
    decided when the run failed: its commit wrote the retry, not the run's end."""
    now = utcnow()
    run = dataclasses.replace(
        make_run(job, due_at=now - timedelta(seconds=3)),
        state=RunState.RUNNING,
        worker_id="w-gone",
        lease_token=(1 << 32) | 1,
        lease_expires_at=now - timedelta(seconds=1),
        created_at=now,
    )
    failed = dataclasses.replace(run, state=RunState.FAILED, reason=RunReason.WORKER_LOST)
    retry = fires.retry_run(job, failed, now=now - timedelta(seconds=1))
    assert retry is not None
    return run, retry


def _retrying_job() -> Job:
    base = make_job()
    spec = base.spec.replace(retry=RetryPolicy(max_attempts=3, initial_backoff=timedelta(0)))
    now = utcnow()
    return dataclasses.replace(base, spec=spec, created_at=now, updated_at=now)


async def _ended(store: SqliteStore, run: Run) -> Run:
    async def wait() -> Run:
        while not (stored := (await store.get_runs([run.id]))[run.id]).state.is_final:
            await asyncio.sleep(0.05)
        return stored

    return await asyncio.wait_for(wait(), WAIT)


@pytest.mark.parametrize("lease_ttl", [timedelta(milliseconds=300)])
async def test_a_retry_stored_and_run_already_is_not_run_again(
    store: SqliteStore, poller: Poller
) -> None:
    job = _retrying_job()
    await store.create_jobs([NewJob(job=job)])
    run, retry = _taken_over(job)
    done = dataclasses.replace(
        retry, state=RunState.SUCCEEDED, started_at=retry.due_at, ended_at=retry.due_at
    )
    await store.commit(runs=[run, done], due=[run])
    ended = await _ended(store, run)  # its lease waited out: WORKER_LOST
    assert (ended.state, ended.reason) == (RunState.FAILED, RunReason.WORKER_LOST)
    await asyncio.sleep(0.5)  # a turn or two after
    assert (await store.get_runs([retry.id]))[retry.id].state == RunState.SUCCEEDED
    assert retry.id not in poller._slots, "the retry that ran already is due again"


@pytest.mark.parametrize("lease_ttl", [timedelta(milliseconds=300)])
async def test_a_retry_stored_without_its_due_row_is_indexed_and_held_once(
    store: SqliteStore, poller: Poller
) -> None:
    job = _retrying_job()
    await store.create_jobs([NewJob(job=job)])
    run, retry = _taken_over(job)
    await store.commit(runs=[run, retry], due=[run])  # the retry's due row did not land
    await _ended(store, run)
    # the retry is held once, waiting for a worker (there is none), and indexed
    await until(lambda: retry.id in poller._slots and poller._slots[retry.id].phase == Phase.READY)
    entries = await store.scan_due(
        retry.shard,
        due_from=retry.due_at - timedelta(seconds=1),
        due_until=retry.due_at + timedelta(seconds=1),
        after=None,
        limit=100,
    )
    assert [e.run_id for e in entries if e.run_id == retry.id] == [retry.id]
    assert (await store.get_runs([retry.id]))[retry.id].state == RunState.PENDING


async def _with_deadline(store: SqliteStore, deadline: timedelta, due_in: timedelta) -> Run:
    """A stored job with a starting deadline and its run, due ``due_in`` from now."""
    base = make_job()
    now = utcnow()
    spec = base.spec.replace(starting_deadline=deadline)
    job = dataclasses.replace(base, spec=spec, created_at=now, updated_at=now)
    run = dataclasses.replace(make_run(job, due_at=now + due_in), created_at=now)
    await store.create_jobs([NewJob(job=job, runs=[run])])
    return run


async def test_a_hint_that_comes_after_its_run_ended_is_ignored(
    store: SqliteStore, poller: Poller
) -> None:
    # no worker here: a run due a while ago ends at once, MISSED, when it triggers;
    # no hint: the scan finds it
    run = await _with_deadline(store, timedelta(milliseconds=1), -timedelta(seconds=1))
    job = (await store.get_jobs([run.job_id]))[run.job_id]
    ended = await _ended(store, run)
    assert ended.state == RunState.MISSED
    poller.runs_created([run], [job])  # the api's hint, late
    await asyncio.sleep(0.5)
    again = (await store.get_runs([run.id]))[run.id]
    assert again.ended_at == ended.ended_at, "the run ended a second time"


async def test_a_run_waiting_for_a_slot_is_missed_at_its_starting_deadline(
    store: SqliteStore, poller: Poller
) -> None:
    deadline = timedelta(milliseconds=300)
    run = await _with_deadline(store, deadline, timedelta(0))
    poller.runs_created([run], list((await store.get_jobs([run.job_id])).values()))
    # admitted and waiting: there is no worker, so no slot ever frees
    await until(lambda: run.id in poller._slots and poller._slots[run.id].phase == Phase.READY)
    ended = await _ended(store, run)
    assert (ended.state, ended.reason) == (RunState.MISSED, RunReason.DEADLINE)
    assert ended.ended_at is not None and ended.ended_at >= run.due_at + deadline


@pytest.mark.parametrize("recheck_window", [timedelta(seconds=1)])
async def test_a_run_written_while_the_poller_was_held_up_is_found_without_its_hint(
    store: SqliteStore, poller: Poller, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = dataclasses.replace(make_job(), created_at=utcnow(), updated_at=utcnow())
    shard = make_run(job).shard
    real = store.scan_due
    held = asyncio.Event()
    armed = True

    async def scan_due(s: int, **kw):  # type: ignore[no-untyped-def]
        nonlocal armed
        entries = await real(s, **kw)
        if s == shard and armed:  # what it read is stale by the time it returns
            armed = False
            held.set()
            await asyncio.sleep(2.5)  # longer than the recheck window
        return entries

    monkeypatch.setattr(store, "scan_due", scan_due)
    await asyncio.wait_for(held.wait(), WAIT)
    run = dataclasses.replace(make_run(job, due_at=utcnow()), created_at=utcnow())
    await store.create_jobs([NewJob(job=job, runs=[run])])  # its hint is lost: none is sent
    await until(lambda: run.id in poller._slots)
