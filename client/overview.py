"""An owner's runs at a glance (``JobService.GetOverview``), as domain values.

Each poller keeps, per owner, what its runs did minute by minute over the last day
(``coordinator/poller/history.py``); the api node asks every poller for its part
(``OverviewPart``) and merges them (``merge``) into one ``Overview``. The start lag of
a minute is a fixed histogram (``LAG_BOUNDS``), so parts add up exactly and quantiles
are read from the sum: a quantile is the upper bound of the bucket it falls in (the
last finite bound for the open bucket above them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from shardcron.client.types import RunReason, RunState

# Upper bounds, in seconds, of the start-lag buckets (one more bucket above the last).
LAG_BOUNDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
LAG_BUCKETS = len(LAG_BOUNDS) + 1
FAILING_JOBS = 20  # the failing jobs an overview lists, most consecutive failures first


class OverviewWindow(StrEnum):
    """How far back an overview's chart goes, and the width of its bars."""

    HOUR = "HOUR"  # 60 one-minute bars
    DAY = "DAY"  # 144 ten-minute bars

    @property
    def minutes(self) -> int:
        return 60 if self is OverviewWindow.HOUR else 24 * 60

    @property
    def bucket_minutes(self) -> int:
        return 1 if self is OverviewWindow.HOUR else 10


def minute_of(at: datetime) -> int:
    """Minutes since the epoch of ``at`` (aware)."""
    return int(at.timestamp() // 60)


def at_minute(minute: int) -> datetime:
    return datetime.fromtimestamp(minute * 60, UTC)


def window_starts(window: OverviewWindow, now: datetime) -> list[datetime]:
    """The starts of the window's buckets ending with the one ``now`` is in, oldest first."""
    width = window.bucket_minutes
    last = minute_of(now) // width * width
    count = window.minutes // width
    return [at_minute(last - width * i) for i in range(count - 1, -1, -1)]


def lag_bucket(seconds: float) -> int:
    """The index of the start-lag bucket ``seconds`` falls in."""
    for i, bound in enumerate(LAG_BOUNDS):
        if seconds <= bound:
            return i
    return len(LAG_BOUNDS)


def lag_quantile(counts: Sequence[int], q: float) -> float | None:
    """The ``q`` quantile of a start-lag histogram (None when it is empty)."""
    total = sum(counts)
    if not total:
        return None
    wanted = q * total
    seen = 0
    for i, n in enumerate(counts):
        seen += n
        if seen >= wanted and n:
            return LAG_BOUNDS[min(i, len(LAG_BOUNDS) - 1)]
    return LAG_BOUNDS[-1]


@dataclass(frozen=True, slots=True, kw_only=True)
class OverviewBucket:
    """Runs that ended in ``[start, start + the window's bucket)``, by outcome, and the
    start lags of those that started then (``lag_counts`` by ``LAG_BOUNDS``)."""

    start: datetime
    succeeded: int = 0
    failed: int = 0  # FAILED, TIMED_OUT, MISSED
    other: int = 0  # CANCELLED, SKIPPED
    lag_counts: tuple[int, ...] = ()

    def plus(self, other: OverviewBucket) -> OverviewBucket:
        counts = self.lag_counts or (0,) * LAG_BUCKETS
        more = other.lag_counts or (0,) * LAG_BUCKETS
        return OverviewBucket(
            start=self.start,
            succeeded=self.succeeded + other.succeeded,
            failed=self.failed + other.failed,
            other=self.other + other.other,
            lag_counts=tuple(a + b for a, b in zip(counts, more, strict=True)),
        )

    @property
    def lag_p50(self) -> float | None:
        return lag_quantile(self.lag_counts, 0.5)

    @property
    def lag_p99(self) -> float | None:
        return lag_quantile(self.lag_counts, 0.99)


@dataclass(frozen=True, slots=True, kw_only=True)
class FailingJob:
    """A job whose last rated run failed, with how many in a row have."""

    job_id: str
    name: str
    consecutive_failures: int
    state: RunState  # its last run's
    reason: RunReason
    error: str
    ended_at: datetime
    run_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class OverviewPart:
    """One poller's part of an owner's overview."""

    running: int = 0  # runs on a worker (LEASED or RUNNING)
    waiting: dict[str, int] | None = None  # runs due and not on a worker, by why they wait
    buckets: tuple[OverviewBucket, ...] = ()  # oldest first, only those with runs
    failing_jobs: tuple[FailingJob, ...] = ()
    since: datetime | None = None  # when this poller's history begins


@dataclass(frozen=True, slots=True, kw_only=True)
class Overview:
    """An owner's overview: every part that answered, merged."""

    window: OverviewWindow
    running: int
    waiting: dict[str, int]
    failed_last_hour: int
    buckets: tuple[OverviewBucket, ...]  # every bucket of the window, oldest first
    failing_jobs: tuple[FailingJob, ...]
    since: datetime | None  # the latest start of a part's history: counts before it are lost
    parts: int  # the pollers that answered


def merge(
    parts: Sequence[OverviewPart], window: OverviewWindow, starts: Sequence[datetime]
) -> Overview:
    """``parts`` as one overview whose buckets begin at ``starts`` (the window's, oldest
    first); ``failed_last_hour`` counts the buckets of the last 60 minutes."""
    by_start = {s: OverviewBucket(start=s) for s in starts}
    waiting: dict[str, int] = {}
    failing: dict[str, FailingJob] = {}
    for part in parts:
        for b in part.buckets:
            if b.start in by_start:
                by_start[b.start] = by_start[b.start].plus(b)
        for reason, n in (part.waiting or {}).items():
            waiting[reason] = waiting.get(reason, 0) + n
        for job in part.failing_jobs:
            known = failing.get(job.job_id)
            if known is None or job.ended_at > known.ended_at:
                failing[job.job_id] = job
    buckets = tuple(by_start[s] for s in starts)
    hour = 60 // window.bucket_minutes
    worst = sorted(failing.values(), key=lambda j: (-j.consecutive_failures, j.name, j.job_id))
    sinces = [p.since for p in parts if p.since is not None]
    return Overview(
        window=window,
        running=sum(p.running for p in parts),
        waiting=waiting,
        failed_last_hour=sum(b.failed for b in buckets[-hour:]),
        buckets=buckets,
        failing_jobs=tuple(worst[:FAILING_JOBS]),
        since=max(sinces) if sinces else None,
        parts=len(parts),
    )
