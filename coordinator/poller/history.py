"""What this poller's runs did lately, per owner, for the overview (``client/overview.py``).

Fed where a run's end is counted (``Ends.end``): per owner, per minute of the last
day, the runs ended by outcome and the start lags of those that started in that
minute (a run's lag is known at its start, and counted once it ends); and the jobs
whose last run failed, with their streak of failures, cleared by a success. Bounded:
at most a day of minutes per owner (older records are not kept), at most
``FAILING_PER_OWNER`` failing jobs per owner (the shortest streak gives way), at most
``MAX_OWNERS`` owners (the one written longest ago gives way), and an owner with
neither minutes nor failing jobs is forgotten when read. Kept in memory only: the history begins when the
poller starts (``since``) and a shard that moves takes none of it along.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from shardcron.client.overview import (
    LAG_BUCKETS,
    FailingJob,
    OverviewBucket,
    OverviewPart,
    OverviewWindow,
    at_minute,
    lag_bucket,
    minute_of,
    window_starts,
)
from shardcron.client.types import Job, Run, RunState

DAY_MINUTES = 24 * 60
FAILING_PER_OWNER = 100
MAX_OWNERS = 10_000  # owners with a history; the one written longest ago gives way
_FAILED = frozenset({RunState.FAILED, RunState.TIMED_OUT, RunState.MISSED})


@dataclass(slots=True)
class _Minute:
    succeeded: int = 0
    failed: int = 0
    other: int = 0
    lags: list[int] = field(default_factory=lambda: [0] * LAG_BUCKETS)


@dataclass(slots=True)
class _Owner:
    minutes: dict[int, _Minute] = field(default_factory=dict)
    failing: dict[str, FailingJob] = field(default_factory=dict)


class RunHistory:
    """The per-owner history of the module docstring; one per poller, on its loop."""

    def __init__(self, since: datetime) -> None:
        self.since = since
        self._owners: dict[str, _Owner] = {}

    def _written(self, owner: str) -> _Owner:
        """The owner's history, about to be written: last in the order owners are given
        way in; past ``MAX_OWNERS``, the one written longest ago is forgotten."""
        owners = self._owners
        held = owners.pop(owner, None)
        if held is None:
            held = _Owner()
            if len(owners) >= MAX_OWNERS:
                del owners[next(iter(owners))]
        owners[owner] = held
        return held

    def _minute(self, owner: str, minute: int, now: datetime) -> _Minute | None:
        """The record of ``minute`` for ``owner``; None when it is older than a day."""
        cutoff = minute_of(now) - DAY_MINUTES
        if minute <= cutoff:
            return None
        held = self._written(owner)
        minutes = held.minutes
        while minutes and (first := next(iter(minutes))) <= cutoff:
            del minutes[first]
        record = minutes.get(minute)
        if record is None:
            record = minutes[minute] = _Minute()
        return record

    def ended(self, run: Run, now: datetime) -> None:
        """``run`` (its final record) ended."""
        record = self._minute(run.owner, minute_of(run.ended_at or now), now)
        if record is not None:
            if run.state is RunState.SUCCEEDED:
                record.succeeded += 1
            elif run.state in _FAILED:
                record.failed += 1
            else:
                record.other += 1
        if run.started_at is not None:
            started = self._minute(run.owner, minute_of(run.started_at), now)
            if started is not None:
                lag = (run.started_at - run.due_at).total_seconds()
                started.lags[lag_bucket(max(0.0, lag))] += 1

    def job_ended(self, job: Job, final: Run, streak: int) -> None:
        """``final`` of ``job`` ended, its job's failure streak now ``streak``: a failed
        run puts the job among the failing, a success takes it out."""
        held = self._owners.get(job.owner)
        if final.state is RunState.SUCCEEDED:
            if held is not None:
                held.failing.pop(job.id, None)
            return
        if final.state not in _FAILED:
            return
        held = self._written(job.owner)
        failing = held.failing
        failing[job.id] = FailingJob(
            job_id=job.id,
            name=job.spec.name,
            consecutive_failures=max(1, streak),
            state=final.state,
            reason=final.reason,
            error=final.error,
            ended_at=final.ended_at or final.due_at,
            run_id=final.id,
        )
        if len(failing) > FAILING_PER_OWNER:
            least = min(failing.values(), key=lambda j: (j.consecutive_failures, j.ended_at))
            del failing[least.job_id]

    def part(
        self,
        owner: str,
        window: OverviewWindow,
        now: datetime,
        *,
        running: int,
        waiting: Mapping[str, int],
    ) -> OverviewPart:
        """This poller's part of ``owner``'s overview over ``window``: its buckets with
        runs, oldest first."""
        held = self._owners.get(owner)
        buckets: list[OverviewBucket] = []
        failing: tuple[FailingJob, ...] = ()
        if held is not None:
            width = window.bucket_minutes
            first = minute_of(window_starts(window, now)[0])
            summed: dict[int, OverviewBucket] = {}
            for minute, r in list(held.minutes.items()):
                if minute < first:
                    continue
                start = minute // width * width
                one = OverviewBucket(
                    start=at_minute(start),
                    succeeded=r.succeeded,
                    failed=r.failed,
                    other=r.other,
                    lag_counts=tuple(r.lags),
                )
                summed[start] = summed[start].plus(one) if start in summed else one
            buckets = [summed[k] for k in sorted(summed)]
            failing = tuple(held.failing.values())
            if not held.minutes and not held.failing:
                del self._owners[owner]
        return OverviewPart(
            running=running,
            waiting=dict(waiting),
            buckets=tuple(buckets),
            failing_jobs=failing,
            since=self.since,
        )
