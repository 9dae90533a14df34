"""When a run's start is written (``PollerConfig.start_write_delay``): the poller over a
real SQLite store on a fake clock, a worker's stream recorded
(``tests/support/pollers.py``), every record the poller's commits write kept.

A run's worker says it started; the run is RUNNING in the poller at once, and its
record is written ``start_write_delay`` later with whatever that turn writes, unless
the run ended by then: its end record carries the start, so a short run is written
twice (LEASED, its end), never three times. A run still going after the delay is
RUNNING in the store, its start as its worker said; a shard released hands its next
owner the starts of its runs not written yet.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

import pytest

from shardcron.client.stream import LeaseRef, Results, RunOutcome, Started
from shardcron.client.types import Run, RunState
from shardcron.coordinator.poller import Poller, PollerConfig
from shardcron.coordinator.poller.events import WorkerMessage
from shardcron.coordinator.sqlite.store import SqliteStore
from tests.support.pollers import (
    ALL_SHARDS,
    FakeClock,
    PollerSetup,
    RecordingLink,
    assign,
    leased_now,
    turns,
    turns_until,
)

DELAY = PollerConfig().start_write_delay


@pytest.fixture
def poller_setup(fake_clock_setup: PollerSetup) -> PollerSetup:
    return fake_clock_setup


Written = list[tuple[str, RunState]]


@pytest.fixture
def written(sqlite_store: SqliteStore, monkeypatch: pytest.MonkeyPatch) -> Written:
    """Every (run id, state) the poller's commits write, in order."""
    out: Written = []
    commit = sqlite_store.commit

    async def recording(*args: Any, **kwargs: Any) -> Any:
        out.extend((r.id, r.state) for r in kwargs.get("runs", ()))
        return await commit(*args, **kwargs)

    monkeypatch.setattr(sqlite_store, "commit", recording)
    return out


async def read(store: SqliteStore, run: Run) -> Run:
    return (await store.get_runs([run.id]))[run.id]


def stored_as(store: SqliteStore, run: Run, state: RunState) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return (await read(store, run)).state == state

    return check


async def started(
    store: SqliteStore, poller: Poller, clock: FakeClock
) -> tuple[Run, RecordingLink, LeaseRef, datetime]:
    """A run due now, leased to a worker, which says it started it now, and the turns
    that follow: the run, its worker's link, its lease and its start."""
    run, link = await leased_now(store, poller, clock)
    grant = link.granted(run.id)
    assert grant is not None
    ref = LeaseRef(run_id=run.id, fencing_token=grant.fencing_token, job_id=run.job_id)
    began = clock.now()
    poller.submit(WorkerMessage(link=link, event=Started(leases=(ref,), at=began)))
    await turns(poller, 3)
    return run, link, ref, began


def finished(poller: Poller, link: RecordingLink, run: Run, ref: LeaseRef, at: datetime) -> None:
    outcome = RunOutcome(
        run_id=run.id, job_id=run.job_id, fencing_token=ref.fencing_token,
        state=RunState.SUCCEEDED, ended_at=at,
    )  # fmt: skip
    poller.submit(WorkerMessage(link=link, event=Results(outcomes=(outcome,))))


def states_of(written: Written, run: Run) -> list[RunState]:
    return [state for rid, state in written if rid == run.id]


async def test_a_run_that_ends_within_the_delay_is_written_twice_its_end_carrying_its_start(
    sqlite_store: SqliteStore, poller: Poller, clock: FakeClock, written: Written
) -> None:
    run, link, ref, began = await started(sqlite_store, poller, clock)
    assert (await read(sqlite_store, run)).state == RunState.LEASED  # not written yet
    await clock.move(DELAY / 2)
    await turns(poller)
    finished(poller, link, run, ref, clock.now())
    await turns_until(stored_as(sqlite_store, run, RunState.SUCCEEDED), poller)
    await clock.move(DELAY)  # the start's turn would have come by now
    await turns(poller, 3)
    assert states_of(written, run) == [RunState.LEASED, RunState.SUCCEEDED]
    final = await read(sqlite_store, run)
    assert final.started_at == began and final.ended_at == began + DELAY / 2


async def test_a_run_still_going_after_the_delay_is_stored_running_from_its_start(
    sqlite_store: SqliteStore, poller: Poller, clock: FakeClock, written: Written
) -> None:
    run, link, ref, began = await started(sqlite_store, poller, clock)
    await clock.move(DELAY - timedelta(milliseconds=1))
    await turns(poller, 3)
    assert (await read(sqlite_store, run)).state == RunState.LEASED
    await clock.move(timedelta(milliseconds=1))
    await turns_until(stored_as(sqlite_store, run, RunState.RUNNING), poller)
    assert (await read(sqlite_store, run)).started_at == began
    finished(poller, link, run, ref, clock.now())
    await turns_until(stored_as(sqlite_store, run, RunState.SUCCEEDED), poller)
    assert states_of(written, run) == [RunState.LEASED, RunState.RUNNING, RunState.SUCCEEDED]
    assert (await read(sqlite_store, run)).started_at == began


async def test_a_shard_released_writes_the_starts_of_its_runs_for_its_next_owner(
    sqlite_store: SqliteStore, poller: Poller, clock: FakeClock, written: Written
) -> None:
    run, link, ref, began = await started(sqlite_store, poller, clock)
    assert (await read(sqlite_store, run)).state == RunState.LEASED
    await assign(poller, ALL_SHARDS - {run.shard}, epoch=2)  # answered once written
    stored = await read(sqlite_store, run)
    assert stored.state == RunState.RUNNING and stored.started_at == began
    assert poller.phase_of(run.id) is None  # not held here any more
    await clock.move(DELAY)
    await turns(poller, 3)
    assert states_of(written, run) == [RunState.LEASED, RunState.RUNNING]
