import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from shardcron.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ShardInfo(_message.Message):
    __slots__ = ("shard", "owner", "lag_seconds")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    LAG_SECONDS_FIELD_NUMBER: _ClassVar[int]
    shard: int
    owner: str
    lag_seconds: float
    def __init__(self, shard: _Optional[int] = ..., owner: _Optional[str] = ..., lag_seconds: _Optional[float] = ...) -> None: ...

class WorkerInfo(_message.Message):
    __slots__ = ("id", "address", "slots_total", "slots_used", "labels", "handlers", "connected_at", "pollers", "owners", "handlers_omitted")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    SLOTS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    SLOTS_USED_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    HANDLERS_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_AT_FIELD_NUMBER: _ClassVar[int]
    POLLERS_FIELD_NUMBER: _ClassVar[int]
    OWNERS_FIELD_NUMBER: _ClassVar[int]
    HANDLERS_OMITTED_FIELD_NUMBER: _ClassVar[int]
    id: str
    address: str
    slots_total: int
    slots_used: int
    labels: _containers.ScalarMap[str, str]
    handlers: _containers.RepeatedScalarFieldContainer[str]
    connected_at: _timestamp_pb2.Timestamp
    pollers: _containers.RepeatedScalarFieldContainer[str]
    owners: _containers.RepeatedScalarFieldContainer[str]
    handlers_omitted: int
    def __init__(self, id: _Optional[str] = ..., address: _Optional[str] = ..., slots_total: _Optional[int] = ..., slots_used: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ..., handlers: _Optional[_Iterable[str]] = ..., connected_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., pollers: _Optional[_Iterable[str]] = ..., owners: _Optional[_Iterable[str]] = ..., handlers_omitted: _Optional[int] = ...) -> None: ...

class ClusterStatus(_message.Message):
    __slots__ = ("mode", "leader", "epoch", "members", "shards", "workers", "workers_omitted")
    MODE_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    WORKERS_OMITTED_FIELD_NUMBER: _ClassVar[int]
    mode: str
    leader: str
    epoch: int
    members: _containers.RepeatedScalarFieldContainer[str]
    shards: _containers.RepeatedCompositeFieldContainer[ShardInfo]
    workers: _containers.RepeatedCompositeFieldContainer[WorkerInfo]
    workers_omitted: int
    def __init__(self, mode: _Optional[str] = ..., leader: _Optional[str] = ..., epoch: _Optional[int] = ..., members: _Optional[_Iterable[str]] = ..., shards: _Optional[_Iterable[_Union[ShardInfo, _Mapping]]] = ..., workers: _Optional[_Iterable[_Union[WorkerInfo, _Mapping]]] = ..., workers_omitted: _Optional[int] = ...) -> None: ...

class NotifyRunsRequest(_message.Message):
    __slots__ = ("run_ids", "job_ids")
    RUN_IDS_FIELD_NUMBER: _ClassVar[int]
    JOB_IDS_FIELD_NUMBER: _ClassVar[int]
    run_ids: _containers.RepeatedScalarFieldContainer[str]
    job_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, run_ids: _Optional[_Iterable[str]] = ..., job_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class NotifyRunsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CancelRunRequest(_message.Message):
    __slots__ = ("run_id", "reason")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    reason: _types_pb2.RunReason
    def __init__(self, run_id: _Optional[str] = ..., reason: _Optional[_Union[_types_pb2.RunReason, str]] = ...) -> None: ...

class CancelJobRunsRequest(_message.Message):
    __slots__ = ("job_id", "reason")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    reason: _types_pb2.RunReason
    def __init__(self, job_id: _Optional[str] = ..., reason: _Optional[_Union[_types_pb2.RunReason, str]] = ...) -> None: ...

class CancelJobRunsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class JobChangedRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class JobChangedResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PollerStatusRequest(_message.Message):
    __slots__ = ("owners",)
    OWNERS_FIELD_NUMBER: _ClassVar[int]
    owners: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, owners: _Optional[_Iterable[str]] = ...) -> None: ...

class PollerStatus(_message.Message):
    __slots__ = ("poller_id", "fencing_epoch", "shards", "workers", "workers_omitted")
    POLLER_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    WORKERS_OMITTED_FIELD_NUMBER: _ClassVar[int]
    poller_id: str
    fencing_epoch: int
    shards: _containers.RepeatedCompositeFieldContainer[ShardInfo]
    workers: _containers.RepeatedCompositeFieldContainer[WorkerInfo]
    workers_omitted: int
    def __init__(self, poller_id: _Optional[str] = ..., fencing_epoch: _Optional[int] = ..., shards: _Optional[_Iterable[_Union[ShardInfo, _Mapping]]] = ..., workers: _Optional[_Iterable[_Union[WorkerInfo, _Mapping]]] = ..., workers_omitted: _Optional[int] = ...) -> None: ...

class WaitingReasonsRequest(_message.Message):
    __slots__ = ("run_ids",)
    RUN_IDS_FIELD_NUMBER: _ClassVar[int]
    run_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, run_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class WaitingReasonsResponse(_message.Message):
    __slots__ = ("reasons",)
    class ReasonsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    REASONS_FIELD_NUMBER: _ClassVar[int]
    reasons: _containers.ScalarMap[str, str]
    def __init__(self, reasons: _Optional[_Mapping[str, str]] = ...) -> None: ...

class OverviewPartRequest(_message.Message):
    __slots__ = ("owner", "window")
    OWNER_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    owner: str
    window: _types_pb2.OverviewWindow
    def __init__(self, owner: _Optional[str] = ..., window: _Optional[_Union[_types_pb2.OverviewWindow, str]] = ...) -> None: ...

class OverviewPart(_message.Message):
    __slots__ = ("running", "waiting", "buckets", "failing_jobs", "since")
    class WaitingEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    BUCKETS_FIELD_NUMBER: _ClassVar[int]
    FAILING_JOBS_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    running: int
    waiting: _containers.ScalarMap[str, int]
    buckets: _containers.RepeatedCompositeFieldContainer[_types_pb2.OverviewBucket]
    failing_jobs: _containers.RepeatedCompositeFieldContainer[_types_pb2.OverviewFailingJob]
    since: _timestamp_pb2.Timestamp
    def __init__(self, running: _Optional[int] = ..., waiting: _Optional[_Mapping[str, int]] = ..., buckets: _Optional[_Iterable[_Union[_types_pb2.OverviewBucket, _Mapping]]] = ..., failing_jobs: _Optional[_Iterable[_Union[_types_pb2.OverviewFailingJob, _Mapping]]] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...
