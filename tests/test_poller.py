"""The poller on its own, over a real SQLite store, with no worker connected, on a
fake clock: each test sets the time and waits for whole turns, never for time.

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
deadline passes, even though no slot ever frees; a lease taken over is taken back
exactly at its expiry plus the grace, and its retry comes due exactly after its
backoff.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import pytest

from shardcron.client.errors import Unavailable
from shardcron.client.schedule import next_fire
from shardcron.client.types import (
    ConcurrencyPolicy,
    Job,
    OverlapPolicy,
    RetryPolicy,
    Run,
    RunReason,
    RunState,
    Schedule,
)
from shardcron.coordinator.coordination import Assignment
from shardcron.coordinator.ids import bucket_for
from shardcron.coordinator.poller import Phase, Poller, PollerConfig, fires
from shardcron.coordinator.poller.config import JOB_ROW_GRACE, JOB_ROW_RETRY
from shardcron.coordinator.sqlite.store import SqliteStore
from shardcron.coordinator.store import NewJob
from tests.support.pollers import (
    RECHECK_INTERVAL,
    SCAN_INTERVAL,
    SHARDS,
    TICK,
    FakeClock,
    PollerSetup,
    leased_now,
    running_poller,
    turns,
    turns_until,
)
from tests.support.store_builders import make_job, make_run


@pytest.fixture
def poller_setup(fake_clock_setup: PollerSetup) -> PollerSetup:
    return fake_clock_setup


@pytest.fixture
def store(sqlite_store: SqliteStore) -> SqliteStore:
    return sqlite_store


async def rescan(poller: Poller, clock: FakeClock) -> None:
    """Moves the clock past the re-read interval and waits for the scan: what a test
    wrote to the store is read (the first scan may have run before it was written,
    and loaded the shard's window past it: only a re-read finds it then)."""
    await clock.move(RECHECK_INTERVAL)
    moved = clock.monotonic()
    # a scan's reads run beside the turns and may outlast a few of them on a busy
    # machine: wait until one that began after the move (and re-read the recent past)
    # was held, then for the turns that act on what it found
    await turns_until(lambda: poller._windows._next_recheck > moved, poller)
    await turns(poller)


def stored(store: SqliteStore, run: Run) -> Callable[[], Awaitable[Run]]:
    async def read() -> Run:
        return (await store.get_runs([run.id]))[run.id]

    return read


async def _ended(store: SqliteStore, run: Run, poller: Poller) -> Run:
    read = stored(store, run)

    async def final() -> bool:
        return (await read()).state.is_final

    await turns_until(final, poller)
    return await read()


async def test_a_run_met_before_its_job_row_waits_for_it(
    store: SqliteStore, poller: Poller, clock: FakeClock
) -> None:
    now = clock.now()
    job = dataclasses.replace(make_job(), created_at=now, updated_at=now)
    run = dataclasses.replace(make_run(job, due_at=now), created_at=now)
    await store.commit(runs=[run], due=[run])  # the job row has not landed yet
    await rescan(poller, clock)
    await turns_until(lambda: poller.phase_of(run.id) == Phase.WAITING, poller)
    for _ in range(4):  # due, scanned and triggered a few times meanwhile
        await clock.move(JOB_ROW_RETRY)
        await turns(poller)
    assert (await stored(store, run)()).state == RunState.PENDING
    assert poller.phase_of(run.id) == Phase.WAITING
    await store.create_jobs([NewJob(job=job)])  # now it lands
    await clock.move(JOB_ROW_RETRY)
    # admitted, waiting for a worker (there is none)
    await turns_until(lambda: poller.phase_of(run.id) == Phase.READY, poller)
    assert (await stored(store, run)()).state == RunState.PENDING


async def test_a_run_whose_job_never_came_is_cancelled_once_old(
    store: SqliteStore, poller: Poller, clock: FakeClock
) -> None:
    now = clock.now()
    job = make_job()  # never created
    old = now - timedelta(minutes=5)
    run = dataclasses.replace(make_run(job, due_at=now), created_at=old)
    await store.commit(runs=[run], due=[run])
    await rescan(poller, clock)
    ended = await _ended(store, run, poller)
    assert (ended.state, ended.reason) == (RunState.CANCELLED, RunReason.JOB_DELETED)


async def test_a_run_without_its_job_row_is_cancelled_when_the_grace_ends(
    store: SqliteStore, poller: Poller, clock: FakeClock
) -> None:
    created = clock.now()
    job = make_job()  # never created
    run = dataclasses.replace(make_run(job, due_at=created), created_at=created)
    await store.commit(runs=[run], due=[run])
    await rescan(poller, clock)
    await turns_until(lambda: poller.phase_of(run.id) == Phase.WAITING, poller)
    await clock.move_to(created + JOB_ROW_GRACE - TICK)  # looked at again: not old enough yet
    await turns(poller)
    assert (await stored(store, run)()).state == RunState.PENDING
    await clock.move(JOB_ROW_RETRY)  # the next look is past the grace
    ended = await _ended(store, run, poller)
    assert (ended.state, ended.reason) == (RunState.CANCELLED, RunReason.JOB_DELETED)


async def test_a_fire_later_than_the_jobs_recorded_next_fire_carries_the_schedule_on(
    store: SqliteStore, poller: Poller, clock: FakeClock
) -> None:
    """A poller froze between writing the next fire's run and the job's progress naming
    it: the run of that fire must still be treated as the schedule's current fire, or
    the cron would stop there."""
    schedule = Schedule.cron_expr("* * * * * *")
    now = clock.now()
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
    await rescan(poller, clock)

    async def moved_on() -> bool:
        return (await store.get_job(job.owner, job.id)).next_fire_at not in (first.at, None)

    await turns_until(moved_on, poller)
    got = await store.get_job(job.owner, job.id)
    assert got.next_fire_at is not None and got.next_fire_at > second.at


def _taken_over(job: Job, now: datetime, bucket_seconds: int) -> tuple[Run, Run]:
    """A run leased by an earlier owner (its lease over), and the retry that owner
    decided when the run failed: its commit wrote the retry, not the run's end.

    Both are due in the bucket of ``now``, however early in it: the poller started
    before the test writes them, and saved its cursors at that bucket's start; the
    store prunes due rows of earlier buckets, as drained (an earlier owner's rows
    due before the cursor would have been written before it was saved)."""
    bucket = datetime.fromtimestamp(bucket_for(now, bucket_seconds), UTC)
    run = dataclasses.replace(
        make_run(job, due_at=max(now - timedelta(seconds=3), bucket)),
        state=RunState.RUNNING,
        worker_id="w-gone",
        lease_token=(1 << 32) | 1,
        lease_expires_at=now - timedelta(seconds=1),
        created_at=now,
    )
    failed = dataclasses.replace(run, state=RunState.FAILED, reason=RunReason.WORKER_LOST)
    retry = fires.retry_run(job, failed, now=max(now - timedelta(seconds=1), bucket))
    assert retry is not None
    return run, retry


def _retrying_job(now: datetime, backoff: timedelta = timedelta(0)) -> Job:
    base = make_job()
    spec = base.spec.replace(retry=RetryPolicy(max_attempts=3, initial_backoff=backoff))
    return dataclasses.replace(base, spec=spec, created_at=now, updated_at=now)


@pytest.mark.parametrize("lease_ttl", [timedelta(milliseconds=300)])
async def test_a_retry_stored_and_run_already_is_not_run_again(
    store: SqliteStore, poller: Poller, clock: FakeClock
) -> None:
    job = _retrying_job(clock.now())
    await store.create_jobs([NewJob(job=job)])
    run, retry = _taken_over(job, clock.now(), store.bucket_seconds)
    done = dataclasses.replace(
        retry, state=RunState.SUCCEEDED, started_at=retry.due_at, ended_at=retry.due_at
    )
    await store.commit(runs=[run, done], due=[run])
    await rescan(poller, clock)
    await turns_until(lambda: poller.phase_of(run.id) == Phase.LEASED, poller)
    await clock.move(timedelta(seconds=1))  # past its lease, one TTL after the take-over
    ended = await _ended(store, run, poller)  # its lease waited out: WORKER_LOST
    assert (ended.state, ended.reason) == (RunState.FAILED, RunReason.WORKER_LOST)
    await turns(poller)  # a turn or two after
    assert (await stored(store, retry)()).state == RunState.SUCCEEDED
    assert poller.phase_of(retry.id) is None, "the retry that ran already is due again"


@pytest.mark.parametrize("lease_ttl", [timedelta(milliseconds=300)])
async def test_a_retry_stored_without_its_due_row_is_indexed_and_held_once(
    store: SqliteStore, poller: Poller, clock: FakeClock
) -> None:
    job = _retrying_job(clock.now())
    await store.create_jobs([NewJob(job=job)])
    run, retry = _taken_over(job, clock.now(), store.bucket_seconds)
    await store.commit(runs=[run, retry], due=[run])  # the retry's due row did not land
    await rescan(poller, clock)
    await turns_until(lambda: poller.phase_of(run.id) == Phase.LEASED, poller)
    await clock.move(timedelta(seconds=1))
    await _ended(store, run, poller)
    # the retry is held once, waiting for a worker (there is none), and indexed
    await turns_until(lambda: poller.phase_of(retry.id) == Phase.READY, poller)
    entries = await store.scan_due(
        retry.shard,
        due_from=retry.due_at - timedelta(seconds=1),
        due_until=retry.due_at + timedelta(seconds=1),
        after=None,
        limit=100,
    )
    assert [e.run_id for e in entries if e.run_id == retry.id] == [retry.id]
    assert (await stored(store, retry)()).state == RunState.PENDING


@pytest.mark.parametrize("lease_ttl", [timedelta(seconds=10)])
async def test_a_lease_taken_over_is_taken_back_at_its_expiry_and_retried_after_backoff(
    store: SqliteStore, poller: Poller, clock: FakeClock, lease_ttl: timedelta
) -> None:
    taken = clock.now()  # the shards were taken when the poller started
    backoff = timedelta(seconds=20)
    job = _retrying_job(taken, backoff)
    await store.create_jobs([NewJob(job=job)])
    run, _ = _taken_over(job, taken, store.bucket_seconds)
    await store.commit(runs=[run], due=[run])
    await rescan(poller, clock)
    await turns_until(lambda: poller.phase_of(run.id) == Phase.LEASED, poller)
    # its stored lease is over, but a worker may still run it: held one TTL from the
    # take-over, and taken back only the expiry grace after that
    expired_at = taken + lease_ttl + PollerConfig().expiry_grace
    await clock.move_to(expired_at - TICK)
    await turns(poller)
    assert poller.phase_of(run.id) == Phase.LEASED
    await clock.move_to(expired_at)  # now == expires_at + grace
    ended = await _ended(store, run, poller)
    assert (ended.state, ended.reason, ended.ended_at) == (
        RunState.FAILED,
        RunReason.WORKER_LOST,
        expired_at,
    )
    retry = fires.retry_run(job, ended, now=expired_at)
    assert retry is not None and retry.due_at == expired_at + backoff
    await turns_until(lambda: poller.phase_of(retry.id) == Phase.WAITING, poller)
    await clock.move_to(retry.due_at - TICK)
    await turns(poller)
    assert poller.phase_of(retry.id) == Phase.WAITING, "a retry came due before its backoff"
    await clock.move_to(retry.due_at)
    await turns_until(lambda: poller.phase_of(retry.id) == Phase.READY, poller)


async def _with_deadline(
    store: SqliteStore, deadline: timedelta, due_in: timedelta, now: datetime
) -> Run:
    """A stored job with a starting deadline and its run, due ``due_in`` from now."""
    base = make_job()
    spec = base.spec.replace(starting_deadline=deadline)
    job = dataclasses.replace(base, spec=spec, created_at=now, updated_at=now)
    run = dataclasses.replace(make_run(job, due_at=now + due_in), created_at=now)
    await store.create_jobs([NewJob(job=job, runs=[run])])
    return run


async def test_a_hint_that_comes_after_its_run_ended_is_ignored(
    store: SqliteStore, poller: Poller, clock: FakeClock
) -> None:
    # no worker here: a run due a while ago ends at once, MISSED, when it triggers;
    # no hint: the scan finds it
    run = await _with_deadline(store, timedelta(milliseconds=1), -timedelta(seconds=1), clock.now())
    job = (await store.get_jobs([run.job_id]))[run.job_id]
    await rescan(poller, clock)
    ended = await _ended(store, run, poller)
    assert ended.state == RunState.MISSED
    poller.runs_created([run], [job])  # the api's hint, late
    await clock.move(timedelta(milliseconds=500))
    await turns(poller)
    again = await stored(store, run)()
    assert again.ended_at == ended.ended_at, "the run ended a second time"


async def test_a_run_waiting_for_a_slot_is_missed_at_its_starting_deadline(
    store: SqliteStore, poller: Poller, clock: FakeClock
) -> None:
    deadline = timedelta(milliseconds=300)
    run = await _with_deadline(store, deadline, timedelta(0), clock.now())
    poller.runs_created([run], list((await store.get_jobs([run.job_id])).values()))
    # admitted and waiting: there is no worker, so no slot ever frees
    await turns_until(lambda: poller.phase_of(run.id) == Phase.READY, poller)
    await clock.move_to(run.due_at + deadline)  # exactly at the deadline: still on time
    await turns(poller)
    assert poller.phase_of(run.id) == Phase.READY
    await clock.move(TICK)
    ended = await _ended(store, run, poller)
    assert (ended.state, ended.reason) == (RunState.MISSED, RunReason.DEADLINE)
    assert ended.ended_at == run.due_at + deadline + TICK


@pytest.mark.parametrize("recheck_window", [timedelta(seconds=1)])
async def test_a_run_written_while_the_poller_was_held_up_is_found_without_its_hint(
    store: SqliteStore, poller: Poller, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = dataclasses.replace(make_job(), created_at=clock.now(), updated_at=clock.now())
    shard = make_run(job).shard
    real = store.scan_due
    held, written = asyncio.Event(), asyncio.Event()
    armed = True

    async def scan_due(s: int, **kw):  # type: ignore[no-untyped-def]
        nonlocal armed
        entries = await real(s, **kw)
        if s == shard and armed:  # what it read is stale by the time it returns
            armed = False
            held.set()
            await written.wait()
        return entries

    monkeypatch.setattr(store, "scan_due", scan_due)
    # the next re-read of the recent past is held up (a scan between re-reads leaves
    # the shard alone: its loaded edge is far enough ahead)
    await clock.move(RECHECK_INTERVAL)
    await turns_until(held.is_set, poller)
    clock.advance(timedelta(seconds=2.5))  # held up longer than the recheck window (mid-scan)
    run = dataclasses.replace(make_run(job, due_at=clock.now()), created_at=clock.now())
    await store.create_jobs([NewJob(job=job, runs=[run])])  # its hint is lost: none is sent
    written.set()
    await turns(poller, 1)  # the held-up scan ends: the shard counts as read up to now + 5 s
    await rescan(poller, clock)  # the next scan re-reads the recent past
    await turns_until(lambda: poller.phase_of(run.id) is not None, poller)


async def test_a_scan_reads_a_shard_again_only_once_its_loaded_edge_comes_near(
    store: SqliteStore, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each read of each shard is a store round trip: a shard loaded up to the lookahead
    and the scan reach ahead is read once per scan reach, not at every scan, and what
    is written before its edge meanwhile is held from its hint."""
    reads: list[int] = []
    real = store.scan_due

    async def scan_due(s: int, **kw):  # type: ignore[no-untyped-def]
        reads.append(s)
        return await real(s, **kw)

    monkeypatch.setattr(store, "scan_due", scan_due)
    config = PollerConfig(scan_interval=SCAN_INTERVAL)  # no re-read of the recent past
    setup = PollerSetup(config=config, clock=clock, store=clock.counting)
    async with running_poller(store, setup) as poller:
        await turns_until(lambda: poller._settled(), poller)
        assert sorted(reads) == sorted(range(SHARDS)), "the first scan reads every shard"
        reads.clear()
        # loaded up to the lookahead and the reach ahead: the scans of the reach less two
        # intervals that follow leave every shard alone
        for step in range(1, config.scan_reach // SCAN_INTERVAL - 1):
            await clock.move(SCAN_INTERVAL)
            await turns(poller)
            assert not reads, f"shards read again by the scan {step} intervals later"
        job = dataclasses.replace(make_job(), created_at=clock.now(), updated_at=clock.now())
        due = clock.now() + config.lookahead + SCAN_INTERVAL  # before the loaded edge
        run = dataclasses.replace(make_run(job, due_at=due), created_at=clock.now())
        await store.create_jobs([NewJob(job=job, runs=[run])])
        poller.runs_created([run], [job])
        await turns_until(lambda: poller.phase_of(run.id) == Phase.WAITING, poller)
        await clock.move(2 * SCAN_INTERVAL)
        await turns(poller)
        assert sorted(reads) == sorted(range(SHARDS)), "each shard read once its edge came near"
        assert poller.phase_of(run.id) == Phase.WAITING


@pytest.mark.parametrize("lease_ttl", [timedelta(seconds=90)])
async def test_a_forbid_fire_is_not_skipped_for_a_taken_over_run_nobody_claims(
    store: SqliteStore, poller: Poller, clock: FakeClock, lease_ttl: timedelta
) -> None:
    """Found on a three-node cluster: after a shard move, fires of a FORBID job were
    recorded SKIPPED/OVERLAP while nothing ran, the new owner waiting out a lease its
    previous owner granted for a run that had ended. The fire is held back while no
    worker claims that lease, and runs once the lease lapses (and the lost fire, its
    job allowing one attempt, is not retried)."""
    schedule = Schedule.cron_expr("* * * * *")
    taken = clock.now()  # the shards were taken when the poller started
    nxt = next_fire(schedule, taken)
    assert nxt is not None
    prev = next_fire(schedule, nxt.at - timedelta(minutes=1, seconds=1))
    assert prev is not None
    base = make_job()
    spec = base.spec.replace(
        schedule=schedule,
        concurrency=ConcurrencyPolicy(overlap=OverlapPolicy.FORBID),
        retry=RetryPolicy(max_attempts=1),
    )
    job = dataclasses.replace(
        base,
        spec=spec,
        schedule_version=1,
        next_fire_at=nxt.at,
        next_fire_key=nxt.key,
        created_at=taken,
        updated_at=taken,
    )
    orphan = dataclasses.replace(
        fires.make_run(job, prev, shard_count=SHARDS, now=taken),
        state=RunState.RUNNING,
        worker_id="w-gone",
        lease_token=(1 << 32) | 1,
        lease_expires_at=taken - timedelta(seconds=1),
        # due within the recheck window whatever the second of the minute, so the
        # re-read finds it (the poller's first scan ran before it was written)
        due_at=max(prev.at, taken - timedelta(seconds=5)),
    )
    fire = fires.make_run(job, nxt, shard_count=SHARDS, now=taken)
    await store.create_jobs([NewJob(job=job)])
    await store.commit(runs=[orphan, fire], due=[orphan, fire])
    await rescan(poller, clock)
    await turns_until(lambda: poller.phase_of(orphan.id) == Phase.LEASED, poller)
    await clock.move_to(max(nxt.at, clock.now()))
    await turns_until(lambda: poller.phase_of(fire.id) == Phase.BLOCKED, poller)
    assert (await stored(store, fire)()).state == RunState.PENDING, "skipped for overlap"
    await clock.move_to(taken + lease_ttl + PollerConfig().expiry_grace)
    ended = await _ended(store, orphan, poller)
    assert (ended.state, ended.reason) == (RunState.FAILED, RunReason.WORKER_LOST)
    await turns_until(lambda: poller.phase_of(fire.id) == Phase.READY, poller)
    assert (await stored(store, fire)()).state == RunState.PENDING
    retry = fires.retry_run(job, ended, now=ended.ended_at or taken)
    assert retry is None


async def test_a_hinted_run_due_past_the_loaded_window_is_held_not_read_back(
    store: SqliteStore, poller: Poller, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    read = _counting_run_reads(store, monkeypatch)
    await rescan(poller, clock)  # every shard loaded up to now + lookahead
    due_in = PollerConfig().lookahead * 6
    run = await _with_deadline(store, timedelta(minutes=5), due_in, clock.now())
    poller.runs_created([run], list((await store.get_jobs([run.job_id])).values()))
    await turns_until(lambda: poller.phase_of(run.id) == Phase.WAITING, poller)
    await clock.move(due_in - TICK)  # scans pass over its due time: it is known
    await rescan(poller, clock)
    assert run.id not in read, "the scan read back a run its hint had given"
    await clock.move_to(run.due_at)
    await turns_until(lambda: poller.phase_of(run.id) == Phase.READY, poller)


def _counting_run_reads(store: SqliteStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    read: list[str] = []
    get_runs = store.get_runs

    async def counting_get_runs(run_ids):  # type: ignore[no-untyped-def]
        read.extend(run_ids)
        return await get_runs(run_ids)

    monkeypatch.setattr(store, "get_runs", counting_get_runs)
    return read


@pytest.mark.parametrize("hint_grace", [timedelta(seconds=1)])
async def test_a_re_read_leaves_a_new_run_to_its_hint_within_the_hint_grace(
    store: SqliteStore, poller: Poller, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a cluster node, every new run was read twice: by the re-read of the recent
    past, which met it before its hint came, and for the hint on the api's node."""
    read = _counting_run_reads(store, monkeypatch)
    await rescan(poller, clock)  # every shard loaded up to now + lookahead
    now = clock.now()
    job = dataclasses.replace(make_job(), created_at=now, updated_at=now)
    run = dataclasses.replace(make_run(job, due_at=now), created_at=now)
    await store.create_jobs([NewJob(job=job, runs=[run])])  # its hint is on its way
    await rescan(poller, clock)
    await rescan(poller, clock)
    assert poller.phase_of(run.id) is None and run.id not in read
    poller.runs_created([run], [job])
    await turns_until(lambda: poller.phase_of(run.id) == Phase.READY, poller)
    assert run.id not in read


@pytest.mark.parametrize("hint_grace", [timedelta(seconds=1)])
async def test_a_run_whose_hint_is_lost_is_read_once_the_hint_grace_is_over(
    store: SqliteStore, poller: Poller, clock: FakeClock, hint_grace: timedelta
) -> None:
    await rescan(poller, clock)
    now = clock.now()
    job = dataclasses.replace(make_job(), created_at=now, updated_at=now)
    run = dataclasses.replace(make_run(job, due_at=now), created_at=now)
    await store.create_jobs([NewJob(job=job, runs=[run])])  # its hint is lost
    await rescan(poller, clock)
    assert poller.phase_of(run.id) is None
    await clock.move(hint_grace)
    await rescan(poller, clock)
    await turns_until(lambda: poller.phase_of(run.id) == Phase.READY, poller)


async def test_a_cancel_waiting_on_a_run_whose_shard_moves_is_answered_regression(
    store: SqliteStore, poller: Poller, clock: FakeClock
) -> None:
    """Issue 33, probe 3: a CancelRun waiting for a leased run's worker to stop it was
    never answered once the run's shard moved to another poller: the run was dropped
    with the shard, and its waiter with it. It is told to try again (Unavailable)."""
    run, link = await leased_now(store, poller, clock)
    answer = asyncio.ensure_future(poller.cancel(run, RunReason.CANCELLED_BY_USER))
    await turns_until(lambda: bool(link.cancels), poller)  # its worker is told to stop
    assert not answer.done()
    moved = poller.on_assignment(Assignment(epoch=2, fencing_epoch=1, shards=frozenset()))
    await turns_until(lambda: moved.done() and answer.done(), poller)
    with pytest.raises(Unavailable):
        answer.result()


async def test_the_poller_counts_its_turns_by_whether_they_wrote(
    store: SqliteStore, poller: Poller, clock: FakeClock
) -> None:
    def turns_of(kind: str) -> float:
        value = poller.metrics.registry.get_sample_value(
            "shardcron_poller_turns_total", {"kind": kind}
        )
        return value or 0.0

    await turns(poller)
    idle, written = turns_of("idle"), turns_of("commit")
    assert idle >= 1
    await leased_now(store, poller, clock)  # its LEASED record is one turn's commit
    assert turns_of("commit") >= written + 1
    before = turns_of("commit")
    await turns(poller, 3)  # nothing more to write
    assert turns_of("commit") == before and turns_of("idle") >= idle + 3
