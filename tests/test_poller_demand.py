"""A poller tells a worker that shares its slots among pollers how many it could use
of them: for its ready runs in every turn, for the runs coming due as counted at most
``COMING_EVERY`` before (``WorkerStreams.update_demand``), which a fake clock shows."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from shardcron.client.stream import Hello
from shardcron.coordinator.ids import utcnow
from shardcron.coordinator.poller import Poller
from shardcron.coordinator.poller.config import COMING_EVERY
from shardcron.coordinator.poller.events import WorkerConnected
from shardcron.coordinator.sqlite.store import SqliteStore
from shardcron.coordinator.store import NewJob
from tests.support.pollers import FakeClock, PollerSetup, RecordingLink, turns, turns_until
from tests.support.store_builders import make_job, make_run


class DemandLink(RecordingLink):
    def __init__(self) -> None:
        super().__init__()
        self.demands: list[int] = []

    def demand(self, slots: int) -> None:
        self.demands.append(slots)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(utcnow())


@pytest.fixture
def poller_setup(clock: FakeClock) -> PollerSetup:
    return PollerSetup(clock=clock, store=clock.counting)


async def _coming(store: SqliteStore, poller: Poller, clock: FakeClock) -> None:
    """A run due in a second, created and hinted."""
    now = clock.now()
    job = dataclasses.replace(make_job(), created_at=now, updated_at=now)
    run = dataclasses.replace(make_run(job, due_at=now + timedelta(seconds=1)), created_at=now)
    await store.create_jobs([NewJob(job=job, runs=[run])])
    poller.runs_created([run], [job])


async def test_runs_coming_due_are_counted_for_the_demand_every_so_often(
    sqlite_store: SqliteStore, poller: Poller, clock: FakeClock
) -> None:
    link = DemandLink()
    hello = Hello(worker_id="w", slots=8, handlers=frozenset({"noop"}), credit_limit=0)
    poller.submit(WorkerConnected(link=link, hello=hello, address="w"))
    await turns_until(lambda: link.demands[-1:] == [0], poller)  # counted: none coming
    await _coming(sqlite_store, poller, clock)
    await turns(poller, 3)
    assert link.demands[-1] == 0  # not counted again yet: the clock stands still
    await clock.move(timedelta(seconds=COMING_EVERY))
    await turns_until(lambda: link.demands[-1:] == [1], poller)
    await _coming(sqlite_store, poller, clock)
    await turns(poller, 3)
    assert link.demands[-1] == 1
    await clock.move(timedelta(seconds=COMING_EVERY))
    await turns_until(lambda: link.demands[-1:] == [2], poller)
