import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from shardcron.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class UploadArtifactRequest(_message.Message):
    __slots__ = ("size", "sha256", "data")
    SIZE_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    size: int
    sha256: str
    data: bytes
    def __init__(self, size: _Optional[int] = ..., sha256: _Optional[str] = ..., data: _Optional[bytes] = ...) -> None: ...

class UploadArtifactResponse(_message.Message):
    __slots__ = ("sha256", "size", "stored")
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    STORED_FIELD_NUMBER: _ClassVar[int]
    sha256: str
    size: int
    stored: bool
    def __init__(self, sha256: _Optional[str] = ..., size: _Optional[int] = ..., stored: _Optional[bool] = ...) -> None: ...

class CreateJobRequest(_message.Message):
    __slots__ = ("spec", "idempotency_key")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    spec: _types_pb2.JobSpec
    idempotency_key: str
    def __init__(self, spec: _Optional[_Union[_types_pb2.JobSpec, _Mapping]] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class CreateJobResponse(_message.Message):
    __slots__ = ("job", "created")
    JOB_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    job: _types_pb2.Job
    created: bool
    def __init__(self, job: _Optional[_Union[_types_pb2.Job, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class CreateJobsRequest(_message.Message):
    __slots__ = ("jobs", "ids_only")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    IDS_ONLY_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[CreateJobRequest]
    ids_only: bool
    def __init__(self, jobs: _Optional[_Iterable[_Union[CreateJobRequest, _Mapping]]] = ..., ids_only: _Optional[bool] = ...) -> None: ...

class CreateJobsResponse(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[CreateJobResponse]
    def __init__(self, jobs: _Optional[_Iterable[_Union[CreateJobResponse, _Mapping]]] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "states", "name_prefix", "labels", "with_health")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    NAME_PREFIX_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    WITH_HEALTH_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    states: _containers.RepeatedScalarFieldContainer[_types_pb2.JobState]
    name_prefix: str
    labels: _containers.ScalarMap[str, str]
    with_health: bool
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., states: _Optional[_Iterable[_Union[_types_pb2.JobState, str]]] = ..., name_prefix: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., with_health: _Optional[bool] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs", "next_page_token")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[_types_pb2.Job]
    next_page_token: str
    def __init__(self, jobs: _Optional[_Iterable[_Union[_types_pb2.Job, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class UpdateJobRequest(_message.Message):
    __slots__ = ("job_id", "expected_version", "spec")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    expected_version: int
    spec: _types_pb2.JobSpec
    def __init__(self, job_id: _Optional[str] = ..., expected_version: _Optional[int] = ..., spec: _Optional[_Union[_types_pb2.JobSpec, _Mapping]] = ...) -> None: ...

class JobRef(_message.Message):
    __slots__ = ("job_id", "expected_version")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    expected_version: int
    def __init__(self, job_id: _Optional[str] = ..., expected_version: _Optional[int] = ...) -> None: ...

class DeleteJobRequest(_message.Message):
    __slots__ = ("job_id", "expected_version", "cancel_running")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    CANCEL_RUNNING_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    expected_version: int
    cancel_running: bool
    def __init__(self, job_id: _Optional[str] = ..., expected_version: _Optional[int] = ..., cancel_running: _Optional[bool] = ...) -> None: ...

class PreviewFiresRequest(_message.Message):
    __slots__ = ("job_id", "schedule", "count", "after")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    schedule: _types_pb2.Schedule
    count: int
    after: _timestamp_pb2.Timestamp
    def __init__(self, job_id: _Optional[str] = ..., schedule: _Optional[_Union[_types_pb2.Schedule, _Mapping]] = ..., count: _Optional[int] = ..., after: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class PreviewFiresResponse(_message.Message):
    __slots__ = ("fires",)
    FIRES_FIELD_NUMBER: _ClassVar[int]
    fires: _containers.RepeatedCompositeFieldContainer[_types_pb2.Fire]
    def __init__(self, fires: _Optional[_Iterable[_Union[_types_pb2.Fire, _Mapping]]] = ...) -> None: ...

class WaitRunRequest(_message.Message):
    __slots__ = ("run_id", "timeout")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    timeout: _duration_pb2.Duration
    def __init__(self, run_id: _Optional[str] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ListRunsRequest(_message.Message):
    __slots__ = ("job_id", "page_size", "page_token", "states")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    page_size: int
    page_token: str
    states: _containers.RepeatedScalarFieldContainer[_types_pb2.RunState]
    def __init__(self, job_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., states: _Optional[_Iterable[_Union[_types_pb2.RunState, str]]] = ...) -> None: ...

class ListRunsResponse(_message.Message):
    __slots__ = ("runs", "next_page_token")
    RUNS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[_types_pb2.Run]
    next_page_token: str
    def __init__(self, runs: _Optional[_Iterable[_Union[_types_pb2.Run, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetRunRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class ReadRunOutputRequest(_message.Message):
    __slots__ = ("run_id", "offset", "follow", "limit")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    offset: int
    follow: bool
    limit: int
    def __init__(self, run_id: _Optional[str] = ..., offset: _Optional[int] = ..., follow: _Optional[bool] = ..., limit: _Optional[int] = ...) -> None: ...

class ListDeadLettersRequest(_message.Message):
    __slots__ = ("job_id", "page_size", "page_token")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    page_size: int
    page_token: str
    def __init__(self, job_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class DeadLettersRequest(_message.Message):
    __slots__ = ("run_ids", "job_id")
    RUN_IDS_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    run_ids: _containers.RepeatedScalarFieldContainer[str]
    job_id: str
    def __init__(self, run_ids: _Optional[_Iterable[str]] = ..., job_id: _Optional[str] = ...) -> None: ...

class DropDeadLettersResponse(_message.Message):
    __slots__ = ("dropped",)
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    dropped: int
    def __init__(self, dropped: _Optional[int] = ...) -> None: ...

class ReadRunResultRequest(_message.Message):
    __slots__ = ("run_id", "name", "offset", "limit")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    name: str
    offset: int
    limit: int
    def __init__(self, run_id: _Optional[str] = ..., name: _Optional[str] = ..., offset: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class RunResultChunk(_message.Message):
    __slots__ = ("offset", "data")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    offset: int
    data: bytes
    def __init__(self, offset: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class OverviewRequest(_message.Message):
    __slots__ = ("window",)
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    window: _types_pb2.OverviewWindow
    def __init__(self, window: _Optional[_Union[_types_pb2.OverviewWindow, str]] = ...) -> None: ...

class OverviewWaiting(_message.Message):
    __slots__ = ("reason", "runs")
    REASON_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    reason: str
    runs: int
    def __init__(self, reason: _Optional[str] = ..., runs: _Optional[int] = ...) -> None: ...

class Overview(_message.Message):
    __slots__ = ("window", "running", "waiting", "waiting_reasons", "failed_last_hour", "bucket_seconds", "buckets", "failing_jobs", "history_since", "pollers")
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    WAITING_REASONS_FIELD_NUMBER: _ClassVar[int]
    FAILED_LAST_HOUR_FIELD_NUMBER: _ClassVar[int]
    BUCKET_SECONDS_FIELD_NUMBER: _ClassVar[int]
    BUCKETS_FIELD_NUMBER: _ClassVar[int]
    FAILING_JOBS_FIELD_NUMBER: _ClassVar[int]
    HISTORY_SINCE_FIELD_NUMBER: _ClassVar[int]
    POLLERS_FIELD_NUMBER: _ClassVar[int]
    window: _types_pb2.OverviewWindow
    running: int
    waiting: int
    waiting_reasons: _containers.RepeatedCompositeFieldContainer[OverviewWaiting]
    failed_last_hour: int
    bucket_seconds: int
    buckets: _containers.RepeatedCompositeFieldContainer[_types_pb2.OverviewBucket]
    failing_jobs: _containers.RepeatedCompositeFieldContainer[_types_pb2.OverviewFailingJob]
    history_since: _timestamp_pb2.Timestamp
    pollers: int
    def __init__(self, window: _Optional[_Union[_types_pb2.OverviewWindow, str]] = ..., running: _Optional[int] = ..., waiting: _Optional[int] = ..., waiting_reasons: _Optional[_Iterable[_Union[OverviewWaiting, _Mapping]]] = ..., failed_last_hour: _Optional[int] = ..., bucket_seconds: _Optional[int] = ..., buckets: _Optional[_Iterable[_Union[_types_pb2.OverviewBucket, _Mapping]]] = ..., failing_jobs: _Optional[_Iterable[_Union[_types_pb2.OverviewFailingJob, _Mapping]]] = ..., history_since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., pollers: _Optional[int] = ...) -> None: ...

class ListDeliveriesRequest(_message.Message):
    __slots__ = ("job_id", "page_size", "page_token")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    page_size: int
    page_token: str
    def __init__(self, job_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListDeliveriesResponse(_message.Message):
    __slots__ = ("deliveries", "next_page_token")
    DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    deliveries: _containers.RepeatedCompositeFieldContainer[_types_pb2.Delivery]
    next_page_token: str
    def __init__(self, deliveries: _Optional[_Iterable[_Union[_types_pb2.Delivery, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetNotifySettingsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class NotifySettings(_message.Message):
    __slots__ = ("defaults", "secret_set")
    DEFAULTS_FIELD_NUMBER: _ClassVar[int]
    SECRET_SET_FIELD_NUMBER: _ClassVar[int]
    defaults: _types_pb2.NotifyPolicy
    secret_set: bool
    def __init__(self, defaults: _Optional[_Union[_types_pb2.NotifyPolicy, _Mapping]] = ..., secret_set: _Optional[bool] = ...) -> None: ...

class SetNotifyDefaultsRequest(_message.Message):
    __slots__ = ("defaults",)
    DEFAULTS_FIELD_NUMBER: _ClassVar[int]
    defaults: _types_pb2.NotifyPolicy
    def __init__(self, defaults: _Optional[_Union[_types_pb2.NotifyPolicy, _Mapping]] = ...) -> None: ...

class SetNotifySecretRequest(_message.Message):
    __slots__ = ("secret",)
    SECRET_FIELD_NUMBER: _ClassVar[int]
    secret: str
    def __init__(self, secret: _Optional[str] = ...) -> None: ...
