"""What happens to a held run when it comes due.

A run waiting for its due time is taken out of the table's timers up to the lease
lead ahead of its instant (further for a crowded instant: ``crowded_instants``), with
the runs due within ``trigger_window`` after it, so its rules and its lease are decided
by then; one whose job has runs admitted waits for its very instant
(``overlap.waits_for_instant``). Its job copy is read again first when it is
older than ``job_cache_ttl`` (``job_reads``). Then ``trigger`` applies its rules, in
order: a run whose job row has not landed yet is looked at again shortly, one whose
job is gone is CANCELLED, a fire of an older schedule is SUPERSEDED; a fresh fire of
the job's schedule applies the fire rules (``fires.on_fire_due``: misfires, pause,
the next fire, written as a new run in the same turn); a run of a paused job that is
not a fresh fire waits in the store (ResumeJob indexes it again); a retry a later
fire overtook is SKIPPED, a run past its starting deadline MISSED; the rest asks its
job's overlap rules to start (``Overlap.admit``). A run that waits to start is
MISSED once its starting deadline passes (``miss_deadlines``).

It reads no clock for its rules (each takes ``now``; the clock only tells how old a
job copy is), calls no store and sends nothing.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from shardcron.client.dataclass_copies import copy_with
from shardcron.client.saturating import saturating_add
from shardcron.client.types import Job, JobState, LateReason, RunLateness, RunReason, RunState
from shardcron.coordinator.metrics import Metrics
from shardcron.coordinator.poller.clock import Clock
from shardcron.coordinator.poller.config import JOB_ROW_GRACE, JOB_ROW_RETRY, PollerConfig
from shardcron.coordinator.poller.end_rules import Outcome, completed_by_fire
from shardcron.coordinator.poller.ends import Ends
from shardcron.coordinator.poller.fires import on_fire_due, retry_misfired
from shardcron.coordinator.poller.lateness import (
    LateCut,
    Waits,
    behind_since,
    late_after,
    missed,
    skipped,
)
from shardcron.coordinator.poller.overlap import waits_for_instant
from shardcron.coordinator.poller.placement import past_deadline
from shardcron.coordinator.poller.table import RunTable, Slot
from shardcron.coordinator.poller.turn import Turn

PAUSED_JOBS_KEPT = 10_000  # jobs remembered as having held runs back for a pause


class Due:
    def __init__(
        self,
        table: RunTable,
        ends: Ends,
        *,
        config: PollerConfig,
        metrics: Metrics,
        clock: Clock,
        shard_count: int,
    ) -> None:
        self._table = table
        self._ends = ends
        self._config = config
        self._metrics = metrics
        self._clock = clock  # monotonic only: how old a job copy is
        self._shard_count = shard_count
        self.late = LateCut(late_after(config.lease_lead))
        # jobs whose runs waited in the store for a pause, the latest last (``_held_for_pause``)
        self._paused: dict[str, None] = {}

    def take(self, now: datetime, lead: timedelta) -> list[Slot]:
        """Runs due by ``now`` + ``lead`` (more for a crowded instant), at most a batch,
        taken out to trigger; when one is, with a lead, those due up to
        ``trigger_window`` after it too. A run whose job has runs admitted is left to its
        very instant instead: whether it overlaps them is decided when it is due, not up
        to a lead before."""
        table = self._table
        until = table.crowds.reach(now, lead)
        window = self._config.trigger_window
        if lead and window and (first := table.next_due(lead)) is not None and first <= now:
            until = max(until, saturating_add(now, lead + window))  # they go with it
        return table.take_due(
            now,
            until,
            self._config.max_batch,
            to_instant=lambda s: waits_for_instant(table.busy(s.run.job_id), s.run.due_at, now),
        )

    def coming(self, until: datetime) -> list[Slot]:
        """Runs waiting for due times by ``until`` (a batch at most), left waiting."""
        return self._table.coming_due(until, self._config.max_batch)

    def stale_jobs(self, due: list[Slot]) -> set[str]:
        """Jobs of these runs to read again: not held, or read longer ago than allowed."""
        ttl = self._config.job_cache_ttl
        oldest = -math.inf if ttl is None else self._clock.monotonic() - ttl.total_seconds()
        table = self._table
        return {
            s.run.job_id
            for s in due
            if s.run.job_id not in table.jobs or table.job_read_at(s.run.job_id) < oldest
        }

    def trigger(self, slot: Slot, now: datetime, turn: Turn) -> None:
        """A run comes due with its job as last read (None: no job row)."""
        run, ends = slot.run, self._ends
        job = self._table.trigger(slot)
        if slot.waits is None and self.late.late(run.due_at, now):
            slot.waits = self._late_since_due(run.job_id, run.due_at)
        elif self._paused and job is not None and job.state != JobState.PAUSED:
            self._paused.pop(job.id, None)  # a run of it on time: its backlog is over
        if job is None and now - run.created_at < JOB_ROW_GRACE:
            # A store that writes a create in steps (Cassandra: runs, due rows, then the
            # job row) can show the run before its job: look again shortly, at that time
            # itself (a look again is no due instant to lead). A run whose job never
            # appears belonged to a create that failed.
            self._table.look_again(slot, saturating_add(now, JOB_ROW_RETRY))
            return
        if job is None or job.state == JobState.DELETED:
            ends.end(slot, _ended(RunState.CANCELLED, RunReason.JOB_DELETED), turn, now)
            return
        scheduled = run.schedule_version > 0 and run.attempt == 1
        if scheduled and run.schedule_version < job.schedule_version:
            ends.end(slot, _ended(RunState.CANCELLED, RunReason.SUPERSEDED), turn, now)
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
                ends.job_rules_failed(job, error, turn, where="fire")
                ends.fault(slot, error, turn, now, where="fire", counted=True)
                return
            if not fired:
                return
            job = slot.job
            assert job is not None
        elif paused:
            # a one-off, retry or manual run of a paused job waits in the store;
            # ResumeJob indexes it again
            self._held_for_pause(job.id)
            self._table.drop(slot, "its job is paused")
            return
        if retry_misfired(job, run, now=now, grace=self._config.misfire_grace):
            text = f"misfire policy {job.spec.misfire.value}: a retry due after a later fire"
            late = skipped(LateReason.MISFIRE, text)
            ends.end(slot, _ended(RunState.SKIPPED, RunReason.MISFIRE, late), turn, now)
            return
        if past_deadline(job, run, now):
            ends.end(slot, missed_deadline(slot, now), turn, now)
            return
        ends.overlap.admit(slot, fresh, turn, now)

    def _held_for_pause(self, job_id: str) -> None:
        """A run of the job waits in the store while it is paused: when the job resumes,
        its runs that come due late say they were paused (until one comes on time)."""
        paused = self._paused
        paused.pop(job_id, None)
        paused[job_id] = None
        if len(paused) > PAUSED_JOBS_KEPT:
            del paused[next(iter(paused))]  # the job paused longest ago

    def _late_since_due(self, job_id: str, due_at: datetime) -> Waits:
        """The waits of a run the poller comes to late: paused, if its job held runs back
        for a pause, else the poller was behind."""
        if job_id in self._paused:
            return Waits(due_at, LateReason.PAUSED, "paused")
        return behind_since(due_at)

    def _fire(self, slot: Slot, job: Job, paused: bool, turn: Turn, now: datetime) -> bool:
        """The schedule's current fire is due: records its outcome and the next fire.
        False when the fire itself was not run (its rules skipped it: it ended)."""
        run, table = slot.run, self._table
        out = on_fire_due(
            job,
            run,
            now=now,
            shard_count=self._shard_count,
            paused=paused,
            grace=self._config.misfire_grace,
        )
        skipped = dict(out.skipped)
        own = next((r for r in out.runs if r.id == run.id), None)
        if own is not None:
            skipped[own.reason] -= 1  # counted as its end is (Metrics.run_ended)
        for reason, n in skipped.items():
            if n:
                self._metrics.fires_skipped.labels(reason=reason.value).inc(n)
        known = set()
        for r in out.runs:
            if r.id == run.id:
                continue
            if table.known(r.id):
                # a fire whose run is already held or done here (written by a commit
                # that landed only in part): keep that one, do not write it again
                known.add(r.id)
                continue
            turn.runs[r.id] = r
            if r.state.is_final:  # a fire its rules skipped: ends as it is made
                self._ends.notify(job, r, turn, now)
        for r in out.due:
            if r.id not in known:
                turn.due.append(r)
                table.hold(r, job)
        nxt = out.next_fire
        at, key = (nxt.at, nxt.key) if nxt else (None, "")
        slot.job = job = copy_with(job, next_fire_at=at, next_fire_key=key)
        table.set_job(job)
        turn.set_progress(job.id, next_fire_at=at, next_fire_key=key)
        if own is not None:
            outcome = Outcome(state=own.state, reason=own.reason, follow_up=False, record=own)
            self._ends.end(slot, outcome, turn, now)
            if completed_by_fire(nxt, runs_left=len(table.runs_of(job.id))):
                turn.set_progress(job.id, state=JobState.COMPLETED)
        return out.run_this

    def miss_deadlines(self, now: datetime, turn: Turn) -> None:
        """Runs waiting to start past their starting deadline are MISSED."""
        for slot in self._table.missed(now):
            with self._ends.isolated(slot, turn, now, where="deadline"):
                self._ends.end(slot, missed_deadline(slot, now), turn, now)


def missed_deadline(slot: Slot, now: datetime) -> Outcome:
    """A run past its starting deadline is MISSED, saying what it waited for."""
    deadline = slot.job.spec.starting_deadline if slot.job is not None else None
    late = missed(slot.waits, deadline, now)
    return Outcome(state=RunState.MISSED, reason=RunReason.DEADLINE, lateness=late)


def _ended(state: RunState, reason: RunReason, lateness: RunLateness | None = None) -> Outcome:
    return Outcome(state=state, reason=reason, lateness=lateness)
