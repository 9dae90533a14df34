"""Leasing ready runs to workers, sending the leases, taking them back; why runs wait.

- ``dispatch``: ready runs in placement order (``placement``), each leased to the
  worker chosen for it: a fencing token and an expiry from the lease book, its
  capacity held on the worker, the LEASED run written by the turn; a run past its
  starting deadline is MISSED; a run whose job has a secret this node cannot open
  fails instead of being leased (``lease_grants.unopenable``); a run not due yet that only
  workers starting it at once have room for is set aside until its instant.
- ``send_lease``: after the commit, the lease goes out; its TTL counts from then.
- ``expire``: a lease that ran out (its grace included) ends its run FAILED
  WORKER_LOST, or CANCELLED when a cancel was sent to it.
- ``waiting_reasons``/``count_waiting``: why a ready or blocked run is not on a
  worker yet, asked for a run and counted for the ``shardcron_waiting_runs`` and
  shard-lag gauges.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator
from datetime import datetime

from shardcron.client.types import LateReason, RunReason, RunState
from shardcron.coordinator.metrics import Metrics
from shardcron.coordinator.poller.clock import Clock
from shardcron.coordinator.poller.config import PollerConfig
from shardcron.coordinator.poller.due import missed_deadline
from shardcron.coordinator.poller.end_rules import Outcome
from shardcron.coordinator.poller.ends import Ends
from shardcron.coordinator.poller.lateness import LateCut, Waits, from_wait, late_after, leased
from shardcron.coordinator.poller.lease_grants import lease_grant, unopenable
from shardcron.coordinator.poller.placement import (
    WaitReason,
    free_slots,
    past_deadline,
    pick_worker,
    why_waiting,
)
from shardcron.coordinator.poller.table import LAG_PHASES, Phase, Place, RunTable, Slot
from shardcron.coordinator.poller.turn import Turn
from shardcron.coordinator.poller.workers import WorkerBook

WAITING_GAUGE_EVERY = 1.0  # seconds between counts of the runs waiting, by reason
# ready runs past their due instant told what they wait for, per class and count (a
# bound on the count's work; a run of a larger backlog never told says, when leased
# late, that it waited for a worker)
SEEN_PER_CLASS = 10_000


def placements(
    table: RunTable, workers: Collection[WorkerBook], now: datetime, max_batch: int
) -> Iterator[tuple[Slot, WorkerBook | None]]:
    """Ready runs in placement order, each with the worker it goes to, or with None:
    it missed its starting deadline. The caller leases each to its worker, or ends it,
    before asking for the next. A run not due yet that only workers starting it at
    once have room for is set aside until due. At most ``max_batch`` placed."""
    table.now_due(now)
    if free_slots(workers) <= 0:
        return
    ready = table.ready
    for rid, cls, key, priority, owner in ready.heads(workers, max_batch):
        slot = table.slots[rid]
        job = slot.job
        assert slot.place is Place.READY and job is not None
        if past_deadline(job, slot.run, now):
            ready.passed(cls, priority, owner, placed=False)
            yield slot, None
            continue
        early = slot.run.due_at > now
        worker = pick_worker(job, owner, workers, early=early)
        if worker is None:
            if early and pick_worker(job, owner, workers) is not None:
                # only workers that would start it at once have room: set aside until
                # due, when it is placed as any due run
                ready.passed(cls, priority, owner, placed=False)
                table.set_aside(slot)
                continue
            ready.close(key)  # no room for this class left: its other runs wait too
            continue
        ready.passed(cls, priority, owner, placed=True)
        yield slot, worker


class Leasing:
    def __init__(
        self, table: RunTable, ends: Ends, *, config: PollerConfig, metrics: Metrics, clock: Clock
    ) -> None:
        self._table = table
        self._ends = ends
        self._config = config
        self._metrics = metrics
        self._clock = clock  # monotonic only: when the waiting gauges were last set
        self._waiting_counted_at = -math.inf
        self.late = LateCut(late_after(config.lease_lead))

    def dispatch(self, workers: Collection[WorkerBook], now: datetime, turn: Turn) -> None:
        """Leases ready runs to workers with room; the leases go out after the commit."""
        count = 0
        ends, cut = self._ends, self.late
        for slot, worker in placements(self._table, workers, now, self._config.max_batch):
            if worker is None:
                ends.end(slot, missed_deadline(slot, now), turn, now)
                continue
            assert slot.job is not None
            if (fault := unopenable(self._config, slot.job)) is not None:
                ends.fault(slot, fault, turn, now, where="secrets")  # never to a worker
                continue
            due, late = slot.run.due_at, None
            if cut.late(due, now):
                late = leased(slot.waits, due, now)
                self._metrics.runs_late.labels(reason=late.reason.value).inc()
            run = self._table.lease(slot, worker, now, late)
            turn.runs[run.id] = run
            turn.leases.append(slot)
            count += 1
        if count:
            self._metrics.runs_leased.inc(count)

    def send_lease(self, slot: Slot, now: datetime) -> None:
        """Sends a lease once it is durable; its TTL counts from now, as the worker's will
        (from the run's due instant for a lease sent ahead of it)."""
        expires = self._table.sent(slot, max(now, slot.run.due_at))
        if expires is None:
            return  # not leased under that token any more
        worker, job = slot.worker, slot.job
        assert worker is not None and job is not None
        # the run keeps its granted expiry: the lease book holds this one, and the run's
        # final record takes it from there (``RunTable.end``)
        worker.link.lease(lease_grant(slot.run, job, self._config, expires))

    def expire(self, now: datetime, turn: Turn) -> None:
        """Ends the runs whose lease ran out: lost with their worker, or cancelled."""
        ends = self._ends
        for slot in self._table.expired(now):
            self._metrics.leases_expired.inc()
            with ends.isolated(slot, turn, now, where="expire"):
                if slot.cancel_reason is not None:
                    outcome = Outcome(state=RunState.CANCELLED, reason=slot.cancel_reason)
                else:
                    outcome = Outcome(
                        state=RunState.FAILED,
                        reason=RunReason.WORKER_LOST,
                        error="lease expired: worker lost",
                    )
                ends.end(slot, outcome, turn, now)

    # --- why runs wait --------------------------------------------------------------------

    def waiting_reasons(
        self, run_ids: Collection[str], workers: Collection[WorkerBook]
    ) -> dict[str, str]:
        """Why each of these runs, held here and due, is not on a worker yet (runs not
        held or not waiting are left out)."""
        reasons = {}
        for rid in run_ids:
            slot = self._table.slots.get(rid)
            reason = "" if slot is None else self._waiting_reason(slot, workers)
            if reason:
                reasons[rid] = reason
        return reasons

    def _waiting_reason(self, slot: Slot, workers: Collection[WorkerBook]) -> str:
        """Why this held run is not on a worker yet ("" unless ready or blocked)."""
        if slot.phase == Phase.BLOCKED:
            if slot.place is Place.HELD_BACK:
                return "waiting to learn whether a run taken over from another poller still goes"
            running = len(self._table.admitted(slot.run.job_id))
            return f"waiting for the job's concurrency limit ({running} running)"
        cls = self._table.ready.class_of(slot.run.id)
        return "" if cls is None else why_waiting(cls.spec, cls.owner, workers)[1]

    def waiting_of(self, owner: str, workers: Collection[WorkerBook]) -> dict[str, int]:
        """The owner's runs waiting, by why as a person reads it: O(classes × workers +
        runs blocked), never the runs stored."""
        counts: dict[str, int] = {}
        for cls in self._table.ready.classes():
            if cls.owner == owner:
                reason = why_waiting(cls.spec, cls.owner, workers)[1] or "waiting for a worker"
                counts[reason] = counts.get(reason, 0) + cls.count
        for slot in self._table.blocked_slots():
            if slot.run.owner == owner:
                reason = self._waiting_reason(slot, workers).split(" (")[0]
                counts[reason] = counts.get(reason, 0) + 1
        return counts

    def running_of(self, owner: str) -> int:
        """The owner's runs on a worker: O(leases held)."""
        slots = self._table.slots
        return sum(
            1 for rid in self._table.leases.held() if (s := slots.get(rid)) and s.run.owner == owner
        )

    def waiting_counts(
        self, workers: Collection[WorkerBook], now: datetime | None = None
    ) -> dict[WaitReason, int]:
        """Runs waiting, by reason: O(classes × workers). With ``now``, each ready run
        past its due instant is told what it waits for (``lateness``): its class's
        reason, or the poller's turn when some worker has room for the class."""
        counts = dict.fromkeys(WaitReason, 0)
        for cls in self._table.ready.classes():
            reason, text = why_waiting(cls.spec, cls.owner, workers)
            counts[reason] += cls.count
            if now is not None:
                if any(w.fits(cls.spec, cls.owner) for w in workers):
                    code, text = LateReason.POLLER_BEHIND, "the poller placed other runs first"
                else:
                    code = from_wait(reason)
                self._seen_waiting(
                    self._table.ready.past_due(cls, now, SEEN_PER_CLASS), code, text, now
                )
        counts[WaitReason.CONCURRENCY_LIMIT] = self._table.blocked
        return counts

    def _seen_waiting(
        self, run_ids: Collection[str], code: LateReason, text: str, now: datetime
    ) -> None:
        """These ready runs, past their due instant, wait for ``code`` (``text``)."""
        slots = self._table.slots
        for rid in run_ids:
            slot = slots[rid]
            if slot.waits is None:
                slot.waits = Waits(slot.run.due_at)
            slot.waits.seen(code, text, now)

    def count_waiting(self, workers: Collection[WorkerBook], now: datetime) -> None:
        """Sets the waiting-runs and shard-lag gauges, at most once a second (they look
        at every class and every run held)."""
        at = self._clock.monotonic()
        if at - self._waiting_counted_at < WAITING_GAUGE_EVERY:
            return
        self._waiting_counted_at = at
        for reason, n in self.waiting_counts(workers, now).items():
            self._metrics.waiting_runs.labels(reason=reason.value).set(n)
        oldest = self._table.oldest_due(LAG_PHASES).values()
        lag = (now - min(oldest)).total_seconds() if oldest else 0.0
        self._metrics.shard_lag.set(max(0.0, lag))
