"""The poller's deciders without a loop: runs held by hand, jobs and workers built
with hand-set times (``T0``), acting as the loop does between the decisions."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

from shardcron.client.stream import Hello
from shardcron.client.types import (
    CommandTask,
    ConcurrencyPolicy,
    HandlerTask,
    Job,
    JobSpec,
    JobState,
    OverlapPolicy,
    Resources,
    Run,
    RunReason,
    RunState,
    Schedule,
)
from shardcron.coordinator.metrics import Metrics
from shardcron.coordinator.poller import PollerConfig
from shardcron.coordinator.poller.clock import SystemClock
from shardcron.coordinator.poller.due import Due
from shardcron.coordinator.poller.end_rules import Outcome
from shardcron.coordinator.poller.ends import Ends
from shardcron.coordinator.poller.history import RunHistory
from shardcron.coordinator.poller.leasing import Leasing, placements
from shardcron.coordinator.poller.overlap import Verdict
from shardcron.coordinator.poller.table import RunTable, Slot
from shardcron.coordinator.poller.turn import Turn
from shardcron.coordinator.poller.workers import WorkerBook

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
TICK = timedelta(microseconds=1)


def job(
    job_id: str = "j",
    *,
    overlap: OverlapPolicy = OverlapPolicy.ALLOW,
    max_concurrent: int = 0,
    deadline: timedelta | None = None,
    resources: Resources | None = None,
    task: CommandTask | HandlerTask | None = None,
) -> Job:
    """A job of owner "o", every minute, running the ``noop`` handler unless told."""
    spec = JobSpec(
        name=job_id,
        task=task or HandlerTask(name="noop"),
        schedule=Schedule.cron_expr("* * * * *"),
        concurrency=ConcurrencyPolicy(max_concurrent=max_concurrent, overlap=overlap),
        starting_deadline=deadline,
        resources=resources or Resources(),
    )
    return Job(
        id=job_id,
        owner="o",
        spec=spec,
        state=JobState.ACTIVE,
        version=1,
        created_at=T0,
        updated_at=T0,
    )


class NoLink:
    closed = False
    demand_standing = False


def worker(
    worker_id: str = "w",
    *,
    slots: int = 4,
    handlers: frozenset[str] = frozenset({"noop"}),
    owners: frozenset[str] | None = None,
    **kw,
) -> WorkerBook:  # type: ignore[no-untyped-def]
    """A worker's book (its link sends nothing): ``kw`` are more ``Hello`` fields."""
    hello = Hello(worker_id=worker_id, slots=slots, handlers=handlers, **kw)
    return WorkerBook(hello, address="", link=NoLink(), connected_at=T0, owners=owners)  # type: ignore[arg-type]


class Held:
    """The poller's rules without its loop: a ``RunTable`` whose runs are held by hand
    (due at ``T0`` unless told), the rules applied to them as a turn would (``turn``
    collects what they write)."""

    def __init__(self, *, metrics: Metrics | None = None) -> None:
        config, metrics, clock = PollerConfig(), metrics or Metrics(), SystemClock()
        self.table = RunTable(config=config, clock=clock)
        self.ends = Ends(self.table, metrics=metrics, history=RunHistory(since=clock.now()))
        self.due_rules = Due(
            self.table, self.ends, config=config, metrics=metrics, clock=clock, shard_count=8
        )
        self.leasing = Leasing(self.table, self.ends, config=config, metrics=metrics, clock=clock)
        self.turn = Turn()
        self._n = 0

    def run(self, j: Job, *, due: datetime = T0, priority: int = 0, owner: str = "o") -> Run:
        self._n += 1
        return Run(
            id=f"r{self._n}",
            job_id=j.id,
            owner=owner,
            fire_key=f"f{self._n}",
            fire_at=due,
            due_at=due,
            state=RunState.PENDING,
            priority=priority,
        )

    def slot(self, j: Job, *, due: datetime = T0, priority: int = 0, owner: str = "o") -> Slot:
        """A run of ``j`` waiting for its due time."""
        slot = self.table.hold(self.run(j, due=due, priority=priority, owner=owner), j)
        assert slot is not None
        return slot

    def due(self, run: Run, j: Job | None) -> Slot:
        """``run`` held and taken out to trigger (DUE)."""
        slot = self.table.hold(run, j)
        assert slot is not None
        [due] = self.table.take_due(run.due_at, run.due_at, 1, to_instant=lambda s: False)
        assert due is slot
        return slot

    def orphan(self, j: Job, *, token: int = (1 << 32) | 1, worker_id: str = "w-gone") -> Slot:
        """A run of ``j`` leased by an earlier owner of its shard, taken over at ``T0``."""
        run = dataclasses.replace(
            self.run(j), state=RunState.LEASED, worker_id=worker_id, lease_token=token
        )
        return self.table.adopt(run, j, taken_at=T0, now=T0)

    def admit(self, s: Slot, *, fresh_fire: bool) -> Verdict:
        """The due run asks to start, as a trigger would ask."""
        return self.ends.overlap.admit(s, fresh_fire, self.turn, T0)

    def end(self, s: Slot) -> None:
        """The run ends (SUCCEEDED): what follows follows (its job's queue moves on)."""
        self.ends.end(s, Outcome(state=RunState.SUCCEEDED, reason=RunReason.NONE), self.turn, T0)

    def drop(self, s: Slot) -> None:
        """The run leaves without an end (its shard was lost)."""
        self.table.drop(s, "its shard was lost")

    def ended(self, s: Slot) -> Run:
        """The final record its end wrote."""
        return self.turn.runs[s.run.id]


def lease_all(h: Held, workers: list[WorkerBook], now: datetime = T0, max_batch: int = 100):  # type: ignore[no-untyped-def]
    """Places what can be placed, acting as the loop does (a run past its starting
    deadline ends MISSED); returns (run id, worker id or None)."""
    out = []
    for s, w in placements(h.table, workers, now, max_batch):
        if w is None:
            h.ends.end(s, Outcome(state=RunState.MISSED, reason=RunReason.DEADLINE), h.turn, now)
            out.append((s.run.id, None))
            continue
        h.table.lease(s, w, now)
        out.append((s.run.id, w.id))
    return out
