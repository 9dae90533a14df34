"""The poller's reads go on beside its turns (``coordinator.poller.scans``, ``job_reads``).

Over a real SQLite store whose reads of one kind the test holds up: a scan held up in
the store must not hold up the turns (a hinted run comes due and is triggered
meanwhile); a run hinted while its shard's first scan is being read, which that
scan's read missed, must still be held once the scan is over (with no re-read of the
recent past, nothing else would ever find it); a job read again when its run comes
due holds up that run alone, and a scanned run due too late for a copy read with it
to serve has its job read only then; a save of the shards' cursors holds up nothing.
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from shardcron.coordinator.coordination import Assignment
from shardcron.coordinator.ids import utcnow
from shardcron.coordinator.metrics import Metrics
from shardcron.coordinator.poller import Phase, Poller, PollerConfig
from shardcron.coordinator.sqlite.store import SqliteStore
from shardcron.coordinator.store import JobStore, NewJob
from tests.support.pollers import ALL_SHARDS, PollerSetup, assign
from tests.support.store_builders import SHARDS, make_job, make_run
from tests.support.waiting import until


class HeldReads:
    """The store, with its calls of one kind (``hold``: ``scan_due``, ``get_jobs``,
    ``save_cursors``) held back: each is made at once (a read sees the store as it is
    then), and answered once released."""

    def __init__(self) -> None:
        self._store: JobStore | None = None
        self.released = asyncio.Event()
        self.released.set()
        self.held_kind = ""
        self.held = 0  # reads made and not answered yet
        self.jobs_read: list[str] = []  # the job ids of every get_jobs, in order

    def wrap(self, store: JobStore, metrics: Metrics) -> HeldReads:
        """A ``PollerSetup.store``: the poller's store, its reads held as told."""
        self._store = store
        return self

    def hold(self, kind: str) -> None:
        self.held_kind = kind
        self.released.clear()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if name not in ("scan_due", "get_jobs", "save_cursors"):
            return attr

        async def read(*args: Any, **kwargs: Any) -> Any:
            if name == "get_jobs":
                self.jobs_read.extend(args[0])
            answer = await attr(*args, **kwargs)
            if name == self.held_kind and not self.released.is_set():
                self.held += 1
                try:
                    await self.released.wait()
                finally:
                    self.held -= 1
            return answer

        return read


@pytest.fixture
def scans() -> HeldReads:
    return HeldReads()


@pytest.fixture
def job_cache_ttl() -> timedelta | None:
    return None


@pytest.fixture
def poller_setup(scans: HeldReads, job_cache_ttl: timedelta | None) -> PollerSetup:
    """Started, assigned no shard yet (``_settled`` assigns them)."""
    config = PollerConfig(
        scan_interval=timedelta(milliseconds=50),
        scan_reach=timedelta(milliseconds=50),  # each scan reads every shard again
        cursor_save_interval=timedelta(milliseconds=50),
        job_cache_ttl=job_cache_ttl,
    )
    return PollerSetup(config=config, store=scans.wrap, shards=None, stopping=scans.released.set)


async def _new_run(store: SqliteStore, poller: Poller, *, due_in: timedelta) -> str:
    """A job and its run, due ``due_in`` from now, created and hinted as the api does."""
    now = utcnow()
    job = dataclasses.replace(make_job(), created_at=now, updated_at=now)
    run = dataclasses.replace(make_run(job, due_at=now + due_in), created_at=now)
    await store.create_jobs([NewJob(job=job, runs=[run])])
    poller.runs_created([run], [job])
    return run.id


async def _settled(poller: Poller) -> None:
    await assign(poller)
    await until(lambda: poller._settled(), what="the first scan is over")


async def _turns_go_on(poller: Poller) -> None:
    turns = poller.turns
    await until(lambda: poller.turns >= turns + 2, what="turns go on meanwhile")


async def test_a_scan_held_up_in_the_store_does_not_hold_up_the_turns(
    sqlite_store: SqliteStore, scans: HeldReads, poller: Poller
) -> None:
    await _settled(poller)
    scans.hold("scan_due")
    await until(lambda: scans.held, what="a scan read held up")
    turns = poller.turns
    run_id = await _new_run(sqlite_store, poller, due_in=timedelta(0))
    # no worker: a run triggered is READY (it waits for a slot)
    await until(lambda: poller.phase_of(run_id) == Phase.READY, what="the hinted run triggered")
    assert scans.held and poller.turns > turns


async def test_a_run_hinted_while_its_shards_first_scan_is_read_is_held_after_it(
    sqlite_store: SqliteStore, scans: HeldReads, poller: Poller
) -> None:
    scans.hold("scan_due")
    await assign(poller)
    await until(lambda: scans.held, what="the first scan's reads made")
    # written after the scan read the due index: that scan does not find it
    run_id = await _new_run(sqlite_store, poller, due_in=timedelta(seconds=2))
    await until(lambda: poller.turns >= 2, what="a turn with the hint")
    scans.released.set()
    await until(lambda: poller._settled(), what="the first scan is over")
    await until(lambda: poller.phase_of(run_id) is not None, what="the hinted run held")


@pytest.mark.parametrize("job_cache_ttl", [timedelta(milliseconds=1)])
async def test_a_job_read_again_at_its_runs_trigger_does_not_hold_up_the_turns(
    sqlite_store: SqliteStore, scans: HeldReads, poller: Poller
) -> None:
    """In a cluster a job copy older than ``job_cache_ttl`` is read again when its run
    comes due; the run waits for that read, the turns do not."""
    await _settled(poller)
    scans.hold("get_jobs")
    # held from its hint with its job, which is too old by the time the run is due
    run_id = await _new_run(sqlite_store, poller, due_in=timedelta(milliseconds=200))
    await until(lambda: scans.held, what="its job read held up")
    await _turns_go_on(poller)
    assert poller.phase_of(run_id) == Phase.WAITING
    scans.released.set()
    await until(lambda: poller.phase_of(run_id) == Phase.READY, what="the run triggered")


@pytest.mark.parametrize("job_cache_ttl", [timedelta(milliseconds=500)])
async def test_a_scanned_run_due_past_the_job_read_horizon_has_its_job_read_as_it_triggers(
    sqlite_store: SqliteStore, scans: HeldReads, poller: Poller
) -> None:
    """Read with the run, the copy would be too old by the trigger and read again."""
    now = utcnow()
    soon, later = make_job(), make_job()
    near = dataclasses.replace(make_run(soon, due_at=now + timedelta(seconds=1)), created_at=now)
    # past the lease lead (0.5 s) and the demand's 2 s beyond it, within the lookahead
    far = dataclasses.replace(make_run(later, due_at=now + timedelta(seconds=3)), created_at=now)
    await sqlite_store.create_jobs([NewJob(job=soon, runs=[near]), NewJob(job=later, runs=[far])])
    await _settled(poller)  # the shards' first scan finds the runs
    assert poller.phase_of(far.id) == Phase.WAITING
    assert soon.id in scans.jobs_read and later.id not in scans.jobs_read
    await until(lambda: poller.phase_of(far.id) == Phase.READY, what="the later run triggered")
    assert later.id in scans.jobs_read
    assert poller._table.slots[far.id].job is not None  # triggered with its job as read


async def test_a_save_of_the_cursors_held_up_in_the_store_does_not_hold_up_the_turns(
    sqlite_store: SqliteStore, scans: HeldReads, poller: Poller
) -> None:
    await _settled(poller)
    scans.hold("save_cursors")
    await until(lambda: scans.held, what="a save held up")
    await _turns_go_on(poller)
    scans.released.set()
    await until(lambda: not scans.held, what="the save answered")
    cursors = await sqlite_store.load_cursors(list(range(SHARDS)))
    assert set(cursors) == set(range(SHARDS))


@pytest.mark.parametrize("job_cache_ttl", [timedelta(milliseconds=1)])
async def test_a_run_waiting_for_its_jobs_read_triggers_after_an_assignment_changes(
    sqlite_store: SqliteStore, scans: HeldReads, poller: Poller
) -> None:
    """As first built, a new assignment dropped the runs waiting for their job's read:
    out of the timer heap already, they never triggered."""
    await _settled(poller)
    scans.hold("get_jobs")
    run_id = await _new_run(sqlite_store, poller, due_in=timedelta(milliseconds=200))
    await until(lambda: scans.held, what="its job read held up")
    await poller.on_assignment(Assignment(epoch=2, fencing_epoch=1, shards=ALL_SHARDS, active=True))
    scans.released.set()
    await until(lambda: poller.phase_of(run_id) == Phase.READY, what="the run triggered")
