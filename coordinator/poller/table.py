"""The runs a poller holds, each in exactly one place, and the one writer of them.

A run held here is a ``Slot``. Where it stands is its ``place``: the one index that
holds it (its timer, the queue for a worker, its job's queue, the lease book, ...).
Its ``phase`` — WAITING, READY, BLOCKED or LEASED, what ``Poller.phase_of`` and the
shard-lag gauge read — follows from the place.

``RunTable`` is the only writer of a slot's place and of the run record it holds.
Each change is a named transition (hold, trigger, admit, lease, renew, refuse, end,
drop, ...) that takes the run out of the index of the place it leaves and puts it
in the index of the place it enters, and keeps the indexes that span places (the
starting deadlines, each job's admitted runs, the runs per job and per shard, the
lease book, each worker's book) in step at once. No index ever holds a run that
left it, so nothing outside asks "is it still this slot"; ``check`` verifies it,
after every turn in the tests.

The table decides nothing: what to do with a run (trigger it, admit it, lease it,
end it) is the rules' (``due``, ``overlap``, ``leasing``, ``ends``), which call
these transitions. It reads its clock only for intervals it keeps to itself (when
a job copy was read, when a run ended here).
"""

from __future__ import annotations

import asyncio
import math
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum

from shardcron.client.dataclass_copies import copy_with
from shardcron.client.errors import Unavailable
from shardcron.client.saturating import saturating_add
from shardcron.client.types import Job, Run, RunLateness, RunReason, RunState
from shardcron.coordinator.poller.clock import Clock
from shardcron.coordinator.poller.config import PollerConfig
from shardcron.coordinator.poller.crowded_instants import CrowdedInstants
from shardcron.coordinator.poller.end_rules import Outcome, final_run
from shardcron.coordinator.poller.lateness import Waits
from shardcron.coordinator.poller.lease_book import LeaseBook
from shardcron.coordinator.poller.placement import ReadyRuns
from shardcron.coordinator.poller.timeline import Timeline
from shardcron.coordinator.poller.workers import WorkerBook


class Phase(Enum):
    WAITING = 1  # not due yet, or due and being triggered
    READY = 2  # due, admitted, waiting for a worker slot
    BLOCKED = 3  # due, waiting for the job's concurrency limit
    LEASED = 4  # on a worker


# What shard lag measures: runs past due and not on a worker for want of the poller or
# a worker. A run BLOCKED by its job's concurrency limit waits by the job's own policy.
LAG_PHASES = frozenset({Phase.WAITING, Phase.READY})


class Place(Enum):
    """The index that holds a run."""

    TIMER = 1  # until its due time comes within the lease lead (crowds count it)
    AT_INSTANT = 2  # until a set time: held to its very due instant, or looked at again
    AWAITING_JOB = 3  # due; its job copy is read again before it triggers (the next read)
    JOB_READ = 4  # due; its job copy is in the read in flight
    RETRY = 5  # a retry decided, not written yet
    DUE = 6  # taken out to trigger in this turn
    READY = 7  # queued for a worker
    NOT_DUE = 8  # set aside until its due instant: only workers starting it at once had room
    QUEUED = 9  # behind its job's concurrency limit
    HELD_BACK = 10  # a FORBID fire, while its job's only runs are orphans nobody claimed
    LEASED = 11  # on a worker, or an orphan of an earlier owner waited out
    GONE = 12  # no longer held: ended or dropped


_PHASE = {
    Place.TIMER: Phase.WAITING,
    Place.AT_INSTANT: Phase.WAITING,
    Place.AWAITING_JOB: Phase.WAITING,
    Place.JOB_READ: Phase.WAITING,
    Place.RETRY: Phase.WAITING,
    Place.DUE: Phase.WAITING,
    Place.READY: Phase.READY,
    Place.NOT_DUE: Phase.READY,
    Place.QUEUED: Phase.BLOCKED,
    Place.HELD_BACK: Phase.BLOCKED,
    Place.LEASED: Phase.LEASED,
}
# places a run counts against its job's concurrency limit in
_ADMITTED = frozenset({Place.READY, Place.NOT_DUE, Place.LEASED})
# places a run waits to start in: its starting deadline is watched
_STARTING = frozenset({Place.READY, Place.NOT_DUE, Place.QUEUED, Place.HELD_BACK})
# places held in a plain dict, in the order runs entered them
_LISTED = (Place.AWAITING_JOB, Place.JOB_READ, Place.RETRY, Place.DUE)


@dataclass(slots=True, eq=False)
class Slot:
    """One run held in memory. Its ``run`` and ``place`` (and ``worker``) are written
    by the ``RunTable`` alone."""

    run: Run
    job: Job | None = None
    place: Place = Place.GONE
    # LEASED: the stream holding it; None for an orphan no worker has renewed here yet
    worker: WorkerBook | None = None
    cancel_reason: RunReason | None = None  # a cancel was sent to its worker
    cancel_waiters: list[asyncio.Future[Run]] = field(default_factory=list)
    output_bytes: int = 0  # output received since the run was loaded
    # what it waited for past its due instant (``lateness``); None: nothing yet
    waits: Waits | None = None

    @property
    def phase(self) -> Phase:
        return _PHASE[self.place]


class RunTable:
    def __init__(self, *, config: PollerConfig, clock: Clock) -> None:
        self._clock = clock  # monotonic only: when a job copy was read, a run ended here
        self.slots: dict[str, Slot] = {}  # runs held, by id
        self._by_job: dict[str, dict[str, Slot]] = {}
        self._by_shard: dict[int, dict[str, Slot]] = {}
        self._timers = Timeline()  # TIMER, by due time
        # how many runs wait for each due instant: a crowded one is reached earlier
        self.crowds = CrowdedInstants(
            per_run=config.crowd_lead_per_run, most=config.crowd_lead_most
        )
        self._at_instant = Timeline()  # AT_INSTANT, by the time to look at them
        self._listed: dict[Place, dict[str, Slot]] = {p: {} for p in _LISTED}
        self.ready = ReadyRuns()  # READY, by placement class
        self._not_due = Timeline()  # NOT_DUE, by due time
        self._queued: dict[str, dict[str, Slot]] = {}  # QUEUED: job id -> its queue, in order
        self._held_back: dict[str, dict[str, Slot]] = {}  # HELD_BACK: job id -> its fires
        self._blocked = 0  # runs QUEUED or HELD_BACK
        self._deadlines = Timeline()  # runs in a _STARTING place whose job has a deadline
        self._admitted: dict[str, set[str]] = {}  # job id -> its runs in an _ADMITTED place
        self.leases = LeaseBook(lease_ttl=config.lease_ttl, expiry_grace=config.expiry_grace)
        # LEASED runs started whose start is not written yet, by when to write it
        self._start_writes = Timeline()
        self._start_write_delay = config.start_write_delay
        # the jobs of the runs held (dropped with a job's last run), and when each copy
        # was read from the store (monotonic)
        self.jobs: dict[str, Job] = {}
        self._job_read_at: dict[str, float] = {}
        # run id -> when it ended here (monotonic), oldest first (``_ended_now``)
        self.recent_final: OrderedDict[str, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self.slots)

    # --- what is held ------------------------------------------------------------------

    def known(self, run_id: str) -> bool:
        """The run is held here, or ended here lately."""
        return run_id in self.slots or run_id in self.recent_final

    def runs_of(self, job_id: str) -> list[Slot]:
        return list(self._by_job.get(job_id, {}).values())

    def admitted(self, job_id: str) -> list[Slot]:
        """The job's runs that count against its concurrency limit: ready or leased."""
        return [self.slots[r] for r in self._admitted.get(job_id, ())]

    def busy(self, job_id: str) -> bool:
        """The job has runs admitted."""
        return job_id in self._admitted

    def queued(self, job_id: str) -> bool:
        """The job has runs queued behind its limit."""
        return job_id in self._queued

    @property
    def blocked(self) -> int:
        """Runs BLOCKED (queued or held back)."""
        return self._blocked

    def blocked_slots(self) -> Iterator[Slot]:
        """The runs BLOCKED (queued or held back): O(those runs)."""
        for runs in (*self._queued.values(), *self._held_back.values()):
            yield from runs.values()

    @property
    def retries(self) -> list[Slot]:
        return list(self._listed[Place.RETRY].values())

    @property
    def awaiting_job(self) -> bool:
        return bool(self._listed[Place.AWAITING_JOB])

    def held_slot(self, run_id: str, token: int) -> Slot | None:
        """The run, if it is leased here under exactly this token."""
        return self.slots[run_id] if self.leases.holds(run_id, token) else None

    def oldest_due(self, phases: Collection[Phase] | None = None) -> dict[int, datetime]:
        """Per shard, the due time of the oldest run held (in one of ``phases``)."""
        oldest: dict[int, datetime] = {}
        for shard, slots in self._by_shard.items():
            dues = [s.run.due_at for s in slots.values() if phases is None or s.phase in phases]
            if dues:
                oldest[shard] = min(dues)
        return oldest

    def job_read_at(self, job_id: str) -> float:
        """When the job copy held was read (monotonic; -inf: none held)."""
        return self._job_read_at.get(job_id, -math.inf)

    def cache_job(self, job: Job, *, read_at: float | None = None) -> None:
        """Holds the job as read at ``read_at`` (monotonic; None: now) if runs of it are
        held, unless the copy held was read later."""
        if job.id not in self._by_job:
            return
        read_at = self._clock.monotonic() if read_at is None else read_at
        if self._job_read_at.get(job.id, -math.inf) > read_at:
            return
        self.jobs[job.id] = job
        self._job_read_at[job.id] = read_at

    def set_job(self, job: Job) -> None:
        """The job as the rules changed it (its progress), held in place of the copy
        held, if runs of it are held (a copy of a job with no run held would never go)."""
        if job.id in self._by_job:
            self.jobs[job.id] = job

    # --- holding runs ------------------------------------------------------------------

    def hold(self, run: Run, job: Job | None = None) -> Slot | None:
        """A PENDING run not known here waits for its due time (None: known already)."""
        if self.known(run.id):
            return None
        slot = self._track(run, job)
        self._move(slot, Place.TIMER)
        return slot

    def adopt(self, run: Run, job: Job | None, *, taken_at: datetime, now: datetime) -> Slot:
        """A run leased before this poller held its shard: its lease is waited out, one
        TTL from the take-over at least."""
        expires = self.leases.adopt(
            run.id, run.lease_token, run.worker_id, run.lease_expires_at, taken_at=taken_at, now=now
        )
        slot = self._track(copy_with(run, lease_expires_at=expires), job)
        self._move(slot, Place.LEASED)
        return slot

    def remember_ended(self, run_id: str) -> None:
        """A run not held here is final (met by a scan, or ended without being held)."""
        self._ended_now(run_id)

    def hold_retry(self, run: Run, job: Job) -> Slot | None:
        """A retry decided; written (or not) by the turn (``place_retry``)."""
        if self.known(run.id):
            return None
        slot = self._track(run, job)
        self._move(slot, Place.RETRY)
        return slot

    def place_retry(self, slot: Slot, stored: Run | None = None) -> None:
        """A retry is written (or found PENDING in the store: ``stored``, its due row
        written again): it waits for its due time."""
        assert slot.place is Place.RETRY
        if stored is not None:
            slot.run = stored
        self._move(slot, Place.TIMER)

    def prune_ended(self, keep_seconds: float) -> None:
        cutoff = self._clock.monotonic() - keep_seconds
        recent = self.recent_final
        while recent:  # oldest first: only the runs let go are looked at
            rid = next(iter(recent))
            if recent[rid] > cutoff:
                return
            del recent[rid]

    def _ended_now(self, run_id: str) -> None:
        """Remembers the run as ended now, behind every run remembered earlier."""
        recent = self.recent_final
        recent.pop(run_id, None)
        recent[run_id] = self._clock.monotonic()

    def _track(self, run: Run, job: Job | None) -> Slot:
        slot = Slot(run=run, job=job)
        self.slots[run.id] = slot
        self._by_job.setdefault(run.job_id, {})[run.id] = slot
        self._by_shard.setdefault(run.shard, {})[run.id] = slot
        return slot

    # --- coming due --------------------------------------------------------------------

    def next_due(self, lead: timedelta) -> datetime | None:
        """When the earliest run waiting comes within ``lead`` of its instant (more for
        a crowded instant, ``crowded_instants``)."""
        due = self._timers.first_at()
        first = None if due is None else self.crowds.trigger_at(due, lead)
        crowd = self.crowds.next_reach(lead)
        return min(first, crowd) if first and crowd else first or crowd

    def next_at_instant(self) -> datetime | None:
        return self._at_instant.first_at()

    def take_due(
        self, now: datetime, until: datetime, limit: int, *, to_instant: Callable[[Slot], bool]
    ) -> list[Slot]:
        """Runs to trigger now, at most ``limit``: those held to a set time by ``now``,
        and those due by ``until``; a run not due by ``now`` that ``to_instant`` says
        waits for its very instant is held to it instead."""
        due = []
        at_instant, timers = self._at_instant, self._timers
        while len(due) < limit and (first := at_instant.first()) is not None and first[0] <= now:
            due.append(self.slots[first[1]])
            self._move(due[-1], Place.DUE)
        while len(due) < limit and (first := timers.first()) is not None and first[0] <= until:
            at, rid = first
            slot = self.slots[rid]
            if at > now and to_instant(slot):
                self._move(slot, Place.AT_INSTANT, at=at)
            else:
                due.append(slot)
                self._move(slot, Place.DUE)
        return due

    def coming_due(self, until: datetime, limit: int) -> list[Slot]:
        """Runs waiting for due times by ``until`` (at most ``limit``), left waiting."""
        return [self.slots[rid] for rid in self._timers.until(until, limit)]

    def look_again(self, slot: Slot, at: datetime) -> None:
        """The run, due, is looked at again at ``at`` (its job row has not landed)."""
        self._move(slot, Place.AT_INSTANT, at=at)

    def await_job(self, slot: Slot) -> None:
        """The run, due, waits for its job to be read again."""
        self._move(slot, Place.AWAITING_JOB)

    def begin_job_read(self) -> list[Slot]:
        """The runs awaiting their job, now in the read that begins."""
        slots = list(self._listed[Place.AWAITING_JOB].values())
        for slot in slots:
            self._move(slot, Place.JOB_READ)
        return slots

    def job_read_over(self) -> list[Slot]:
        """The runs of the read that is over: due, to trigger now."""
        slots = list(self._listed[Place.JOB_READ].values())
        for slot in slots:
            self._move(slot, Place.DUE)
        return slots

    def trigger(self, slot: Slot) -> Job | None:
        """The run triggers with its job as held (None: no job row)."""
        assert slot.place is Place.DUE
        slot.job = self.jobs.get(slot.run.job_id)
        return slot.job

    # --- admitted and blocked ----------------------------------------------------------

    def make_ready(self, slot: Slot) -> None:
        """The run, due and admitted, waits for a worker."""
        self._move(slot, Place.READY)

    def queue(self, slot: Slot, *, first: bool = False) -> None:
        """The run, due, waits behind its job's limit (``first``: ahead of the queue)."""
        self._move(slot, Place.QUEUED, first=first)

    def hold_back(self, slot: Slot) -> None:
        """A FORBID fire waits to learn whether its job's orphans still go."""
        self._move(slot, Place.HELD_BACK)

    def unblock(self, job_id: str, limit: Callable[[Job], float], now: datetime) -> None:
        """Admits the job's queued runs, in order, while fewer are admitted than the
        ``limit`` of the next one's job copy; the wait for the limit is over at ``now``."""
        queue = self._queued.get(job_id)
        while queue:
            slot = next(iter(queue.values()))
            assert slot.job is not None
            if len(self._admitted.get(job_id, ())) >= limit(slot.job):
                return
            if slot.waits is not None:
                slot.waits.note(None, "", now)
            self._move(slot, Place.READY)

    def release_held(self, job_id: str) -> list[Slot]:
        """The job's fires held back, due again, to be decided again in order."""
        slots = list(self._held_back.get(job_id, {}).values())
        for slot in slots:
            self._move(slot, Place.DUE)
        return slots

    def set_aside(self, slot: Slot) -> None:
        """A ready run not due yet waits for its instant (only workers that would start
        it at once have room)."""
        self._move(slot, Place.NOT_DUE)

    def now_due(self, now: datetime) -> None:
        """Runs set aside until due that are due by ``now`` are ready to place again."""
        not_due = self._not_due
        while (first := not_due.first()) is not None and first[0] <= now:
            self._move(self.slots[first[1]], Place.READY)

    def next_not_due(self) -> datetime | None:
        return self._not_due.first_at()

    def missed(self, now: datetime) -> Iterator[Slot]:
        """Runs waiting to start whose starting deadline is before ``now`` (each yielded
        before the next is looked at: the caller ends it)."""
        while (first := self._deadlines.first()) is not None and first[0] < now:
            yield self.slots[first[1]]

    def next_deadline(self) -> datetime | None:
        return self._deadlines.first_at()

    # --- leases ------------------------------------------------------------------------

    def lease(
        self, slot: Slot, worker: WorkerBook, now: datetime, lateness: RunLateness | None = None
    ) -> Run:
        """The ready run goes to ``worker``: a new token, held one TTL from now (from
        its due instant for a run leased ahead of it, which its worker waits for); a
        run leased late says why (``lateness``)."""
        assert slot.place in (Place.READY, Place.NOT_DUE) and slot.job is not None
        token, expires = self.leases.grant(slot.run.id, worker.id, max(now, slot.run.due_at))
        self._move(slot, Place.LEASED)
        slot.run = copy_with(
            slot.run,
            state=RunState.LEASED,
            worker_id=worker.id,
            lease_token=token,
            lease_expires_at=expires,
            lateness=lateness or slot.run.lateness,
        )
        slot.worker = worker
        worker.hold(slot.run.id, slot.job.spec.resources)
        return slot.run

    def sent(self, slot: Slot, now: datetime) -> datetime | None:
        """The lease goes out now: it holds one TTL from now in the lease book (the run
        keeps its granted expiry). None if the run is not leased under its token."""
        return self.leases.sent(slot.run.id, slot.run.lease_token, now)

    def start(self, slot: Slot, at: datetime, now: datetime) -> Run | None:
        """The leased run started on its worker at ``at``: the record to write now, or
        None when its write waits ``start_write_delay`` (``starts_to_write``), for the
        run's end to carry it instead."""
        assert slot.place is Place.LEASED and slot.run.state == RunState.LEASED
        slot.run = copy_with(slot.run, state=RunState.RUNNING, started_at=at)
        if not self._start_write_delay:
            return slot.run
        self._start_writes.push(slot.run.id, now + self._start_write_delay)
        return None

    def starts_to_write(self, now: datetime, shards: Collection[int] = ()) -> list[Run]:
        """The records of the runs started whose start waited until ``now``, and of all
        those of ``shards`` (released: their next owner reads the start), taken out of
        the wait: written by the caller's turn."""
        writes = self._start_writes
        runs = [self.slots[rid].run for _, rid in writes.pop_until(now, len(writes))]
        for shard in shards:
            for rid in self._by_shard.get(shard, {}):
                if writes.remove(rid):
                    runs.append(self.slots[rid].run)
        return runs

    def next_start_write(self) -> datetime | None:
        return self._start_writes.first_at()

    def renew(
        self, slot: Slot, book: WorkerBook, token: int, now: datetime, *, active: bool
    ) -> tuple[datetime | None, bool]:
        """A heartbeat of ``book`` names the run's lease: its new expiry if granted, and
        whether that claimed an orphan (no worker had renewed it here). A lease renewed
        from another stream of its worker moves there."""
        rid = slot.run.id
        expires = self.leases.renew(rid, token, book.id, now, active=active)
        if expires is None:
            return None, False
        claimed = slot.worker is None
        if slot.worker is not book:
            if slot.worker is not None:
                slot.worker.release(rid)
            assert slot.job is not None
            book.hold(rid, slot.job.spec.resources)
            slot.worker = book
        slot.run = copy_with(slot.run, lease_expires_at=expires)
        return expires, claimed

    def refuse(self, slot: Slot) -> None:
        """Its worker refused the lease: nothing of it ran, it is ready again (PENDING:
        its stored LEASED row is superseded by the next lease's). A run a cancel was
        sent to is ended instead (by the caller)."""
        assert slot.place is Place.LEASED and slot.cancel_reason is None
        self._move(slot, Place.READY)
        slot.run = copy_with(slot.run, state=RunState.PENDING)

    def mark_cancel(self, slot: Slot, reason: RunReason) -> bool:
        """A leased run is to be cancelled on its worker; False if it was already."""
        assert slot.place is Place.LEASED
        if slot.cancel_reason is not None:
            return False
        slot.cancel_reason = reason
        return True

    def expired(self, now: datetime) -> list[Slot]:
        """Leased runs whose lease ran out, grace included (out of the lease book; the
        caller ends each)."""
        return [self.slots[rid] for rid in self.leases.expired(now)]

    # --- leaving ----------------------------------------------------------------------

    def end(self, slot: Slot, outcome: Outcome, now: datetime) -> Run:
        """The run ends here: its final record (with its lease's last expiry, when the
        book holds it); it leaves every index, and is remembered as ended."""
        rid = slot.run.id
        final = outcome.record or final_run(
            slot.run,
            outcome.state,
            outcome.reason,
            now,
            exit_code=outcome.exit_code,
            error=outcome.error,
            started_at=outcome.started_at,
            ended_at=outcome.ended_at,
            output_bytes=slot.output_bytes,
            lease_expires_at=self.leases.expires_at(rid),
            usage=outcome.usage,
            lateness=outcome.lateness,
            output_sha256=outcome.output_sha256,
            output_truncated=outcome.output_truncated,
            results=outcome.results,
            results_note=outcome.results_note,
        )
        self._remove(slot)
        self._ended_now(rid)
        return final

    def drop(self, slot: Slot, why: str) -> None:
        """The run leaves without an end (the store has it as it is, or another poller
        serves it now); a cancel waiting for it is told to try again (``why``)."""
        self._remove(slot)
        _unavailable(slot, why)

    def release(self, shards: Collection[int]) -> None:
        """Drops every run of these shards (another poller serves them now)."""
        for shard in shards:
            for slot in list(self._by_shard.get(shard, {}).values()):
                self.drop(slot, f"shard {shard} moved to another poller; try again")

    def clear(self) -> None:
        """Forgets every run held (the poller reloads its shards); a cancel waiting for
        one of them is told to try again."""
        for slot in self.slots.values():
            _unavailable(slot, "the poller reloaded its shards; try again")
            slot.place = Place.GONE
            slot.worker = None
        for book in {s.worker for s in self.slots.values() if s.worker is not None}:
            book.clear()
        self.slots.clear()
        self._by_job.clear()
        self._by_shard.clear()
        self._timers.clear()
        self.crowds.clear()
        self._at_instant.clear()
        for listed in self._listed.values():
            listed.clear()
        self.ready.clear()
        self._not_due.clear()
        self._queued.clear()
        self._held_back.clear()
        self._blocked = 0
        self._deadlines.clear()
        self._admitted.clear()
        self.leases.clear()
        self._start_writes.clear()
        self.jobs.clear()
        self._job_read_at.clear()
        self.recent_final.clear()

    def _remove(self, slot: Slot) -> None:
        rid, job_id = slot.run.id, slot.run.job_id
        self._move(slot, Place.GONE)
        del self.slots[rid]
        _pop(self._by_shard, slot.run.shard, rid)
        if _pop(self._by_job, job_id, rid):
            self.jobs.pop(job_id, None)
            self._job_read_at.pop(job_id, None)

    # --- the one move ---------------------------------------------------------------------

    def _move(
        self, slot: Slot, place: Place, *, at: datetime | None = None, first: bool = False
    ) -> None:
        """Takes the run out of the index of its place and puts it in ``place``'s, and
        keeps the indexes that span places in step."""
        run, old = slot.run, slot.place
        rid = run.id
        match old:
            case Place.TIMER:
                self._timers.remove(rid)
                self.crowds.remove(run.due_at)
            case Place.AT_INSTANT:
                self._at_instant.remove(rid)
            case Place.READY:
                self.ready.discard(rid)
            case Place.NOT_DUE:
                self._not_due.remove(rid)
            case Place.QUEUED:
                _pop(self._queued, run.job_id, rid)
                self._blocked -= 1
            case Place.HELD_BACK:
                _pop(self._held_back, run.job_id, rid)
                self._blocked -= 1
            case Place.LEASED:
                self.leases.release(rid)
                self._start_writes.remove(rid)  # ended: its end record carries the start
                if slot.worker is not None:
                    slot.worker.release(rid)
                    slot.worker = None
            case Place.GONE:
                pass
            case _:
                del self._listed[old][rid]
        slot.place = place
        match place:
            case Place.TIMER:
                self._timers.push(rid, run.due_at)
                self.crowds.add(run.due_at)
            case Place.AT_INSTANT:
                assert at is not None
                self._at_instant.push(rid, at)
            case Place.READY:
                assert slot.job is not None
                job = slot.job
                self.ready.push(rid, job.spec, run.owner, run.priority, run.due_at)
            case Place.NOT_DUE:
                self._not_due.push(rid, run.due_at)
            case Place.QUEUED:
                queue = self._queued.setdefault(run.job_id, {})
                if first:
                    self._queued[run.job_id] = {rid: slot, **queue}
                else:
                    queue[rid] = slot
                self._blocked += 1
            case Place.HELD_BACK:
                self._held_back.setdefault(run.job_id, {})[rid] = slot
                self._blocked += 1
            case Place.LEASED | Place.GONE:
                pass
            case _:
                self._listed[place][rid] = slot
        if (old in _ADMITTED) != (place in _ADMITTED):
            if place in _ADMITTED:
                self._admitted.setdefault(run.job_id, set()).add(rid)
            else:
                _pop(self._admitted, run.job_id, rid)
        if place in _STARTING:
            deadline = slot.job.spec.starting_deadline if slot.job is not None else None
            if deadline is not None and old not in _STARTING:
                self._deadlines.push(rid, saturating_add(run.due_at, deadline))
        elif old in _STARTING:
            self._deadlines.remove(rid)

    # --- invariants ----------------------------------------------------------------------

    def check(self) -> None:
        """Raises AssertionError naming the first invariant that does not hold between
        two turns: each run in exactly the index of its place, the indexes that span
        places in step with the places, the run records in step with the places."""
        slots = self.slots
        where: dict[Place, set[str]] = {p: set() for p in Place}
        for rid, slot in slots.items():
            assert slot.run.id == rid, f"run {slot.run.id} held as {rid}"
            assert slot.place is not Place.GONE, f"run {rid} held and gone"
            where[slot.place].add(rid)
        assert not where[Place.DUE], f"runs left due after the turn: {where[Place.DUE]}"
        _same("timers", set(self._timers), where[Place.TIMER])
        _same("set times", set(self._at_instant), where[Place.AT_INSTANT])
        for place in _LISTED:
            _same(place.name, set(self._listed[place]), where[place])
        _same("ready runs", set(self.ready), where[Place.READY])
        _same("runs set aside", set(self._not_due), where[Place.NOT_DUE])
        _same("queues", _ids(self._queued), where[Place.QUEUED])
        _same("held-back fires", _ids(self._held_back), where[Place.HELD_BACK])
        blocked = len(where[Place.QUEUED]) + len(where[Place.HELD_BACK])
        assert self._blocked == blocked, f"{self._blocked} runs counted blocked, {blocked} are"
        _same("lease book", self.leases.held(), where[Place.LEASED])
        crowds: dict[datetime, int] = {}
        for rid in where[Place.TIMER]:
            due = slots[rid].run.due_at
            assert self._timers.at(rid) == due, f"run {rid}'s timer is not its due time"
            crowds[due] = crowds.get(due, 0) + 1
        assert self.crowds.counts() == crowds, "the crowds do not count the runs waiting"
        admitted: dict[str, set[str]] = {}
        deadlines = set()
        books: dict[int, tuple[WorkerBook, set[str]]] = {}
        for rid, slot in slots.items():
            run, place = slot.run, slot.place
            if place in _ADMITTED:
                admitted.setdefault(run.job_id, set()).add(rid)
            if place in _STARTING and slot.job and slot.job.spec.starting_deadline is not None:
                deadlines.add(rid)
            if place is Place.LEASED:
                assert run.state in (RunState.LEASED, RunState.RUNNING), f"{rid} is {run.state}"
                assert self.leases.holds(rid, run.lease_token), f"{rid} leased under another token"
            else:
                assert run.state == RunState.PENDING, f"{place.name} run {rid} is {run.state}"
                assert slot.worker is None, f"{place.name} run {rid} holds a worker"
                assert not slot.cancel_reason and not slot.cancel_waiters, f"{rid} not leased"
            if slot.worker is not None:
                assert run.worker_id == slot.worker.id, f"run {rid} not on its worker"
                books.setdefault(id(slot.worker), (slot.worker, set()))[1].add(rid)
            assert rid not in self.recent_final, f"run {rid} held and ended here"
        assert self._admitted == admitted, "the runs admitted per job are not those placed so"
        for rid in self._start_writes:
            run = slots[rid].run if rid in slots else None
            assert run is not None and run.state == RunState.RUNNING, f"{rid}'s start waits"
            assert slots[rid].place is Place.LEASED, f"{rid}'s start waits, not leased"
        _same("starting deadlines", set(self._deadlines), deadlines)
        for book, held in books.values():
            _same(f"worker {book.id}'s runs", set(book.leases), held)
            assert book.used == sum(n.slots or 1 for n in book.leases.values())
        by_job = {j: set(s) for j, s in self._by_job.items()}
        assert by_job == _group(slots, lambda s: s.run.job_id), "the runs per job"
        by_shard = {k: set(s) for k, s in self._by_shard.items()}
        assert by_shard == _group(slots, lambda s: s.run.shard), "the runs per shard"
        assert set(self.jobs) <= set(self._by_job), "a job copy held with no run of it"


def _unavailable(slot: Slot, why: str) -> None:
    for fut in slot.cancel_waiters:
        if not fut.done():
            fut.set_exception(Unavailable(why))
    slot.cancel_waiters = []


def _pop(index: dict, key: object, rid: str) -> bool:  # type: ignore[type-arg]
    """Takes ``rid`` out of ``index[key]``, and ``key`` out of ``index`` when that leaves
    it empty; True if it did."""
    group = index.get(key)
    if group is None:
        return False
    if isinstance(group, set):
        group.discard(rid)
    else:
        group.pop(rid, None)
    if group:
        return False
    del index[key]
    return True


def _ids(groups: dict[str, dict[str, Slot]]) -> set[str]:
    assert all(groups.values()), "an empty group left in an index"
    return {rid for group in groups.values() for rid in group}


def _group(slots: dict[str, Slot], key: Callable[[Slot], object]) -> dict[object, set[str]]:
    out: dict[object, set[str]] = {}
    for rid, slot in slots.items():
        out.setdefault(key(slot), set()).add(rid)
    return out


def _same(what: str, index: set[str], places: set[str]) -> None:
    assert index == places, f"the {what} hold {index - places}, miss {places - index}"
