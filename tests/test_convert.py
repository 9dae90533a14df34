"""shardcron.client.codec (the job API): domain <-> protobuf round trips, defaults, structural
InvalidArgument paths, and the error <-> gRPC status table in both directions."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from zoneinfo import ZoneInfo

import grpc
import grpc.aio
import pytest

from shardcron.client import codec
from shardcron.client.codec import common as codec_common
from shardcron.client.codec.common import ProtoEnum
from shardcron.client.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    ShardcronError,
    StaleLease,
    Unauthenticated,
    Unavailable,
    VersionConflict,
)
from shardcron.client.types import (
    ClusterStatus,
    CommandTask,
    ConcurrencyPolicy,
    DstGap,
    DstOverlap,
    Fire,
    HandlerTask,
    Job,
    JobSpec,
    JobState,
    LateReason,
    MisfirePolicy,
    OutputChunk,
    OverlapPolicy,
    Resources,
    RetryPolicy,
    Run,
    RunLateness,
    RunReason,
    RunState,
    Schedule,
    ScheduleKind,
    ShardInfo,
    WorkerInfo,
)
from shardcron.v1 import cluster_pb2, types_pb2

T0 = datetime(2026, 3, 29, 0, 30, 15, 123456, tzinfo=UTC)
BERLIN = ZoneInfo("Europe/Berlin")


def full_spec() -> JobSpec:
    """A spec with every field away from its default."""
    return JobSpec(
        name="nightly-report",
        task=CommandTask(argv=("/bin/sh", "-c", "echo hi"), env={"A": "1", "B": "x=y"}, cwd="/tmp"),
        schedule=Schedule(
            kind=ScheduleKind.CRON,
            cron="30 2 * * *",
            timezone="Europe/Berlin",
            start_at=T0,
            end_at=T0 + timedelta(days=365),
            jitter=timedelta(seconds=90, milliseconds=5),
            dst_gap=DstGap.SKIP,
            dst_overlap=DstOverlap.BOTH,
        ),
        priority=-7,
        retry=RetryPolicy(
            max_attempts=5,
            initial_backoff=timedelta(milliseconds=250),
            multiplier=1.5,
            max_backoff=timedelta(minutes=10),
            jitter=0.25,
        ),
        timeout=timedelta(minutes=2, microseconds=7),
        concurrency=ConcurrencyPolicy(max_concurrent=3, overlap=OverlapPolicy.QUEUE),
        misfire=MisfirePolicy.RUN_ALL,
        starting_deadline=timedelta(seconds=45),
        resources=Resources(slots=2, cpu_millis=1500, memory_mb=512, labels={"gpu": "a100"}),
        pause_after_failures=4,
        labels={"team": "data", "tier": "1"},
    )


def full_job() -> Job:
    return Job(
        id="job-1",
        owner="acme",
        spec=full_spec(),
        state=JobState.PAUSED,
        version=9,
        created_at=T0,
        updated_at=T0 + timedelta(hours=1),
        next_fire_at=T0 + timedelta(days=1),
        next_fire_key="2026-03-30T02:30:00+fold0",
        idempotency_key="key-1",
        consecutive_failures=2,
        pause_reason="4 failures in a row",
        schedule_version=7,
    )


def full_run() -> Run:
    return Run(
        id="run-1",
        job_id="job-1",
        owner="acme",
        fire_key="2026-03-29T02:30:00+fold0",
        fire_at=T0,
        due_at=T0 + timedelta(seconds=30),
        state=RunState.FAILED,
        attempt=3,
        priority=5,
        shard=17,
        worker_id="w-1",
        lease_token=(7 << 32) + 12,
        lease_expires_at=T0 + timedelta(minutes=1),
        created_at=T0 - timedelta(seconds=1),
        started_at=T0 + timedelta(seconds=31),
        ended_at=T0 + timedelta(seconds=40),
        exit_code=-9,
        reason=RunReason.NON_ZERO_EXIT,
        error="killed",
        output_bytes=4096,
        output_sha256="9f" * 32,
        output_truncated="blob store unavailable for 45 s",
        replayed_from="run-0",
        dead_letter=True,
        schedule_version=7,
        waiting_reason="no connected worker serves handler resize",
        lateness=RunLateness(
            reason=LateReason.NO_WORKER_WITH_LABELS,
            text="leased 31.0 s after its due time: no worker has label gpu=a100 for 30.5 s",
            waited=timedelta(seconds=30, microseconds=500_000),
        ),
    )


def full_cluster() -> ClusterStatus:
    return ClusterStatus(
        mode="cluster",
        leader="node-a",
        epoch=12,
        members=["node-a", "node-b"],
        shards=[
            ShardInfo(shard=0, owner="node-a", lag_seconds=0.5),
            ShardInfo(shard=1, owner="", lag_seconds=0.0),
        ],
        workers=[
            WorkerInfo(
                id="w-1",
                address="10.0.0.5:7500",
                slots_total=8,
                slots_used=3,
                labels={"gpu": "a100"},
                handlers=("resize", "send-mail"),
                connected_at=T0,
                pollers=("node1", "node2"),
                owners=("team-a", "team-b"),
                handlers_omitted=3,
            ),
            WorkerInfo(id="w-2", address="", slots_total=1, slots_used=0, owners=("*",)),
        ],
        workers_omitted=7,
    )


# --------------------------------------------------------------------------- round trips

SCHEDULES = [
    Schedule.immediate(),
    Schedule.once_at(T0),
    full_spec().schedule,
    Schedule.every(timedelta(minutes=5), anchor=T0, start_at=T0, end_at=T0 + timedelta(days=1)),
    Schedule(kind=ScheduleKind.INTERVAL, interval=timedelta(milliseconds=1500)),
]


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: s.kind.value)
def test_schedule_round_trip(schedule: Schedule) -> None:
    assert codec.schedule_from_proto(codec.schedule_to_proto(schedule)) == schedule


@pytest.mark.parametrize(
    "task",
    [
        CommandTask(argv=("/bin/echo", "hi"), env={"K": "V"}, cwd="/srv"),
        CommandTask(argv=("true",)),
        HandlerTask(name="resize", payload=b"\x00\xffbinary"),
        HandlerTask(name="noop"),
    ],
)
def test_task_round_trip(task: CommandTask | HandlerTask) -> None:
    assert codec.task_from_proto(codec.task_to_proto(task)) == task


def test_job_spec_round_trip_every_field_set() -> None:
    spec = full_spec()
    assert codec.job_spec_from_proto(codec.job_spec_to_proto(spec)) == spec


def test_job_spec_round_trip_handler_and_defaults() -> None:
    spec = JobSpec(name="h", task=HandlerTask(name="resize", payload=b"{}"))
    assert codec.job_spec_from_proto(codec.job_spec_to_proto(spec)) == spec


def test_job_round_trip() -> None:
    job = full_job()
    assert codec.job_from_proto(codec.job_to_proto(job)) == job


def test_run_round_trip() -> None:
    run = full_run()
    assert codec.run_from_proto(codec.run_to_proto(run)) == run


@pytest.mark.parametrize("exit_code", [None, 0, 1, -15])
def test_run_exit_code_none_is_not_zero(exit_code: int | None) -> None:
    run = Run(
        id="r",
        job_id="j",
        owner="o",
        fire_key="k",
        fire_at=T0,
        due_at=T0,
        state=RunState.SUCCEEDED,
        exit_code=exit_code,
    )
    back = codec.run_from_proto(codec.run_to_proto(run))
    assert back == run
    assert back.exit_code == exit_code


def test_fire_round_trip_keeps_local_offset() -> None:
    local = datetime(2026, 10, 25, 2, 30, tzinfo=BERLIN, fold=1)
    fire = Fire(
        key="2026-10-25T02:30:00+fold1",
        at=local.astimezone(UTC),
        local=local,
        skip_reason=RunReason.DST_GAP,
    )
    msg = codec.fire_to_proto(fire)
    assert msg.local_time == "2026-10-25T02:30:00+01:00"
    back = codec.fire_from_proto(msg)
    # The zone name is not on the wire: local comes back with a fixed offset, and Python
    # never calls a repeated wall time equal across zones (PEP 495), so compare the parts.
    assert (back.key, back.at, back.skip_reason) == (fire.key, fire.at, fire.skip_reason)
    assert back.local.utcoffset() == timedelta(hours=1)
    assert back.local.replace(tzinfo=None) == datetime(2026, 10, 25, 2, 30)
    assert back.local.timestamp() == fire.local.timestamp()


def test_fire_round_trip() -> None:
    local = datetime(2026, 3, 30, 9, 0, tzinfo=BERLIN)
    fire = Fire(key="2026-03-30T09:00:00+fold0", at=local.astimezone(UTC), local=local)
    assert codec.fire_from_proto(codec.fire_to_proto(fire)) == fire


def test_output_chunk_round_trip() -> None:
    chunk = OutputChunk(run_id="r", offset=1 << 40, data=b"\x00line\n", stream="stderr", eof=True)
    assert codec.output_chunk_from_proto(codec.output_chunk_to_proto(chunk)) == chunk


def test_worker_info_round_trip() -> None:
    for worker in full_cluster().workers:
        assert codec.worker_info_from_proto(codec.worker_info_to_proto(worker)) == worker


def test_cluster_status_round_trip() -> None:
    status = full_cluster()
    assert codec.cluster_status_from_proto(codec.cluster_status_to_proto(status)) == status


def test_times_come_back_aware_utc_to_the_microsecond() -> None:
    at = datetime(2026, 1, 1, 12, 0, 0, 999999, tzinfo=ZoneInfo("Asia/Tokyo"))
    back = codec.schedule_from_proto(codec.schedule_to_proto(Schedule.once_at(at)))
    assert back.at == at
    assert back.at is not None and back.at.tzinfo is UTC
    assert back.at.microsecond == 999999


# --------------------------------------------------------------------------- enums

ENUMS: list[tuple[ProtoEnum, object, str]] = [
    (codec_common.SCHEDULE_KIND, types_pb2.ScheduleKind, "SCHEDULE_KIND_"),
    (codec_common.DST_GAP, types_pb2.DstGap, "DST_GAP_"),
    (codec_common.DST_OVERLAP, types_pb2.DstOverlap, "DST_OVERLAP_"),
    (codec_common.OVERLAP_POLICY, types_pb2.OverlapPolicy, "OVERLAP_POLICY_"),
    (codec_common.MISFIRE_POLICY, types_pb2.MisfirePolicy, "MISFIRE_POLICY_"),
    (codec_common.JOB_STATE, types_pb2.JobState, "JOB_STATE_"),
    (codec_common.RUN_STATE, types_pb2.RunState, "RUN_STATE_"),
    (codec_common.RUN_REASON, types_pb2.RunReason, "RUN_REASON_"),
    (codec_common.LATE_REASON, types_pb2.LateReason, "LATE_REASON_"),
]


@pytest.mark.parametrize(
    ("table", "pb_enum", "prefix"),
    ENUMS,
    ids=lambda x: x.domain.__name__ if isinstance(x, ProtoEnum) else None,
)
def test_every_enum_value_maps_both_ways(table: ProtoEnum, pb_enum: object, prefix: str) -> None:
    domain = table.domain
    proto_names = {v.name.removeprefix(prefix) for v in pb_enum.DESCRIPTOR.values} - {"UNSPECIFIED"}  # type: ignore[attr-defined]
    assert proto_names == {m.value for m in domain if m.value}
    for member in domain:
        number = table.to_proto(member)
        assert number == pb_enum.Value(prefix + (member.value or "UNSPECIFIED"))  # type: ignore[attr-defined]
        assert table.from_proto(number, "f") is member
        assert table.to_proto(member.value) == number, "its text maps as the member does"
        assert table.by_number.get(number, member) is member
    for bad in ("NO_SUCH_VALUE", ["unhashable"], 3):
        with pytest.raises(InvalidArgument, match="unknown value"):
            table.to_proto(bad)  # type: ignore[arg-type]


def test_an_enum_table_missing_a_schema_value_fails_at_build() -> None:
    class Partial(StrEnum):
        ACTIVE = "ACTIVE"

    with pytest.raises(TypeError, match="JOB_STATE_PAUSED"):
        ProtoEnum(Partial, types_pb2.JobState, "JOB_STATE_")


def test_run_state_succeeded_maps_by_prefix() -> None:
    assert codec.run_state_to_proto(RunState.SUCCEEDED) == types_pb2.RUN_STATE_SUCCEEDED
    assert codec.run_state_from_proto(types_pb2.RUN_STATE_SUCCEEDED) is RunState.SUCCEEDED
    assert codec.run_reason_to_proto(RunReason.NONE) == types_pb2.RUN_REASON_UNSPECIFIED
    assert codec.run_reason_from_proto(types_pb2.RUN_REASON_UNSPECIFIED) is RunReason.NONE
    assert codec.job_state_from_proto(types_pb2.JOB_STATE_PAUSED) is JobState.PAUSED


# --------------------------------------------------------------------------- defaults


def test_empty_schedule_reads_as_documented_defaults() -> None:
    s = codec.schedule_from_proto(types_pb2.Schedule())
    assert s == Schedule()
    assert (s.kind, s.dst_gap, s.dst_overlap, s.timezone) == (
        ScheduleKind.IMMEDIATE,
        DstGap.SHIFT,
        DstOverlap.FIRST,
        "UTC",
    )
    assert s.jitter == timedelta(0)
    assert s.at is s.anchor is s.start_at is s.end_at is s.interval is s.cron is None


def test_minimal_spec_reads_as_dataclass_defaults() -> None:
    msg = types_pb2.JobSpec(
        name="n", task=types_pb2.Task(command=types_pb2.CommandTask(argv=["true"]))
    )
    spec = codec.job_spec_from_proto(msg)
    assert spec == JobSpec(name="n", task=CommandTask(argv=("true",)))
    assert spec.misfire is MisfirePolicy.RUN_ONCE
    assert spec.concurrency.overlap is OverlapPolicy.ALLOW
    assert spec.timeout is None and spec.starting_deadline is None


def test_zero_numbers_read_as_documented_defaults() -> None:
    msg = types_pb2.JobSpec(
        name="n",
        task=types_pb2.Task(handler=types_pb2.HandlerTask(name="h")),
        retry=types_pb2.RetryPolicy(),
        resources=types_pb2.Resources(),
        concurrency=types_pb2.ConcurrencyPolicy(max_concurrent=0),
    )
    spec = codec.job_spec_from_proto(msg)
    assert spec.retry == RetryPolicy()  # max_attempts 0 = 3, multiplier 0 = 2.0
    assert spec.retry.max_attempts == 3
    assert spec.resources.slots == 1  # 0 = 1
    assert spec.concurrency == ConcurrencyPolicy(max_concurrent=0)  # kept: the server reads 0


def test_run_unset_optional_fields() -> None:
    msg = types_pb2.Run(id="r", job_id="j", state=types_pb2.RUN_STATE_PENDING)
    msg.fire_at.FromDatetime(T0)
    msg.due_at.FromDatetime(T0)
    run = codec.run_from_proto(msg)
    assert run.reason is RunReason.NONE
    assert run.exit_code is None
    assert run.started_at is run.ended_at is run.lease_expires_at is run.created_at is None
    assert run.attempt == 1
    assert run.lateness is None


def test_output_chunk_and_cluster_defaults() -> None:
    assert codec.output_chunk_from_proto(types_pb2.OutputChunk(run_id="r")).stream == "stdout"
    assert codec.cluster_status_from_proto(cluster_pb2.ClusterStatus()).mode == "dev"


def test_fire_without_local_time_reads_utc() -> None:
    msg = types_pb2.Fire(key="k")
    msg.at.FromDatetime(T0)
    assert codec.fire_from_proto(msg).local == T0


# --------------------------------------------------------------------------- structural errors


def valid_spec_proto() -> types_pb2.JobSpec:
    return codec.job_spec_to_proto(full_spec())


def _no_task(m: types_pb2.JobSpec) -> None:
    m.ClearField("task")


def _empty_argv(m: types_pb2.JobSpec) -> None:
    del m.task.command.argv[:]


def _handler_without_name(m: types_pb2.JobSpec) -> None:
    m.task.handler.name = ""


def _at_without_at(m: types_pb2.JobSpec) -> None:
    m.schedule.kind = types_pb2.SCHEDULE_KIND_AT


def _cron_without_cron(m: types_pb2.JobSpec) -> None:
    m.schedule.cron = ""


def _interval_without_interval(m: types_pb2.JobSpec) -> None:
    m.schedule.kind = types_pb2.SCHEDULE_KIND_INTERVAL


def _negative(path: str) -> Callable[[types_pb2.JobSpec], None]:
    def mutate(m: types_pb2.JobSpec) -> None:
        *parents, name = path.split(".")
        msg = m
        for p in parents:
            msg = getattr(msg, p)
        getattr(msg, name).FromTimedelta(timedelta(seconds=-1))

    return mutate


def _bad_timestamp(m: types_pb2.JobSpec) -> None:
    m.schedule.start_at.seconds = 10**13


def _set(path: str, value: object) -> Callable[[types_pb2.JobSpec], None]:
    def mutate(m: types_pb2.JobSpec) -> None:
        *parents, name = path.split(".")
        msg = m
        for p in parents:
            msg = getattr(msg, p)
        setattr(msg, name, value)

    return mutate


STRUCTURAL = [
    (_no_task, "spec.task"),
    (_empty_argv, "spec.task.command.argv"),
    (_set("name", ""), "spec.name"),
    (_at_without_at, "spec.schedule.at"),
    (_cron_without_cron, "spec.schedule.cron"),
    (_interval_without_interval, "spec.schedule.interval"),
    (_set("retry.multiplier", -1.0), "spec.retry.multiplier"),
    (_set("retry.multiplier", float("nan")), "spec.retry.multiplier"),
    (_set("retry.jitter", 1.5), "spec.retry.jitter"),
    (_set("retry.max_attempts", -1), "spec.retry.max_attempts"),
    (_negative("timeout"), "spec.timeout"),
    (_negative("starting_deadline"), "spec.starting_deadline"),
    (_negative("schedule.jitter"), "spec.schedule.jitter"),
    (_negative("retry.initial_backoff"), "spec.retry.initial_backoff"),
    (_bad_timestamp, "spec.schedule.start_at"),
    (_set("schedule.kind", 42), "spec.schedule.kind"),
    (_set("schedule.dst_gap", 99), "spec.schedule.dst_gap"),
    (_set("schedule.dst_overlap", 3), "spec.schedule.dst_overlap"),
    (_set("misfire", 7), "spec.misfire"),
    (_set("concurrency.overlap", 9), "spec.concurrency.overlap"),
    (_set("concurrency.max_concurrent", -2), "spec.concurrency.max_concurrent"),
    (_set("resources.slots", -1), "spec.resources.slots"),
    (_set("resources.memory_mb", -1), "spec.resources.memory_mb"),
    (_set("pause_after_failures", -1), "spec.pause_after_failures"),
]


@pytest.mark.parametrize(("mutate", "path"), STRUCTURAL, ids=[p for _, p in STRUCTURAL])
def test_malformed_spec_names_the_field(
    mutate: Callable[[types_pb2.JobSpec], None], path: str
) -> None:
    msg = valid_spec_proto()
    mutate(msg)
    with pytest.raises(InvalidArgument) as info:
        codec.job_spec_from_proto(msg)
    assert info.value.field == path
    assert info.value.reason
    assert str(info.value) == f"{path}: {info.value.reason}"


def test_handler_without_name_names_the_field() -> None:
    msg = codec.job_spec_to_proto(JobSpec(name="n", task=HandlerTask(name="h")))
    _handler_without_name(msg)
    with pytest.raises(InvalidArgument) as info:
        codec.job_spec_from_proto(msg)
    assert info.value.field == "spec.task.handler.name"


def test_field_prefix_is_the_callers() -> None:
    msg = valid_spec_proto()
    msg.ClearField("task")
    with pytest.raises(InvalidArgument) as info:
        codec.job_spec_from_proto(msg, field="jobs[2].spec")
    assert info.value.field == "jobs[2].spec.task"


def test_semantic_checks_are_left_to_the_server() -> None:
    msg = valid_spec_proto()
    msg.schedule.cron = "not a cron"
    msg.schedule.timezone = "Mars/Olympus"
    spec = codec.job_spec_from_proto(msg)
    assert (spec.schedule.cron, spec.schedule.timezone) == ("not a cron", "Mars/Olympus")


def test_run_without_state_or_times_is_invalid() -> None:
    with pytest.raises(InvalidArgument) as info:
        codec.run_from_proto(types_pb2.Run(id="r"))
    assert info.value.field == "run.fire_at"
    msg = codec.run_to_proto(full_run())
    msg.state = types_pb2.RUN_STATE_UNSPECIFIED
    with pytest.raises(InvalidArgument) as info:
        codec.run_from_proto(msg)
    assert info.value.field == "run.state"


# --------------------------------------------------------------------------- errors <-> status


class FakeRpcError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


def test_error_code_table() -> None:
    assert {
        InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
        NotFound: grpc.StatusCode.NOT_FOUND,
        VersionConflict: grpc.StatusCode.ABORTED,
        FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
        StaleLease: grpc.StatusCode.FAILED_PRECONDITION,
        AlreadyExists: grpc.StatusCode.ALREADY_EXISTS,
        Unavailable: grpc.StatusCode.UNAVAILABLE,
        Unauthenticated: grpc.StatusCode.UNAUTHENTICATED,
        PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
        ResourceExhausted: grpc.StatusCode.RESOURCE_EXHAUSTED,
    } == codec.ERROR_CODES
    for cls, code in codec.ERROR_CODES.items():
        assert cls.code == code.name  # the class attribute agrees with the table


@pytest.mark.parametrize(
    ("exc", "status"),
    [
        (InvalidArgument("spec.cron", "bad"), (grpc.StatusCode.INVALID_ARGUMENT, "spec.cron: bad")),
        (NotFound("job j"), (grpc.StatusCode.NOT_FOUND, "job j")),
        (VersionConflict("at 3"), (grpc.StatusCode.ABORTED, "at 3")),
        (FailedPrecondition("deleted"), (grpc.StatusCode.FAILED_PRECONDITION, "deleted")),
        (StaleLease("token 5"), (grpc.StatusCode.FAILED_PRECONDITION, "token 5")),
        (AlreadyExists("dup"), (grpc.StatusCode.ALREADY_EXISTS, "dup")),
        (Unavailable("store down"), (grpc.StatusCode.UNAVAILABLE, "store down")),
        (Unauthenticated("no token"), (grpc.StatusCode.UNAUTHENTICATED, "no token")),
        (PermissionDenied("not yours"), (grpc.StatusCode.PERMISSION_DENIED, "not yours")),
        (ResourceExhausted("max_jobs: 5"), (grpc.StatusCode.RESOURCE_EXHAUSTED, "max_jobs: 5")),
        (ShardcronError("odd"), (grpc.StatusCode.UNKNOWN, "odd")),
        (KeyError("x"), (grpc.StatusCode.INTERNAL, "internal error: KeyError: 'x'")),
    ],
)
def test_status_for(exc: BaseException, status: tuple[grpc.StatusCode, str]) -> None:
    assert codec.status_for(exc) == status


def test_status_for_subclass_of_a_domain_error() -> None:
    class JobGone(NotFound):
        pass

    assert codec.status_for(JobGone("j")) == (grpc.StatusCode.NOT_FOUND, "j")


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        (grpc.StatusCode.NOT_FOUND, NotFound),
        (grpc.StatusCode.ABORTED, VersionConflict),
        (grpc.StatusCode.FAILED_PRECONDITION, FailedPrecondition),
        (grpc.StatusCode.ALREADY_EXISTS, AlreadyExists),
        (grpc.StatusCode.UNAVAILABLE, Unavailable),
        (grpc.StatusCode.DEADLINE_EXCEEDED, Unavailable),
    ],
)
def test_error_from_rpc_maps_codes(code: grpc.StatusCode, cls: type[ShardcronError]) -> None:
    err = codec.error_from_rpc(FakeRpcError(code, "what happened"))
    assert type(err) is cls
    assert err.message == "what happened"
    assert err.code == code.name


def test_error_from_rpc_splits_invalid_argument() -> None:
    err = codec.error_from_rpc(
        FakeRpcError(grpc.StatusCode.INVALID_ARGUMENT, "spec.schedule.cron: must have 5 fields")
    )
    assert isinstance(err, InvalidArgument)
    assert (err.field, err.reason) == ("spec.schedule.cron", "must have 5 fields")
    assert str(err) == "spec.schedule.cron: must have 5 fields"


def test_error_from_rpc_invalid_argument_without_field() -> None:
    err = codec.error_from_rpc(FakeRpcError(grpc.StatusCode.INVALID_ARGUMENT, "bad request"))
    assert isinstance(err, InvalidArgument)
    assert (err.field, err.reason, err.message, str(err)) == (
        "",
        "bad request",
        "bad request",
        "bad request",
    )


def test_error_from_rpc_unknown_code_keeps_it() -> None:
    err = codec.error_from_rpc(FakeRpcError(grpc.StatusCode.DATA_LOSS, "no"))
    assert type(err) is ShardcronError
    assert err.code == "DATA_LOSS"
    assert err.message == "no"
    assert ShardcronError.code == "UNKNOWN"  # the instance attribute did not leak


def test_error_from_rpc_reads_a_real_aio_error() -> None:
    e = grpc.aio.AioRpcError(
        grpc.StatusCode.NOT_FOUND,
        grpc.aio.Metadata(),
        grpc.aio.Metadata(),
        details="job job-9",
    )
    err = codec.error_from_rpc(e)
    assert isinstance(err, NotFound)
    assert err.message == "job job-9"


@pytest.mark.parametrize(
    "exc",
    [
        InvalidArgument("spec.timeout", "must not be negative"),
        NotFound("run r"),
        VersionConflict("job at version 4"),
        FailedPrecondition("job is deleted"),
        AlreadyExists("dup"),
        Unavailable("no leader"),
    ],
)
def test_errors_survive_the_wire(exc: ShardcronError) -> None:
    code, message = codec.status_for(exc)
    back = codec.error_from_rpc(FakeRpcError(code, message))
    assert type(back) is type(exc)
    assert str(back) == str(exc)
    if isinstance(exc, InvalidArgument):
        assert isinstance(back, InvalidArgument)
        assert (back.field, back.reason) == (exc.field, exc.reason)


# --------------------------------------------------------------------------- servicer reads


class _Aborted(Exception):
    pass


class _Context:
    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise _Aborted(code, details)

    def invocation_metadata(self) -> tuple[()]:
        return ()


async def test_preview_fires_with_an_invalid_after_is_invalid_argument() -> None:
    """A malformed ``after`` used to reach Timestamp.ToDatetime in the servicer and
    come back as INTERNAL."""
    from shardcron.coordinator.service import JobServiceServicer
    from shardcron.v1 import jobs_pb2

    request = jobs_pb2.PreviewFiresRequest(
        schedule=codec.schedule_to_proto(Schedule.every(timedelta(minutes=1))), count=1
    )
    request.after.seconds = 10
    request.after.nanos = -1
    with pytest.raises(_Aborted) as e:
        await JobServiceServicer(api=None).PreviewFires(request, _Context())  # type: ignore[arg-type]
    assert e.value.args == (grpc.StatusCode.INVALID_ARGUMENT, "after: not a valid timestamp")
