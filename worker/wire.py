"""Protobuf <-> worker conversions for the lease stream (leases in, results out).

Kept to what the worker needs so the worker does not depend on the server side.
"""

from __future__ import annotations

from datetime import datetime

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from shardcron.client.types import CommandTask, HandlerTask, RunReason, RunState
from shardcron.v1 import types_pb2, worker_pb2

from .executor import ExecResult


def seconds(msg: object, field: str) -> float | None:
    """A Duration field of ``msg`` in seconds, or None when unset or not positive."""
    if not msg.HasField(field):  # type: ignore[attr-defined]
        return None
    d: Duration = getattr(msg, field)
    value = d.seconds + d.nanos / 1e9
    return value if value > 0 else None


def timestamp(dt: datetime) -> Timestamp:
    ts = Timestamp()
    ts.FromDatetime(dt)
    return ts


def state_to_pb(state: RunState) -> int:
    return types_pb2.RunState.Value("RUN_STATE_" + state.value)


def reason_to_pb(reason: RunReason) -> int:
    if reason == RunReason.NONE:
        return types_pb2.RUN_REASON_UNSPECIFIED
    return types_pb2.RunReason.Value("RUN_REASON_" + reason.value)


def reason_from_pb(value: int) -> RunReason:
    try:
        name = types_pb2.RunReason.Name(value)
    except ValueError:
        return RunReason.NONE
    try:
        return RunReason(name.removeprefix("RUN_REASON_"))
    except ValueError:
        return RunReason.NONE


def task_from_pb(task: types_pb2.Task) -> CommandTask | HandlerTask | None:
    kind = task.WhichOneof("kind")
    if kind == "command":
        c = task.command
        return CommandTask(argv=tuple(c.argv), env=dict(c.env), cwd=c.cwd)
    if kind == "handler":
        return HandlerTask(name=task.handler.name, payload=task.handler.payload)
    return None


def result_to_pb(run_id: str, token: int, res: ExecResult) -> worker_pb2.RunResult:
    msg = worker_pb2.RunResult(
        run_id=run_id,
        fencing_token=token,
        state=state_to_pb(res.state),
        reason=reason_to_pb(res.reason),
        error=res.error,
    )
    if res.exit_code is not None:
        msg.has_exit_code = True
        msg.exit_code = res.exit_code
    if res.started_at is not None:
        msg.started_at.CopyFrom(timestamp(res.started_at))
    if res.ended_at is not None:
        msg.ended_at.CopyFrom(timestamp(res.ended_at))
    return msg
