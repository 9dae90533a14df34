"""The overview (``client/overview.py``) on the wire: a poller's part between nodes
(``PollerService.GetOverviewPart``) with each bucket's start-lag counts, and the merged
overview a caller reads (``JobService.GetOverview``) with their quantiles instead."""

from __future__ import annotations

from shardcron.client.codec.common import (
    RUN_REASON,
    RUN_STATE,
    ProtoEnum,
    get_required_time,
    get_time,
    set_time,
)
from shardcron.client.errors import InvalidArgument
from shardcron.client.overview import (
    LAG_BUCKETS,
    FailingJob,
    Overview,
    OverviewBucket,
    OverviewPart,
    OverviewWindow,
)
from shardcron.v1 import cluster_pb2, jobs_pb2, types_pb2

__all__ = [
    "overview_part_from_proto",
    "overview_part_to_proto",
    "overview_to_proto",
    "overview_window_from_proto",
    "overview_window_to_proto",
]

OVERVIEW_WINDOW = ProtoEnum(
    OverviewWindow, types_pb2.OverviewWindow, "OVERVIEW_WINDOW_", OverviewWindow.HOUR
)


def overview_window_to_proto(window: OverviewWindow) -> int:
    return OVERVIEW_WINDOW.to_proto(window)


def overview_window_from_proto(number: int, field: str = "window") -> OverviewWindow:
    return OVERVIEW_WINDOW.from_proto(number, field)


def _bucket_to_proto(bucket: OverviewBucket, *, counts: bool) -> types_pb2.OverviewBucket:
    msg = types_pb2.OverviewBucket(
        succeeded=bucket.succeeded, failed=bucket.failed, other=bucket.other
    )
    set_time(msg, "start", bucket.start)
    if counts:
        msg.lag_counts.extend(bucket.lag_counts)
    else:
        if (p50 := bucket.lag_p50) is not None:
            msg.lag_p50_seconds = p50
        if (p99 := bucket.lag_p99) is not None:
            msg.lag_p99_seconds = p99
    return msg


def _bucket_from_proto(msg: types_pb2.OverviewBucket, field: str) -> OverviewBucket:
    if msg.lag_counts and len(msg.lag_counts) != LAG_BUCKETS:
        raise InvalidArgument(
            f"{field}.lag_counts", f"{LAG_BUCKETS} counts, not {len(msg.lag_counts)}"
        )
    if any(n < 0 for n in msg.lag_counts) or min(msg.succeeded, msg.failed, msg.other) < 0:
        raise InvalidArgument(field, "counts are not negative")
    return OverviewBucket(
        start=get_required_time(msg, "start", field),
        succeeded=msg.succeeded,
        failed=msg.failed,
        other=msg.other,
        lag_counts=tuple(msg.lag_counts),
    )


def _failing_to_proto(job: FailingJob) -> types_pb2.OverviewFailingJob:
    msg = types_pb2.OverviewFailingJob(
        job_id=job.job_id,
        name=job.name,
        consecutive_failures=job.consecutive_failures,
        state=RUN_STATE.to_proto(job.state),
        reason=RUN_REASON.to_proto(job.reason),
        error=job.error,
        run_id=job.run_id,
    )
    set_time(msg, "ended_at", job.ended_at)
    return msg


def _failing_from_proto(msg: types_pb2.OverviewFailingJob, field: str) -> FailingJob:
    return FailingJob(
        job_id=msg.job_id,
        name=msg.name,
        consecutive_failures=msg.consecutive_failures,
        state=RUN_STATE.from_proto(msg.state, f"{field}.state"),
        reason=RUN_REASON.from_proto(msg.reason, f"{field}.reason"),
        error=msg.error,
        ended_at=get_required_time(msg, "ended_at", field),
        run_id=msg.run_id,
    )


def overview_part_to_proto(part: OverviewPart) -> cluster_pb2.OverviewPart:
    msg = cluster_pb2.OverviewPart(
        running=part.running,
        waiting=dict(part.waiting or {}),
        buckets=[_bucket_to_proto(b, counts=True) for b in part.buckets],
        failing_jobs=[_failing_to_proto(j) for j in part.failing_jobs],
    )
    set_time(msg, "since", part.since)
    return msg


def overview_part_from_proto(msg: cluster_pb2.OverviewPart, field: str = "part") -> OverviewPart:
    return OverviewPart(
        running=msg.running,
        waiting=dict(msg.waiting),
        buckets=tuple(
            _bucket_from_proto(b, f"{field}.buckets[{i}]") for i, b in enumerate(msg.buckets)
        ),
        failing_jobs=tuple(
            _failing_from_proto(j, f"{field}.failing_jobs[{i}]")
            for i, j in enumerate(msg.failing_jobs)
        ),
        since=get_time(msg, "since", field),
    )


def overview_to_proto(overview: Overview) -> jobs_pb2.Overview:
    """The merged overview as a caller reads it: quantiles, not counts, per bucket."""
    waiting = sorted(overview.waiting.items(), key=lambda kv: (-kv[1], kv[0]))
    msg = jobs_pb2.Overview(
        window=overview_window_to_proto(overview.window),
        running=overview.running,
        waiting=sum(overview.waiting.values()),
        waiting_reasons=[jobs_pb2.OverviewWaiting(reason=r, runs=n) for r, n in waiting],
        failed_last_hour=overview.failed_last_hour,
        bucket_seconds=overview.window.bucket_minutes * 60,
        buckets=[_bucket_to_proto(b, counts=False) for b in overview.buckets],
        failing_jobs=[_failing_to_proto(j) for j in overview.failing_jobs],
        pollers=overview.parts,
    )
    set_time(msg, "history_since", overview.since)
    return msg
