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

class ReadArtifactRequest(_message.Message):
    __slots__ = ("run_id", "fencing_token", "sha256", "worker_id")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    fencing_token: int
    sha256: str
    worker_id: str
    def __init__(self, run_id: _Optional[str] = ..., fencing_token: _Optional[int] = ..., sha256: _Optional[str] = ..., worker_id: _Optional[str] = ...) -> None: ...

class ArtifactChunk(_message.Message):
    __slots__ = ("data", "size")
    DATA_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    size: int
    def __init__(self, data: _Optional[bytes] = ..., size: _Optional[int] = ...) -> None: ...

class WorkerMessage(_message.Message):
    __slots__ = ("hello", "credits", "heartbeat", "started", "results", "output", "refused", "result_files")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    CREDITS_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    RESULT_FILES_FIELD_NUMBER: _ClassVar[int]
    hello: Hello
    credits: Credits
    heartbeat: Heartbeat
    started: Started
    results: Results
    output: Output
    refused: Refused
    result_files: ResultFilePieces
    def __init__(self, hello: _Optional[_Union[Hello, _Mapping]] = ..., credits: _Optional[_Union[Credits, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ..., started: _Optional[_Union[Started, _Mapping]] = ..., results: _Optional[_Union[Results, _Mapping]] = ..., output: _Optional[_Union[Output, _Mapping]] = ..., refused: _Optional[_Union[Refused, _Mapping]] = ..., result_files: _Optional[_Union[ResultFilePieces, _Mapping]] = ...) -> None: ...

class PollerMessage(_message.Message):
    __slots__ = ("welcome", "leases", "cancels", "renewals", "acks", "demand", "output_room")
    WELCOME_FIELD_NUMBER: _ClassVar[int]
    LEASES_FIELD_NUMBER: _ClassVar[int]
    CANCELS_FIELD_NUMBER: _ClassVar[int]
    RENEWALS_FIELD_NUMBER: _ClassVar[int]
    ACKS_FIELD_NUMBER: _ClassVar[int]
    DEMAND_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_ROOM_FIELD_NUMBER: _ClassVar[int]
    welcome: Welcome
    leases: Leases
    cancels: Cancels
    renewals: Renewals
    acks: ResultAcks
    demand: Demand
    output_room: OutputRoom
    def __init__(self, welcome: _Optional[_Union[Welcome, _Mapping]] = ..., leases: _Optional[_Union[Leases, _Mapping]] = ..., cancels: _Optional[_Union[Cancels, _Mapping]] = ..., renewals: _Optional[_Union[Renewals, _Mapping]] = ..., acks: _Optional[_Union[ResultAcks, _Mapping]] = ..., demand: _Optional[_Union[Demand, _Mapping]] = ..., output_room: _Optional[_Union[OutputRoom, _Mapping]] = ...) -> None: ...

class Hello(_message.Message):
    __slots__ = ("worker_id", "slots", "cpu_millis", "memory_mb", "labels", "handlers", "runs_commands", "version", "pending_results", "held", "credit_limit", "instance_id", "waits_for_due", "output_spool")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    CPU_MILLIS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MB_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    HANDLERS_FIELD_NUMBER: _ClassVar[int]
    RUNS_COMMANDS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PENDING_RESULTS_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    CREDIT_LIMIT_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    WAITS_FOR_DUE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SPOOL_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    slots: int
    cpu_millis: int
    memory_mb: int
    labels: _containers.ScalarMap[str, str]
    handlers: _containers.RepeatedScalarFieldContainer[str]
    runs_commands: bool
    version: str
    pending_results: _containers.RepeatedCompositeFieldContainer[RunResult]
    held: _containers.RepeatedCompositeFieldContainer[LeaseRef]
    credit_limit: int
    instance_id: str
    waits_for_due: bool
    output_spool: bool
    def __init__(self, worker_id: _Optional[str] = ..., slots: _Optional[int] = ..., cpu_millis: _Optional[int] = ..., memory_mb: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ..., handlers: _Optional[_Iterable[str]] = ..., runs_commands: _Optional[bool] = ..., version: _Optional[str] = ..., pending_results: _Optional[_Iterable[_Union[RunResult, _Mapping]]] = ..., held: _Optional[_Iterable[_Union[LeaseRef, _Mapping]]] = ..., credit_limit: _Optional[int] = ..., instance_id: _Optional[str] = ..., waits_for_due: _Optional[bool] = ..., output_spool: _Optional[bool] = ...) -> None: ...

class Credits(_message.Message):
    __slots__ = ("limit",)
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    limit: int
    def __init__(self, limit: _Optional[int] = ...) -> None: ...

class Refused(_message.Message):
    __slots__ = ("leases",)
    LEASES_FIELD_NUMBER: _ClassVar[int]
    leases: _containers.RepeatedCompositeFieldContainer[LeaseRef]
    def __init__(self, leases: _Optional[_Iterable[_Union[LeaseRef, _Mapping]]] = ...) -> None: ...

class LeaseRef(_message.Message):
    __slots__ = ("run_id", "fencing_token", "job_id")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    fencing_token: int
    job_id: str
    def __init__(self, run_id: _Optional[str] = ..., fencing_token: _Optional[int] = ..., job_id: _Optional[str] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ("leases",)
    LEASES_FIELD_NUMBER: _ClassVar[int]
    leases: _containers.RepeatedCompositeFieldContainer[LeaseRef]
    def __init__(self, leases: _Optional[_Iterable[_Union[LeaseRef, _Mapping]]] = ...) -> None: ...

class Started(_message.Message):
    __slots__ = ("leases", "at")
    LEASES_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    leases: _containers.RepeatedCompositeFieldContainer[LeaseRef]
    at: _timestamp_pb2.Timestamp
    def __init__(self, leases: _Optional[_Iterable[_Union[LeaseRef, _Mapping]]] = ..., at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class RunResult(_message.Message):
    __slots__ = ("run_id", "fencing_token", "state", "has_exit_code", "exit_code", "reason", "error", "started_at", "ended_at", "job_id", "usage", "output_truncated", "output_dropped_bytes", "results_note")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    HAS_EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_DROPPED_BYTES_FIELD_NUMBER: _ClassVar[int]
    RESULTS_NOTE_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    fencing_token: int
    state: _types_pb2.RunState
    has_exit_code: bool
    exit_code: int
    reason: _types_pb2.RunReason
    error: str
    started_at: _timestamp_pb2.Timestamp
    ended_at: _timestamp_pb2.Timestamp
    job_id: str
    usage: _types_pb2.RunUsage
    output_truncated: str
    output_dropped_bytes: int
    results_note: str
    def __init__(self, run_id: _Optional[str] = ..., fencing_token: _Optional[int] = ..., state: _Optional[_Union[_types_pb2.RunState, str]] = ..., has_exit_code: _Optional[bool] = ..., exit_code: _Optional[int] = ..., reason: _Optional[_Union[_types_pb2.RunReason, str]] = ..., error: _Optional[str] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., ended_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., job_id: _Optional[str] = ..., usage: _Optional[_Union[_types_pb2.RunUsage, _Mapping]] = ..., output_truncated: _Optional[str] = ..., output_dropped_bytes: _Optional[int] = ..., results_note: _Optional[str] = ...) -> None: ...

class Results(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[RunResult]
    def __init__(self, results: _Optional[_Iterable[_Union[RunResult, _Mapping]]] = ...) -> None: ...

class Output(_message.Message):
    __slots__ = ("chunks",)
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    chunks: _containers.RepeatedCompositeFieldContainer[_types_pb2.OutputChunk]
    def __init__(self, chunks: _Optional[_Iterable[_Union[_types_pb2.OutputChunk, _Mapping]]] = ...) -> None: ...

class Welcome(_message.Message):
    __slots__ = ("poller_id", "epoch", "lease_ttl", "heartbeat_interval")
    POLLER_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEASE_TTL_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    poller_id: str
    epoch: int
    lease_ttl: _duration_pb2.Duration
    heartbeat_interval: _duration_pb2.Duration
    def __init__(self, poller_id: _Optional[str] = ..., epoch: _Optional[int] = ..., lease_ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., heartbeat_interval: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class Lease(_message.Message):
    __slots__ = ("run_id", "job_id", "owner", "fencing_token", "attempt", "fire_at", "due_at", "task", "timeout", "lease_ttl", "resources", "job_name", "expires_at")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    FIRE_AT_FIELD_NUMBER: _ClassVar[int]
    DUE_AT_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    LEASE_TTL_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    JOB_NAME_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    job_id: str
    owner: str
    fencing_token: int
    attempt: int
    fire_at: _timestamp_pb2.Timestamp
    due_at: _timestamp_pb2.Timestamp
    task: _types_pb2.Task
    timeout: _duration_pb2.Duration
    lease_ttl: _duration_pb2.Duration
    resources: _types_pb2.Resources
    job_name: str
    expires_at: _timestamp_pb2.Timestamp
    def __init__(self, run_id: _Optional[str] = ..., job_id: _Optional[str] = ..., owner: _Optional[str] = ..., fencing_token: _Optional[int] = ..., attempt: _Optional[int] = ..., fire_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., due_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., task: _Optional[_Union[_types_pb2.Task, _Mapping]] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., lease_ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., resources: _Optional[_Union[_types_pb2.Resources, _Mapping]] = ..., job_name: _Optional[str] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Leases(_message.Message):
    __slots__ = ("leases",)
    LEASES_FIELD_NUMBER: _ClassVar[int]
    leases: _containers.RepeatedCompositeFieldContainer[Lease]
    def __init__(self, leases: _Optional[_Iterable[_Union[Lease, _Mapping]]] = ...) -> None: ...

class Cancel(_message.Message):
    __slots__ = ("run_id", "fencing_token", "reason")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    fencing_token: int
    reason: _types_pb2.RunReason
    def __init__(self, run_id: _Optional[str] = ..., fencing_token: _Optional[int] = ..., reason: _Optional[_Union[_types_pb2.RunReason, str]] = ...) -> None: ...

class Cancels(_message.Message):
    __slots__ = ("cancels",)
    CANCELS_FIELD_NUMBER: _ClassVar[int]
    cancels: _containers.RepeatedCompositeFieldContainer[Cancel]
    def __init__(self, cancels: _Optional[_Iterable[_Union[Cancel, _Mapping]]] = ...) -> None: ...

class Renewal(_message.Message):
    __slots__ = ("run_id", "fencing_token", "ok", "expires_at", "not_owner")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    NOT_OWNER_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    fencing_token: int
    ok: bool
    expires_at: _timestamp_pb2.Timestamp
    not_owner: bool
    def __init__(self, run_id: _Optional[str] = ..., fencing_token: _Optional[int] = ..., ok: _Optional[bool] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., not_owner: _Optional[bool] = ...) -> None: ...

class Renewals(_message.Message):
    __slots__ = ("renewals", "lease_ttl")
    RENEWALS_FIELD_NUMBER: _ClassVar[int]
    LEASE_TTL_FIELD_NUMBER: _ClassVar[int]
    renewals: _containers.RepeatedCompositeFieldContainer[Renewal]
    lease_ttl: _duration_pb2.Duration
    def __init__(self, renewals: _Optional[_Iterable[_Union[Renewal, _Mapping]]] = ..., lease_ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ResultAck(_message.Message):
    __slots__ = ("run_id", "fencing_token", "accepted", "reason", "not_owner")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    NOT_OWNER_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    fencing_token: int
    accepted: bool
    reason: str
    not_owner: bool
    def __init__(self, run_id: _Optional[str] = ..., fencing_token: _Optional[int] = ..., accepted: _Optional[bool] = ..., reason: _Optional[str] = ..., not_owner: _Optional[bool] = ...) -> None: ...

class ResultAcks(_message.Message):
    __slots__ = ("acks",)
    ACKS_FIELD_NUMBER: _ClassVar[int]
    acks: _containers.RepeatedCompositeFieldContainer[ResultAck]
    def __init__(self, acks: _Optional[_Iterable[_Union[ResultAck, _Mapping]]] = ...) -> None: ...

class Demand(_message.Message):
    __slots__ = ("slots",)
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    slots: int
    def __init__(self, slots: _Optional[int] = ...) -> None: ...

class OutputRoom(_message.Message):
    __slots__ = ("paused", "resumed")
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    RESUMED_FIELD_NUMBER: _ClassVar[int]
    paused: _containers.RepeatedCompositeFieldContainer[LeaseRef]
    resumed: _containers.RepeatedCompositeFieldContainer[LeaseRef]
    def __init__(self, paused: _Optional[_Iterable[_Union[LeaseRef, _Mapping]]] = ..., resumed: _Optional[_Iterable[_Union[LeaseRef, _Mapping]]] = ...) -> None: ...

class ResultFilePieces(_message.Message):
    __slots__ = ("pieces",)
    PIECES_FIELD_NUMBER: _ClassVar[int]
    pieces: _containers.RepeatedCompositeFieldContainer[ResultFilePiece]
    def __init__(self, pieces: _Optional[_Iterable[_Union[ResultFilePiece, _Mapping]]] = ...) -> None: ...

class ResultFilePiece(_message.Message):
    __slots__ = ("run_id", "fencing_token", "name", "offset", "data", "last", "size", "sha256")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    fencing_token: int
    name: str
    offset: int
    data: bytes
    last: bool
    size: int
    sha256: str
    def __init__(self, run_id: _Optional[str] = ..., fencing_token: _Optional[int] = ..., name: _Optional[str] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ..., last: _Optional[bool] = ..., size: _Optional[int] = ..., sha256: _Optional[str] = ...) -> None: ...
