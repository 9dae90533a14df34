"""The lease stream codec: ``WorkerMessage`` / ``PollerMessage`` <-> ``shardcron.client.stream``.

The poller's gRPC edge and the worker's link call the four entry points below and
nothing else touches the stream's protobuf. Decoding validates structure and raises
``InvalidArgument`` naming the field path from the message's body down (e.g.
``results.results[0].reason``): no body set, an unknown enum number, a timestamp or
duration protobuf would not accept, a result whose state is not final, a negative
count, an empty ``run_id`` or ``worker_id``, a ``Hello`` past what a worker may say of
itself (``stream.check_hello``). Encoding raises ``InvalidArgument`` for
the one thing the wire cannot carry: a negative fencing token.

A few readings are lenient on purpose, because both sides rely on them; each says
why where it is made.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TypeVar

from shardcron.client.codec.common import (
    RUN_REASON,
    RUN_STATE,
    each,
    fencing_token,
    get_duration,
    get_time,
    non_negative,
    required_text,
    set_duration,
    set_time,
    usage_from_proto,
    usage_to_proto,
)
from shardcron.client.codec.leases import NOT_SAID, leases_from_proto, leases_to_proto
from shardcron.client.errors import InvalidArgument
from shardcron.client.limits import MAX_RESULTS_NOTE, clip, is_result_name
from shardcron.client.stream import (
    CancelOrder,
    Cancels,
    Credits,
    Demand,
    Heartbeat,
    Hello,
    LeaseRef,
    Leases,
    Output,
    OutputPiece,
    OutputRoom,
    PollerEvent,
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
    WorkerEvent,
    check_hello,
)
from shardcron.client.types import RunReason, RunState
from shardcron.v1 import types_pb2, worker_pb2

T = TypeVar("T")

__all__ = [
    "decode_poller_message",
    "decode_worker_message",
    "encode_poller_message",
    "encode_worker_message",
]


def _body(msg: Any, kind: str) -> tuple[str, Any]:
    body = msg.WhichOneof("body")
    if body is None:
        raise InvalidArgument("body", f"required: an empty {kind}")
    return body, getattr(msg, body)


# --------------------------------------------------------------------------- shared parts


def _ref_from_proto(msg: worker_pb2.LeaseRef, path: str) -> LeaseRef:
    return LeaseRef(
        run_id=required_text(msg.run_id, f"{path}.run_id"),
        fencing_token=msg.fencing_token,
        job_id=msg.job_id,
    )


def _ref_to_proto(ref: LeaseRef, path: str) -> worker_pb2.LeaseRef:
    return worker_pb2.LeaseRef(
        run_id=ref.run_id, fencing_token=fencing_token(ref.fencing_token, path), job_id=ref.job_id
    )


def _refs_to_proto(refs: Sequence[LeaseRef], path: str) -> list[worker_pb2.LeaseRef]:
    return [_ref_to_proto(ref, f"{path}[{i}]") for i, ref in enumerate(refs)]


def _outcome_from_proto(msg: worker_pb2.RunResult, path: str) -> RunOutcome:
    # read first without naming fields (a result of every run passes here); a field in
    # doubt is read again by ``_refuse_outcome``, which names it
    state = _FINAL_STATES.get(msg.state)
    reason = RUN_REASON.by_number.get(msg.reason)
    run_id = msg.run_id
    if state is None or reason is None or not run_id:
        _refuse_outcome(msg, path)
    has_exit_code = msg.has_exit_code
    if state is RunState.FAILED and reason is RunReason.NONE:
        # A worker may report a failure without saying why (older Python workers, the
        # Go worker): a run that has an exit code failed on it, anything else in its
        # handler. Every FAILED run has a reason from here on.
        reason = RunReason.NON_ZERO_EXIT if has_exit_code else RunReason.HANDLER_ERROR
    return RunOutcome(
        run_id=run_id,
        fencing_token=msg.fencing_token,
        state=state,
        reason=reason,
        exit_code=msg.exit_code if has_exit_code else None,
        error=msg.error,
        started_at=get_time(msg, "started_at", path),
        ended_at=get_time(msg, "ended_at", path),
        job_id=msg.job_id,
        usage=usage_from_proto(msg, path),
        output_truncated=_truncation(msg.output_truncated, path) if msg.output_truncated else "",
        output_dropped_bytes=msg.output_dropped_bytes
        and non_negative(msg.output_dropped_bytes, f"{path}.output_dropped_bytes"),
        results_note=msg.results_note[:MAX_RESULTS_NOTE],
    )


MAX_TRUNCATION_TEXT = 512  # characters of a result's ``output_truncated``


def _truncation(text: str, path: str) -> str:
    if len(text) > MAX_TRUNCATION_TEXT:
        raise InvalidArgument(
            f"{path}.output_truncated", f"at most {MAX_TRUNCATION_TEXT} characters"
        )
    return text


_FINAL_STATES = {n: state for n, state in RUN_STATE.by_number.items() if state.is_final}


def _refuse_outcome(msg: worker_pb2.RunResult, path: str) -> NoReturn:
    state = RUN_STATE.from_proto(msg.state, f"{path}.state")
    if not state.is_final:
        raise InvalidArgument(f"{path}.state", f"{state.value} is not a final state")
    RUN_REASON.from_proto(msg.reason, f"{path}.reason")
    required_text(msg.run_id, f"{path}.run_id")
    raise AssertionError(f"{path}: refused with no field in doubt")


def _add_outcomes(out: Any, outcomes: Sequence[RunOutcome], path: str) -> None:
    """Adds a ``RunResult`` of each outcome to the repeated field ``out`` (built in place:
    a result built alone is copied again into its message)."""
    for i, o in enumerate(outcomes):
        msg = out.add(
            run_id=o.run_id,
            fencing_token=fencing_token(o.fencing_token, path, i),
            state=RUN_STATE.to_proto(o.state),
            reason=RUN_REASON.to_proto(o.reason),
            error=o.error,
            has_exit_code=o.exit_code is not None,
            exit_code=o.exit_code or 0,
            job_id=o.job_id,
            results_note=o.results_note,
        )
        if o.output_truncated:
            msg.output_truncated = o.output_truncated
            msg.output_dropped_bytes = o.output_dropped_bytes
        set_time(msg, "started_at", o.started_at)
        set_time(msg, "ended_at", o.ended_at)
        if o.usage is not None:
            msg.usage.CopyFrom(usage_to_proto(o.usage))


def _piece_from_proto(msg: types_pb2.OutputChunk, path: str) -> OutputPiece:
    # ``offset`` is ignored (the poller appends); an empty ``stream`` is stdout, as in
    # the job API's OutputChunk.
    return OutputPiece(
        run_id=required_text(msg.run_id, f"{path}.run_id"),
        fencing_token=msg.fencing_token,
        data=bytes(msg.data),
        stream=msg.stream or "stdout",
    )


def _piece_to_proto(piece: OutputPiece, path: str) -> types_pb2.OutputChunk:
    return types_pb2.OutputChunk(
        run_id=piece.run_id,
        fencing_token=fencing_token(piece.fencing_token, path),
        data=piece.data,
        stream=piece.stream,
    )


def _result_piece_from_proto(msg: worker_pb2.ResultFilePiece, path: str) -> ResultFilePiece:
    if not is_result_name(msg.name):
        raise InvalidArgument(f"{path}.name", f"{clip(msg.name)!r} is not a result file name")
    size = non_negative(msg.size, f"{path}.size")
    offset = non_negative(msg.offset, f"{path}.offset")
    if offset + len(msg.data) > size:
        raise InvalidArgument(f"{path}.data", "reaches past the file's size")
    if not _is_sha256(msg.sha256):
        raise InvalidArgument(f"{path}.sha256", "must be 64 lowercase hex digits")
    return ResultFilePiece(
        run_id=required_text(msg.run_id, f"{path}.run_id"),
        fencing_token=msg.fencing_token,
        name=msg.name,
        offset=offset,
        data=bytes(msg.data),
        size=size,
        sha256=msg.sha256,
        last=msg.last,
    )


def _is_sha256(text: str) -> bool:
    return len(text) == 64 and all(c in "0123456789abcdef" for c in text)


def _result_piece_to_proto(piece: ResultFilePiece, path: str) -> worker_pb2.ResultFilePiece:
    return worker_pb2.ResultFilePiece(
        run_id=piece.run_id,
        fencing_token=fencing_token(piece.fencing_token, path),
        name=piece.name,
        offset=piece.offset,
        data=piece.data,
        last=piece.last,
        size=piece.size,
        sha256=piece.sha256,
    )


# --------------------------------------------------------------------------- worker -> poller


def _hello_from_proto(msg: worker_pb2.Hello, path: str) -> Hello:
    hello = Hello(
        worker_id=required_text(msg.worker_id, f"{path}.worker_id"),
        # 0 reads as 1, as a run's Resources.slots does: the poller has always counted
        # a worker as having at least one slot.
        slots=non_negative(msg.slots, f"{path}.slots") or 1,
        cpu_millis=non_negative(msg.cpu_millis, f"{path}.cpu_millis"),
        memory_mb=non_negative(msg.memory_mb, f"{path}.memory_mb"),
        labels=dict(msg.labels),
        handlers=frozenset(msg.handlers),
        runs_commands=msg.runs_commands,
        version=msg.version,
        pending_results=each(msg.pending_results, f"{path}.pending_results", _outcome_from_proto),
        held=each(msg.held, f"{path}.held", _ref_from_proto),
        # kept as sent: above ``slots`` it means every slot (the poller takes the lower)
        credit_limit=(
            non_negative(msg.credit_limit, f"{path}.credit_limit")
            if msg.HasField("credit_limit")
            else None
        ),
        instance_id=msg.instance_id,
        waits_for_due=msg.waits_for_due,
        output_spool=msg.output_spool,
    )
    check_hello(hello, path)
    return hello


def _hello_to_proto(hello: Hello, path: str) -> worker_pb2.Hello:
    msg = worker_pb2.Hello(
        worker_id=hello.worker_id,
        slots=hello.slots,
        cpu_millis=hello.cpu_millis,
        memory_mb=hello.memory_mb,
        labels=hello.labels,
        handlers=sorted(hello.handlers),
        runs_commands=hello.runs_commands,
        version=hello.version,
        held=_refs_to_proto(hello.held, f"{path}.held"),
        instance_id=hello.instance_id,
        waits_for_due=hello.waits_for_due,
        output_spool=hello.output_spool,
    )
    _add_outcomes(msg.pending_results, hello.pending_results, f"{path}.pending_results")
    if hello.credit_limit is not None:
        msg.credit_limit = hello.credit_limit
    return msg


def _credits_from_proto(msg: worker_pb2.Credits, path: str) -> Credits:
    return Credits(limit=non_negative(msg.limit, f"{path}.limit"))


def _heartbeat_from_proto(msg: worker_pb2.Heartbeat, path: str) -> Heartbeat:
    return Heartbeat(leases=each(msg.leases, f"{path}.leases", _ref_from_proto))


def _started_from_proto(msg: worker_pb2.Started, path: str) -> Started:
    return Started(
        leases=each(msg.leases, f"{path}.leases", _ref_from_proto),
        at=get_time(msg, "at", path),
    )


def _results_from_proto(msg: worker_pb2.Results, path: str) -> Results:
    return Results(outcomes=each(msg.results, f"{path}.results", _outcome_from_proto))


def _output_from_proto(msg: worker_pb2.Output, path: str) -> Output:
    return Output(pieces=each(msg.chunks, f"{path}.chunks", _piece_from_proto))


def _refused_from_proto(msg: worker_pb2.Refused, path: str) -> Refused:
    return Refused(leases=each(msg.leases, f"{path}.leases", _ref_from_proto))


def _result_files_from_proto(msg: worker_pb2.ResultFilePieces, path: str) -> ResultFiles:
    return ResultFiles(pieces=each(msg.pieces, f"{path}.pieces", _result_piece_from_proto))


_WORKER_READERS: dict[str, Callable[[Any, str], Hello | WorkerEvent]] = {
    "hello": _hello_from_proto,
    "credits": _credits_from_proto,
    "heartbeat": _heartbeat_from_proto,
    "started": _started_from_proto,
    "results": _results_from_proto,
    "output": _output_from_proto,
    "refused": _refused_from_proto,
    "result_files": _result_files_from_proto,
}


def decode_worker_message(msg: worker_pb2.WorkerMessage) -> Hello | WorkerEvent:
    """What a worker sent, as a typed value; raises ``InvalidArgument`` naming the field."""
    body, inner = _body(msg, "WorkerMessage")
    return _WORKER_READERS[body](inner, body)


def encode_worker_message(event: Hello | WorkerEvent) -> worker_pb2.WorkerMessage:
    """The message a worker sends for ``event``."""
    if isinstance(event, Hello):
        return worker_pb2.WorkerMessage(hello=_hello_to_proto(event, "hello"))
    if isinstance(event, Credits):
        return worker_pb2.WorkerMessage(
            credits=worker_pb2.Credits(limit=non_negative(event.limit, "credits.limit"))
        )
    if isinstance(event, Heartbeat):
        leases = _refs_to_proto(event.leases, "heartbeat.leases")
        return worker_pb2.WorkerMessage(heartbeat=worker_pb2.Heartbeat(leases=leases))
    if isinstance(event, Started):
        started = worker_pb2.Started(leases=_refs_to_proto(event.leases, "started.leases"))
        set_time(started, "at", event.at)
        return worker_pb2.WorkerMessage(started=started)
    if isinstance(event, Results):
        msg = worker_pb2.WorkerMessage()
        msg.results.SetInParent()
        _add_outcomes(msg.results.results, event.outcomes, "results.results")
        return msg
    if isinstance(event, Output):
        chunks = each(event.pieces, "output.chunks", _piece_to_proto)
        return worker_pb2.WorkerMessage(output=worker_pb2.Output(chunks=chunks))
    if isinstance(event, Refused):
        leases = _refs_to_proto(event.leases, "refused.leases")
        return worker_pb2.WorkerMessage(refused=worker_pb2.Refused(leases=leases))
    if isinstance(event, ResultFiles):
        pieces = each(event.pieces, "result_files.pieces", _result_piece_to_proto)
        return worker_pb2.WorkerMessage(result_files=worker_pb2.ResultFilePieces(pieces=pieces))
    raise TypeError(f"not a worker event: {event!r}")


# --------------------------------------------------------------------------- poller -> worker


def _welcome_from_proto(msg: worker_pb2.Welcome, path: str) -> Welcome:
    return Welcome(
        poller_id=msg.poller_id,
        epoch=msg.epoch,
        lease_ttl=get_duration(msg, "lease_ttl", path, NOT_SAID),  # type: ignore[arg-type]
        heartbeat_interval=get_duration(msg, "heartbeat_interval", path, NOT_SAID),  # type: ignore[arg-type]
    )


def _cancel_from_proto(msg: worker_pb2.Cancel, path: str) -> CancelOrder:
    # fencing_token 0 is any lease of the run; UNSPECIFIED reads as CANCELLED_BY_USER,
    # the reason the worker has always given a cancel that named none.
    reason = RUN_REASON.from_proto(msg.reason, f"{path}.reason")
    return CancelOrder(
        run_id=required_text(msg.run_id, f"{path}.run_id"),
        fencing_token=msg.fencing_token,
        reason=reason or RunReason.CANCELLED_BY_USER,
    )


def _renewal_from_proto(msg: worker_pb2.Renewal, path: str) -> Renewal:
    return Renewal(
        run_id=required_text(msg.run_id, f"{path}.run_id"),
        fencing_token=msg.fencing_token,
        ok=msg.ok,
        expires_at=get_time(msg, "expires_at", path),
        not_owner=msg.not_owner and not msg.ok,
    )


def _renewal_to_proto(renewal: Renewal, path: str) -> worker_pb2.Renewal:
    msg = worker_pb2.Renewal(
        run_id=renewal.run_id,
        fencing_token=fencing_token(renewal.fencing_token, path),
        ok=renewal.ok,
        not_owner=renewal.not_owner,
    )
    set_time(msg, "expires_at", renewal.expires_at, path)
    return msg


def _ack_from_proto(msg: worker_pb2.ResultAck, path: str) -> ResultAck:
    return ResultAck(
        run_id=required_text(msg.run_id, f"{path}.run_id"),
        fencing_token=msg.fencing_token,
        accepted=msg.accepted,
        reason=msg.reason,
        not_owner=msg.not_owner and not msg.accepted,
    )


def _cancels_from_proto(msg: worker_pb2.Cancels, path: str) -> Cancels:
    return Cancels(orders=each(msg.cancels, f"{path}.cancels", _cancel_from_proto))


def _renewals_from_proto(msg: worker_pb2.Renewals, path: str) -> Renewals:
    return Renewals(
        renewals=each(msg.renewals, f"{path}.renewals", _renewal_from_proto),
        lease_ttl=get_duration(msg, "lease_ttl", path, NOT_SAID),  # type: ignore[arg-type]
    )


def _acks_from_proto(msg: worker_pb2.ResultAcks, path: str) -> ResultAcks:
    return ResultAcks(acks=each(msg.acks, f"{path}.acks", _ack_from_proto))


def _demand_from_proto(msg: worker_pb2.Demand, path: str) -> Demand:
    return Demand(slots=non_negative(msg.slots, f"{path}.slots"))


def _output_room_from_proto(msg: worker_pb2.OutputRoom, path: str) -> OutputRoom:
    return OutputRoom(
        paused=each(msg.paused, f"{path}.paused", _ref_from_proto),
        resumed=each(msg.resumed, f"{path}.resumed", _ref_from_proto),
    )


_POLLER_READERS: dict[str, Callable[[Any, str], PollerEvent]] = {
    "welcome": _welcome_from_proto,
    "leases": leases_from_proto,
    "cancels": _cancels_from_proto,
    "renewals": _renewals_from_proto,
    "acks": _acks_from_proto,
    "demand": _demand_from_proto,
    "output_room": _output_room_from_proto,
}


def decode_poller_message(msg: worker_pb2.PollerMessage) -> PollerEvent:
    """What a poller sent, as a typed value; raises ``InvalidArgument`` naming the field."""
    body, inner = _body(msg, "PollerMessage")
    return _POLLER_READERS[body](inner, body)


def encode_poller_message(event: PollerEvent) -> worker_pb2.PollerMessage:
    """The message a poller sends for ``event``."""
    if isinstance(event, Welcome):
        welcome = worker_pb2.Welcome(poller_id=event.poller_id, epoch=event.epoch)
        set_duration(welcome, "lease_ttl", event.lease_ttl)
        set_duration(welcome, "heartbeat_interval", event.heartbeat_interval)
        return worker_pb2.PollerMessage(welcome=welcome)
    if isinstance(event, Leases):
        return leases_to_proto(event.grants)
    if isinstance(event, Cancels):
        cancels = [
            worker_pb2.Cancel(
                run_id=c.run_id,
                fencing_token=fencing_token(c.fencing_token, "cancels.cancels", i),
                reason=RUN_REASON.to_proto(c.reason),
            )
            for i, c in enumerate(event.orders)
        ]
        return worker_pb2.PollerMessage(cancels=worker_pb2.Cancels(cancels=cancels))
    if isinstance(event, Renewals):
        msg = worker_pb2.Renewals(
            renewals=[
                _renewal_to_proto(r, f"renewals.renewals[{i}]")
                for i, r in enumerate(event.renewals)
            ]
        )
        set_duration(msg, "lease_ttl", event.lease_ttl)
        return worker_pb2.PollerMessage(renewals=msg)
    if isinstance(event, ResultAcks):
        acks = [
            worker_pb2.ResultAck(
                run_id=a.run_id,
                fencing_token=fencing_token(a.fencing_token, "acks.acks", i),
                accepted=a.accepted,
                reason=a.reason,
                not_owner=a.not_owner,
            )
            for i, a in enumerate(event.acks)
        ]
        return worker_pb2.PollerMessage(acks=worker_pb2.ResultAcks(acks=acks))
    if isinstance(event, Demand):
        demand = worker_pb2.Demand(slots=non_negative(event.slots, "demand.slots"))
        return worker_pb2.PollerMessage(demand=demand)
    if isinstance(event, OutputRoom):
        room = worker_pb2.OutputRoom(
            paused=_refs_to_proto(event.paused, "output_room.paused"),
            resumed=_refs_to_proto(event.resumed, "output_room.resumed"),
        )
        return worker_pb2.PollerMessage(output_room=room)
    raise TypeError(f"not a poller event: {event!r}")
