"""shardcron.client.codec.stream: every lease stream message round-trips, the lenient
readings the two sides rely on, and each malformed message raises InvalidArgument
naming its field."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from shardcron.client.codec.leases import (
    GRANT_OWN_FIELDS,
    GRANT_SHARED_FIELDS,
    GRANT_SHARED_OBJECTS,
    grant_to_proto,
)
from shardcron.client.codec.stream import (
    decode_poller_message,
    decode_worker_message,
    encode_poller_message,
    encode_worker_message,
)
from shardcron.client.errors import InvalidArgument
from shardcron.client.stream import (
    CancelOrder,
    Cancels,
    Credits,
    Demand,
    Heartbeat,
    Hello,
    LeaseGrant,
    LeaseRef,
    Leases,
    Output,
    OutputPiece,
    OutputRoom,
    Refused,
    Renewal,
    Renewals,
    ResultAck,
    ResultAcks,
    ResultFilePiece,
    ResultFiles,
    Results,
    RunOutcome,
    Started,
    Welcome,
)
from shardcron.client.types import (
    CommandTask,
    HandlerTask,
    Resources,
    RunReason,
    RunState,
    RunUsage,
)
from shardcron.v1 import types_pb2, worker_pb2

T0 = datetime(2026, 11, 26, 11, 30, 15, 123456, tzinfo=UTC)
TOKEN = (7 << 32) | 42

REF = LeaseRef(run_id="r-1", fencing_token=TOKEN)
SHA = "0" * 64
OUTCOME = RunOutcome(
    run_id="r-1",
    fencing_token=TOKEN,
    state=RunState.FAILED,
    reason=RunReason.OOM_KILLED,
    exit_code=-9,
    error="killed at its memory limit of 64 MiB",
    started_at=T0,
    ended_at=T0 + timedelta(seconds=2),
    usage=RunUsage(peak_memory_bytes=67_108_864, cpu_seconds=0.75, limits_enforced=True),
    output_truncated="blob store unavailable for 45 s",
    output_dropped_bytes=1 << 30,
)
GRANT = LeaseGrant(
    run_id="r-1",
    job_id="j-1",
    owner="team-a",
    fencing_token=TOKEN,
    attempt=2,
    fire_at=T0,
    due_at=T0 + timedelta(seconds=1),
    task=CommandTask(argv=("/bin/sh", "-c", "echo hi"), env={"A": "1"}, cwd="/tmp"),
    timeout=timedelta(minutes=2, microseconds=7),
    lease_ttl=timedelta(seconds=30),
    resources=Resources(slots=2, cpu_millis=500, memory_mb=64, labels={"zone": "a"}),
    job_name="nightly",
    expires_at=T0 + timedelta(seconds=31),
)

WORKER_EVENTS: list[Any] = [
    Hello(
        worker_id="w-1",
        slots=8,
        cpu_millis=4000,
        memory_mb=1024,
        labels={"zone": "a"},
        handlers=frozenset({"send", "bill"}),
        runs_commands=True,
        version="1.2.3",
        pending_results=(
            OUTCOME,
            RunOutcome(run_id="r-2", fencing_token=1, state=RunState.SUCCEEDED),
        ),
        held=(REF, LeaseRef(run_id="r-3", fencing_token=5)),
        credit_limit=3,
        instance_id="5f0c",
        output_spool=True,
    ),
    Hello(worker_id="w-2", slots=1),
    Hello(worker_id="w-3", slots=4, credit_limit=0),
    Credits(limit=0),
    Credits(limit=5),
    Heartbeat(leases=(REF,)),
    Heartbeat(),
    Started(leases=(REF,), at=T0),
    Started(leases=(REF,)),
    Results(outcomes=(OUTCOME,)),
    Results(
        outcomes=(
            RunOutcome(
                run_id="r-4",
                fencing_token=9,
                state=RunState.CANCELLED,
                reason=RunReason.CANCELLED_BY_USER,
            ),
            RunOutcome(
                run_id="r-5", fencing_token=9, state=RunState.TIMED_OUT, reason=RunReason.TIMEOUT
            ),
        )
    ),
    Output(
        pieces=(
            OutputPiece(run_id="r-1", fencing_token=7, data=b"hello\n"),
            OutputPiece(run_id="r-1", fencing_token=7, data=b"\x00\xff", stream="stderr"),
        )
    ),
    Refused(leases=(REF,)),
    Results(outcomes=(dataclasses.replace(OUTCOME, results_note="x.bin: left out: a link"),)),
    ResultFiles(
        pieces=(
            ResultFilePiece(
                run_id="r-1",
                fencing_token=7,
                name="report.json",
                offset=0,
                data=b"{}",
                size=4,
                sha256=SHA,
                last=False,
            ),
            ResultFilePiece(
                run_id="r-1",
                fencing_token=7,
                name="report.json",
                offset=2,
                data=b"[]",
                size=4,
                sha256=SHA,
                last=True,
            ),
        )
    ),  # fmt: skip
]

POLLER_EVENTS: list[Any] = [
    Welcome(
        poller_id="p-1",
        epoch=7,
        lease_ttl=timedelta(seconds=30),
        heartbeat_interval=timedelta(seconds=10),
    ),
    Leases(
        grants=(
            GRANT,
            LeaseGrant(
                run_id="r-2",
                job_id="j-2",
                owner="",
                fencing_token=TOKEN + 1,
                attempt=1,
                fire_at=None,  # not sent: the worker does not need them
                due_at=None,
                task=HandlerTask(name="send", payload=b"\x01\x02"),
                timeout=None,
                lease_ttl=timedelta(seconds=30),
                resources=Resources(),
            ),
        )
    ),
    Cancels(
        orders=(
            CancelOrder(run_id="r-1", fencing_token=TOKEN, reason=RunReason.REPLACED),
            CancelOrder(run_id="r-2", fencing_token=0, reason=RunReason.CANCELLED_BY_USER),
        )
    ),
    Renewals(
        renewals=(
            Renewal(
                run_id="r-1", fencing_token=TOKEN, ok=True, expires_at=T0 + timedelta(seconds=40)
            ),
            Renewal(run_id="r-2", fencing_token=3, ok=False),
        ),
        lease_ttl=timedelta(seconds=30),
    ),
    ResultAcks(
        acks=(
            ResultAck(run_id="r-1", fencing_token=TOKEN, accepted=True),
            ResultAck(run_id="r-2", fencing_token=3, accepted=False, reason="stale fencing token"),
        )
    ),
    Demand(slots=0),
    Demand(slots=12),
    OutputRoom(paused=(REF, LeaseRef(run_id="r-3", fencing_token=5, job_id="j-3"))),
    OutputRoom(resumed=(REF,)),
]


def _name(event: Any) -> str:
    return type(event).__name__


@pytest.mark.parametrize("event", WORKER_EVENTS, ids=_name)
def test_worker_message_round_trips(event: Any) -> None:
    msg = encode_worker_message(event)
    wire = worker_pb2.WorkerMessage.FromString(msg.SerializeToString())
    assert decode_worker_message(wire) == event


@pytest.mark.parametrize("event", POLLER_EVENTS, ids=_name)
def test_poller_message_round_trips(event: Any) -> None:
    msg = encode_poller_message(event)
    wire = worker_pb2.PollerMessage.FromString(msg.SerializeToString())
    assert decode_poller_message(wire) == event


def _kinds(message: Any) -> set[str]:
    return {f.name for f in message.DESCRIPTOR.oneofs_by_name["body"].fields}


def test_every_message_kind_is_covered() -> None:
    worker_kinds = {encode_worker_message(e).WhichOneof("body") for e in WORKER_EVENTS}
    poller_kinds = {encode_poller_message(e).WhichOneof("body") for e in POLLER_EVENTS}
    assert worker_kinds == _kinds(worker_pb2.WorkerMessage)
    assert poller_kinds == _kinds(worker_pb2.PollerMessage)


def test_decoded_times_are_aware_utc() -> None:
    started = decode_worker_message(encode_worker_message(Started(leases=(REF,), at=T0)))
    assert isinstance(started, Started) and started.at is not None
    assert started.at.tzinfo is UTC


# --------------------------------------------------------------------------- lenient readings


def _result(**fields: Any) -> worker_pb2.WorkerMessage:
    base: dict[str, Any] = {
        "run_id": "r-1",
        "fencing_token": 1,
        "state": types_pb2.RUN_STATE_FAILED,
    }
    base.update(fields)
    return worker_pb2.WorkerMessage(
        results=worker_pb2.Results(results=[worker_pb2.RunResult(**base)])
    )


def test_failed_result_without_reason_reads_as_non_zero_exit_when_it_has_an_exit_code() -> None:
    event = decode_worker_message(_result(has_exit_code=True, exit_code=0))
    assert isinstance(event, Results)
    assert event.outcomes[0].reason is RunReason.NON_ZERO_EXIT
    assert event.outcomes[0].exit_code == 0


def test_failed_result_without_reason_or_exit_code_reads_as_handler_error() -> None:
    event = decode_worker_message(_result())
    assert isinstance(event, Results)
    assert event.outcomes[0].reason is RunReason.HANDLER_ERROR
    assert event.outcomes[0].exit_code is None


def test_hello_with_no_slots_reads_as_one_and_unset_credit_limit_as_none() -> None:
    hello = decode_worker_message(worker_pb2.WorkerMessage(hello=worker_pb2.Hello(worker_id="w")))
    assert hello == Hello(worker_id="w", slots=1, credit_limit=None)


def test_output_without_stream_reads_as_stdout() -> None:
    msg = worker_pb2.WorkerMessage(
        output=worker_pb2.Output(chunks=[types_pb2.OutputChunk(run_id="r", data=b"x", offset=9)])
    )
    piece = OutputPiece(run_id="r", fencing_token=0, data=b"x")
    assert decode_worker_message(msg) == Output(pieces=(piece,))


def test_unset_durations_read_as_zero_and_a_zero_timeout_as_none() -> None:
    welcome = decode_poller_message(worker_pb2.PollerMessage(welcome=worker_pb2.Welcome()))
    assert welcome == Welcome(
        poller_id="", epoch=0, lease_ttl=timedelta(0), heartbeat_interval=timedelta(0)
    )
    lease = encode_poller_message(Leases(grants=(GRANT,))).leases.leases[0]
    lease.ClearField("lease_ttl")
    lease.timeout.seconds = 0
    lease.timeout.nanos = 0
    event = decode_poller_message(
        worker_pb2.PollerMessage(leases=worker_pb2.Leases(leases=[lease]))
    )
    assert isinstance(event, Leases)
    assert (event.grants[0].timeout, event.grants[0].lease_ttl) == (None, timedelta(0))
    renewals = decode_poller_message(worker_pb2.PollerMessage(renewals=worker_pb2.Renewals()))
    assert renewals == Renewals(lease_ttl=timedelta(0))


def test_cancel_without_reason_reads_as_cancelled_by_user() -> None:
    msg = worker_pb2.PollerMessage(
        cancels=worker_pb2.Cancels(cancels=[worker_pb2.Cancel(run_id="r", fencing_token=0)])
    )
    assert decode_poller_message(msg) == Cancels(
        orders=(CancelOrder(run_id="r", fencing_token=0, reason=RunReason.CANCELLED_BY_USER),)
    )


# --------------------------------------------------------------------------- malformed messages


def _w(**body: Any) -> worker_pb2.WorkerMessage:
    return worker_pb2.WorkerMessage(**body)


def _p(**body: Any) -> worker_pb2.PollerMessage:
    return worker_pb2.PollerMessage(**body)


def _lease(**changes: Any) -> worker_pb2.PollerMessage:
    lease = encode_poller_message(Leases(grants=(GRANT, GRANT))).leases.leases[1]
    for name, value in changes.items():
        if value is None:
            lease.ClearField(name)
        elif name in ("fire_at", "due_at", "timeout", "lease_ttl"):
            getattr(lease, name).CopyFrom(value)
        elif name == "task":
            lease.task.CopyFrom(value)
        else:
            setattr(lease, name, value)
    first = encode_poller_message(Leases(grants=(GRANT,))).leases.leases[0]
    return _p(leases=worker_pb2.Leases(leases=[first, lease]))


def _ts(seconds: int, nanos: int = 0) -> Timestamp:
    return Timestamp(seconds=seconds, nanos=nanos)


def _dur(seconds: int, nanos: int = 0) -> Duration:
    return Duration(seconds=seconds, nanos=nanos)


def _hello(**fields: Any) -> worker_pb2.WorkerMessage:
    return _w(hello=worker_pb2.Hello(**{"worker_id": "w", "slots": 1, **fields}))


def test_a_hello_at_every_bound_decodes() -> None:
    widest = _hello(
        worker_id="w" * 128,
        instance_id="i" * 128,
        version="v" * 64,
        labels={f"{i:02d}" + "k" * 61: "v" * 256 for i in range(64)},
        handlers=[f"{i:04d}" + "h" * 196 for i in range(1000)],
    )
    hello = decode_worker_message(widest)
    assert isinstance(hello, Hello)
    assert len(hello.labels) == 64 and len(hello.handlers) == 1000


def _started_at(ts: Any) -> worker_pb2.WorkerMessage:
    started = worker_pb2.Started(leases=[worker_pb2.LeaseRef(run_id="r", fencing_token=1)])
    started.at.CopyFrom(ts)
    return _w(started=started)


def _result_using(**usage: Any) -> worker_pb2.WorkerMessage:
    result = worker_pb2.RunResult(
        run_id="r", state=types_pb2.RUN_STATE_SUCCEEDED, usage=types_pb2.RunUsage(**usage)
    )
    return _w(results=worker_pb2.Results(results=[result]))


def _result_piece(**fields: Any) -> worker_pb2.WorkerMessage:
    piece = dict(run_id="r", name="a.txt", offset=0, data=b"ab", size=2, sha256=SHA, last=True)
    piece.update(fields)
    pieces = worker_pb2.ResultFilePieces(pieces=[worker_pb2.ResultFilePiece(**piece)])
    return _w(result_files=pieces)


MALFORMED_WORKER: list[tuple[str, Callable[[], worker_pb2.WorkerMessage], str]] = [
    ("no body", lambda: _w(), "body"),
    ("result file named a path", lambda: _result_piece(name="../a"), "result_files.pieces[0].name"),
    ("result file hidden", lambda: _result_piece(name=".a"), "result_files.pieces[0].name"),
    ("result piece past its size", lambda: _result_piece(size=1), "result_files.pieces[0].data"),
    ("result file bad digest", lambda: _result_piece(sha256="AB"), "result_files.pieces[0].sha256"),
    ("result piece without run", lambda: _result_piece(run_id=""), "result_files.pieces[0].run_id"),
    (
        "result using negative memory",
        lambda: _result_using(peak_memory_bytes=-1),
        "results.results[0].usage.peak_memory_bytes",
    ),
    (
        "result using NaN CPU seconds",
        lambda: _result_using(cpu_seconds=float("nan")),
        "results.results[0].usage.cpu_seconds",
    ),
    ("hello without worker_id", lambda: _w(hello=worker_pb2.Hello(slots=2)), "hello.worker_id"),
    (
        "hello with negative slots",
        lambda: _w(hello=worker_pb2.Hello(worker_id="w", slots=-1)),
        "hello.slots",
    ),
    (
        "hello with negative cpu",
        lambda: _w(hello=worker_pb2.Hello(worker_id="w", cpu_millis=-1)),
        "hello.cpu_millis",
    ),
    (
        "hello with negative credit limit",
        lambda: _w(hello=worker_pb2.Hello(worker_id="w", credit_limit=-1)),
        "hello.credit_limit",
    ),
    (
        "hello with a pending result of unknown reason",
        lambda: _w(
            hello=worker_pb2.Hello(
                worker_id="w",
                pending_results=[
                    worker_pb2.RunResult(
                        run_id="r", state=types_pb2.RUN_STATE_SUCCEEDED, reason=999
                    )
                ],
            )
        ),
        "hello.pending_results[0].reason",
    ),
    (
        "hello holding a lease without run_id",
        lambda: _w(hello=worker_pb2.Hello(worker_id="w", held=[worker_pb2.LeaseRef()])),
        "hello.held[0].run_id",
    ),
    # issue 32: what a worker says of itself is held by the poller and listed in every
    # cluster status: a Hello past the bounds of client.limits is refused
    ("hello with a long worker_id", lambda: _hello(worker_id="w" * 129), "hello.worker_id"),
    ("hello with a long instance_id", lambda: _hello(instance_id="i" * 129), "hello.instance_id"),
    ("hello with a long version", lambda: _hello(version="v" * 65), "hello.version"),
    (
        "hello with too many labels",
        lambda: _hello(labels={f"k{i}": "v" for i in range(65)}),
        "hello.labels",
    ),
    (
        "hello with a long label key",
        lambda: _hello(labels={"k" * 64: "v"}),
        f"hello.labels[{'k' * 64}]",
    ),
    ("hello with an empty label key", lambda: _hello(labels={"": "v"}), "hello.labels[]"),
    ("hello with a long label value", lambda: _hello(labels={"k": "v" * 257}), "hello.labels[k]"),
    (
        "hello with too many handlers",
        lambda: _hello(handlers=[f"h{i}" for i in range(1001)]),
        "hello.handlers",
    ),
    (
        "hello with a long handler name",
        lambda: _hello(handlers=["ok", "h" * 201]),
        "hello.handlers",
    ),
    ("negative credits", lambda: _w(credits=worker_pb2.Credits(limit=-1)), "credits.limit"),
    (
        "heartbeat lease without run_id",
        lambda: _w(
            heartbeat=worker_pb2.Heartbeat(
                leases=[worker_pb2.LeaseRef(run_id="r"), worker_pb2.LeaseRef(fencing_token=3)]
            )
        ),
        "heartbeat.leases[1].run_id",
    ),
    ("started at negative nanos", lambda: _started_at(_ts(5, -1)), "started.at"),
    ("started at nanos past a second", lambda: _started_at(_ts(5, 10**9)), "started.at"),
    ("started before year 1", lambda: _started_at(_ts(-62_135_596_801)), "started.at"),
    ("started after year 9999", lambda: _started_at(_ts(253_402_300_800)), "started.at"),
    ("result with unknown reason", lambda: _result(reason=999), "results.results[0].reason"),
    ("result with unknown state", lambda: _result(state=999), "results.results[0].state"),
    ("result without state", lambda: _result(state=0), "results.results[0].state"),
    (
        "result in a non-final state",
        lambda: _result(state=types_pb2.RUN_STATE_RUNNING),
        "results.results[0].state",
    ),
    ("result without run_id", lambda: _result(run_id=""), "results.results[0].run_id"),
    (
        "result with a long truncation text",
        lambda: _result(output_truncated="x" * 513),
        "results.results[0].output_truncated",
    ),
    (
        "result with negative dropped bytes",
        lambda: _result(output_truncated="cut", output_dropped_bytes=-1),
        "results.results[0].output_dropped_bytes",
    ),
    (
        "result with a bad end time",
        lambda: _result(ended_at=_ts(1, -5)),
        "results.results[0].ended_at",
    ),
    (
        "output without run_id",
        lambda: _w(output=worker_pb2.Output(chunks=[types_pb2.OutputChunk(data=b"x")])),
        "output.chunks[0].run_id",
    ),
    (
        "refused lease without run_id",
        lambda: _w(refused=worker_pb2.Refused(leases=[worker_pb2.LeaseRef()])),
        "refused.leases[0].run_id",
    ),
]

MALFORMED_POLLER: list[tuple[str, Callable[[], worker_pb2.PollerMessage], str]] = [
    ("no body", lambda: _p(), "body"),
    (
        "welcome with a negative ttl",
        lambda: _p(welcome=worker_pb2.Welcome(lease_ttl=_dur(-1))),
        "welcome.lease_ttl",
    ),
    (
        "welcome with a heartbeat of mixed signs",
        lambda: _p(welcome=worker_pb2.Welcome(heartbeat_interval=_dur(1, -1))),
        "welcome.heartbeat_interval",
    ),
    ("lease without run_id", lambda: _lease(run_id=""), "leases.leases[1].run_id"),
    ("lease without task", lambda: _lease(task=None), "leases.leases[1].task"),
    (
        "lease with an empty command",
        lambda: _lease(task=types_pb2.Task(command=types_pb2.CommandTask())),
        "leases.leases[1].task.command.argv",
    ),
    ("lease with negative attempt", lambda: _lease(attempt=-1), "leases.leases[1].attempt"),
    (
        "lease fired after year 9999",
        lambda: _lease(fire_at=_ts(253_402_300_800)),
        "leases.leases[1].fire_at",
    ),
    ("lease due at negative nanos", lambda: _lease(due_at=_ts(1, -1)), "leases.leases[1].due_at"),
    ("lease with negative timeout", lambda: _lease(timeout=_dur(-5)), "leases.leases[1].timeout"),
    (
        "lease with negative slots",
        lambda: _lease_with_slots(-1),
        "leases.leases[1].resources.slots",
    ),
    (
        "cancel with unknown reason",
        lambda: _p(cancels=worker_pb2.Cancels(cancels=[worker_pb2.Cancel(run_id="r", reason=999)])),
        "cancels.cancels[0].reason",
    ),
    (
        "cancel without run_id",
        lambda: _p(cancels=worker_pb2.Cancels(cancels=[worker_pb2.Cancel()])),
        "cancels.cancels[0].run_id",
    ),
    (
        "renewal without run_id",
        lambda: _p(renewals=worker_pb2.Renewals(renewals=[worker_pb2.Renewal(ok=True)])),
        "renewals.renewals[0].run_id",
    ),
    (
        "renewals with a negative ttl",
        lambda: _p(renewals=worker_pb2.Renewals(lease_ttl=_dur(0, -1))),
        "renewals.lease_ttl",
    ),
    (
        "ack without run_id",
        lambda: _p(acks=worker_pb2.ResultAcks(acks=[worker_pb2.ResultAck(accepted=True)])),
        "acks.acks[0].run_id",
    ),
    ("negative demand", lambda: _p(demand=worker_pb2.Demand(slots=-2)), "demand.slots"),
    (
        "output room without run_id",
        lambda: _p(output_room=worker_pb2.OutputRoom(resumed=[worker_pb2.LeaseRef()])),
        "output_room.resumed[0].run_id",
    ),
]


def _lease_with_slots(slots: int) -> worker_pb2.PollerMessage:
    msg = _lease()
    msg.leases.leases[1].resources.slots = slots
    return msg


@pytest.mark.parametrize(
    ("case", "build", "field"), MALFORMED_WORKER, ids=[c[0] for c in MALFORMED_WORKER]
)
def test_malformed_worker_message_names_its_field(case: str, build: Callable, field: str) -> None:
    with pytest.raises(InvalidArgument) as e:
        decode_worker_message(build())
    assert e.value.field == field, case


@pytest.mark.parametrize(
    ("case", "build", "field"), MALFORMED_POLLER, ids=[c[0] for c in MALFORMED_POLLER]
)
def test_malformed_poller_message_names_its_field(case: str, build: Callable, field: str) -> None:
    with pytest.raises(InvalidArgument) as e:
        decode_poller_message(build())
    assert e.value.field == field, case


@pytest.mark.parametrize(
    ("event", "field"),
    [
        (
            Heartbeat(leases=(LeaseRef(run_id="r", fencing_token=-1),)),
            "heartbeat.leases[0].fencing_token",
        ),
        (
            Results(outcomes=(RunOutcome(run_id="r", fencing_token=-1, state=RunState.SUCCEEDED),)),
            "results.results[0].fencing_token",
        ),
        (Credits(limit=-1), "credits.limit"),
    ],
    ids=_name,
)
def test_worker_event_with_a_negative_count_is_not_encoded(event: Any, field: str) -> None:
    with pytest.raises(InvalidArgument) as e:
        encode_worker_message(event)
    assert e.value.field == field


@pytest.mark.parametrize(
    ("event", "field"),
    [
        (
            Leases(grants=(GRANT, dataclasses.replace(GRANT, fencing_token=-1))),
            "leases.leases[1].fencing_token",
        ),
        (
            Renewals(renewals=(Renewal(run_id="r", fencing_token=-1, ok=True),)),
            "renewals.renewals[0].fencing_token",
        ),
        (Demand(slots=-1), "demand.slots"),
    ],
    ids=_name,
)
def test_poller_event_with_a_negative_count_is_not_encoded(event: Any, field: str) -> None:
    with pytest.raises(InvalidArgument) as e:
        encode_poller_message(event)
    assert e.value.field == field


def test_leases_sharing_a_task_read_it_once_and_keep_what_differs() -> None:
    other = dataclasses.replace(
        GRANT, run_id="r-9", resources=dataclasses.replace(GRANT.resources, slots=3)
    )
    again = dataclasses.replace(GRANT, run_id="r-10")
    msg = encode_poller_message(Leases(grants=(GRANT, other, again)))
    grants = decode_poller_message(msg).grants
    assert grants == (GRANT, other, again)
    assert grants[0].task is grants[1].task is grants[2].task
    assert grants[0].resources is grants[2].resources
    assert grants[1].resources.slots == 3


def test_leases_of_one_batch_share_the_instants_they_share_and_keep_their_own() -> None:
    later = dataclasses.replace(GRANT, run_id="r-2", due_at=T0 + timedelta(seconds=5))
    wire = encode_poller_message(Leases(grants=(GRANT, later, GRANT)))
    event = decode_poller_message(wire)
    assert isinstance(event, Leases)
    assert event.grants == (GRANT, later, GRANT)
    first, second, third = event.grants
    assert first.expires_at is second.expires_at  # read once for the batch
    assert first.due_at is third.due_at and second.due_at == T0 + timedelta(seconds=5)


def test_a_bad_instant_in_a_later_lease_of_a_batch_still_names_that_lease() -> None:
    wire = encode_poller_message(Leases(grants=(GRANT, GRANT)))
    wire.leases.leases[1].expires_at.nanos = -1
    with pytest.raises(InvalidArgument) as e:
        decode_poller_message(wire)
    assert "leases[1].expires_at" in e.value.field


def test_every_grant_field_is_its_own_or_shared_by_value_or_by_identity() -> None:
    named = [*GRANT_OWN_FIELDS, *GRANT_SHARED_FIELDS, *GRANT_SHARED_OBJECTS]
    assert sorted(named) == sorted(f.name for f in dataclasses.fields(LeaseGrant))


def test_leases_built_from_shared_bytes_are_the_leases_built_whole() -> None:
    varied = [
        GRANT,
        dataclasses.replace(GRANT, run_id="r-2", job_id="j-2", owner="team-b"),
        dataclasses.replace(GRANT, run_id="r-3", fencing_token=0, attempt=0),
        dataclasses.replace(GRANT, run_id="r-4", fire_at=None, timeout=None),
        dataclasses.replace(GRANT, run_id="r-5", due_at=T0 + timedelta(seconds=9)),
        dataclasses.replace(GRANT, run_id="r-6", expires_at=None, job_name=""),
        dataclasses.replace(GRANT, run_id="r-7", task=HandlerTask(name="h", payload=b"p")),
        dataclasses.replace(GRANT, run_id="r-8", lease_ttl=timedelta(seconds=5)),
        dataclasses.replace(GRANT, run_id="r-9", resources=Resources()),
        dataclasses.replace(GRANT, run_id="r-10", attempt=3),
    ]
    leases = encode_poller_message(Leases(grants=tuple(varied))).leases.leases
    for i, (grant, lease) in enumerate(zip(varied, leases, strict=True)):
        whole = grant_to_proto(grant, f"leases.leases[{i}]")
        assert lease == whole, grant.run_id
        assert lease.SerializeToString() == whole.SerializeToString()
    empty = encode_poller_message(Leases(grants=()))
    assert empty.WhichOneof("body") == "leases" and not empty.leases.leases


def test_a_negative_token_in_a_later_lease_is_not_encoded_and_names_it() -> None:
    bad = dataclasses.replace(GRANT, run_id="r-2", fencing_token=-1)
    with pytest.raises(InvalidArgument) as e:
        encode_poller_message(Leases(grants=(GRANT, bad)))
    assert e.value.field == "leases.leases[1].fencing_token"
