"""A real ``Poller`` for tests, and what drives and watches it.

- ``PollerSetup`` says how the ``poller`` fixture (tests/conftest.py) builds its poller:
  config, clock, a wrapper around the store, started and assigned or not. A test module
  overrides the ``poller_setup`` fixture to change it; ``running_poller`` builds one
  outside the fixture (two pollers on one store).
- Every poller built here checks the invariants of the runs it holds after each of its
  turns (``poller_invariants``): a broken one fails the test when its poller stops, and
  at once in ``turns``.
- ``FakeClock`` (moved by the test, between turns) and ``CountingStore`` (its store
  calls in flight: none means the poller is between turns); ``turns`` and
  ``turns_until`` drive the poller turn by turn while the fake clock stands still.
- ``RecordingLink``: a worker's lease stream as the poller sees it, recording what
  the poller sends; ``connect`` books a worker on it; ``leased_now`` leases it a run
  due now.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from shardcron.client.errors import ShardcronError
from shardcron.client.stream import CancelOrder, Hello, LeaseGrant, Renewal, ResultAck, Welcome
from shardcron.client.types import Run
from shardcron.coordinator.coordination import Assignment
from shardcron.coordinator.metrics import Metrics
from shardcron.coordinator.poller import Poller, PollerConfig
from shardcron.coordinator.poller.clock import Clock
from shardcron.coordinator.poller.events import WorkerConnected
from shardcron.coordinator.store import JobStore, NewJob
from tests.support.poller_invariants import InvariantWatch
from tests.support.store_builders import SHARDS, make_job, make_run
from tests.support.waiting import until

ALL_SHARDS = frozenset(range(SHARDS))
# How long a test waits for what it expects (about a second when the machine is idle;
# SQLite's fsyncs can stall for seconds while other servers write): not a speed check.
WAIT = 30.0
TICK = timedelta(microseconds=1)
SCAN_INTERVAL = timedelta(milliseconds=100)
RECHECK_INTERVAL = timedelta(milliseconds=200)

StoreWrapper = Callable[[JobStore, Metrics], Any]


@dataclass(frozen=True, kw_only=True)
class PollerSetup:
    """How a test's poller is built (the ``poller`` fixture's defaults: a real clock,
    scans every 100 ms, started, every shard assigned)."""

    config: PollerConfig = field(default_factory=lambda: PollerConfig(scan_interval=SCAN_INTERVAL))
    clock: Clock | None = None
    store: StoreWrapper | None = None  # wraps the store the poller is given
    start: bool = True
    shards: frozenset[int] | None = ALL_SHARDS  # None: no assignment yet
    poller_id: str = "p1"
    stopping: Callable[[], object] | None = None  # called before the poller stops


def build_poller(store: JobStore, setup: PollerSetup) -> Poller:
    """The poller ``setup`` describes, not started; its invariants are watched."""
    metrics = Metrics()
    watch = InvariantWatch()
    poller = Poller(
        setup.store(store, metrics) if setup.store is not None else store,
        poller_id=setup.poller_id,
        config=setup.config,
        metrics=metrics,
        clock=setup.clock,
        after_turn=watch,
    )
    _watches[poller] = watch
    return poller


_watches: dict[Poller, InvariantWatch] = {}


def invariants_held(poller: Poller) -> None:
    """Raises the first invariant a turn of ``poller`` broke (tests/support/poller_invariants)."""
    _watches[poller].raise_broken()


async def assign(poller: Poller, shards: frozenset[int] = ALL_SHARDS, *, epoch: int = 1) -> None:
    await poller.on_assignment(
        Assignment(epoch=epoch, fencing_epoch=epoch, shards=shards, active=True)
    )


@contextlib.asynccontextmanager
async def running_poller(store: JobStore, setup: PollerSetup) -> AsyncIterator[Poller]:
    """The poller ``setup`` describes, started and assigned as it says; stopped after,
    and its invariants checked."""
    poller = build_poller(store, setup)
    try:
        if setup.start:
            poller.start()
            if setup.shards is not None:
                await assign(poller, setup.shards)
        yield poller
    finally:
        if setup.stopping is not None:
            setup.stopping()
        await poller.stop()
        try:
            invariants_held(poller)
        finally:
            del _watches[poller]


class CountingStore:
    """The poller's view of the store, counting its calls in flight. Every wait inside
    a turn is a store call, so with none in flight the poller is between turns."""

    def __init__(self, store: JobStore) -> None:
        self._store = store
        self.in_flight = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)  # looked up per call: monkeypatches apply
        if not inspect.iscoroutinefunction(attr):
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            self.in_flight += 1
            try:
                return await attr(*args, **kwargs)
            finally:
                self.in_flight -= 1

        return call


class FakeClock:
    """The poller's clock, moved by the test only, and only between turns (``move``):
    a turn sees one time from its start, as it would with a real clock that moved on
    in the meantime by less than a turn's work."""

    def __init__(self, start: datetime) -> None:
        self._now = start
        self._monotonic = 1000.0
        self.store: CountingStore | None = None  # the poller's, once it runs

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._monotonic

    def counting(self, store: JobStore, metrics: Metrics) -> CountingStore:
        """A ``PollerSetup.store``: the poller's store, counted so ``move`` waits for a
        turn's store calls."""
        self.store = CountingStore(store)
        return self.store

    def advance(self, by: timedelta) -> None:
        """Moves the clock now, even in the middle of a turn."""
        self._now += by
        self._monotonic += by.total_seconds()

    async def move(self, by: timedelta) -> None:
        """Moves the clock once no store call is in flight (between turns)."""
        store = self.store
        if store is not None and store.in_flight:
            await until(lambda: not store.in_flight, WAIT, "the turn's store calls", 0.001)
        self.advance(by)

    async def move_to(self, at: datetime) -> None:
        await self.move(at - self._now)


def on_fake_clock(
    clock: FakeClock,
    *,
    lease_ttl: timedelta,
    recheck_window: timedelta,
    hint_grace: timedelta,
) -> PollerSetup:
    """A poller on ``clock``, re-reading the recent past as in a cluster (no hint comes
    from another node)."""
    config = PollerConfig(
        scan_interval=SCAN_INTERVAL,
        recheck_interval=RECHECK_INTERVAL,
        recheck_window=recheck_window,
        hint_grace=hint_grace,
        lease_ttl=lease_ttl,
    )
    return PollerSetup(config=config, clock=clock, store=clock.counting)


async def turns(poller: Poller, n: int = 2) -> None:
    """Drives ``n`` more whole turns (the first may have begun at the old time)."""
    target = poller.turns + n
    end = asyncio.get_running_loop().time() + WAIT
    while poller.turns < target:
        invariants_held(poller)
        assert asyncio.get_running_loop().time() < end, "timed out"
        poller._wake.set()  # idle, the loop would sleep up to half a second per turn
        await asyncio.sleep(0.005)
    invariants_held(poller)


async def turns_until(pred: Callable[[], object], poller: Poller) -> None:
    """Drives the poller turn after turn (the fake clock stands still) until ``pred()``
    holds: a coroutine function or a plain one. Waits that need no turns use
    ``tests.support.waiting.until``."""
    end = asyncio.get_running_loop().time() + WAIT
    while True:
        got = pred()
        if isinstance(got, Awaitable):
            got = await got
        if got:
            return
        assert asyncio.get_running_loop().time() < end, "timed out"
        await turns(poller, 1)


class RecordingLink:
    """A worker's stream as the poller sees it: what is sent is recorded."""

    def __init__(self) -> None:
        self.closed = False
        self.demand_standing = False
        self.leases: list[LeaseGrant] = []
        self.cancels: list[CancelOrder] = []

    def welcome(self, welcome: Welcome) -> None:
        pass

    def lease(self, grant: LeaseGrant) -> None:
        self.leases.append(grant)

    def cancel(self, order: CancelOrder) -> None:
        self.cancels.append(order)

    def renewals(self, renewals: Sequence[Renewal], ttl: timedelta) -> None:
        pass

    def ack(self, ack: ResultAck) -> None:
        pass

    def demand(self, slots: int) -> None:
        pass

    def flush(self) -> None:
        pass

    def flush_leases(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def fail(self, error: ShardcronError) -> None:
        self.closed = True

    def drop_unsent_leases(self) -> None:
        pass

    def forget(self) -> None:
        pass

    def granted(self, run_id: str) -> LeaseGrant | None:
        return next((g for g in self.leases if g.run_id == run_id), None)


def connect(poller: Poller, worker_id: str, *, waits: bool, slots: int = 4) -> RecordingLink:
    """A worker serving the ``noop`` handler connects to ``poller`` (``waits``: it holds
    a lease until its run's due instant)."""
    link = RecordingLink()
    hello = Hello(
        worker_id=worker_id, slots=slots, handlers=frozenset({"noop"}), waits_for_due=waits
    )
    poller.submit(WorkerConnected(link=link, hello=hello, address=worker_id))
    return link


async def leased_now(
    store: JobStore, poller: Poller, clock: FakeClock, worker_id: str = "w"
) -> tuple[Run, RecordingLink]:
    """A worker connects, and a run due now (of a job of its own, both created on
    ``store`` and hinted) is leased to it: the run and the worker's link."""
    link = connect(poller, worker_id, waits=False)
    now = clock.now()
    job = dataclasses.replace(make_job(), created_at=now, updated_at=now)
    run = dataclasses.replace(make_run(job, due_at=now), created_at=now)
    await store.create_jobs([NewJob(job=job, runs=[run])])
    poller.runs_created([run], [job])
    await turns_until(lambda: link.granted(run.id) is not None, poller)
    return run, link
