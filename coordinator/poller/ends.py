"""How a run ends: the one way out of the run table, and what every end leads to.

``Ends.end(slot, outcome)`` is how a held run ends, whatever ends it (its worker's
result, its lease running out, its starting deadline, a cancel, its job deleted, a
fault in the rules, its fire skipped by its own rules). In this order, once:

1. the table makes its final record and takes it out of every index (``RunTable.end``);
2. the end is counted (``Metrics.run_ended``) and kept in the overview's history
   (``history``; with the job's failure streak once the rules below decided it);
3. unless the outcome says nothing follows, the job's rules follow it
   (``end_rules.follow_up``: a retry, dead letter, failure streak, auto-pause,
   completion); if they raise, the job is paused (``job_rules_failed``);
4. the room it leaves goes to its job's queued runs, and its job's fires held back
   are decided again (``Overlap.after_end``);
5. the record goes into the turn's writes, with the notifications its end makes under
   its job's ``NotifyPolicy`` (``notify.rules.decide``; rules that raise are counted
   and make none, never failing the run);
6. a cancel waiting for it is answered with it once the turn is written.

Ending a run that ended already does nothing: a rule that raises after the run's end
(``Isolated``) finds it ended. A cancel of a run not held here (``end_unheld``) is
recorded and counted the same way, with nothing to follow.

A rule that raises fails its own run or job, never the turn: the run ends FAILED with
``INTERNAL_ERROR`` and the error's text (``fault``: nothing follows, deciding it
again would raise again), or, when the job's own rules raised (its schedule, its
fires, its retries), the job is paused with the error as its pause reason. Each such
fault is counted in ``shardcron_poller_faults_total{where}``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from datetime import datetime

from shardcron.client.dataclass_copies import copy_with
from shardcron.client.stream import CancelOrder
from shardcron.client.types import Job, JobState, NotifyPolicy, Run, RunReason, RunState
from shardcron.coordinator.metrics import Metrics
from shardcron.coordinator.notify.hooks import NotifyHooks
from shardcron.coordinator.notify.rules import decide, decide_start
from shardcron.coordinator.poller.end_rules import Outcome, follow_up
from shardcron.coordinator.poller.faults import Isolated, fault_text
from shardcron.coordinator.poller.history import RunHistory
from shardcron.coordinator.poller.overlap import Overlap, ran_until
from shardcron.coordinator.poller.table import Place, RunTable, Slot
from shardcron.coordinator.poller.turn import Turn

log = logging.getLogger("shardcron.poller")


class Ends:
    def __init__(
        self,
        table: RunTable,
        *,
        metrics: Metrics,
        history: RunHistory,
        notify: NotifyHooks | None = None,
    ) -> None:
        self._table = table
        self._metrics = metrics
        self.history = history  # what the overview shows of the runs ended here
        # an owner's default notification rules, for its jobs without rules of their own
        self._owner_defaults = notify.owner_defaults if notify else _no_defaults
        # what an end lets start; it ends runs (a skip, a replaced run) through here
        self.overlap = Overlap(table, end=self.end, cancel=self.cancel, isolated=self.isolated)

    def end(self, slot: Slot, outcome: Outcome, turn: Turn, now: datetime) -> Run:
        """The run ends here (see the module's docstring); its final record."""
        if slot.place is Place.GONE:
            return turn.runs.get(slot.run.id, slot.run)  # ended already
        job = slot.job
        streak = self._streak(job)  # before the end: the table may forget the job with it
        started = slot.run.state == RunState.RUNNING  # its start was seen: late was decided
        final = self._table.end(slot, outcome, now)
        self._metrics.run_ended(final)
        self.history.ended(final, now)
        if outcome.follow_up and job is not None:
            try:
                final = self._follow_up(job, final, turn, now)
            except Exception as error:  # its retry rules: the run's own end stands
                self.job_rules_failed(job, error, turn, where="ending")
            self._metrics.dead_lettered(final)
        until = ran_until(final, reported=outcome.reported)
        self.overlap.after_end(final.job_id, turn, now, ran_until=until)
        turn.runs[final.id] = final
        if job is not None:
            self.notify(job, final, turn, now, streak_before=streak, start_decided=started)
        for fut in slot.cancel_waiters:
            _answer(turn, fut, final)
        return final

    def _streak(self, job: Job | None) -> int:
        """The job's failure streak as the poller holds it (its newest copy)."""
        if job is None:
            return 0
        return self._table.jobs.get(job.id, job).consecutive_failures

    def _rules_of(self, job: Job) -> tuple[Job, NotifyPolicy | None] | None:
        """The newest copy of the job held, and its owner's default rules when it has
        none of its own; None: no rules at all (nothing to decide)."""
        current = self._table.jobs.get(job.id, job)
        if current.spec.notify is not None:
            return current, None
        defaults = self._owner_defaults(job.owner)
        return None if defaults is None else (current, defaults)

    def notify_start(self, job: Job, run: Run, turn: Turn, now: datetime) -> None:
        """A run started (its worker said so): its ``late`` notification, if it is late."""
        if (rules := self._rules_of(job)) is None:
            return
        current, defaults = rules
        try:
            turn.deliveries += decide_start(current, run, now, owner_defaults=defaults)
        except Exception as error:
            log.error("run %s: its notifications failed", run.id, exc_info=error)
            self._metrics.poller_faults.labels(where="notify").inc()

    def notify(
        self,
        job: Job,
        final: Run,
        turn: Turn,
        now: datetime,
        *,
        streak_before: int | None = None,
        start_decided: bool = False,
    ) -> None:
        """The notifications ``final``'s end makes go into the turn's writes. The newest
        copy of the job held gives the policy and the streak after the end; a policy
        whose rules raise makes none (counted), and the run's end stands."""
        if (rules := self._rules_of(job)) is None:
            return
        current, defaults = rules
        before = current.consecutive_failures if streak_before is None else streak_before
        progress = turn.progress.get(job.id)
        after = before
        if progress is not None and progress.consecutive_failures is not None:
            after = progress.consecutive_failures
        try:
            made = decide(
                current,
                final,
                now,
                streak_before=before,
                streak_after=after,
                owner_defaults=defaults,
                start_decided=start_decided,
            )
        except Exception as error:
            log.error("run %s: its notifications failed", final.id, exc_info=error)
            self._metrics.poller_faults.labels(where="notify").inc()
            return
        turn.deliveries += made

    def end_unheld(
        self,
        stored: Run,
        outcome: Outcome,
        turn: Turn,
        now: datetime,
        *,
        waiter: asyncio.Future[Run],
    ) -> Run:
        """A run of an owned shard not held here (not due yet, or not loaded) ends as it
        is stored; nothing follows its end. ``waiter`` is answered with it."""
        final = dataclasses.replace(
            stored, state=outcome.state, reason=outcome.reason, ended_at=outcome.ended_at or now
        )
        self._table.remember_ended(final.id)
        self._metrics.run_ended(final)
        self.history.ended(final, now)
        turn.runs[final.id] = final
        _answer(turn, waiter, final)
        return final

    def cancel(self, slot: Slot, reason: RunReason, turn: Turn, now: datetime) -> None:
        """A run not on a worker ends CANCELLED now; a leased one is told to stop (its
        worker reports the end, or the lease expires)."""
        if slot.place is not Place.LEASED:
            self.end(slot, Outcome(state=RunState.CANCELLED, reason=reason), turn, now)
            return
        if self._table.mark_cancel(slot, reason) and (worker := slot.worker) is not None:
            token = slot.run.lease_token
            order = CancelOrder(run_id=slot.run.id, fencing_token=token, reason=reason)
            turn.after.append(lambda: worker.link.cancel(order))

    def cancel_job(self, job_id: str, reason: RunReason, turn: Turn, now: datetime) -> None:
        for slot in self._table.runs_of(job_id):
            self.cancel(slot, reason, turn, now)

    def _follow_up(self, job: Job, final: Run, turn: Turn, now: datetime) -> Run:
        table = self._table
        ending = follow_up(
            job,
            final,
            now,
            current=table.jobs.get(job.id, job),
            runs_left=len(table.runs_of(job.id)),
        )
        if ending.retry is not None:
            table.hold_retry(ending.retry, job)  # written (or not) by the loop's place_retries
        current = table.jobs.get(job.id, job)
        streak = ending.progress.get("consecutive_failures", current.consecutive_failures)
        self.history.job_ended(current, ending.final, int(streak))
        if ending.progress:
            turn.set_progress(job.id, **ending.progress)
        if (changed := ending.job) is not None:
            table.set_job(changed)
        return ending.final

    # --- faults ------------------------------------------------------------------------------

    def isolated(self, slot: Slot, turn: Turn, now: datetime, *, where: str) -> Isolated:
        """Applies rules to one run; if they raise, that run alone fails (``fault``)."""
        return Isolated(self.fault, slot, turn, now, where)

    def fault(
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
        them would apply the same rules again. ``counted``: the fault was counted
        already (as its job's)."""
        if not counted:
            log.error("run %s failed in the poller (%s)", slot.run.id, where, exc_info=error)
            self._metrics.poller_faults.labels(where=where).inc()
        outcome = Outcome(
            state=RunState.FAILED,
            reason=RunReason.INTERNAL_ERROR,
            error=fault_text(error),
            follow_up=False,
        )
        self.end(slot, outcome, turn, now)

    def job_rules_failed(self, job: Job, error: BaseException, turn: Turn, *, where: str) -> None:
        """The job's own rules raised: the job is paused, the error its pause reason
        (ResumeJob, after an update that mends it, starts it again)."""
        log.error("job %s paused: its rules failed (%s)", job.id, where, exc_info=error)
        self._metrics.poller_faults.labels(where=where).inc()
        reason = f"paused: the scheduler failed applying its rules: {fault_text(error)}"
        if job.state == JobState.ACTIVE:
            turn.set_progress(job.id, state=JobState.PAUSED, pause_reason=reason)
        self._table.set_job(copy_with(job, state=JobState.PAUSED, pause_reason=reason))


def _no_defaults(owner: str) -> NotifyPolicy | None:
    return None


def _answer(turn: Turn, fut: asyncio.Future[Run], final: Run) -> None:
    """``fut`` gets ``final`` once the turn is written (an error if it is not)."""
    turn.answers.append(fut)
    turn.after.append(lambda: fut.done() or fut.set_result(final))
