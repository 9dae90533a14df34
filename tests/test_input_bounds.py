"""Bad input gets INVALID_ARGUMENT naming the field and changes nothing: every duration,
time, multiplier, count, id and string a user sends is bounded (``shardcron.client.limits``).

Each case drives a real node (api, poller and coordinator on SQLite, built in-process
on port 0) with raw gRPC stubs, as a client in any language would, and checks that
nothing was stored. The SDK and CLI cases are in ``test_input_bounds_client``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path

import grpc
import grpc.aio
import pytest
import pytest_asyncio
from google.protobuf.message import Message

from shardcron.client import limits
from shardcron.coordinator.coordination import LocalCoordination
from shardcron.coordinator.node import Node, NodeConfig
from shardcron.coordinator.sqlite.store import SqliteStore
from shardcron.v1 import jobs_pb2, jobs_pb2_grpc, types_pb2, worker_pb2

pytestmark = pytest.mark.asyncio(loop_scope="module")

OWNER = "bounds"
METADATA = (("x-shardcron-owner", OWNER),)
TEN_THOUSAND_YEARS = 315_576_000_000  # seconds: the top of protobuf's Duration range
SHARDS = 8


class Api:
    """A running node and raw stubs onto it."""

    def __init__(self, node: Node, channel: grpc.aio.Channel) -> None:
        self.node = node
        self.channel = channel
        self.stub = jobs_pb2_grpc.JobServiceStub(channel)

    async def status(self, method: str, request: object) -> tuple[grpc.StatusCode, str]:
        """The status of calling ``method`` with ``request`` (OK and "" on success)."""
        try:
            await getattr(self.stub, method)(request, metadata=METADATA, timeout=10)
        except grpc.aio.AioRpcError as e:
            return e.code(), e.details() or ""
        return grpc.StatusCode.OK, ""

    async def raw_status(self, method: str, data: bytes) -> tuple[grpc.StatusCode, str]:
        """The status of sending the bytes ``data`` as the request of unary ``method``."""
        call = self.channel.unary_unary(
            f"/shardcron.v1.JobService/{method}",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        try:
            await call(data, metadata=METADATA, timeout=10)
        except grpc.aio.AioRpcError as e:
            return e.code(), e.details() or ""
        return grpc.StatusCode.OK, ""

    async def stored_jobs(self) -> int:
        return len((await self.node.raw_store.list_jobs(OWNER, page_size=1000)).items)

    async def assert_rejected(self, method: str, request: object, field: str) -> str:
        """The call fails with INVALID_ARGUMENT naming ``field``, and no job is stored."""
        code, details = await self.status(method, request)
        assert (code, details.partition(": ")[0]) == (grpc.StatusCode.INVALID_ARGUMENT, field), (
            details
        )
        assert await self.stored_jobs() == 0
        return details


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def api(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Api]:
    data: Path = tmp_path_factory.mktemp("bounds")
    store = SqliteStore(data / "shardcron.db", shard_count=SHARDS)
    config = NodeConfig(listen="127.0.0.1:0", node_id="bounds")
    node = Node(store, LocalCoordination(data, shard_count=SHARDS, node_id="bounds"), config)
    await node.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{node.port}")
    try:
        yield Api(node, channel)
    finally:
        await channel.close()
        await node.stop()


def _parent(msg: Message, path: str) -> tuple[Message, str]:
    """The message holding the field at dotted ``path`` of ``msg``, and the field's name."""
    *parents, name = path.split(".")
    for p in parents:
        msg = getattr(msg, p)
    return msg, name


def spec(**changes: object) -> types_pb2.JobSpec:
    """A valid spec with ``changes`` (``retry__multiplier=...`` for ``retry.multiplier``)."""
    msg = types_pb2.JobSpec(
        name="victim", task=types_pb2.Task(command=types_pb2.CommandTask(argv=["true"]))
    )
    for path, value in changes.items():
        setattr(*_parent(msg, path.replace("__", ".")), value)
    return msg


def create(msg: types_pb2.JobSpec, key: str = "") -> jobs_pb2.CreateJobRequest:
    return jobs_pb2.CreateJobRequest(spec=msg, idempotency_key=key)


def set_duration(msg: types_pb2.JobSpec, path: str, seconds: int, nanos: int = 0) -> None:
    parent, name = _parent(msg, path)
    getattr(parent, name).seconds = seconds
    getattr(parent, name).nanos = nanos


def with_duration(path: str, seconds: int, nanos: int = 0) -> types_pb2.JobSpec:
    msg = spec()
    set_duration(msg, path, seconds, nanos)
    return msg


# --------------------------------------------------------------------------- issue item 1


async def test_a_starting_deadline_of_ten_thousand_years_is_invalid_argument(api: Api) -> None:
    msg = with_duration("starting_deadline", TEN_THOUSAND_YEARS)
    await api.assert_rejected("CreateJob", create(msg), "spec.starting_deadline")


async def test_backoffs_of_ten_thousand_years_are_invalid_argument(api: Api) -> None:
    msg = spec(retry__max_attempts=3)
    msg.retry.initial_backoff.seconds = TEN_THOUSAND_YEARS
    msg.retry.max_backoff.seconds = TEN_THOUSAND_YEARS
    await api.assert_rejected("CreateJob", create(msg), "spec.retry.initial_backoff")
    msg.retry.initial_backoff.seconds = 1
    await api.assert_rejected("CreateJob", create(msg), "spec.retry.max_backoff")


@pytest.mark.parametrize("multiplier", [1e300, float("nan"), float("inf"), -1.0, 0.5, 100.5])
async def test_a_multiplier_out_of_bounds_is_invalid_argument(api: Api, multiplier: float) -> None:
    msg = spec(retry__max_attempts=3, retry__multiplier=multiplier)
    await api.assert_rejected("CreateJob", create(msg), "spec.retry.multiplier")


def _at(seconds: int) -> Callable[[types_pb2.JobSpec], None]:
    def mutate(msg: types_pb2.JobSpec) -> None:
        msg.schedule.kind = types_pb2.SCHEDULE_KIND_AT
        msg.schedule.at.seconds = seconds

    return mutate


def _time(name: str, seconds: int) -> Callable[[types_pb2.JobSpec], None]:
    def mutate(msg: types_pb2.JobSpec) -> None:
        msg.schedule.kind = types_pb2.SCHEDULE_KIND_INTERVAL
        msg.schedule.interval.seconds = 60
        getattr(msg.schedule, name).seconds = seconds

    return mutate


def _duration(path: str, seconds: int) -> Callable[[types_pb2.JobSpec], None]:
    def mutate(msg: types_pb2.JobSpec) -> None:
        if path == "schedule.interval":
            msg.schedule.kind = types_pb2.SCHEDULE_KIND_INTERVAL
        set_duration(msg, path, seconds)

    return mutate


def _scalar(path: str, value: object) -> Callable[[types_pb2.JobSpec], None]:
    def mutate(msg: types_pb2.JobSpec) -> None:
        setattr(*_parent(msg, path), value)

    return mutate


OVER_TEN_YEARS = int(limits.MAX_DURATION.total_seconds()) + 1
LATEST = int(limits.LATEST_TIME.timestamp())
OUT_OF_BOUNDS = [
    (_duration("timeout", OVER_TEN_YEARS), "spec.timeout"),
    (_duration("schedule.jitter", OVER_TEN_YEARS), "spec.schedule.jitter"),
    (_duration("schedule.interval", OVER_TEN_YEARS), "spec.schedule.interval"),
    (_at(-1), "spec.schedule.at"),
    (_at(LATEST), "spec.schedule.at"),
    (_time("anchor", LATEST), "spec.schedule.anchor"),
    (_time("start_at", -86400), "spec.schedule.start_at"),
    (_time("end_at", LATEST + 1), "spec.schedule.end_at"),
    (_scalar("priority", limits.MAX_PRIORITY + 1), "spec.priority"),
    (_scalar("retry.max_attempts", limits.MAX_ATTEMPTS + 1), "spec.retry.max_attempts"),
    (_scalar("resources.slots", limits.MAX_SLOTS + 1), "spec.resources.slots"),
    (_scalar("resources.cpu_millis", limits.MAX_CPU_MILLIS + 1), "spec.resources.cpu_millis"),
    (_scalar("resources.memory_mb", limits.MAX_MEMORY_MB + 1), "spec.resources.memory_mb"),
    (_scalar("resources.pids_limit", limits.MAX_PIDS_LIMIT + 1), "spec.resources.pids_limit"),
    (_scalar("resources.pids_limit", -1), "spec.resources.pids_limit"),
    (
        _scalar("resources.output_limit_bytes", limits.MAX_OUTPUT_LIMIT + 1),
        "spec.resources.output_limit_bytes",
    ),
    (_scalar("resources.output_limit_bytes", -1), "spec.resources.output_limit_bytes"),
    (
        _scalar("resources.results.max_files", limits.MAX_RESULT_FILES + 1),
        "spec.resources.results.max_files",
    ),
    (
        _scalar("resources.results.max_file_bytes", limits.MAX_RESULT_FILE_BYTES + 1),
        "spec.resources.results.max_file_bytes",
    ),
    (
        _scalar("resources.results.max_bytes", limits.MAX_RESULT_BYTES + 1),
        "spec.resources.results.max_bytes",
    ),
    (_scalar("resources.results.max_bytes", -1), "spec.resources.results.max_bytes"),
    (
        _scalar("concurrency.max_concurrent", limits.MAX_CONCURRENT + 1),
        "spec.concurrency.max_concurrent",
    ),
    (
        _scalar("pause_after_failures", limits.MAX_PAUSE_AFTER_FAILURES + 1),
        "spec.pause_after_failures",
    ),
    (_scalar("name", "n" * (limits.MAX_NAME + 1)), "spec.name"),
    (_scalar("schedule.timezone", "Z" * 10_000), "spec.schedule.timezone"),
    (_scalar("task.command.cwd", "/" * (limits.MAX_CWD + 1)), "spec.task.command.cwd"),
]


@pytest.mark.parametrize(("mutate", "field"), OUT_OF_BOUNDS, ids=[f for _, f in OUT_OF_BOUNDS])
async def test_every_bound_of_a_spec_is_invalid_argument_naming_the_field(
    api: Api, mutate: Callable[[types_pb2.JobSpec], None], field: str
) -> None:
    msg = spec()
    mutate(msg)
    await api.assert_rejected("CreateJob", create(msg), field)


async def test_the_largest_values_allowed_are_accepted(api: Api) -> None:
    """The bounds are inclusive where they say so: a spec at every upper bound is taken."""
    msg = spec(
        priority=limits.MAX_PRIORITY,
        retry__max_attempts=limits.MAX_ATTEMPTS,
        retry__multiplier=limits.MAX_MULTIPLIER,
    )
    ten_years = int(limits.MAX_DURATION.total_seconds())
    for path in ("timeout", "starting_deadline", "retry.initial_backoff", "retry.max_backoff"):
        _duration(path, ten_years)(msg)
    msg.schedule.kind = types_pb2.SCHEDULE_KIND_AT
    msg.schedule.at.seconds = LATEST - 1
    msg.schedule.jitter.seconds = ten_years
    resp = await api.stub.CreateJob(create(msg), metadata=METADATA, timeout=10)
    assert resp.created
    await api.stub.DeleteJob(
        jobs_pb2.DeleteJobRequest(job_id=resp.job.id), metadata=METADATA, timeout=10
    )


# --------------------------------------------------------------------------- issue item 5

NUL_CASES = {
    "argv": (lambda m: m.task.command.argv.append("a\0b"), "spec.task.command.argv[1]"),
    "env_value": (lambda m: m.task.command.env.update(X="a\0b"), "spec.task.command.env[X]"),
    "env_key": (lambda m: m.task.command.env.update({"X\0Y": "v"}), "spec.task.command.env[X\0Y]"),
    "cwd": (lambda m: setattr(m.task.command, "cwd", "/tmp\0x"), "spec.task.command.cwd"),
    "name": (lambda m: setattr(m, "name", "a\0b"), "spec.name"),
    "label_value": (lambda m: m.labels.update(team="a\0b"), "spec.labels[team]"),
    "label_key": (lambda m: m.labels.update({"te\0am": "a"}), "spec.labels[te\0am]"),
    "resource_label": (
        lambda m: m.resources.labels.update(gpu="a\0"),
        "spec.resources.labels[gpu]",
    ),
    "handler_name": (
        lambda m: m.task.handler.CopyFrom(types_pb2.HandlerTask(name="billing\0x")),
        "spec.task.handler.name",
    ),
}


@pytest.mark.parametrize("case", NUL_CASES)
async def test_a_nul_byte_is_invalid_argument_naming_the_field(api: Api, case: str) -> None:
    mutate, field = NUL_CASES[case]
    msg = spec()
    mutate(msg)
    await api.assert_rejected("CreateJob", create(msg), field)


async def test_a_nul_byte_in_argv_is_invalid_argument(api: Api) -> None:
    msg = spec()
    msg.task.command.argv[:] = ["echo", "a\0b"]
    details = await api.assert_rejected("CreateJob", create(msg), "spec.task.command.argv[1]")
    assert "NUL" in details


async def test_a_nul_byte_in_the_idempotency_key_is_invalid_argument(api: Api) -> None:
    await api.assert_rejected("CreateJob", create(spec(), key="k\0k"), "idempotency_key")


async def test_a_duration_with_seconds_and_nanos_of_opposite_signs_is_invalid_argument(
    api: Api,
) -> None:
    msg = with_duration("timeout", 1, -5)
    await api.assert_rejected("CreateJob", create(msg), "spec.timeout")


async def test_a_duration_just_past_protobuf_range_is_invalid_argument(api: Api) -> None:
    msg = with_duration("timeout", TEN_THOUSAND_YEARS + 1)
    await api.assert_rejected("CreateJob", create(msg), "spec.timeout")


@pytest.mark.parametrize(
    ("seconds", "nanos"),
    [(10, -1), (10**13, 0), (-62_135_596_800, 0), (LATEST, 0), (253_402_300_799, 0)],
)
async def test_preview_fires_with_a_bad_after_is_invalid_argument(
    api: Api, seconds: int, nanos: int
) -> None:
    request = jobs_pb2.PreviewFiresRequest(
        schedule=types_pb2.Schedule(kind=types_pb2.SCHEDULE_KIND_CRON, cron="* * * * *"), count=5
    )
    request.after.seconds, request.after.nanos = seconds, nanos
    code, details = await api.status("PreviewFires", request)
    assert (code, details.partition(":")[0]) == (grpc.StatusCode.INVALID_ARGUMENT, "after")


async def test_preview_fires_never_goes_past_year_9000(api: Api) -> None:
    request = jobs_pb2.PreviewFiresRequest(
        schedule=types_pb2.Schedule(kind=types_pb2.SCHEDULE_KIND_INTERVAL), count=1000
    )
    request.schedule.interval.seconds = int(limits.MAX_DURATION.total_seconds())
    request.after.seconds = LATEST - 86400
    resp = await api.stub.PreviewFires(request, metadata=METADATA, timeout=10)
    assert all(f.at.seconds < LATEST for f in resp.fires)


async def test_update_job_with_expected_version_2_63_minus_1_is_invalid_argument(
    api: Api,
) -> None:
    job = (await api.stub.CreateJob(create(spec()), metadata=METADATA, timeout=10)).job
    try:
        for method, request in [
            (
                "UpdateJob",
                jobs_pb2.UpdateJobRequest(job_id=job.id, expected_version=2**63 - 1, spec=spec()),
            ),
            ("PauseJob", jobs_pb2.JobRef(job_id=job.id, expected_version=2**63 - 1)),
            ("DeleteJob", jobs_pb2.DeleteJobRequest(job_id=job.id, expected_version=-1)),
        ]:
            code, details = await api.status(method, request)
            assert code == grpc.StatusCode.INVALID_ARGUMENT, (method, details)
            assert details.startswith("expected_version: ")
        stored = await api.stub.GetJob(
            jobs_pb2.GetJobRequest(job_id=job.id), metadata=METADATA, timeout=10
        )
        assert (stored.version, stored.state) == (1, types_pb2.JOB_STATE_ACTIVE)
    finally:
        await api.stub.DeleteJob(
            jobs_pb2.DeleteJobRequest(job_id=job.id), metadata=METADATA, timeout=10
        )


async def test_an_at_of_year_9999_with_a_day_of_jitter_is_invalid_argument(api: Api) -> None:
    msg = spec()
    msg.schedule.kind = types_pb2.SCHEDULE_KIND_AT
    msg.schedule.at.FromDatetime(datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC))
    msg.schedule.jitter.seconds = 86400
    await api.assert_rejected("CreateJob", create(msg), "spec.schedule.at")


async def test_invalid_utf8_in_a_string_field_is_invalid_argument_naming_it(api: Api) -> None:
    msg = spec()
    msg.name = "NAME"
    msg.task.command.argv.append("ARGX")
    data = create(msg).SerializeToString()
    assert await api.raw_status("CreateJob", data.replace(b"ARGX", b"A\xffGX")) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "spec.task.command.argv[1]: not valid UTF-8",
    )
    assert await api.raw_status("CreateJob", data.replace(b"NAME", b"N\xc3ME")) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "spec.name: not valid UTF-8",
    )
    bad_id = jobs_pb2.GetJobRequest(job_id="abc").SerializeToString().replace(b"abc", b"\xff\xfe")
    assert await api.raw_status("GetJob", bad_id) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "job_id: not valid UTF-8",
    )
    assert await api.stored_jobs() == 0


async def test_a_request_that_does_not_decode_is_invalid_argument(api: Api) -> None:
    data = create(spec()).SerializeToString()[:-2]
    code, details = await api.raw_status("CreateJob", data)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details == "request: not a valid shardcron.v1.CreateJobRequest message"


async def test_invalid_utf8_in_a_streamed_request_is_invalid_argument(api: Api) -> None:
    output = api.channel.unary_stream(
        "/shardcron.v1.JobService/ReadRunOutput",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    with pytest.raises(grpc.aio.AioRpcError) as e:
        async for _ in output(b"\x0a\x02\xff\xfe", metadata=METADATA, timeout=10):
            pass
    assert (e.value.code(), e.value.details()) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "run_id: not valid UTF-8",
    )
    connect = api.channel.stream_stream(
        "/shardcron.v1.WorkerService/Connect",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    hello = worker_pb2.WorkerMessage(hello=worker_pb2.Hello(worker_id="WWW", slots=1))
    call = connect(iter([hello.SerializeToString().replace(b"WWW", b"W\xffW")]), timeout=10)
    with pytest.raises(grpc.aio.AioRpcError) as e:
        async for _ in call:
            pass
    assert (e.value.code(), e.value.details()) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "hello.worker_id: not valid UTF-8",
    )


LONG_ID = "x" * 10_000
LONG_ID_CALLS = [
    ("GetJob", jobs_pb2.GetJobRequest(job_id=LONG_ID), "job_id"),
    ("PauseJob", jobs_pb2.JobRef(job_id=LONG_ID), "job_id"),
    ("ResumeJob", jobs_pb2.JobRef(job_id=LONG_ID), "job_id"),
    ("RunJobNow", jobs_pb2.JobRef(job_id=LONG_ID), "job_id"),
    ("DeleteJob", jobs_pb2.DeleteJobRequest(job_id=LONG_ID), "job_id"),
    ("PreviewFires", jobs_pb2.PreviewFiresRequest(job_id=LONG_ID), "job_id"),
    ("ListRuns", jobs_pb2.ListRunsRequest(job_id=LONG_ID), "job_id"),
    ("GetRun", jobs_pb2.GetRunRequest(run_id=LONG_ID), "run_id"),
    ("CancelRun", jobs_pb2.GetRunRequest(run_id=LONG_ID), "run_id"),
    ("ListDeadLetters", jobs_pb2.ListDeadLettersRequest(job_id=LONG_ID), "job_id"),
    ("ListDeliveries", jobs_pb2.ListDeliveriesRequest(job_id=LONG_ID), "job_id"),
    ("ReplayDeadLetters", jobs_pb2.DeadLettersRequest(run_ids=[LONG_ID]), "run_ids[0]"),
    ("DropDeadLetters", jobs_pb2.DeadLettersRequest(job_id=LONG_ID), "job_id"),
    ("ListJobs", jobs_pb2.ListJobsRequest(page_token=LONG_ID), "page_token"),
    ("ListJobs", jobs_pb2.ListJobsRequest(name_prefix=LONG_ID), "name_prefix"),
    ("ListJobs", jobs_pb2.ListJobsRequest(labels={LONG_ID: "v"}), f"labels[{'x' * 64}"),
    (
        "UpdateJob",
        jobs_pb2.UpdateJobRequest(job_id=LONG_ID, expected_version=1, spec=spec()),
        "job_id",
    ),
]


@pytest.mark.parametrize(
    ("method", "request_", "field"), LONG_ID_CALLS, ids=[f"{m}-{f}" for m, _, f in LONG_ID_CALLS]
)
async def test_a_10kb_job_id_is_invalid_argument_and_not_echoed(
    api: Api, method: str, request_: object, field: str
) -> None:
    code, details = await api.status(method, request_)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details.startswith(field)
    assert len(details) <= limits.MAX_ERROR_MESSAGE


async def test_an_unknown_id_within_bounds_is_not_found(api: Api) -> None:
    code, details = await api.status("GetJob", jobs_pb2.GetJobRequest(job_id="y" * limits.MAX_ID))
    assert code == grpc.StatusCode.NOT_FOUND
