import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ScheduleKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SCHEDULE_KIND_UNSPECIFIED: _ClassVar[ScheduleKind]
    SCHEDULE_KIND_IMMEDIATE: _ClassVar[ScheduleKind]
    SCHEDULE_KIND_AT: _ClassVar[ScheduleKind]
    SCHEDULE_KIND_CRON: _ClassVar[ScheduleKind]
    SCHEDULE_KIND_INTERVAL: _ClassVar[ScheduleKind]

class DstGap(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DST_GAP_UNSPECIFIED: _ClassVar[DstGap]
    DST_GAP_SHIFT: _ClassVar[DstGap]
    DST_GAP_SKIP: _ClassVar[DstGap]

class DstOverlap(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DST_OVERLAP_UNSPECIFIED: _ClassVar[DstOverlap]
    DST_OVERLAP_FIRST: _ClassVar[DstOverlap]
    DST_OVERLAP_BOTH: _ClassVar[DstOverlap]

class OverlapPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OVERLAP_POLICY_UNSPECIFIED: _ClassVar[OverlapPolicy]
    OVERLAP_POLICY_ALLOW: _ClassVar[OverlapPolicy]
    OVERLAP_POLICY_FORBID: _ClassVar[OverlapPolicy]
    OVERLAP_POLICY_REPLACE: _ClassVar[OverlapPolicy]
    OVERLAP_POLICY_QUEUE: _ClassVar[OverlapPolicy]

class MisfirePolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MISFIRE_POLICY_UNSPECIFIED: _ClassVar[MisfirePolicy]
    MISFIRE_POLICY_RUN_ONCE: _ClassVar[MisfirePolicy]
    MISFIRE_POLICY_SKIP: _ClassVar[MisfirePolicy]
    MISFIRE_POLICY_RUN_ALL: _ClassVar[MisfirePolicy]

class JobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATE_UNSPECIFIED: _ClassVar[JobState]
    JOB_STATE_ACTIVE: _ClassVar[JobState]
    JOB_STATE_PAUSED: _ClassVar[JobState]
    JOB_STATE_DELETED: _ClassVar[JobState]
    JOB_STATE_COMPLETED: _ClassVar[JobState]

class RunState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_STATE_UNSPECIFIED: _ClassVar[RunState]
    RUN_STATE_PENDING: _ClassVar[RunState]
    RUN_STATE_LEASED: _ClassVar[RunState]
    RUN_STATE_RUNNING: _ClassVar[RunState]
    RUN_STATE_SUCCEEDED: _ClassVar[RunState]
    RUN_STATE_FAILED: _ClassVar[RunState]
    RUN_STATE_TIMED_OUT: _ClassVar[RunState]
    RUN_STATE_CANCELLED: _ClassVar[RunState]
    RUN_STATE_SKIPPED: _ClassVar[RunState]
    RUN_STATE_MISSED: _ClassVar[RunState]

class RunReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_REASON_UNSPECIFIED: _ClassVar[RunReason]
    RUN_REASON_NON_ZERO_EXIT: _ClassVar[RunReason]
    RUN_REASON_HANDLER_ERROR: _ClassVar[RunReason]
    RUN_REASON_TIMEOUT: _ClassVar[RunReason]
    RUN_REASON_WORKER_LOST: _ClassVar[RunReason]
    RUN_REASON_NO_HANDLER: _ClassVar[RunReason]
    RUN_REASON_SPAWN_FAILED: _ClassVar[RunReason]
    RUN_REASON_CANCELLED_BY_USER: _ClassVar[RunReason]
    RUN_REASON_REPLACED: _ClassVar[RunReason]
    RUN_REASON_JOB_DELETED: _ClassVar[RunReason]
    RUN_REASON_OVERLAP: _ClassVar[RunReason]
    RUN_REASON_PAUSED: _ClassVar[RunReason]
    RUN_REASON_DST_GAP: _ClassVar[RunReason]
    RUN_REASON_MISFIRE: _ClassVar[RunReason]
    RUN_REASON_DEADLINE: _ClassVar[RunReason]
    RUN_REASON_SUPERSEDED: _ClassVar[RunReason]
    RUN_REASON_INTERNAL_ERROR: _ClassVar[RunReason]
    RUN_REASON_OOM_KILLED: _ClassVar[RunReason]

class LateReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LATE_REASON_UNSPECIFIED: _ClassVar[LateReason]
    LATE_REASON_POLLER_BEHIND: _ClassVar[LateReason]
    LATE_REASON_NO_WORKER_FOR_OWNER: _ClassVar[LateReason]
    LATE_REASON_NO_WORKER_FOR_HANDLER: _ClassVar[LateReason]
    LATE_REASON_NO_WORKER_FOR_COMMANDS: _ClassVar[LateReason]
    LATE_REASON_NO_WORKER_WITH_LABELS: _ClassVar[LateReason]
    LATE_REASON_NO_CAPACITY: _ClassVar[LateReason]
    LATE_REASON_NO_FREE_SLOT: _ClassVar[LateReason]
    LATE_REASON_CONCURRENCY_LIMIT: _ClassVar[LateReason]
    LATE_REASON_OVERLAP: _ClassVar[LateReason]
    LATE_REASON_PAUSED: _ClassVar[LateReason]
    LATE_REASON_MISFIRE: _ClassVar[LateReason]
    LATE_REASON_DEADLINE: _ClassVar[LateReason]

class NotifyRule(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NOTIFY_RULE_UNSPECIFIED: _ClassVar[NotifyRule]
    NOTIFY_RULE_FAILURE: _ClassVar[NotifyRule]
    NOTIFY_RULE_RECOVERY: _ClassVar[NotifyRule]
    NOTIFY_RULE_DEAD_LETTER: _ClassVar[NotifyRule]
    NOTIFY_RULE_CONSECUTIVE_FAILURES: _ClassVar[NotifyRule]
    NOTIFY_RULE_LATE: _ClassVar[NotifyRule]
    NOTIFY_RULE_MISSED: _ClassVar[NotifyRule]

class DeliveryStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DELIVERY_STATUS_UNSPECIFIED: _ClassVar[DeliveryStatus]
    DELIVERY_STATUS_PENDING: _ClassVar[DeliveryStatus]
    DELIVERY_STATUS_DELIVERED: _ClassVar[DeliveryStatus]
    DELIVERY_STATUS_DROPPED: _ClassVar[DeliveryStatus]

class OverviewWindow(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OVERVIEW_WINDOW_UNSPECIFIED: _ClassVar[OverviewWindow]
    OVERVIEW_WINDOW_HOUR: _ClassVar[OverviewWindow]
    OVERVIEW_WINDOW_DAY: _ClassVar[OverviewWindow]
SCHEDULE_KIND_UNSPECIFIED: ScheduleKind
SCHEDULE_KIND_IMMEDIATE: ScheduleKind
SCHEDULE_KIND_AT: ScheduleKind
SCHEDULE_KIND_CRON: ScheduleKind
SCHEDULE_KIND_INTERVAL: ScheduleKind
DST_GAP_UNSPECIFIED: DstGap
DST_GAP_SHIFT: DstGap
DST_GAP_SKIP: DstGap
DST_OVERLAP_UNSPECIFIED: DstOverlap
DST_OVERLAP_FIRST: DstOverlap
DST_OVERLAP_BOTH: DstOverlap
OVERLAP_POLICY_UNSPECIFIED: OverlapPolicy
OVERLAP_POLICY_ALLOW: OverlapPolicy
OVERLAP_POLICY_FORBID: OverlapPolicy
OVERLAP_POLICY_REPLACE: OverlapPolicy
OVERLAP_POLICY_QUEUE: OverlapPolicy
MISFIRE_POLICY_UNSPECIFIED: MisfirePolicy
MISFIRE_POLICY_RUN_ONCE: MisfirePolicy
MISFIRE_POLICY_SKIP: MisfirePolicy
MISFIRE_POLICY_RUN_ALL: MisfirePolicy
JOB_STATE_UNSPECIFIED: JobState
JOB_STATE_ACTIVE: JobState
JOB_STATE_PAUSED: JobState
JOB_STATE_DELETED: JobState
JOB_STATE_COMPLETED: JobState
RUN_STATE_UNSPECIFIED: RunState
RUN_STATE_PENDING: RunState
RUN_STATE_LEASED: RunState
RUN_STATE_RUNNING: RunState
RUN_STATE_SUCCEEDED: RunState
RUN_STATE_FAILED: RunState
RUN_STATE_TIMED_OUT: RunState
RUN_STATE_CANCELLED: RunState
RUN_STATE_SKIPPED: RunState
RUN_STATE_MISSED: RunState
RUN_REASON_UNSPECIFIED: RunReason
RUN_REASON_NON_ZERO_EXIT: RunReason
RUN_REASON_HANDLER_ERROR: RunReason
RUN_REASON_TIMEOUT: RunReason
RUN_REASON_WORKER_LOST: RunReason
RUN_REASON_NO_HANDLER: RunReason
RUN_REASON_SPAWN_FAILED: RunReason
RUN_REASON_CANCELLED_BY_USER: RunReason
RUN_REASON_REPLACED: RunReason
RUN_REASON_JOB_DELETED: RunReason
RUN_REASON_OVERLAP: RunReason
RUN_REASON_PAUSED: RunReason
RUN_REASON_DST_GAP: RunReason
RUN_REASON_MISFIRE: RunReason
RUN_REASON_DEADLINE: RunReason
RUN_REASON_SUPERSEDED: RunReason
RUN_REASON_INTERNAL_ERROR: RunReason
RUN_REASON_OOM_KILLED: RunReason
LATE_REASON_UNSPECIFIED: LateReason
LATE_REASON_POLLER_BEHIND: LateReason
LATE_REASON_NO_WORKER_FOR_OWNER: LateReason
LATE_REASON_NO_WORKER_FOR_HANDLER: LateReason
LATE_REASON_NO_WORKER_FOR_COMMANDS: LateReason
LATE_REASON_NO_WORKER_WITH_LABELS: LateReason
LATE_REASON_NO_CAPACITY: LateReason
LATE_REASON_NO_FREE_SLOT: LateReason
LATE_REASON_CONCURRENCY_LIMIT: LateReason
LATE_REASON_OVERLAP: LateReason
LATE_REASON_PAUSED: LateReason
LATE_REASON_MISFIRE: LateReason
LATE_REASON_DEADLINE: LateReason
NOTIFY_RULE_UNSPECIFIED: NotifyRule
NOTIFY_RULE_FAILURE: NotifyRule
NOTIFY_RULE_RECOVERY: NotifyRule
NOTIFY_RULE_DEAD_LETTER: NotifyRule
NOTIFY_RULE_CONSECUTIVE_FAILURES: NotifyRule
NOTIFY_RULE_LATE: NotifyRule
NOTIFY_RULE_MISSED: NotifyRule
DELIVERY_STATUS_UNSPECIFIED: DeliveryStatus
DELIVERY_STATUS_PENDING: DeliveryStatus
DELIVERY_STATUS_DELIVERED: DeliveryStatus
DELIVERY_STATUS_DROPPED: DeliveryStatus
OVERVIEW_WINDOW_UNSPECIFIED: OverviewWindow
OVERVIEW_WINDOW_HOUR: OverviewWindow
OVERVIEW_WINDOW_DAY: OverviewWindow

class Schedule(_message.Message):
    __slots__ = ("kind", "at", "cron", "timezone", "interval", "anchor", "start_at", "end_at", "jitter", "dst_gap", "dst_overlap")
    KIND_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    CRON_FIELD_NUMBER: _ClassVar[int]
    TIMEZONE_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_FIELD_NUMBER: _ClassVar[int]
    ANCHOR_FIELD_NUMBER: _ClassVar[int]
    START_AT_FIELD_NUMBER: _ClassVar[int]
    END_AT_FIELD_NUMBER: _ClassVar[int]
    JITTER_FIELD_NUMBER: _ClassVar[int]
    DST_GAP_FIELD_NUMBER: _ClassVar[int]
    DST_OVERLAP_FIELD_NUMBER: _ClassVar[int]
    kind: ScheduleKind
    at: _timestamp_pb2.Timestamp
    cron: str
    timezone: str
    interval: _duration_pb2.Duration
    anchor: _timestamp_pb2.Timestamp
    start_at: _timestamp_pb2.Timestamp
    end_at: _timestamp_pb2.Timestamp
    jitter: _duration_pb2.Duration
    dst_gap: DstGap
    dst_overlap: DstOverlap
    def __init__(self, kind: _Optional[_Union[ScheduleKind, str]] = ..., at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., cron: _Optional[str] = ..., timezone: _Optional[str] = ..., interval: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., anchor: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., start_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., jitter: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., dst_gap: _Optional[_Union[DstGap, str]] = ..., dst_overlap: _Optional[_Union[DstOverlap, str]] = ...) -> None: ...

class CommandTask(_message.Message):
    __slots__ = ("argv", "env", "cwd", "secret_env", "artifact")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class SecretEnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ARGV_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    SECRET_ENV_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    argv: _containers.RepeatedScalarFieldContainer[str]
    env: _containers.ScalarMap[str, str]
    cwd: str
    secret_env: _containers.ScalarMap[str, str]
    artifact: str
    def __init__(self, argv: _Optional[_Iterable[str]] = ..., env: _Optional[_Mapping[str, str]] = ..., cwd: _Optional[str] = ..., secret_env: _Optional[_Mapping[str, str]] = ..., artifact: _Optional[str] = ...) -> None: ...

class HandlerTask(_message.Message):
    __slots__ = ("name", "payload")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    name: str
    payload: bytes
    def __init__(self, name: _Optional[str] = ..., payload: _Optional[bytes] = ...) -> None: ...

class Task(_message.Message):
    __slots__ = ("command", "handler")
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    HANDLER_FIELD_NUMBER: _ClassVar[int]
    command: CommandTask
    handler: HandlerTask
    def __init__(self, command: _Optional[_Union[CommandTask, _Mapping]] = ..., handler: _Optional[_Union[HandlerTask, _Mapping]] = ...) -> None: ...

class RetryPolicy(_message.Message):
    __slots__ = ("max_attempts", "initial_backoff", "multiplier", "max_backoff", "jitter")
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    INITIAL_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    MULTIPLIER_FIELD_NUMBER: _ClassVar[int]
    MAX_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    JITTER_FIELD_NUMBER: _ClassVar[int]
    max_attempts: int
    initial_backoff: _duration_pb2.Duration
    multiplier: float
    max_backoff: _duration_pb2.Duration
    jitter: float
    def __init__(self, max_attempts: _Optional[int] = ..., initial_backoff: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., multiplier: _Optional[float] = ..., max_backoff: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., jitter: _Optional[float] = ...) -> None: ...

class ConcurrencyPolicy(_message.Message):
    __slots__ = ("max_concurrent", "overlap")
    MAX_CONCURRENT_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_FIELD_NUMBER: _ClassVar[int]
    max_concurrent: int
    overlap: OverlapPolicy
    def __init__(self, max_concurrent: _Optional[int] = ..., overlap: _Optional[_Union[OverlapPolicy, str]] = ...) -> None: ...

class Resources(_message.Message):
    __slots__ = ("slots", "cpu_millis", "memory_mb", "labels", "pids_limit", "output_limit_bytes", "results")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    CPU_MILLIS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MB_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    PIDS_LIMIT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_LIMIT_BYTES_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    slots: int
    cpu_millis: int
    memory_mb: int
    labels: _containers.ScalarMap[str, str]
    pids_limit: int
    output_limit_bytes: int
    results: ResultLimits
    def __init__(self, slots: _Optional[int] = ..., cpu_millis: _Optional[int] = ..., memory_mb: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ..., pids_limit: _Optional[int] = ..., output_limit_bytes: _Optional[int] = ..., results: _Optional[_Union[ResultLimits, _Mapping]] = ...) -> None: ...

class ResultLimits(_message.Message):
    __slots__ = ("max_files", "max_file_bytes", "max_bytes")
    MAX_FILES_FIELD_NUMBER: _ClassVar[int]
    MAX_FILE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    max_files: int
    max_file_bytes: int
    max_bytes: int
    def __init__(self, max_files: _Optional[int] = ..., max_file_bytes: _Optional[int] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class JobSpec(_message.Message):
    __slots__ = ("name", "task", "schedule", "priority", "retry", "timeout", "concurrency", "misfire", "starting_deadline", "resources", "pause_after_failures", "labels", "notify")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_FIELD_NUMBER: _ClassVar[int]
    MISFIRE_FIELD_NUMBER: _ClassVar[int]
    STARTING_DEADLINE_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    PAUSE_AFTER_FAILURES_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    NOTIFY_FIELD_NUMBER: _ClassVar[int]
    name: str
    task: Task
    schedule: Schedule
    priority: int
    retry: RetryPolicy
    timeout: _duration_pb2.Duration
    concurrency: ConcurrencyPolicy
    misfire: MisfirePolicy
    starting_deadline: _duration_pb2.Duration
    resources: Resources
    pause_after_failures: int
    labels: _containers.ScalarMap[str, str]
    notify: NotifyPolicy
    def __init__(self, name: _Optional[str] = ..., task: _Optional[_Union[Task, _Mapping]] = ..., schedule: _Optional[_Union[Schedule, _Mapping]] = ..., priority: _Optional[int] = ..., retry: _Optional[_Union[RetryPolicy, _Mapping]] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., concurrency: _Optional[_Union[ConcurrencyPolicy, _Mapping]] = ..., misfire: _Optional[_Union[MisfirePolicy, str]] = ..., starting_deadline: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., resources: _Optional[_Union[Resources, _Mapping]] = ..., pause_after_failures: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ..., notify: _Optional[_Union[NotifyPolicy, _Mapping]] = ...) -> None: ...

class NotifyPolicy(_message.Message):
    __slots__ = ("webhook_url", "on_failure", "on_recovery", "on_dead_letter", "on_consecutive_failures", "on_late", "on_missed", "slack")
    WEBHOOK_URL_FIELD_NUMBER: _ClassVar[int]
    ON_FAILURE_FIELD_NUMBER: _ClassVar[int]
    ON_RECOVERY_FIELD_NUMBER: _ClassVar[int]
    ON_DEAD_LETTER_FIELD_NUMBER: _ClassVar[int]
    ON_CONSECUTIVE_FAILURES_FIELD_NUMBER: _ClassVar[int]
    ON_LATE_FIELD_NUMBER: _ClassVar[int]
    ON_MISSED_FIELD_NUMBER: _ClassVar[int]
    SLACK_FIELD_NUMBER: _ClassVar[int]
    webhook_url: str
    on_failure: bool
    on_recovery: bool
    on_dead_letter: bool
    on_consecutive_failures: int
    on_late: _duration_pb2.Duration
    on_missed: bool
    slack: bool
    def __init__(self, webhook_url: _Optional[str] = ..., on_failure: _Optional[bool] = ..., on_recovery: _Optional[bool] = ..., on_dead_letter: _Optional[bool] = ..., on_consecutive_failures: _Optional[int] = ..., on_late: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., on_missed: _Optional[bool] = ..., slack: _Optional[bool] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("id", "owner", "spec", "state", "version", "created_at", "updated_at", "next_fire_at", "next_fire_key", "idempotency_key", "consecutive_failures", "pause_reason", "schedule_version", "health")
    ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIRE_AT_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIRE_KEY_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    CONSECUTIVE_FAILURES_FIELD_NUMBER: _ClassVar[int]
    PAUSE_REASON_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_VERSION_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    id: str
    owner: str
    spec: JobSpec
    state: JobState
    version: int
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    next_fire_at: _timestamp_pb2.Timestamp
    next_fire_key: str
    idempotency_key: str
    consecutive_failures: int
    pause_reason: str
    schedule_version: int
    health: JobHealth
    def __init__(self, id: _Optional[str] = ..., owner: _Optional[str] = ..., spec: _Optional[_Union[JobSpec, _Mapping]] = ..., state: _Optional[_Union[JobState, str]] = ..., version: _Optional[int] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., next_fire_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., next_fire_key: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., consecutive_failures: _Optional[int] = ..., pause_reason: _Optional[str] = ..., schedule_version: _Optional[int] = ..., health: _Optional[_Union[JobHealth, _Mapping]] = ...) -> None: ...

class JobHealth(_message.Message):
    __slots__ = ("runs", "succeeded", "rated")
    RUNS_FIELD_NUMBER: _ClassVar[int]
    SUCCEEDED_FIELD_NUMBER: _ClassVar[int]
    RATED_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[JobHealthRun]
    succeeded: int
    rated: int
    def __init__(self, runs: _Optional[_Iterable[_Union[JobHealthRun, _Mapping]]] = ..., succeeded: _Optional[int] = ..., rated: _Optional[int] = ...) -> None: ...

class JobHealthRun(_message.Message):
    __slots__ = ("run_id", "state", "due_at")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    DUE_AT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    state: RunState
    due_at: _timestamp_pb2.Timestamp
    def __init__(self, run_id: _Optional[str] = ..., state: _Optional[_Union[RunState, str]] = ..., due_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Run(_message.Message):
    __slots__ = ("id", "job_id", "owner", "fire_key", "fire_at", "due_at", "state", "attempt", "priority", "shard", "worker_id", "lease_token", "lease_expires_at", "created_at", "started_at", "ended_at", "has_exit_code", "exit_code", "reason", "error", "output_bytes", "replayed_from", "dead_letter", "schedule_version", "waiting_reason", "usage", "lateness", "output_sha256", "output_truncated", "results", "results_note")
    ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    FIRE_KEY_FIELD_NUMBER: _ClassVar[int]
    FIRE_AT_FIELD_NUMBER: _ClassVar[int]
    DUE_AT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    HAS_EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FROM_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_VERSION_FIELD_NUMBER: _ClassVar[int]
    WAITING_REASON_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    LATENESS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SHA256_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    RESULTS_NOTE_FIELD_NUMBER: _ClassVar[int]
    id: str
    job_id: str
    owner: str
    fire_key: str
    fire_at: _timestamp_pb2.Timestamp
    due_at: _timestamp_pb2.Timestamp
    state: RunState
    attempt: int
    priority: int
    shard: int
    worker_id: str
    lease_token: int
    lease_expires_at: _timestamp_pb2.Timestamp
    created_at: _timestamp_pb2.Timestamp
    started_at: _timestamp_pb2.Timestamp
    ended_at: _timestamp_pb2.Timestamp
    has_exit_code: bool
    exit_code: int
    reason: RunReason
    error: str
    output_bytes: int
    replayed_from: str
    dead_letter: bool
    schedule_version: int
    waiting_reason: str
    usage: RunUsage
    lateness: RunLateness
    output_sha256: str
    output_truncated: str
    results: _containers.RepeatedCompositeFieldContainer[RunResultFile]
    results_note: str
    def __init__(self, id: _Optional[str] = ..., job_id: _Optional[str] = ..., owner: _Optional[str] = ..., fire_key: _Optional[str] = ..., fire_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., due_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., state: _Optional[_Union[RunState, str]] = ..., attempt: _Optional[int] = ..., priority: _Optional[int] = ..., shard: _Optional[int] = ..., worker_id: _Optional[str] = ..., lease_token: _Optional[int] = ..., lease_expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., ended_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., has_exit_code: _Optional[bool] = ..., exit_code: _Optional[int] = ..., reason: _Optional[_Union[RunReason, str]] = ..., error: _Optional[str] = ..., output_bytes: _Optional[int] = ..., replayed_from: _Optional[str] = ..., dead_letter: _Optional[bool] = ..., schedule_version: _Optional[int] = ..., waiting_reason: _Optional[str] = ..., usage: _Optional[_Union[RunUsage, _Mapping]] = ..., lateness: _Optional[_Union[RunLateness, _Mapping]] = ..., output_sha256: _Optional[str] = ..., output_truncated: _Optional[str] = ..., results: _Optional[_Iterable[_Union[RunResultFile, _Mapping]]] = ..., results_note: _Optional[str] = ...) -> None: ...

class RunResultFile(_message.Message):
    __slots__ = ("name", "size", "sha256")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    name: str
    size: int
    sha256: str
    def __init__(self, name: _Optional[str] = ..., size: _Optional[int] = ..., sha256: _Optional[str] = ...) -> None: ...

class RunLateness(_message.Message):
    __slots__ = ("reason", "text", "waited")
    REASON_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    WAITED_FIELD_NUMBER: _ClassVar[int]
    reason: LateReason
    text: str
    waited: _duration_pb2.Duration
    def __init__(self, reason: _Optional[_Union[LateReason, str]] = ..., text: _Optional[str] = ..., waited: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class Delivery(_message.Message):
    __slots__ = ("id", "job_id", "run_id", "rule", "reason", "status", "attempts", "created_at", "next_attempt_at", "last_attempt_at", "last_error", "delivered_at", "webhook_url")
    ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    NEXT_ATTEMPT_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_ATTEMPT_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_AT_FIELD_NUMBER: _ClassVar[int]
    WEBHOOK_URL_FIELD_NUMBER: _ClassVar[int]
    id: str
    job_id: str
    run_id: str
    rule: NotifyRule
    reason: str
    status: DeliveryStatus
    attempts: int
    created_at: _timestamp_pb2.Timestamp
    next_attempt_at: _timestamp_pb2.Timestamp
    last_attempt_at: _timestamp_pb2.Timestamp
    last_error: str
    delivered_at: _timestamp_pb2.Timestamp
    webhook_url: str
    def __init__(self, id: _Optional[str] = ..., job_id: _Optional[str] = ..., run_id: _Optional[str] = ..., rule: _Optional[_Union[NotifyRule, str]] = ..., reason: _Optional[str] = ..., status: _Optional[_Union[DeliveryStatus, str]] = ..., attempts: _Optional[int] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., next_attempt_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_attempt_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_error: _Optional[str] = ..., delivered_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., webhook_url: _Optional[str] = ...) -> None: ...

class RunUsage(_message.Message):
    __slots__ = ("peak_memory_bytes", "cpu_seconds", "limits_enforced")
    PEAK_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    CPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LIMITS_ENFORCED_FIELD_NUMBER: _ClassVar[int]
    peak_memory_bytes: int
    cpu_seconds: float
    limits_enforced: bool
    def __init__(self, peak_memory_bytes: _Optional[int] = ..., cpu_seconds: _Optional[float] = ..., limits_enforced: _Optional[bool] = ...) -> None: ...

class Fire(_message.Message):
    __slots__ = ("key", "at", "local_time", "skip_reason")
    KEY_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    LOCAL_TIME_FIELD_NUMBER: _ClassVar[int]
    SKIP_REASON_FIELD_NUMBER: _ClassVar[int]
    key: str
    at: _timestamp_pb2.Timestamp
    local_time: str
    skip_reason: RunReason
    def __init__(self, key: _Optional[str] = ..., at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., local_time: _Optional[str] = ..., skip_reason: _Optional[_Union[RunReason, str]] = ...) -> None: ...

class OutputChunk(_message.Message):
    __slots__ = ("run_id", "offset", "data", "stream", "eof", "fencing_token")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    EOF_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    offset: int
    data: bytes
    stream: str
    eof: bool
    fencing_token: int
    def __init__(self, run_id: _Optional[str] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ..., stream: _Optional[str] = ..., eof: _Optional[bool] = ..., fencing_token: _Optional[int] = ...) -> None: ...

class OverviewBucket(_message.Message):
    __slots__ = ("start", "succeeded", "failed", "other", "lag_counts", "lag_p50_seconds", "lag_p99_seconds")
    START_FIELD_NUMBER: _ClassVar[int]
    SUCCEEDED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    OTHER_FIELD_NUMBER: _ClassVar[int]
    LAG_COUNTS_FIELD_NUMBER: _ClassVar[int]
    LAG_P50_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LAG_P99_SECONDS_FIELD_NUMBER: _ClassVar[int]
    start: _timestamp_pb2.Timestamp
    succeeded: int
    failed: int
    other: int
    lag_counts: _containers.RepeatedScalarFieldContainer[int]
    lag_p50_seconds: float
    lag_p99_seconds: float
    def __init__(self, start: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., succeeded: _Optional[int] = ..., failed: _Optional[int] = ..., other: _Optional[int] = ..., lag_counts: _Optional[_Iterable[int]] = ..., lag_p50_seconds: _Optional[float] = ..., lag_p99_seconds: _Optional[float] = ...) -> None: ...

class OverviewFailingJob(_message.Message):
    __slots__ = ("job_id", "name", "consecutive_failures", "state", "reason", "error", "ended_at", "run_id")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONSECUTIVE_FAILURES_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    name: str
    consecutive_failures: int
    state: RunState
    reason: RunReason
    error: str
    ended_at: _timestamp_pb2.Timestamp
    run_id: str
    def __init__(self, job_id: _Optional[str] = ..., name: _Optional[str] = ..., consecutive_failures: _Optional[int] = ..., state: _Optional[_Union[RunState, str]] = ..., reason: _Optional[_Union[RunReason, str]] = ..., error: _Optional[str] = ..., ended_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., run_id: _Optional[str] = ...) -> None: ...
