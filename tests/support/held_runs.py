"""The poller's deciders without a loop: runs held by hand, jobs and workers built
with hand-set times (``T0``), acting as the loop does between the decisions."""

from __future__ import annotations

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
    RunState,
    Schedule,
)
from shardcron.coordinator.poller.admission import Admission
from shardcron.coordinator.poller.state import Phase, Slot
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
    """The loop's side: the runs held, and an admission over them."""

    def __init__(self) -> None:
        self.slots: dict[str, Slot] = {}
        self.admission = Admission(self.slots)
        self._n = 0

    def slot(self, j: Job, *, due: datetime = T0, priority: int = 0) -> Slot:
        self._n += 1
        run = Run(
            id=f"r{self._n}",
            job_id=j.id,
            owner="o",
            fire_key=f"f{self._n}",
            fire_at=due,
            due_at=due,
            state=RunState.PENDING,
            priority=priority,
        )
        s = Slot(run=run, job=j)
        self.slots[run.id] = s
        return s

    def end(self, s: Slot) -> None:
        """What the loop does when a run ends."""
        self.drop(s)
        assert s.job is not None
        self.admission.unblock(s.job.id)

    def drop(self, s: Slot) -> None:
        """What the loop does when a run leaves without an end (its shard was lost)."""
        del self.slots[s.run.id]
        self.admission.forget(s)


def lease_all(h: Held, workers: list[WorkerBook], now: datetime = T0, max_batch: int = 100):  # type: ignore[no-untyped-def]
    """Places what can be placed, acting as the loop does; returns (run id, worker id)."""
    out = []
    for s, w in h.admission.place(workers, now, max_batch):
        if w is None:
            out.append((s.run.id, None))
            continue
        assert s.job is not None
        w.hold(s.run.id, s.job.spec.resources)
        s.phase = Phase.LEASED
        out.append((s.run.id, w.id))
    return out
