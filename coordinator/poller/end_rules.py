"""How a run ends and what its end leads to: its final record, a retry, the job's
streak, auto-pause and completion. Pure functions of the run, its job and ``now``.

- ``Outcome``: how a held run ends (its state and reason, what its worker said of it,
  whether anything follows), as the rules decide it; ``final_run`` makes the record.

- A FAILED or TIMED_OUT run of a job not deleted is retried while the retry policy
  has attempts left (``fires.retry_run``: backoff from ``now``); otherwise it is a
  dead letter.
- A final SUCCEEDED, FAILED or TIMED_OUT run (not one that is retried) sets the
  job's failure streak (0 on success); at ``pause_after_failures`` an ACTIVE job is
  paused.
- A one-off job (immediate, at) is COMPLETED when its run ends for good, a recurring
  one when its schedule is exhausted and none of its runs is left; so is a recurring
  job whose last fire its own rules skipped (``completed_by_fire``), paused or not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from shardcron.client.dataclass_copies import copy_with
from shardcron.client.types import (
    Fire,
    Job,
    JobState,
    Run,
    RunLateness,
    RunReason,
    RunResultFile,
    RunState,
    RunUsage,
    ScheduleKind,
)
from shardcron.coordinator.poller.fires import is_extra_run, retry_run

_COUNTED = (RunState.SUCCEEDED, RunState.FAILED, RunState.TIMED_OUT)


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """How a held run ends."""

    state: RunState
    reason: RunReason
    exit_code: int | None = None
    error: str = ""
    started_at: datetime | None = None
    ended_at: datetime | None = None
    # False: nothing follows (no retry, streak, completion): a fault in the rules, which
    # deciding again would only repeat, or a fire whose own rules skipped it
    follow_up: bool = True
    reported: bool = False  # its worker reported this end (a result)
    record: Run | None = None  # the final record, made by the fire rules already
    usage: RunUsage | None = None  # what its command used, as its worker reported
    lateness: RunLateness | None = None  # why it was skipped or missed (``lateness``)
    output_sha256: str = ""  # its output's digest, from the node that wrote it
    output_truncated: str = ""  # why its output was cut
    results: tuple[RunResultFile, ...] = ()  # its result files, as its node stored them
    results_note: str = ""  # what of them was not kept, and why


def final_run(
    run: Run,
    state: RunState,
    reason: RunReason,
    now: datetime,
    *,
    exit_code: int | None = None,
    error: str = "",
    started_at: datetime | None = None,
    ended_at: datetime | None = None,
    output_bytes: int = 0,
    lease_expires_at: datetime | None = None,
    usage: RunUsage | None = None,
    lateness: RunLateness | None = None,
    output_sha256: str = "",
    output_truncated: str = "",
    results: tuple[RunResultFile, ...] = (),
    results_note: str = "",
) -> Run:
    """The run's final record; ``output_bytes`` received since it was loaded are added,
    ``lease_expires_at`` (the lease's last expiry, when it is still held) set,
    ``usage`` (what its command used, as its worker reported) and its result files kept,
    ``lateness`` (why it did not run on time) set, else the one its lease had kept, with
    the digest of its output and why it was cut."""
    return copy_with(
        run,
        state=state,
        reason=reason,
        exit_code=exit_code,
        error=error,
        started_at=started_at or run.started_at,
        ended_at=ended_at or now,
        output_bytes=run.output_bytes + output_bytes,
        lease_expires_at=lease_expires_at or run.lease_expires_at,
        usage=usage,
        lateness=lateness or run.lateness,
        output_sha256=output_sha256,
        output_truncated=output_truncated,
        results=results,
        results_note=results_note,
    )


@dataclass(slots=True, kw_only=True)
class Ending:
    final: Run  # the record to write (dead_letter set when no attempt is left)
    retry: Run | None = None  # the next attempt, PENDING
    progress: dict[str, Any] = field(default_factory=dict)  # the job's progress changes
    before: Job | None = None  # the job ``progress`` changes

    @property
    def job(self) -> Job | None:
        """The job as it stands after, when it changed; built when asked for (the poller
        keeps it only while it still holds the job, which a one-off's end is not)."""
        if not self.progress or self.before is None:
            return None
        return copy_with(self.before, **self.progress)


def dropped_retry(run: Run) -> bool:
    """A retry skipped because a later fire of its job came due first (``fires.retry_misfired``):
    its fire failed and is not tried again, so it counts in the failure streak as a failed
    run would (a per-second cron whose retries never run still pauses after its failures)."""
    return run.state == RunState.SKIPPED and run.reason == RunReason.MISFIRE and run.attempt > 1


def follow_up(job: Job, final: Run, now: datetime, *, current: Job, runs_left: int) -> Ending:
    """Retries, dead letters, failure streaks, auto-pause and completion after ``final``
    ended. ``job`` is the copy the run was triggered with; ``current`` the newest copy
    held (its streak and state); ``runs_left`` how many runs of the job are still held."""
    failed = final.state in (RunState.FAILED, RunState.TIMED_OUT)
    if failed and job.state != JobState.DELETED:
        nxt = retry_run(job, final, now=now)
        if nxt is not None:
            return Ending(final=final, retry=nxt)
        final = copy_with(final, dead_letter=True)
    out = Ending(final=final, before=current)
    job, state, progress = current, current.state, out.progress  # progress: Job fields
    if final.state in _COUNTED or dropped_retry(final):
        streak = 0 if final.state == RunState.SUCCEEDED else job.consecutive_failures + 1
        if streak != job.consecutive_failures:
            progress["consecutive_failures"] = streak
        limit = job.spec.pause_after_failures
        if limit and streak >= limit and state == JobState.ACTIVE:
            state = JobState.PAUSED
            progress.update(
                state=state, pause_reason=f"paused after {streak} consecutive failed runs"
            )
    kind = job.spec.schedule.kind
    one_off = kind in (ScheduleKind.IMMEDIATE, ScheduleKind.AT) and not is_extra_run(final)
    exhausted = job.spec.schedule.recurring and job.next_fire_key == "" and job.next_fire_at is None
    if (one_off or (exhausted and runs_left == 0)) and state == JobState.ACTIVE:
        progress["state"] = JobState.COMPLETED
    return out


def completed_by_fire(next_fire: Fire | None, *, runs_left: int) -> bool:
    """A fire of a recurring job that its own rules skipped (paused, misfired) leaves its
    job COMPLETED when the schedule has no fire after it and none of its runs is left,
    whatever the job's state: no fire will ever come."""
    return next_fire is None and runs_left == 0
