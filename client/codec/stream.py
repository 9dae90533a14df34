"""The lease stream codec: ``WorkerMessage`` / ``PollerMessage`` <-> ``shardcron.client.stream``.

The poller's gRPC edge and the worker's link call the four entry points below and
nothing else touches the stream's protobuf. Decoding validates structure and raises
``InvalidArgument`` naming the field path from the message's body down (e.g.
``results.results[0].reason``): no body set, an unknown enum number, a timestamp or
duration protobuf would not accept, a result whose state is not final, a negative
count, an empty ``run_id`` or ``worker_id``. Encoding raises ``InvalidArgument`` for
the one thing the wire cannot carry: a negative fencing token.

A few readings are lenient on purpose, because both sides rely on them; each says
why where it is made.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, NoReturn, TypeVar

from shardcron.client.codec.common import (
    RUN_REASON,
    RUN_STATE,
    get_duration,
    get_time,
    non_negative,
    required_text,
    set_duration,
    set_time,
)
from shardcron.client.codec.jobs import (
    resources_from_proto,
    resources_to_proto,
    task_from_proto,
    task_to_proto,
)
from shardcron.client.errors import InvalidArgument
from shardcron.client.frozen import copy_with
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
    PollerEvent,
    Refused,
    Renewal,
    Renewals,
    ResultAck,
    ResultAcks,
    Results,
    RunOutcome,
    Started,
    Welcome,
    WorkerEvent,
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


def _each(items: Sequence[Any], path: str, read: Callable[[Any, str], Any]) -> tuple[Any, ...]:
    return tuple(read(item, f"{path}[{i}]") for i, item in enumerate(items))


def _token(value: int, path: str) -> int:
    if value >= 0:  # the field's path is formatted only for the error: this runs per run
        return value
    return non_negative(value, f"{path}.fencing_token")


# --------------------------------------------------------------------------- shared parts


def _ref_from_proto(msg: worker_pb2.LeaseRef, path: str) -> LeaseRef:
    return LeaseRef(
        run_id=required_text(msg.run_id, f"{path}.run_id"),
        fencing_token=msg.fencing_token,
        job_id=msg.job_id,
    )


def _ref_to_proto(ref: LeaseRef, path: str) -> worker_pb2.LeaseRef:
    return worker_pb2.LeaseRef(
        run_id=ref.run_id, fencing_token=_token(ref.fencing_token, path), job_id=ref.job_id
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
    )


_FINAL_STATES = {n: state for n, state in RUN_STATE.by_number.items() if state.is_final}


def _refuse_outcome(msg: worker_pb2.RunResult, path: str) -> NoReturn:
    state = RUN_STATE.from_proto(msg.state, f"{path}.state")
    if not state.is_final:
        raise InvalidArgument(f"{path}.state", f"{state.value} is not a final state")
    RUN_REASON.from_proto(msg.reason, f"{path}.reason")
    required_text(msg.run_id, f"{path}.run_id")
    raise AssertionError(f"{path}: refused with no field in doubt")


def _outcomes_to_proto(outcomes: Sequence[RunOutcome], path: str) -> list[worker_pb2.RunResult]:
    holder = worker_pb2.Results()
    _add_outcomes(holder.results, outcomes, path)
    return list(holder.results)


def _add_outcomes(out: Any, outcomes: Sequence[RunOutcome], path: str) -> None:
    """Adds a ``RunResult`` of each outcome to the repeated field ``out`` (built in place:
    a result built alone is copied again into its message)."""
    for i, o in enumerate(outcomes):
        token = o.fencing_token
        msg = out.add(
            run_id=o.run_id,
            fencing_token=token if token >= 0 else _token(token, f"{path}[{i}]"),
            state=RUN_STATE.to_proto(o.state),
            reason=RUN_REASON.to_proto(o.reason),
            error=o.error,
            has_exit_code=o.exit_code is not None,
            exit_code=o.exit_code or 0,
            job_id=o.job_id,
        )
        set_time(msg, "started_at", o.started_at)
        set_time(msg, "ended_at", o.ended_at)


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
        fencing_token=_token(piece.fencing_token, path),
        data=piece.data,
        stream=piece.stream,
    )


# --------------------------------------------------------------------------- worker -> poller


def _hello_from_proto(msg: worker_pb2.Hello, path: str) -> Hello:
    return Hello(
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
        pending_results=_each(msg.pending_results, f"{path}.pending_results", _outcome_from_proto),
        held=_each(msg.held, f"{path}.held", _ref_from_proto),
        # kept as sent: above ``slots`` it means every slot (the poller takes the lower)
        credit_limit=(
            non_negative(msg.credit_limit, f"{path}.credit_limit")
            if msg.HasField("credit_limit")
            else None
        ),
        instance_id=msg.instance_id,
        waits_for_due=msg.waits_for_due,
    )


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
        pending_results=_outcomes_to_proto(hello.pending_results, f"{path}.pending_results"),
        held=_refs_to_proto(hello.held, f"{path}.held"),
        instance_id=hello.instance_id,
        waits_for_due=hello.waits_for_due,
    )
    if hello.credit_limit is not None:
        msg.credit_limit = hello.credit_limit
    return msg


def _credits_from_proto(msg: worker_pb2.Credits, path: str) -> Credits:
    return Credits(limit=non_negative(msg.limit, f"{path}.limit"))


def _heartbeat_from_proto(msg: worker_pb2.Heartbeat, path: str) -> Heartbeat:
    return Heartbeat(leases=_each(msg.leases, f"{path}.leases", _ref_from_proto))


def _started_from_proto(msg: worker_pb2.Started, path: str) -> Started:
    return Started(
        leases=_each(msg.leases, f"{path}.leases", _ref_from_proto),
        at=get_time(msg, "at", path),
    )


def _results_from_proto(msg: worker_pb2.Results, path: str) -> Results:
    return Results(outcomes=_each(msg.results, f"{path}.results", _outcome_from_proto))


def _output_from_proto(msg: worker_pb2.Output, path: str) -> Output:
    return Output(pieces=_each(msg.chunks, f"{path}.chunks", _piece_from_proto))


def _refused_from_proto(msg: worker_pb2.Refused, path: str) -> Refused:
    return Refused(leases=_each(msg.leases, f"{path}.leases", _ref_from_proto))


_WORKER_READERS: dict[str, Callable[[Any, str], Hello | WorkerEvent]] = {
    "hello": _hello_from_proto,
    "credits": _credits_from_proto,
    "heartbeat": _heartbeat_from_proto,
    "started": _started_from_proto,
    "results": _results_from_proto,
    "output": _output_from_proto,
    "refused": _refused_from_proto,
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
        chunks = _each(event.pieces, "output.chunks", _piece_to_proto)
        return worker_pb2.WorkerMessage(output=worker_pb2.Output(chunks=chunks))
    if isinstance(event, Refused):
        leases = _refs_to_proto(event.leases, "refused.leases")
        return worker_pb2.WorkerMessage(refused=worker_pb2.Refused(leases=leases))
    raise TypeError(f"not a worker event: {event!r}")


# --------------------------------------------------------------------------- poller -> worker

# Durations the poller may leave unset read as timedelta(0), "not said": the worker
# then keeps what it had (its default lease TTL, a third of it between heartbeats,
# the Welcome's TTL for a lease or a renewal), as it always has.
_NOT_SAID = timedelta(0)


def _welcome_from_proto(msg: worker_pb2.Welcome, path: str) -> Welcome:
    return Welcome(
        poller_id=msg.poller_id,
        epoch=msg.epoch,
        lease_ttl=get_duration(msg, "lease_ttl", path, _NOT_SAID),  # type: ignore[arg-type]
        heartbeat_interval=get_duration(msg, "heartbeat_interval", path, _NOT_SAID),  # type: ignore[arg-type]
    )


def _read_once(read: Callable[[Any, str], T], msg: Any, path: str, memo: dict[Any, Any]) -> T:
    """``read(msg, path)``, or what it gave for the same bytes earlier in this batch: the
    leases of one job, or of jobs made from one spec, carry the same task and resources.
    The first message of some bytes is read in full, so errors name what they did."""
    key = (read, msg.SerializeToString())
    value = memo.get(key)
    if value is None:
        value = memo[key] = read(msg, path)
    return value


def _time_once(msg: Any, name: str, path: str, memo: dict[Any, Any]) -> datetime | None:
    """``get_time(msg, name, path)``, or the datetime read for the same instant earlier
    in this batch: a batch's leases mostly share their expiry, and the fire and due
    instants of the jobs created together (a third of what ``get_time`` costs)."""
    if not msg.HasField(name):
        return None
    ts = getattr(msg, name)
    key = (get_time, ts.seconds, ts.nanos)
    value = memo.get(key)
    if value is None:
        value = memo[key] = get_time(msg, name, path)
    return value


def _built_once(build: Callable[[Any], Any], value: Any, memo: dict[Any, Any]) -> Any:
    """``build(value)``, or the message built for the same object earlier in this batch
    (by identity: every value stays referenced by its grant while the batch is built)."""
    msg = memo.get(id(value))
    if msg is None:
        msg = memo[id(value)] = build(value)
    return msg


def _grant_from_proto(
    msg: worker_pb2.Lease, path: str, memo: dict[Any, Any] | None = None
) -> LeaseGrant:
    if not msg.HasField("task"):
        raise InvalidArgument(f"{path}.task", "required: set a command or a handler")
    memo = {} if memo is None else memo
    return LeaseGrant(
        run_id=required_text(msg.run_id, f"{path}.run_id"),
        job_id=msg.job_id,
        owner=msg.owner,
        fencing_token=msg.fencing_token,
        attempt=non_negative(msg.attempt, f"{path}.attempt"),
        fire_at=_time_once(msg, "fire_at", path, memo),
        due_at=_time_once(msg, "due_at", path, memo),
        task=_read_once(task_from_proto, msg.task, f"{path}.task", memo),
        # a zero timeout is none, as the worker has always read it
        timeout=get_duration(msg, "timeout", path) or None,
        lease_ttl=get_duration(msg, "lease_ttl", path, _NOT_SAID),  # type: ignore[arg-type]
        resources=_read_once(resources_from_proto, msg.resources, f"{path}.resources", memo),
        job_name=msg.job_name,
        expires_at=_time_once(msg, "expires_at", path, memo),
    )


def _grant_to_proto(
    grant: LeaseGrant, path: str, memo: dict[Any, Any] | None = None
) -> worker_pb2.Lease:
    memo = {} if memo is None else memo
    return worker_pb2.Lease(
        run_id=grant.run_id,
        job_id=grant.job_id,
        owner=grant.owner,
        fencing_token=_token(grant.fencing_token, path),
        attempt=grant.attempt,
        task=_built_once(task_to_proto, grant.task, memo),
        resources=_built_once(resources_to_proto, grant.resources, memo),
        job_name=grant.job_name,
        fire_at=_stamp_once(set_time, grant.fire_at, "fire_at", path, memo),
        due_at=_stamp_once(set_time, grant.due_at, "due_at", path, memo),
        timeout=_stamp_once(set_duration, grant.timeout, "timeout", path, memo),
        lease_ttl=_stamp_once(set_duration, grant.lease_ttl, "lease_ttl", path, memo),
        expires_at=_stamp_once(set_time, grant.expires_at, "expires_at", path, memo),
    )


# Every field of a grant is its own or one it may share with others of a batch (a test
# checks): the shared ones are compared by value, task and resources by identity (each
# stays referenced by its grant while the batch is built).
GRANT_OWN_FIELDS = ("run_id", "job_id", "owner", "fencing_token", "attempt")
GRANT_SHARED_FIELDS = ("fire_at", "due_at", "timeout", "lease_ttl", "expires_at", "job_name")
GRANT_SHARED_OBJECTS = ("task", "resources")
_shared_values = operator.attrgetter(*GRANT_SHARED_FIELDS)


def _shared_key(g: LeaseGrant) -> tuple[Any, ...]:
    return id(g.task), id(g.resources), _shared_values(g)


def _leases_to_proto(grants: Sequence[LeaseGrant]) -> worker_pb2.PollerMessage:
    """The ``Leases`` message of ``grants``. What a grant shares with others of the
    batch (task, resources, times, job name: a turn's leases mostly share all of it) is
    built and serialized once; each lease is those bytes merged, then its own fields
    set: a fifth of the cost of building each lease whole."""
    msg = worker_pb2.PollerMessage()
    msg.leases.SetInParent()
    out = msg.leases.leases
    memo: dict[Any, Any] = {}
    shared: dict[tuple[Any, ...], bytes] = {}
    for i, g in enumerate(grants):
        key = _shared_key(g)
        common = shared.get(key)
        if common is None:
            path = f"leases.leases[{i}]"
            alone = copy_with(g, run_id="", job_id="", owner="", fencing_token=0, attempt=0)
            common = shared[key] = _grant_to_proto(alone, path, memo).SerializeToString()
        lease = out.add()
        lease.MergeFromString(common)
        lease.run_id = g.run_id
        lease.job_id = g.job_id
        lease.owner = g.owner
        token = g.fencing_token
        lease.fencing_token = token if token >= 0 else _token(token, f"leases.leases[{i}]")
        lease.attempt = g.attempt
    return msg


def _stamp_once(
    setter: Callable[[Any, str, Any, str], None],
    value: datetime | timedelta | None,
    name: str,
    path: str,
    memo: dict[Any, Any],
) -> Any:
    """Field ``name`` of a ``Lease`` (a Timestamp or Duration; None when unset) as
    ``setter`` builds it, or the one built for an equal value earlier in this batch: a
    turn's leases mostly share their due instant, lease TTL and expiry."""
    if value is None:
        return None
    key = (setter, value)
    stamp = memo.get(key)
    if stamp is None:
        holder = worker_pb2.Lease()
        setter(holder, name, value, path)
        stamp = memo[key] = getattr(holder, name)
    return stamp


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
        fencing_token=_token(renewal.fencing_token, path),
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


def _leases_from_proto(msg: worker_pb2.Leases, path: str) -> Leases:
    memo: dict[Any, Any] = {}
    read = functools.partial(_grant_from_proto, memo=memo)
    return Leases(grants=_each(msg.leases, f"{path}.leases", read))


def _cancels_from_proto(msg: worker_pb2.Cancels, path: str) -> Cancels:
    return Cancels(orders=_each(msg.cancels, f"{path}.cancels", _cancel_from_proto))


def _renewals_from_proto(msg: worker_pb2.Renewals, path: str) -> Renewals:
    return Renewals(
        renewals=_each(msg.renewals, f"{path}.renewals", _renewal_from_proto),
        lease_ttl=get_duration(msg, "lease_ttl", path, _NOT_SAID),  # type: ignore[arg-type]
    )


def _acks_from_proto(msg: worker_pb2.ResultAcks, path: str) -> ResultAcks:
    return ResultAcks(acks=_each(msg.acks, f"{path}.acks", _ack_from_proto))


def _demand_from_proto(msg: worker_pb2.Demand, path: str) -> Demand:
    return Demand(slots=non_negative(msg.slots, f"{path}.slots"))


_POLLER_READERS: dict[str, Callable[[Any, str], PollerEvent]] = {
    "welcome": _welcome_from_proto,
    "leases": _leases_from_proto,
    "cancels": _cancels_from_proto,
    "renewals": _renewals_from_proto,
    "acks": _acks_from_proto,
    "demand": _demand_from_proto,
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
        return _leases_to_proto(event.grants)
    if isinstance(event, Cancels):
        cancels = [
            worker_pb2.Cancel(
                run_id=c.run_id,
                fencing_token=_token(c.fencing_token, f"cancels.cancels[{i}]"),
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
                fencing_token=_token(a.fencing_token, f"acks.acks[{i}]"),
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
    raise TypeError(f"not a poller event: {event!r}")
