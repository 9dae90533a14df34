"""Admission and placement: which due runs may start, and on which worker.

- **Concurrency**: a job runs at most ``max_concurrent`` runs at once (0: one, or
  no limit under ALLOW). A due run past the limit is, by the job's overlap policy:
  FORBID — skipped (a fresh fire only); REPLACE — queued first and the oldest
  running run cancelled; QUEUE and ALLOW — queued behind the others. Runs that are
  not fresh fires (retries, manual runs) always queue. A queued run is admitted
  when a run of its job ends (``unblock``), in queue order.
- **Skipped only while a run is really going**: under FORBID, a fresh fire whose
  job's runs are all unclaimed orphans (leased by an earlier owner of the shard, no
  worker has renewed them here yet: maybe nothing runs) is held back (HOLD), not
  skipped, until one is claimed by its worker or ends; then it is admitted again
  (``release_held``): skipped if a run is going, else run.
- **Starting deadline**: a run not started within ``starting_deadline`` of its due
  time is missed, whether it waits for a slot or for its job's limit (``missed``),
  or is about to be placed (``place``); exactly at the deadline it is still on time.
- **Placement**: ready runs go out highest priority first; within a priority,
  owners take turns and each owner's runs go by due time (``placement``). Each
  goes to the worker with the most free slots among those that fit it (its
  owner's pool, slots, cpu, memory, labels, handler or command). Runs are grouped by what they need
  (placement class): a class no worker has room for is skipped whole, so runs
  nobody can take never hold up the runs that can, and a turn does not look at
  every waiting run.
- **Leasing ahead**: a run triggered ahead of its due instant (the poller's lease
  lead, ``lease_lead``: only while some worker waits for ``due_at``) goes only to a
  worker that holds a lease until its due instant (``Hello.waits_for_due``). When
  only other workers have room, it is set aside until it is due (``not_due``), then
  placed as any due run.
- **Why a run waits**: for a READY run, the first thing no connected worker offers
  (``placement.why_waiting``); for a BLOCKED one, its job's limit. Counted by
  reason for the ``shardcron_waiting_runs`` gauge.
- **Demand**: for a worker that shares its slots among pollers, how many slots of
  ready runs, and of runs coming due (``ahead``), it could take from this one.

Pure: nothing here reads a clock or calls the store; ``missed`` and ``place`` yield
decisions lazily, so what the loop does with one (a run ended, a slot held) counts
for the next.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Iterator
from datetime import datetime, timedelta
from enum import Enum

from shardcron.client.saturating import saturating_add
from shardcron.client.types import Job, JobSpec, OverlapPolicy, Run
from shardcron.coordinator.poller.placement import ReadyRuns, WaitReason, why_waiting
from shardcron.coordinator.poller.state import Phase, Slot
from shardcron.coordinator.poller.timeline import Timeline
from shardcron.coordinator.poller.workers import WorkerBook


class Verdict(Enum):
    READY = 1  # admitted: waits for a worker's slot
    BLOCKED = 2  # waits for its job's concurrency limit
    SKIP = 3  # FORBID: the fire is skipped (OVERLAP)
    REPLACE = 4  # queued first; cancel ``Admission.replaced(job)`` to make room
    HOLD = 5  # FORBID, and only unclaimed orphans run: decided again (``release_held``)


def concurrency_limit(job: Job) -> float:
    c = job.spec.concurrency
    if c.max_concurrent > 0:
        return c.max_concurrent
    return math.inf if c.overlap == OverlapPolicy.ALLOW else 1


def past_deadline(job: Job, run: Run, now: datetime) -> bool:
    """The run can no longer start: its starting deadline passed (strictly)."""
    deadline = job.spec.starting_deadline
    return deadline is not None and now - run.due_at > deadline


def lease_lead(workers: Iterable[WorkerBook], configured: timedelta) -> timedelta:
    """How far ahead of their due instant runs are triggered: the configured lead while
    some connected worker holds leases until their due instant, else none (every run
    would wait for its instant anyway, set aside)."""
    return configured if any(w.waits_for_due for w in workers) else timedelta(0)


def pick_worker(
    job: Job, owner: str, workers: Iterable[WorkerBook], *, early: bool = False
) -> WorkerBook | None:
    """The worker with the most free slots among those that have room for a run of the
    job, of ``owner``; for a run not due yet (``early``), only among the workers that
    hold a lease until its due instant."""
    best: WorkerBook | None = None
    for w in workers:
        if early and not w.waits_for_due:
            continue
        if w.fits(job.spec, owner) and (best is None or w.free > best.free):
            best = w
    return best


class Admission:
    """Runs due and admitted (READY, by placement class), queued behind their job's
    limit (BLOCKED), and their starting deadlines."""

    __slots__ = (
        "_admitted",
        "_blocked",
        "_blocked_runs",
        "_deadlines",
        "_held",
        "_not_due",
        "_ready",
        "_slots",
    )

    def __init__(self, slots: dict[str, Slot]) -> None:
        self._slots = slots  # the loop's runs held, by run id (read only here)
        self._ready = ReadyRuns()
        self._blocked_runs: set[str] = set()  # run ids BLOCKED
        # READY and BLOCKED runs by starting deadline (runs of jobs that have one)
        self._deadlines = Timeline()
        self._admitted: dict[str, set[str]] = {}  # job id -> run ids READY or LEASED
        self._blocked: dict[str, dict[str, Slot]] = {}  # job id -> runs BLOCKED, in order
        # job id -> fresh fires held back (BLOCKED) while its runs are unclaimed orphans
        self._held: dict[str, dict[str, Slot]] = {}
        # READY runs set aside until due: only workers that would start them at once had room
        self._not_due = Timeline()

    def __len__(self) -> int:
        """Runs READY."""
        return len(self._ready)

    def clear(self) -> None:
        self._ready.clear()
        self._blocked_runs.clear()
        self._deadlines.clear()
        self._admitted.clear()
        self._blocked.clear()
        self._held.clear()
        self._not_due.clear()

    # --- admitting -----------------------------------------------------------------

    def admit(self, slot: Slot, *, fresh_fire: bool) -> Verdict:
        """A due run of ``slot.job`` asks to start. READY, BLOCKED and REPLACE move it
        to that phase; SKIP leaves it for the loop to record as skipped."""
        job = slot.job
        assert job is not None
        admitted = self._admitted.get(job.id, ())
        rid = slot.run.id
        if len(admitted) < concurrency_limit(job) and job.id not in self._blocked:
            self._admitted.setdefault(job.id, set()).add(rid)
            self._make_ready(slot)
            self.watch_deadline(slot)
            return Verdict.READY
        policy = job.spec.concurrency.overlap
        if fresh_fire and policy == OverlapPolicy.FORBID:
            if not self._unclaimed_only(admitted):
                return Verdict.SKIP
            slot.phase = Phase.BLOCKED
            self._blocked_runs.add(rid)
            self._held.setdefault(job.id, {})[rid] = slot
            self.watch_deadline(slot)
            return Verdict.HOLD
        slot.phase = Phase.BLOCKED
        self._blocked_runs.add(rid)
        self.watch_deadline(slot)
        queue = self._blocked.setdefault(job.id, {})
        if fresh_fire and policy == OverlapPolicy.REPLACE:
            self._blocked[job.id] = {rid: slot, **queue}
            return Verdict.REPLACE
        queue[rid] = slot
        return Verdict.BLOCKED

    def busy(self, job_id: str) -> bool:
        """The job has runs admitted: ready or leased."""
        return bool(self._admitted.get(job_id))

    def _unclaimed_only(self, run_ids: Collection[str]) -> bool:
        """Every one of these runs is an orphan no worker has renewed here yet."""
        slots = self._slots
        return all(slots[r].phase == Phase.LEASED and slots[r].worker is None for r in run_ids)

    def release_held(self, job_id: str) -> list[Slot]:
        """The fires of the job held back, to admit again in order (an orphan of the
        job was claimed by its worker, or ended): no longer BLOCKED."""
        out = list(self._held.pop(job_id, {}).values())
        for slot in out:
            self._blocked_runs.discard(slot.run.id)
            self._deadlines.remove(slot.run.id)
        return out

    def replaced(self, job_id: str) -> Slot | None:
        """The run a REPLACE cancels: the oldest admitted run of the job not already
        being cancelled (None: each is)."""
        running = (self._slots[r] for r in self._admitted.get(job_id, ()))
        victims = [s for s in running if s.cancel_reason is None]
        return min(victims, key=lambda s: (s.run.due_at, s.run.id)) if victims else None

    def adopt(self, slot: Slot) -> None:
        """A run leased before (an orphan of an earlier owner) counts against its job's limit."""
        self._admitted.setdefault(slot.run.job_id, set()).add(slot.run.id)

    def requeue(self, slot: Slot) -> None:
        """A lease its worker refused: nothing of it ran, it is ready again."""
        self._make_ready(slot)
        self.watch_deadline(slot)

    def forget(self, slot: Slot) -> None:
        """The run is no longer held (ended, paused, its shard lost)."""
        rid, job_id = slot.run.id, slot.run.job_id
        self._ready.discard(rid)
        self._not_due.remove(rid)
        self._deadlines.remove(rid)
        self._blocked_runs.discard(rid)
        _drop(self._blocked, job_id, rid)
        _drop(self._held, job_id, rid)
        admitted = self._admitted.get(job_id)
        if admitted is not None:
            admitted.discard(rid)
            if not admitted:
                del self._admitted[job_id]

    def unblock(self, job_id: str) -> None:
        """A run of the job ended: admit queued ones while the limit allows."""
        queue = self._blocked.get(job_id)
        while queue:
            slot = next(iter(queue.values()))
            assert slot.job is not None
            if len(self._admitted.get(job_id, ())) >= concurrency_limit(slot.job):
                return
            del queue[slot.run.id]
            self._blocked_runs.discard(slot.run.id)
            self._admitted.setdefault(job_id, set()).add(slot.run.id)
            self._make_ready(slot)
        self._blocked.pop(job_id, None)

    def _make_ready(self, slot: Slot) -> None:
        slot.phase = Phase.READY
        self._ready.push(slot)

    # --- starting deadlines ----------------------------------------------------------

    def watch_deadline(self, slot: Slot) -> None:
        """A run with a starting deadline is MISSED when the deadline passes while it
        waits (for a slot, or for its job's concurrency limit), not only once a slot
        frees: with no worker at all, it would wait forever."""
        deadline = slot.job.spec.starting_deadline if slot.job is not None else None
        if deadline is not None:
            self._deadlines.push(slot.run.id, saturating_add(slot.run.due_at, deadline))

    def missed(self, now: datetime) -> Iterator[Slot]:
        """Runs still waiting whose starting deadline is before ``now``."""
        deadlines = self._deadlines
        while (first := deadlines.first()) is not None and first[0] < now:
            deadlines.pop()
            yield self._slots[first[1]]

    def next_deadline(self) -> datetime | None:
        return self._deadlines.first_at()

    # --- placement --------------------------------------------------------------------

    def place(
        self, workers: Collection[WorkerBook], now: datetime, max_batch: int
    ) -> Iterator[tuple[Slot, WorkerBook | None]]:
        """Ready runs in placement order, each with the worker it goes to, or with None:
        it missed its starting deadline. The loop leases each to its worker (holding
        the worker's capacity) before asking for the next. At most ``max_batch``."""
        self._now_due(now)
        if free_slots(workers) <= 0:
            return
        ready = self._ready
        for slot, cls, key, priority, owner in ready.heads(workers, max_batch):
            job = slot.job
            assert job is not None
            if past_deadline(job, slot.run, now):
                ready.take(cls, priority, owner, placed=False)
                yield slot, None
                continue
            early = slot.run.due_at > now
            worker = pick_worker(job, owner, workers, early=early)
            if worker is None:
                if early and pick_worker(job, owner, workers) is not None:
                    # only workers that would start it at once have room: set aside
                    # until due, when it is placed as any due run
                    ready.take(cls, priority, owner, placed=False)
                    self._not_due.push(slot.run.id, slot.run.due_at)
                    continue
                ready.close(key)  # no room for this class left: its other runs wait too
                continue
            ready.take(cls, priority, owner, placed=True)
            self._deadlines.remove(slot.run.id)  # it starts on that worker
            yield slot, worker

    def _now_due(self, now: datetime) -> None:
        """Runs set aside until due that are due by ``now`` are ready to place again."""
        for _, rid in self._not_due.pop_until(now, len(self._not_due)):
            self._ready.push(self._slots[rid])

    def next_not_due(self) -> datetime | None:
        """When the earliest run set aside until due is due (placed then)."""
        return self._not_due.first_at()

    def has_ready(self) -> bool:
        """Ready runs a pass may place that the last one did not."""
        return self._ready.worth_a_pass()

    def demand(
        self, workers: Collection[WorkerBook], coming: Iterable[tuple[JobSpec, str]] = ()
    ) -> dict[WorkerBook, int]:
        """For each worker given, the slots of ready runs, and of runs ``coming`` due
        ((spec, owner) each), it could take (at most its slots)."""
        want = dict.fromkeys(workers, 0)
        needs = [(c.spec, c.owner, c.count) for c in self._ready.classes()]
        for spec, owner, count in (*needs, *((spec, owner, 1) for spec, owner in coming)):
            need = count * (spec.resources.slots or 1)
            for w in workers:
                if want[w] < w.slots and w.could_run(spec, owner):
                    want[w] += need
        return {w: min(n, w.slots) for w, n in want.items()}

    # --- why runs wait ------------------------------------------------------------------

    def waiting_reason(self, slot: Slot, workers: Collection[WorkerBook]) -> str:
        """Why this held run is not on a worker yet ("" unless READY or BLOCKED)."""
        if slot.phase == Phase.BLOCKED:
            if slot.run.id in self._held.get(slot.run.job_id, ()):
                return "waiting to learn whether a run taken over from another poller still goes"
            running = len(self._admitted.get(slot.run.job_id, ()))
            return f"waiting for the job's concurrency limit ({running} running)"
        cls = self._ready.class_of(slot.run.id)
        if slot.phase != Phase.READY or cls is None:
            return ""
        return why_waiting(cls.spec, cls.owner, workers)[1]

    def waiting_counts(self, workers: Collection[WorkerBook]) -> dict[WaitReason, int]:
        """Runs waiting, by reason: O(classes × workers)."""
        counts = dict.fromkeys(WaitReason, 0)
        for cls in self._ready.classes():
            counts[why_waiting(cls.spec, cls.owner, workers)[0]] += cls.count
        counts[WaitReason.CONCURRENCY_LIMIT] = len(self._blocked_runs)
        return counts


def _drop(queues: dict[str, dict[str, Slot]], job_id: str, run_id: str) -> None:
    queue = queues.get(job_id)
    if queue is not None and queue.pop(run_id, None) is not None and not queue:
        del queues[job_id]


def free_slots(workers: Iterable[WorkerBook]) -> int:
    return sum(w.free for w in workers)
