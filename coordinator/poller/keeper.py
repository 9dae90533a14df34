"""The runs a poller holds in memory, and the rules applied to them in a turn.

``RunKeeper`` holds every run of the owned shards that is not final yet (each a
``Slot`` in one phase), the jobs they belong to, and the runs that ended here
lately (so a late hint or a second load does not bring one back). It applies the
deciders' answers — the fire rules when a run comes due, admission, placement, the
lease book's expiries, the run-end rules — and adds what they decide to the
turn's write set. It reads no clock for its rules (each takes ``now``), calls no
store and sends nothing: the loop writes the turn, then sends what it carries.

A rule that raises fails its own run or job, never the turn (``isolated``): the run
ends FAILED with ``INTERNAL_ERROR`` and the error's text (no retry: deciding it
again would raise again), or, when the job's own rules raised (its schedule, its
fires, its retries), the job is paused with the error as its pause reason. Each
such fault is counted in ``shardcron_poller_faults_total{where}``.
"""

from __future__ import annotations

import heapq
import logging
import math
from collections.abc import Collection
from datetime import datetime, timedelta

from shardcron.client.errors import Unavailable
from shardcron.client.frozen import copy_with
from shardcron.client.saturating import saturating_add
from shardcron.client.stream import CancelOrder
from shardcron.client.types import Job, JobState, Run, RunReason, RunState, RunUsage
from shardcron.coordinator.metrics import Metrics
from shardcron.coordinator.poller.admission import Admission, Verdict, past_deadline
from shardcron.coordinator.poller.clock import Clock
from shardcron.coordinator.poller.config import JOB_ROW_GRACE, JOB_ROW_RETRY, PollerConfig
from shardcron.coordinator.poller.crowds import DueCrowds
from shardcron.coordinator.poller.endings import final_run, follow_up
from shardcron.coordinator.poller.faults import Isolated, fault_text
from shardcron.coordinator.poller.fires import on_fire_due, retry_misfired
from shardcron.coordinator.poller.grants import lease_grant, unopenable
from shardcron.coordinator.poller.leases import LeaseBook
from shardcron.coordinator.poller.state import LAG_PHASES, Phase, Slot
from shardcron.coordinator.poller.timers import heap_until
from shardcron.coordinator.poller.turn import Turn
from shardcron.coordinator.poller.workers import WorkerBook

_REPORTED = (RunState.SUCCEEDED, RunState.FAILED, RunState.TIMED_OUT)  # ends a worker says
WAITING_GAUGE_EVERY = 1.0  # seconds between counts of the runs waiting, by reason

log = logging.getLogger("shardcron.poller")


class RunKeeper:
    def __init__(
        self, *, config: PollerConfig, metrics: Metrics, clock: Clock, shard_count: int
    ) -> None:
        self.config = config
        self.metrics = metrics
        self._clock = clock  # monotonic only: when a job copy was read, a run ended here
        self._shard_count = shard_count
        self.slots: dict[str, Slot] = {}  # runs held, by id
        self._timers: list[tuple[datetime, str]] = []  # (due, run id) of WAITING runs
        # (time, run id) of WAITING runs triggered at that time, not a lease lead ahead:
        # their job had runs admitted when the lead reached them, or their job row had
        # not landed and they are looked at again then
        self._at_instant: list[tuple[datetime, str]] = []
        # how many timers are due at each instant: a crowded one is reached earlier
        self._crowds = DueCrowds(per_run=config.crowd_lead_per_run, most=config.crowd_lead_most)
        self.leases = LeaseBook(lease_ttl=config.lease_ttl, expiry_grace=config.expiry_grace)
        self.admission = Admission(self.slots)
        self._job_runs: dict[str, int] = {}  # job id -> runs of it held
        # jobs of the runs held, with when they were read from the store (monotonic)
        self.jobs: dict[str, Job] = {}
        self._job_read_at: dict[str, float] = {}
        self.recent_final: dict[str, float] = {}  # run id -> when it ended here (monotonic)
        self._waiting_counted_at = -math.inf  # monotonic: the waiting gauge was last set

    def clear(self) -> None:
        """Forgets every run held (the poller reloads its shards); a cancel waiting for
        one of them is told to try again."""
        for slot in self.slots.values():
            for fut in slot.cancel_waiters:
                if not fut.done():
                    fut.set_exception(Unavailable("the poller reloaded its shards; try again"))
        self.slots.clear()
        self._timers.clear()
        self._crowds.clear()
        self._at_instant.clear()
        self.leases.clear()
        self.admission.clear()
        self._job_runs.clear()
        self.jobs.clear()
        self._job_read_at.clear()
        self.recent_final.clear()

    # --- holding runs --------------------------------------------------------------

    def known(self, run_id: str) -> bool:
        """The run is held here, or ended here lately."""
        return run_id in self.slots or run_id in self.recent_final

    def holds_job(self, job_id: str) -> bool:
        return job_id in self._job_runs

    def track(self, slot: Slot) -> None:
        self.slots[slot.run.id] = slot
        self._job_runs[slot.run.job_id] = self._job_runs.get(slot.run.job_id, 0) + 1

    def add_waiting(self, slot: Slot) -> None:
        """Holds the run (if not yet) until it is due."""
        if self.slots.get(slot.run.id) is not slot:
            self.track(slot)
        slot.phase = Phase.WAITING
        heapq.heappush(self._timers, (slot.run.due_at, slot.run.id))
        self._crowds.add(slot.run.due_at)

    def adopt_orphan(self, run: Run, job: Job | None, *, taken_at: datetime, now: datetime) -> None:
        """A run leased before this poller held the shard: wait out its lease, one TTL at least."""
        expires = self.leases.adopt(
            run.id, run.lease_token, run.worker_id, run.lease_expires_at, taken_at=taken_at, now=now
        )
        slot = Slot(run=copy_with(run, lease_expires_at=expires), job=job, phase=Phase.LEASED)
        self.track(slot)
        self.admission.adopt(slot)

    def ended_here(self, run_id: str) -> None:
        self.recent_final[run_id] = self._clock.monotonic()

    def forget(self, slot: Slot) -> None:
        rid = slot.run.id
        if self.slots.pop(rid, None) is None:
            return
        job_id = slot.run.job_id
        left = self._job_runs.get(job_id, 1) - 1
        if left <= 0:
            self._job_runs.pop(job_id, None)
            self.jobs.pop(job_id, None)
            self._job_read_at.pop(job_id, None)
        else:
            self._job_runs[job_id] = left
        self.admission.forget(slot)
        self.leases.release(rid)
        if slot.worker is not None:
            slot.worker.release(rid)
            slot.worker = None

    def forget_shards(self, shards: Collection[int]) -> None:
        for slot in [s for s in self.slots.values() if s.run.shard in shards]:
            self.forget(slot)

    def prune_ended(self, keep_seconds: float) -> None:
        cutoff = self._clock.monotonic() - keep_seconds
        self.recent_final = {k: v for k, v in self.recent_final.items() if v > cutoff}

    def cache_job(self, job: Job, *, read_at: float | None = None) -> None:
        """Holds the job as read at ``read_at`` (monotonic; None: now) unless held newer."""
        read_at = self._clock.monotonic() if read_at is None else read_at
        if self._job_read_at.get(job.id, -math.inf) > read_at:
            return
        self.jobs[job.id] = job
        self._job_read_at[job.id] = read_at

    def oldest_due(self, phases: Collection[Phase] | None = None) -> dict[int, datetime]:
        """Per shard, the due time of the oldest run held (in one of ``phases``)."""
        oldest: dict[int, datetime] = {}
        for slot in self.slots.values():
            if phases is None or slot.phase in phases:
                s = slot.run.shard
                if s not in oldest or slot.run.due_at < oldest[s]:
                    oldest[s] = slot.run.due_at
        return oldest

    def next_due(self, lead: timedelta = timedelta(0)) -> datetime | None:
        """When the earliest run comes within ``lead`` of its instant (more for a
        crowded instant, ``crowds``)."""
        first = self._crowds.trigger_at(self._timers[0][0], lead) if self._timers else None
        crowd = self._crowds.next_reach(lead)
        return min(first, crowd) if first and crowd else first or crowd

    def next_at_instant(self) -> datetime | None:
        """When the earliest run left to trigger at a set time (no lead) comes due."""
        return self._at_instant[0][0] if self._at_instant else None

    def held_slot(self, run_id: str, token: int) -> Slot | None:
        """The run, if it is leased here under exactly this token."""
        return self.slots[run_id] if self.leases.holds(run_id, token) else None

    # --- coming due -------------------------------------------------------------------

    def pop_due(self, now: datetime, *, lead: timedelta = timedelta(0)) -> list[Slot]:
        """Runs due by ``now`` + ``lead`` (at most a batch), out of the timer heap: a
        run is triggered up to the lease lead ahead of its due instant, so its fire
        rules, admission and lease are decided by then; a crowded instant's further
        ahead (``crowds``), so its last lease is out by then too. A run whose job has
        runs admitted (ready or leased) is left to its very instant instead: whether it
        overlaps them is decided when it is due, not up to a lead before."""
        due: list[Slot] = []
        timers, at_instant, limit = self._timers, self._at_instant, self.config.max_batch
        while at_instant and at_instant[0][0] <= now and len(due) < limit:
            _, rid = heapq.heappop(at_instant)
            slot = self.slots.get(rid)
            if slot is not None and slot.phase == Phase.WAITING:
                due.append(slot)
        until = self._crowds.reach(now, lead)
        while timers and timers[0][0] <= until and len(due) < limit:
            at, rid = heapq.heappop(timers)
            self._crowds.remove(at)
            slot = self.slots.get(rid)
            if slot is None or slot.phase != Phase.WAITING:
                continue
            if at > now and self.admission.busy(slot.run.job_id):
                heapq.heappush(at_instant, (at, rid))
                continue
            due.append(slot)
        return due

    def coming_due(self, until: datetime) -> list[Slot]:
        """WAITING runs due by ``until`` (a batch at most), left in the timer heap."""
        ids = dict.fromkeys(heap_until(self._timers, until, self.config.max_batch))
        slots = (self.slots.get(rid) for rid in ids)
        return [s for s in slots if s is not None and s.phase == Phase.WAITING]

    def stale_jobs(self, due: list[Slot]) -> set[str]:
        """Jobs of these runs to read again: not held, or read longer ago than allowed."""
        ttl = self.config.job_cache_ttl
        oldest = -math.inf if ttl is None else self._clock.monotonic() - ttl.total_seconds()
        return {
            s.run.job_id
            for s in due
            if s.run.job_id not in self.jobs
            or self._job_read_at.get(s.run.job_id, -math.inf) < oldest
        }

    def trigger(self, slot: Slot, now: datetime, turn: Turn) -> None:
        """A run comes due with its job as last read (None: no job row)."""
        run = slot.run
        job = slot.job = self.jobs.get(run.job_id)
        if job is None and now - run.created_at < JOB_ROW_GRACE:
            # A store that writes a create in steps (Cassandra: runs, due rows, then the
            # job row) can show the run before its job: look again shortly. A run whose
            # job never appears belonged to a create that failed.
            # at that time itself: a look again is no due instant to lead
            heapq.heappush(self._at_instant, (saturating_add(now, JOB_ROW_RETRY), run.id))
            return
        if job is None or job.state == JobState.DELETED:
            self.finish(slot, RunState.CANCELLED, RunReason.JOB_DELETED, turn, now)
            return
        scheduled = run.schedule_version > 0 and run.attempt == 1
        if scheduled and run.schedule_version < job.schedule_version:
            self.finish(slot, RunState.CANCELLED, RunReason.SUPERSEDED, turn, now)
            return
        paused = job.state == JobState.PAUSED
        # The fire the job's progress names, or a later one: a run of a later fire
        # exists only if the fire before it was triggered, so the progress naming it
        # was lost or is late (a poller froze between its writes); carry the chain on.
        behind = job.next_fire_at is not None and run.fire_at > job.next_fire_at
        fresh = (
            scheduled
            and job.spec.schedule.recurring
            and (job.next_fire_key == run.fire_key or behind)
            and job.state in (JobState.ACTIVE, JobState.PAUSED)
        )
        if fresh:
            try:
                fired = self._fire(slot, job, paused, turn, now)
            except Exception as error:
                self.job_rules_failed(job, error, turn, where="fire")
                self.fail(slot, error, turn, now, where="fire", counted=True)
                return
            if not fired:
                return
            job = slot.job
            assert job is not None
        elif paused:
            # a one-off, retry or manual run of a paused job waits in the store;
            # ResumeJob indexes it again
            self.forget(slot)
            return
        if retry_misfired(job, run, now=now, grace=self.config.misfire_grace):
            self.finish(slot, RunState.SKIPPED, RunReason.MISFIRE, turn, now)
            return
        if past_deadline(job, run, now):
            self.finish(slot, RunState.MISSED, RunReason.DEADLINE, turn, now)
            return
        self._admit(slot, fresh, turn, now)

    def _fire(self, slot: Slot, job: Job, paused: bool, turn: Turn, now: datetime) -> bool:
        """The schedule's current fire is due: records its outcome and the next fire.
        False when the fire itself was not run (skipped, or a misfire)."""
        run = slot.run
        out = on_fire_due(
            job,
            run,
            now=now,
            shard_count=self._shard_count,
            paused=paused,
            grace=self.config.misfire_grace,
        )
        for reason, n in out.skipped.items():
            self.metrics.fires_skipped.labels(reason=reason.value).inc(n)
        known = set()
        for r in out.runs:
            if r.id == run.id:
                self.forget(slot)
                self.ended_here(run.id)
            elif self.known(r.id):
                # a fire whose run is already held or done here (written by a commit
                # that landed only in part): keep that one, do not write it again
                known.add(r.id)
                continue
            turn.runs[r.id] = r
        for r in out.due:
            if r.id not in known:
                turn.due.append(r)
                self.add_waiting(Slot(run=r, job=job))
        nxt = out.next_fire
        at, key = (nxt.at, nxt.key) if nxt else (None, "")
        slot.job = job = copy_with(job, next_fire_at=at, next_fire_key=key)
        self.jobs[job.id] = job
        turn.set_progress(job.id, next_fire_at=at, next_fire_key=key)
        if nxt is None and not out.run_this and self._job_runs.get(job.id, 0) == 0:
            turn.set_progress(job.id, state=JobState.COMPLETED)
        return out.run_this

    def _admit(self, slot: Slot, fresh_fire: bool, turn: Turn, now: datetime) -> None:
        verdict = self.admission.admit(slot, fresh_fire=fresh_fire)
        if verdict == Verdict.SKIP:
            self.finish(slot, RunState.SKIPPED, RunReason.OVERLAP, turn, now)
        elif verdict == Verdict.REPLACE:
            victim = self.admission.replaced(slot.run.job_id)
            if victim is not None:
                self.cancel(victim, RunReason.REPLACED, turn, now)

    def reconsider_held(
        self, job_id: str, turn: Turn, now: datetime, *, ran_until: datetime | None = None
    ) -> None:
        """A run of the job taken over from an earlier owner was claimed by its worker
        (it is going: the fires held back are skipped), or ended: the fires due before
        ``ran_until`` (when its worker says it ended) overlapped it and are skipped, the
        others may run."""
        for slot in self.admission.release_held(job_id):
            with self.isolated(slot, turn, now, where="admit"):
                if ran_until is not None and slot.run.due_at < ran_until:
                    self.finish(slot, RunState.SKIPPED, RunReason.OVERLAP, turn, now)
                else:
                    self._admit(slot, True, turn, now)

    def miss_deadlines(self, now: datetime, turn: Turn) -> None:
        for slot in self.admission.missed(now):
            with self.isolated(slot, turn, now, where="deadline"):
                self.finish(slot, RunState.MISSED, RunReason.DEADLINE, turn, now)

    # --- leasing -------------------------------------------------------------------------

    def dispatch(self, workers: Collection[WorkerBook], now: datetime, turn: Turn) -> None:
        """Leases ready runs to workers with room; the leases go out after the commit."""
        leased = 0
        for slot, worker in self.admission.place(workers, now, self.config.max_batch):
            if worker is None:
                self.finish(slot, RunState.MISSED, RunReason.DEADLINE, turn, now)
                continue
            assert slot.job is not None
            if (fault := unopenable(self.config, slot.job)) is not None:
                self.fail(slot, fault, turn, now, where="secrets")  # never to a worker
                continue
            # a lease taken ahead of its due instant holds one TTL from that instant:
            # its worker waits for it before starting the run
            start = max(now, slot.run.due_at)
            token, expires = self.leases.grant(slot.run.id, worker.id, start)
            run = copy_with(
                slot.run,
                state=RunState.LEASED,
                worker_id=worker.id,
                lease_token=token,
                lease_expires_at=expires,
            )
            slot.run = run
            slot.phase = Phase.LEASED
            slot.worker = worker
            worker.hold(run.id, slot.job.spec.resources)
            turn.runs[run.id] = run
            turn.leases.append(slot)
            leased += 1
        if leased:
            self.metrics.runs_leased.inc(leased)

    def waiting_reasons(
        self, run_ids: Collection[str], workers: Collection[WorkerBook]
    ) -> dict[str, str]:
        """Why each of these runs, held here and due, is not on a worker yet (runs not
        held or not waiting are left out)."""
        reasons = {}
        for rid in run_ids:
            slot = self.slots.get(rid)
            reason = "" if slot is None else self.admission.waiting_reason(slot, workers)
            if reason:
                reasons[rid] = reason
        return reasons

    def count_waiting(self, workers: Collection[WorkerBook], now: datetime) -> None:
        """Sets the waiting-runs and shard-lag gauges, at most once a second (they look
        at every class and every run held)."""
        at = self._clock.monotonic()
        if at - self._waiting_counted_at < WAITING_GAUGE_EVERY:
            return
        self._waiting_counted_at = at
        for reason, n in self.admission.waiting_counts(workers).items():
            self.metrics.waiting_runs.labels(reason=reason.value).set(n)
        oldest = self.oldest_due(LAG_PHASES).values()
        lag = (now - min(oldest)).total_seconds() if oldest else 0.0
        self.metrics.shard_lag.set(max(0.0, lag))

    def send_lease(self, slot: Slot, now: datetime) -> None:
        """Sends a lease once it is durable; its TTL counts from now, as the worker's will
        (from the run's due instant for a lease sent ahead of it)."""
        worker, job = slot.worker, slot.job
        if worker is None or job is None:
            return  # refused or ended meanwhile
        expires = self.leases.sent(slot.run.id, slot.run.lease_token, max(now, slot.run.due_at))
        if expires is None:
            return
        # the run keeps its granted expiry: the lease book holds this one, and the run's
        # final record takes it from there (``finish``)
        worker.link.lease(lease_grant(slot.run, job, self.config, expires))

    def expire(self, now: datetime, turn: Turn) -> None:
        """Ends the runs whose lease ran out: lost with their worker, or cancelled."""
        for rid in self.leases.expired(now):
            slot = self.slots[rid]
            self.metrics.leases_expired.inc()
            with self.isolated(slot, turn, now, where="expire"):
                if slot.cancel_reason is not None:
                    self.finish(slot, RunState.CANCELLED, slot.cancel_reason, turn, now)
                else:
                    self.finish(
                        slot,
                        RunState.FAILED,
                        RunReason.WORKER_LOST,
                        turn,
                        now,
                        error="lease expired: worker lost",
                    )

    def requeue(self, slot: Slot) -> None:
        """Its worker refused the lease: nothing of it ran, it is leased again."""
        if slot.worker is not None:
            slot.worker.release(slot.run.id)
            slot.worker = None
        self.leases.release(slot.run.id)
        self.admission.requeue(slot)

    # --- cancelling and ending ------------------------------------------------------------

    def cancel(self, slot: Slot, reason: RunReason, turn: Turn, now: datetime) -> None:
        """A run not on a worker ends CANCELLED now; a leased one is told to stop (its
        worker reports the end, or the lease expires)."""
        if slot.phase == Phase.LEASED:
            if slot.cancel_reason is None:
                slot.cancel_reason = reason
                worker = slot.worker
                if worker is not None:
                    token = slot.run.lease_token
                    order = CancelOrder(run_id=slot.run.id, fencing_token=token, reason=reason)
                    turn.after.append(lambda: worker.link.cancel(order))
            return
        self.finish(slot, RunState.CANCELLED, reason, turn, now)

    def cancel_job(self, job_id: str, reason: RunReason, turn: Turn, now: datetime) -> None:
        for slot in [s for s in self.slots.values() if s.run.job_id == job_id]:
            self.cancel(slot, reason, turn, now)

    def finish(
        self,
        slot: Slot,
        state: RunState,
        reason: RunReason,
        turn: Turn,
        now: datetime,
        *,
        exit_code: int | None = None,
        error: str = "",
        started_at: datetime | None = None,
        ended_at: datetime | None = None,
        usage: RunUsage | None = None,
    ) -> None:
        """The run ends here: its final record, and what that leads to (endings)."""
        job = slot.job
        final = final_run(
            slot.run,
            state,
            reason,
            now,
            exit_code=exit_code,
            error=error,
            started_at=started_at,
            ended_at=ended_at,
            output_bytes=slot.output_bytes,
            lease_expires_at=self.leases.expires_at(slot.run.id),
            usage=usage,
        )
        self.forget(slot)
        self.ended_here(final.id)
        self.metrics.run_ended(final)
        if job is not None:
            try:
                final = self._follow_up(job, final, turn, now)
            except Exception as error:  # its retry rules: the run's own end stands
                self.job_rules_failed(job, error, turn, where="ending")
            self.metrics.dead_lettered(final)
            self.admission.unblock(job.id)
            # a result its worker reported says until when the run really went
            reported = state in _REPORTED and reason != RunReason.WORKER_LOST
            self.reconsider_held(job.id, turn, now, ran_until=final.ended_at if reported else None)
        turn.runs[final.id] = final
        for fut in slot.cancel_waiters:
            turn.answers.append(fut)
            turn.after.append(lambda f=fut, r=final: f.done() or f.set_result(r))

    def _follow_up(self, job: Job, final: Run, turn: Turn, now: datetime) -> Run:
        ending = follow_up(
            job,
            final,
            now,
            current=self.jobs.get(job.id, job),
            runs_left=self._job_runs.get(job.id, 0),
        )
        if ending.retry is not None and not self.known(ending.retry.id):
            slot = Slot(run=ending.retry, job=job)
            self.track(slot)  # counted now; written (or not) by the loop's place_retries
            turn.retries.append(slot)
        if ending.progress:
            turn.set_progress(job.id, **ending.progress)
        if job.id in self.jobs and (changed := ending.job) is not None:
            self.jobs[job.id] = changed
        return ending.final

    # --- faults ------------------------------------------------------------------------------

    def isolated(self, slot: Slot, turn: Turn, now: datetime, *, where: str) -> Isolated:
        """Applies rules to one run; if they raise, that run alone fails (``fail``)."""
        return Isolated(self.fail, slot, turn, now, where)

    def fail(
        self,
        slot: Slot,
        error: BaseException,
        turn: Turn,
        now: datetime,
        *,
        where: str,
        counted: bool = False,
    ) -> None:
        """Handling the run raised: it ends FAILED (``INTERNAL_ERROR``) with the error's
        text, and nothing follows from that end (no retry, no failure streak): deciding
        them would apply the same rules again. A cancel waiting for it gets that end."""
        if not counted:
            log.error("run %s failed in the poller (%s)", slot.run.id, where, exc_info=error)
            self.metrics.poller_faults.labels(where=where).inc()
        final = final_run(
            slot.run,
            RunState.FAILED,
            RunReason.INTERNAL_ERROR,
            now,
            error=fault_text(error),
            output_bytes=slot.output_bytes,
        )
        self.forget(slot)
        self.ended_here(final.id)
        self.metrics.run_ended(final)
        self.admission.unblock(final.job_id)
        self.reconsider_held(final.job_id, turn, now)
        turn.runs[final.id] = final
        for fut in slot.cancel_waiters:
            turn.answers.append(fut)
            turn.after.append(lambda f=fut, r=final: f.done() or f.set_result(r))
        slot.cancel_waiters = []

    def job_rules_failed(self, job: Job, error: BaseException, turn: Turn, *, where: str) -> None:
        """The job's own rules raised: the job is paused, the error its pause reason
        (ResumeJob, after an update that mends it, starts it again)."""
        log.error("job %s paused: its rules failed (%s)", job.id, where, exc_info=error)
        self.metrics.poller_faults.labels(where=where).inc()
        reason = f"paused: the scheduler failed applying its rules: {fault_text(error)}"
        if job.state == JobState.ACTIVE:
            turn.set_progress(job.id, state=JobState.PAUSED, pause_reason=reason)
        paused = copy_with(job, state=JobState.PAUSED, pause_reason=reason)
        if job.id in self.jobs:
            self.jobs[job.id] = paused
