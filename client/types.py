"""Domain types shared by the SDK, the server roles and the worker.

Frozen, slotted, keyword-only dataclasses; times are aware UTC datetimes and
durations are ``timedelta``. Protobuf never appears here: ``shardcron.client.codec``
is the one place that maps these to and from the wire.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Generic, TypeVar

from shardcron.client.dataclass_copies import fast_init
from shardcron.client.limits import MAX_RESULT_BYTES, MAX_RESULT_FILE_BYTES, MAX_RESULT_FILES
from shardcron.client.notify_types import (
    Delivery,
    DeliveryStatus,
    NotifyPolicy,
    NotifyRule,
    NotifySettings,
)

# What ``shardcron.client`` re-exports: the public domain types.
__all__ = [
    "ClusterStatus",
    "CommandTask",
    "ConcurrencyPolicy",
    "DstGap",
    "Delivery",
    "DeliveryStatus",
    "DstOverlap",
    "Fire",
    "HandlerTask",
    "Job",
    "JobHealth",
    "JobHealthRun",
    "JobSpec",
    "JobState",
    "LateReason",
    "MisfirePolicy",
    "NotifyPolicy",
    "NotifyRule",
    "NotifySettings",
    "OutputChunk",
    "OverlapPolicy",
    "Page",
    "Resources",
    "ResultLimits",
    "RetryPolicy",
    "Run",
    "RunLateness",
    "RunReason",
    "RunResultFile",
    "RunState",
    "Schedule",
    "ScheduleKind",
    "ShardInfo",
    "Task",
    "WorkerInfo",
]

T = TypeVar("T")

DEFAULT_OWNER = "default"  # the owner of a call that names none
OWNER_HEADER = "x-shardcron-owner"  # the header (gRPC metadata) that names it
# In a list of owners (an auth file principal's, a worker's pool): every owner.
ANY_OWNER = "*"


class ScheduleKind(StrEnum):
    IMMEDIATE = "IMMEDIATE"
    AT = "AT"
    CRON = "CRON"
    INTERVAL = "INTERVAL"


class DstGap(StrEnum):
    """What a cron fire does when its local time does not exist that day."""

    SHIFT = "SHIFT"  # fire at the first local time that exists after the gap
    SKIP = "SKIP"  # drop the fire (recorded as SKIPPED, reason DST_GAP)


class DstOverlap(StrEnum):
    """What a cron fire does when its local time happens twice that day."""

    FIRST = "FIRST"  # fire once, at the first occurrence
    BOTH = "BOTH"  # fire at both occurrences


class OverlapPolicy(StrEnum):
    ALLOW = "ALLOW"
    FORBID = "FORBID"
    REPLACE = "REPLACE"
    QUEUE = "QUEUE"


class MisfirePolicy(StrEnum):
    RUN_ONCE = "RUN_ONCE"
    SKIP = "SKIP"
    RUN_ALL = "RUN_ALL"


class JobState(StrEnum):
    ACTIVE = "ACTIVE"
    PAUSED = "PAUSED"
    DELETED = "DELETED"
    COMPLETED = "COMPLETED"


class RunState(StrEnum):
    PENDING = "PENDING"
    LEASED = "LEASED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    TIMED_OUT = "TIMED_OUT"
    CANCELLED = "CANCELLED"
    SKIPPED = "SKIPPED"
    MISSED = "MISSED"

    @property
    def is_final(self) -> bool:
        return self in FINAL_RUN_STATES

    @property
    def is_active(self) -> bool:
        return self in (RunState.LEASED, RunState.RUNNING)


FINAL_RUN_STATES = frozenset(
    {
        RunState.SUCCEEDED,
        RunState.FAILED,
        RunState.TIMED_OUT,
        RunState.CANCELLED,
        RunState.SKIPPED,
        RunState.MISSED,
    }
)


class RunReason(StrEnum):
    """Why a run failed, was skipped or was missed (empty when it succeeded)."""

    NONE = ""
    NON_ZERO_EXIT = "NON_ZERO_EXIT"
    HANDLER_ERROR = "HANDLER_ERROR"
    TIMEOUT = "TIMEOUT"
    WORKER_LOST = "WORKER_LOST"
    NO_HANDLER = "NO_HANDLER"
    SPAWN_FAILED = "SPAWN_FAILED"
    CANCELLED_BY_USER = "CANCELLED_BY_USER"
    REPLACED = "REPLACED"  # cancelled by a newer fire under OverlapPolicy.REPLACE
    JOB_DELETED = "JOB_DELETED"
    OVERLAP = "OVERLAP"  # skipped: FORBID and a run was still going
    PAUSED = "PAUSED"  # skipped: the job was paused at fire time
    DST_GAP = "DST_GAP"  # skipped: local time did not exist and dst_gap=SKIP
    MISFIRE = "MISFIRE"  # skipped: overdue fire dropped by the misfire policy
    DEADLINE = "DEADLINE"  # missed: not started before starting_deadline
    SUPERSEDED = "SUPERSEDED"  # cancelled: the job's schedule changed before this fire ran
    INTERNAL_ERROR = "INTERNAL_ERROR"  # failed: the scheduler failed handling it (see error)
    OOM_KILLED = "OOM_KILLED"  # failed: killed at its memory limit (the error names it)


class LateReason(StrEnum):
    """What a run that was leased late, skipped or missed waited for the longest (the
    machine-readable code of its ``RunLateness``)."""

    NONE = ""
    POLLER_BEHIND = "POLLER_BEHIND"  # the poller came to it late (busy, down, catching up)
    NO_WORKER_FOR_OWNER = "NO_WORKER_FOR_OWNER"  # no connected worker's pool takes its owner
    NO_WORKER_FOR_HANDLER = "NO_WORKER_FOR_HANDLER"
    NO_WORKER_FOR_COMMANDS = "NO_WORKER_FOR_COMMANDS"
    NO_WORKER_WITH_LABELS = "NO_WORKER_WITH_LABELS"
    NO_CAPACITY = "NO_CAPACITY"  # no worker big enough, or none with the cpu/memory free
    NO_FREE_SLOT = "NO_FREE_SLOT"  # the workers that fit it were full
    CONCURRENCY_LIMIT = "CONCURRENCY_LIMIT"  # its job's max_concurrent runs were going
    OVERLAP = "OVERLAP"  # its job's overlap policy held it or skipped it
    PAUSED = "PAUSED"  # its job was paused
    MISFIRE = "MISFIRE"  # its misfire policy dropped it
    DEADLINE = "DEADLINE"  # its starting deadline passed


@dataclass(frozen=True, slots=True, kw_only=True)
class RunLateness:
    """Why a run was leased more than the poller's lateness threshold after its due
    instant, or was skipped or missed: the ``reason`` it waited for the longest and
    for how long (``waited``), and ``text`` for a person, at most 200 characters
    ("waiting for a free slot for 12.0 s", "paused", "overlap: a run of the job was
    still running (FORBID)")."""

    reason: LateReason
    text: str
    waited: timedelta = timedelta(0)


@dataclass(frozen=True, slots=True, kw_only=True)
class Schedule:
    """When a job fires. Build one with the class methods below."""

    kind: ScheduleKind = ScheduleKind.IMMEDIATE
    at: datetime | None = None  # AT: the instant
    cron: str | None = None  # CRON: 5 fields, or 6 with seconds last
    timezone: str = "UTC"  # CRON: IANA zone the expression is read in
    interval: timedelta | None = None  # INTERVAL: period
    anchor: datetime | None = None  # INTERVAL: fires at anchor + k*interval
    start_at: datetime | None = None  # no fire before this instant
    end_at: datetime | None = None  # no fire after this instant
    jitter: timedelta = timedelta(0)  # each fire delayed by a stable random 0..jitter
    dst_gap: DstGap = DstGap.SHIFT
    dst_overlap: DstOverlap = DstOverlap.FIRST

    @classmethod
    def immediate(cls) -> Schedule:
        return cls(kind=ScheduleKind.IMMEDIATE)

    @classmethod
    def once_at(cls, at: datetime) -> Schedule:
        return cls(kind=ScheduleKind.AT, at=at)

    @classmethod
    def cron_expr(cls, expr: str, timezone: str = "UTC", **kw: object) -> Schedule:
        return cls(kind=ScheduleKind.CRON, cron=expr, timezone=timezone, **kw)  # type: ignore[arg-type]

    @classmethod
    def every(cls, interval: timedelta, anchor: datetime | None = None, **kw: object) -> Schedule:
        return cls(kind=ScheduleKind.INTERVAL, interval=interval, anchor=anchor, **kw)  # type: ignore[arg-type]

    @property
    def recurring(self) -> bool:
        return self.kind in (ScheduleKind.CRON, ScheduleKind.INTERVAL)


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Fire:
    """One nominal fire of a schedule.

    ``key`` identifies the fire within its job: the nominal local time and its
    fold (``2026-10-25T02:30:00+fold1``), so one fire can never be materialised
    twice. ``at`` is the UTC instant it is due (before jitter). ``skip_reason`` is
    set for a fire that exists in the schedule but must not run (DST_GAP).
    """

    key: str
    at: datetime
    local: datetime  # aware, in the schedule's zone
    skip_reason: RunReason = RunReason.NONE


# What every reply of the job API shows for a secret env value: the key is shown, so a
# user sees which secrets are set; sent back in an update, it keeps the stored value.
SECRET_PLACEHOLDER = "***"


@dataclass(frozen=True, slots=True, kw_only=True)
class CommandTask:
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    cwd: str = ""
    # Write-only environment: the command gets it, no reply or log shows its values
    # (read back, each value is SECRET_PLACEHOLDER); kept out of repr for the logs' sake.
    secret_env: dict[str, str] = field(default_factory=dict, repr=False)
    # The sha256 of the code archive the run's directory gets unpacked before the
    # command starts (its owner's, uploaded first); "" = none.
    artifact: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class HandlerTask:
    name: str
    payload: bytes = b""


Task = CommandTask | HandlerTask


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    # total attempts: 3 by default (two retries, 1 s then 2 s after a failure); 1 = no retry
    max_attempts: int = 3
    initial_backoff: timedelta = timedelta(seconds=1)
    multiplier: float = 2.0
    max_backoff: timedelta = timedelta(minutes=5)
    jitter: float = 0.0  # fraction of the backoff, 0..1

    def backoff(self, attempt: int) -> timedelta:
        """Delay before attempt ``attempt + 1`` given that ``attempt`` failed (no jitter):
        ``initial_backoff * multiplier ** (attempt - 1)``, at most ``max_backoff``. Computed
        in floats and capped before it becomes a timedelta, so a late attempt of a long
        retry chain gives ``max_backoff`` instead of overflowing."""
        if self.initial_backoff <= timedelta(0):
            return min(timedelta(0), self.max_backoff)
        try:
            growth = self.multiplier ** max(0, attempt - 1)
        except OverflowError:
            growth = math.inf
        seconds = self.initial_backoff.total_seconds() * growth
        if not seconds < self.max_backoff.total_seconds():  # also inf and NaN
            return self.max_backoff
        return timedelta(seconds=seconds)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConcurrencyPolicy:
    max_concurrent: int = 0  # 0 = unlimited for ALLOW, 1 for the other policies
    overlap: OverlapPolicy = OverlapPolicy.ALLOW


@dataclass(frozen=True, slots=True, kw_only=True)
class ResultLimits:
    """The most of a run's result files kept (``$SHARDCRON_RESULT_DIR``); 0: the largest
    allowed (``limits.MAX_RESULT_*``). What passes them is left out and said on the run."""

    max_files: int = 0
    max_file_bytes: int = 0
    max_bytes: int = 0  # all of a run's files together

    def bounds(self) -> tuple[int, int, int]:
        """Files, bytes per file, bytes in all, each 0 read as its largest."""
        return (
            self.max_files or MAX_RESULT_FILES,
            self.max_file_bytes or MAX_RESULT_FILE_BYTES,
            self.max_bytes or MAX_RESULT_BYTES,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Resources:
    slots: int = 1
    cpu_millis: int = 0
    memory_mb: int = 0
    labels: dict[str, str] = field(default_factory=dict)  # the worker must have all of them
    pids_limit: int = 0  # processes a command's run may have at once; 0: the worker's default
    # bytes of a run's output kept in the blob store; 0: the node's limit
    output_limit_bytes: int = 0
    results: ResultLimits = field(default_factory=ResultLimits)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSpec:
    """What a user asks for. Everything a create or update carries."""

    name: str
    task: Task
    schedule: Schedule = field(default_factory=Schedule.immediate)
    priority: int = 0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    timeout: timedelta | None = None
    concurrency: ConcurrencyPolicy = field(default_factory=ConcurrencyPolicy)
    misfire: MisfirePolicy = MisfirePolicy.RUN_ONCE
    starting_deadline: timedelta | None = None
    resources: Resources = field(default_factory=Resources)
    pause_after_failures: int = 0  # auto-pause after N consecutive failed runs; 0 = never
    labels: dict[str, str] = field(default_factory=dict)  # free-form, for listing
    notify: NotifyPolicy | None = None  # webhook notifications of its runs; None = none

    def replace(self, **changes: object) -> JobSpec:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    id: str
    owner: str
    spec: JobSpec
    state: JobState
    version: int
    created_at: datetime
    updated_at: datetime
    next_fire_at: datetime | None = None  # UTC instant of the next fire not yet materialised
    next_fire_key: str = ""
    idempotency_key: str = ""
    consecutive_failures: int = 0
    pause_reason: str = ""
    schedule_version: int = 1  # the version at which the schedule last changed
    # Its recent runs, when a list asked for them (``ListJobsRequest.with_health``);
    # read with the page, never stored.
    health: JobHealth | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class JobHealthRun:
    """One of a job's recent runs, as its health strip shows it."""

    run_id: str
    state: RunState
    due_at: datetime


# Outcomes a job's success rate counts: it ran (or should have) and ended so.
RATED_RUN_STATES = frozenset({"SUCCEEDED", "FAILED", "TIMED_OUT", "MISSED"})
JOB_HEALTH_RUNS = 20  # the runs a job's health strip shows


@dataclass(frozen=True, slots=True, kw_only=True)
class JobHealth:
    """A job's last runs that came due (at most ``JOB_HEALTH_RUNS``, newest first) and
    its success rate over them: SUCCEEDED among the runs that ended SUCCEEDED, FAILED,
    TIMED_OUT or MISSED (a cancelled or skipped run says nothing of the job's health)."""

    runs: tuple[JobHealthRun, ...] = ()

    @property
    def succeeded(self) -> int:
        return sum(1 for r in self.runs if r.state is RunState.SUCCEEDED)

    @property
    def rated(self) -> int:
        return sum(1 for r in self.runs if r.state.value in RATED_RUN_STATES)

    @property
    def success_rate(self) -> float | None:
        """SUCCEEDED over rated runs; None when none is rated."""
        rated = self.rated
        return self.succeeded / rated if rated else None


@dataclass(frozen=True, slots=True, kw_only=True)
class RunUsage:
    """What one command run used, as its worker measured it from the run's cgroup.
    ``limits_enforced`` False: the worker had no cgroups to contain it, so its limits
    were not enforced and the figures are estimates."""

    peak_memory_bytes: int = 0
    cpu_seconds: float = 0.0
    limits_enforced: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class RunResultFile:
    """One result file of a run, as the node holding its lease stored it in the blob
    store (``results/<owner>/<run>/<name>``)."""

    name: str
    size: int
    sha256: str  # 64 lowercase hex digits


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    id: str
    job_id: str
    owner: str
    fire_key: str
    fire_at: datetime  # when the fire was meant to run (nominal, UTC)
    due_at: datetime  # when this attempt may start
    state: RunState
    attempt: int = 1
    priority: int = 0
    shard: int = 0
    worker_id: str = ""
    lease_token: int = 0
    lease_expires_at: datetime | None = None
    created_at: datetime | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    exit_code: int | None = None
    reason: RunReason = RunReason.NONE
    error: str = ""
    output_bytes: int = 0
    replayed_from: str = ""  # a dead letter this run replays
    dead_letter: bool = False  # final failure with no attempt left, not yet replayed or dropped
    schedule_version: int = (
        0  # scheduled fires: the job's schedule_version that made it; 0 otherwise
    )
    # Why a due run is not on a worker yet, as its poller says when the run is read;
    # never stored (stores neither write nor read it).
    waiting_reason: str = ""
    usage: RunUsage | None = None  # what its command used; None: no command ran
    # why it was leased late, skipped or missed; None: on time, or not decided yet
    lateness: RunLateness | None = None
    # the sha256 (hex) of its whole output in the blob store, as the node that wrote
    # it hashed it; "": no node saw the attempt whole, or no blob store
    output_sha256: str = ""
    output_truncated: str = ""  # why its output was cut; "": it is whole
    results: tuple[RunResultFile, ...] = ()  # its result files kept, by name
    results_note: str = ""  # what of its result files was not kept, and why

    @property
    def is_final(self) -> bool:
        return self.state.is_final


@dataclass(frozen=True, slots=True, kw_only=True)
class Page(Generic[T]):
    items: list[T]
    next_page_token: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputChunk:
    run_id: str
    offset: int  # byte offset of ``data`` in the run's kept output
    data: bytes
    stream: str = "stdout"  # stdout | stderr
    eof: bool = False  # the run is final and nothing more will come


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerInfo:
    id: str
    address: str
    slots_total: int
    slots_used: int
    labels: dict[str, str] = field(default_factory=dict)
    handlers: tuple[str, ...] = ()
    connected_at: datetime | None = None
    pollers: tuple[str, ...] = ()  # the pollers it streams to
    # its pool: the owners whose runs it may take; (ANY_OWNER,): every owner; (): not
    # said (a node of an older version)
    owners: tuple[str, ...] = ()
    handlers_omitted: int = 0  # handler names it serves beyond those in ``handlers``


@dataclass(frozen=True, slots=True, kw_only=True)
class ShardInfo:
    shard: int
    owner: str
    lag_seconds: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterStatus:
    leader: str
    epoch: int
    members: list[str]
    shards: list[ShardInfo]
    workers: list[WorkerInfo]  # those the caller may see, as many as fit in one reply
    mode: str = "dev"
    workers_omitted: int = 0  # workers the caller may see that are not in ``workers``
