"""The rules applied, in a turn, to the runs a poller holds.

``RunKeeper`` applies the deciders' answers to the runs its ``RunTable`` holds — the
fire rules when a run comes due, overlap and the concurrency limit, placement, the
lease book's expiries, the run-end rules — through the table's transitions, and adds
what they decide to the turn's write set. It reads no clock for its rules (each takes ``now``), calls no
store and sends nothing: the loop writes the turn, then sends what it carries.

A rule that raises fails its own run or job, never the turn (``isolated``): the run
ends FAILED with ``INTERNAL_ERROR`` and the error's text (no retry: deciding it
again would raise again), or, when the job's own rules raised (its schedule, its
fires, its retries), the job is paused with the error as its pause reason. Each
such fault is counted in ``shardcron_poller_faults_total{where}``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Iterator
from datetime import datetime, timedelta

from shardcron.client.frozen import copy_with
from shardcron.client.saturating import saturating_add
from shardcron.client.stream import CancelOrder
from shardcron.client.types import Job, JobState, Run, RunReason, RunState
from shardcron.coordinator.metrics import Metrics
from shardcron.coordinator.poller.clock import Clock
from shardcron.coordinator.poller.config import JOB_ROW_GRACE, JOB_ROW_RETRY, PollerConfig
from shardcron.coordinator.poller.endings import Outcome, follow_up
from shardcron.coordinator.poller.faults import Isolated, fault_text
from shardcron.coordinator.poller.fires import on_fire_due, retry_misfired
from shardcron.coordinator.poller.grants import lease_grant, unopenable
from shardcron.coordinator.poller.overlap import (
    Verdict,
    concurrency_limit,
    decide,
    ran_until,
    skipped_by_reported_end,
    victim,
    waits_for_instant,
)
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

log = logging.getLogger("shardcron.poller")


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


class RunKeeper:
    def __init__(
        self, *, config: PollerConfig, metrics: Metrics, clock: Clock, shard_count: int
    ) -> None:
        self.config = config
        self.metrics = metrics
        self._clock = clock  # monotonic only: how old a job copy is, when gauges were set
        self._shard_count = shard_count
        self.table = RunTable(config=config, clock=clock)
        self._waiting_counted_at = -math.inf  # monotonic: the waiting gauge was last set

    # --- coming due -------------------------------------------------------------------

    def pop_due(self, now: datetime, *, lead: timedelta = timedelta(0)) -> list[Slot]:
        """Runs due by ``now`` + ``lead`` (at most a batch), out of their timers: a run is
        triggered up to the lease lead ahead of its due instant, so its fire rules,
        admission and lease are decided by then; a crowded instant's further ahead
        (``crowds``), so its last lease is out by then too. A run whose job has runs
        admitted (ready or leased) is left to its very instant instead: whether it
        overlaps them is decided when it is due, not up to a lead before."""
        table = self.table
        return table.take_due(
            now,
            table.crowds.reach(now, lead),
            self.config.max_batch,
            to_instant=lambda s: waits_for_instant(table.busy(s.run.job_id), s.run.due_at, now),
        )

    def coming_due(self, until: datetime) -> list[Slot]:
        """WAITING runs due by ``until`` (a batch at most), left waiting."""
        return self.table.coming_due(until, self.config.max_batch)

    def stale_jobs(self, due: list[Slot]) -> set[str]:
        """Jobs of these runs to read again: not held, or read longer ago than allowed."""
        ttl = self.config.job_cache_ttl
        oldest = -math.inf if ttl is None else self._clock.monotonic() - ttl.total_seconds()
        table = self.table
        return {
            s.run.job_id
            for s in due
            if s.run.job_id not in table.jobs or table.job_read_at(s.run.job_id) < oldest
        }

    def trigger(self, slot: Slot, now: datetime, turn: Turn) -> None:
        """A run comes due with its job as last read (None: no job row)."""
        run = slot.run
        job = self.table.trigger(slot)
        if job is None and now - run.created_at < JOB_ROW_GRACE:
            # A store that writes a create in steps (Cassandra: runs, due rows, then the
            # job row) can show the run before its job: look again shortly. A run whose
            # job never appears belonged to a create that failed.
            # at that time itself: a look again is no due instant to lead
            self.table.look_again(slot, saturating_add(now, JOB_ROW_RETRY))
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
            self.table.drop(slot, "its job is paused")
            return
        if retry_misfired(job, run, now=now, grace=self.config.misfire_grace):
            self.finish(slot, RunState.SKIPPED, RunReason.MISFIRE, turn, now)
            return
        if past_deadline(job, run, now):
            self.finish(slot, RunState.MISSED, RunReason.DEADLINE, turn, now)
            return
        self.admit(slot, fresh, turn, now)

    def _fire(self, slot: Slot, job: Job, paused: bool, turn: Turn, now: datetime) -> bool:
        """The schedule's current fire is due: records its outcome and the next fire.
        False when the fire itself was not run (skipped, or a misfire)."""
        run = slot.run
        table = self.table
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
                table.end(slot, Outcome(state=r.state, reason=r.reason, record=r), now)
            elif table.known(r.id):
                # a fire whose run is already held or done here (written by a commit
                # that landed only in part): keep that one, do not write it again
                known.add(r.id)
                continue
            turn.runs[r.id] = r
        for r in out.due:
            if r.id not in known:
                turn.due.append(r)
                table.hold(r, job)
        nxt = out.next_fire
        at, key = (nxt.at, nxt.key) if nxt else (None, "")
        slot.job = job = copy_with(job, next_fire_at=at, next_fire_key=key)
        table.set_job(job)
        turn.set_progress(job.id, next_fire_at=at, next_fire_key=key)
        if nxt is None and not out.run_this and not table.holds_job(job.id):
            turn.set_progress(job.id, state=JobState.COMPLETED)
        return out.run_this

    def admit(self, slot: Slot, fresh_fire: bool, turn: Turn, now: datetime) -> Verdict:
        """The due run asks to start (``overlap.decide``): it is made ready, queued,
        held back or skipped; a REPLACE cancels the run it replaces."""
        job = slot.job
        assert job is not None
        table = self.table
        admitted = table.admitted(job.id)
        verdict = decide(job, admitted, queued=table.queued(job.id), fresh_fire=fresh_fire)
        if verdict == Verdict.READY:
            table.make_ready(slot)
        elif verdict == Verdict.HOLD:
            table.hold_back(slot)
        elif verdict == Verdict.SKIP:
            self.finish(slot, RunState.SKIPPED, RunReason.OVERLAP, turn, now)
        else:
            table.queue(slot, first=verdict == Verdict.REPLACE)
            replaced = victim(admitted) if verdict == Verdict.REPLACE else None
            if replaced is not None:
                self.cancel(replaced, RunReason.REPLACED, turn, now)
        return verdict

    def reconsider_held(
        self, job_id: str, turn: Turn, now: datetime, *, ran_until: datetime | None = None
    ) -> None:
        """A run of the job taken over from an earlier owner was claimed by its worker
        (it is going: the fires held back are skipped), or ended: the fires due before
        ``ran_until`` (when its worker says it ended) overlapped it and are skipped, the
        others may run."""
        for slot in self.table.release_held(job_id):
            with self.isolated(slot, turn, now, where="admit"):
                if skipped_by_reported_end(slot.run.due_at, ran_until):
                    self.finish(slot, RunState.SKIPPED, RunReason.OVERLAP, turn, now)
                else:
                    self.admit(slot, True, turn, now)

    def miss_deadlines(self, now: datetime, turn: Turn) -> None:
        for slot in self.table.missed(now):
            with self.isolated(slot, turn, now, where="deadline"):
                self.finish(slot, RunState.MISSED, RunReason.DEADLINE, turn, now)

    # --- leasing -------------------------------------------------------------------------

    def dispatch(self, workers: Collection[WorkerBook], now: datetime, turn: Turn) -> None:
        """Leases ready runs to workers with room; the leases go out after the commit."""
        leased = 0
        for slot, worker in placements(self.table, workers, now, self.config.max_batch):
            if worker is None:
                self.finish(slot, RunState.MISSED, RunReason.DEADLINE, turn, now)
                continue
            assert slot.job is not None
            if (fault := unopenable(self.config, slot.job)) is not None:
                self.fail(slot, fault, turn, now, where="secrets")  # never to a worker
                continue
            run = self.table.lease(slot, worker, now)
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
            slot = self.table.slots.get(rid)
            reason = "" if slot is None else self._waiting_reason(slot, workers)
            if reason:
                reasons[rid] = reason
        return reasons

    def _waiting_reason(self, slot: Slot, workers: Collection[WorkerBook]) -> str:
        """Why this held run is not on a worker yet ("" unless READY or BLOCKED)."""
        if slot.phase == Phase.BLOCKED:
            if slot.place is Place.HELD_BACK:
                return "waiting to learn whether a run taken over from another poller still goes"
            running = len(self.table.admitted(slot.run.job_id))
            return f"waiting for the job's concurrency limit ({running} running)"
        cls = self.table.ready.class_of(slot.run.id)
        return "" if cls is None else why_waiting(cls.spec, cls.owner, workers)[1]

    def waiting_counts(self, workers: Collection[WorkerBook]) -> dict[WaitReason, int]:
        """Runs waiting, by reason: O(classes × workers)."""
        counts = dict.fromkeys(WaitReason, 0)
        for cls in self.table.ready.classes():
            counts[why_waiting(cls.spec, cls.owner, workers)[0]] += cls.count
        counts[WaitReason.CONCURRENCY_LIMIT] = self.table.blocked
        return counts

    def count_waiting(self, workers: Collection[WorkerBook], now: datetime) -> None:
        """Sets the waiting-runs and shard-lag gauges, at most once a second (they look
        at every class and every run held)."""
        at = self._clock.monotonic()
        if at - self._waiting_counted_at < WAITING_GAUGE_EVERY:
            return
        self._waiting_counted_at = at
        for reason, n in self.waiting_counts(workers).items():
            self.metrics.waiting_runs.labels(reason=reason.value).set(n)
        oldest = self.table.oldest_due(LAG_PHASES).values()
        lag = (now - min(oldest)).total_seconds() if oldest else 0.0
        self.metrics.shard_lag.set(max(0.0, lag))

    def send_lease(self, slot: Slot, now: datetime) -> None:
        """Sends a lease once it is durable; its TTL counts from now, as the worker's will
        (from the run's due instant for a lease sent ahead of it)."""
        expires = self.table.sent(slot, max(now, slot.run.due_at))
        if expires is None:
            return  # not leased under that token any more
        worker, job = slot.worker, slot.job
        assert worker is not None and job is not None
        # the run keeps its granted expiry: the lease book holds this one, and the run's
        # final record takes it from there (``RunTable.end``)
        worker.link.lease(lease_grant(slot.run, job, self.config, expires))

    def expire(self, now: datetime, turn: Turn) -> None:
        """Ends the runs whose lease ran out: lost with their worker, or cancelled."""
        for slot in self.table.expired(now):
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

    # --- cancelling and ending ------------------------------------------------------------

    def cancel(self, slot: Slot, reason: RunReason, turn: Turn, now: datetime) -> None:
        """A run not on a worker ends CANCELLED now; a leased one is told to stop (its
        worker reports the end, or the lease expires)."""
        if slot.place is not Place.LEASED:
            self.finish(slot, RunState.CANCELLED, reason, turn, now)
            return
        if self.table.mark_cancel(slot, reason) and (worker := slot.worker) is not None:
            token = slot.run.lease_token
            order = CancelOrder(run_id=slot.run.id, fencing_token=token, reason=reason)
            turn.after.append(lambda: worker.link.cancel(order))

    def cancel_job(self, job_id: str, reason: RunReason, turn: Turn, now: datetime) -> None:
        for slot in self.table.runs_of(job_id):
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
        reported: bool = False,
    ) -> None:
        """The run ends here: its final record, and what that leads to (endings). A
        run ended already (a rule raised after its end) is left as it ended."""
        if slot.place is Place.GONE:
            return
        job = slot.job
        outcome = Outcome(
            state=state,
            reason=reason,
            exit_code=exit_code,
            error=error,
            started_at=started_at,
            ended_at=ended_at,
            reported=reported,
        )
        final = self.table.end(slot, outcome, now)
        self.metrics.run_ended(final)
        if job is not None:
            try:
                final = self._follow_up(job, final, turn, now)
            except Exception as error:  # its retry rules: the run's own end stands
                self.job_rules_failed(job, error, turn, where="ending")
            self.metrics.dead_lettered(final)
            self.table.unblock(job.id, concurrency_limit)
            self.reconsider_held(job.id, turn, now, ran_until=ran_until(final, reported=reported))
        turn.runs[final.id] = final
        for fut in slot.cancel_waiters:
            turn.answers.append(fut)
            turn.after.append(lambda f=fut, r=final: f.done() or f.set_result(r))

    def _follow_up(self, job: Job, final: Run, turn: Turn, now: datetime) -> Run:
        table = self.table
        ending = follow_up(
            job,
            final,
            now,
            current=table.jobs.get(job.id, job),
            runs_left=len(table.runs_of(job.id)),
        )
        if ending.retry is not None:
            table.hold_retry(ending.retry, job)  # written (or not) by the loop's place_retries
        if ending.progress:
            turn.set_progress(job.id, **ending.progress)
        if (changed := ending.job) is not None:
            table.set_job(changed)
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
        them would apply the same rules again. A cancel waiting for it gets that end. A
        run ended already (the rule raised after its end) is left as it ended."""
        if not counted:
            log.error("run %s failed in the poller (%s)", slot.run.id, where, exc_info=error)
            self.metrics.poller_faults.labels(where=where).inc()
        if slot.place is Place.GONE:
            return
        outcome = Outcome(
            state=RunState.FAILED,
            reason=RunReason.INTERNAL_ERROR,
            error=fault_text(error),
            follow_up=False,
        )
        final = self.table.end(slot, outcome, now)
        self.metrics.run_ended(final)
        self.table.unblock(final.job_id, concurrency_limit)
        self.reconsider_held(final.job_id, turn, now)
        turn.runs[final.id] = final
        for fut in slot.cancel_waiters:
            turn.answers.append(fut)
            turn.after.append(lambda f=fut, r=final: f.done() or f.set_result(r))

    def job_rules_failed(self, job: Job, error: BaseException, turn: Turn, *, where: str) -> None:
        """The job's own rules raised: the job is paused, the error its pause reason
        (ResumeJob, after an update that mends it, starts it again)."""
        log.error("job %s paused: its rules failed (%s)", job.id, where, exc_info=error)
        self.metrics.poller_faults.labels(where=where).inc()
        reason = f"paused: the scheduler failed applying its rules: {fault_text(error)}"
        if job.state == JobState.ACTIVE:
            turn.set_progress(job.id, state=JobState.PAUSED, pause_reason=reason)
        self.table.set_job(copy_with(job, state=JobState.PAUSED, pause_reason=reason))
