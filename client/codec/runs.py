"""The mapping between domain types and protobuf for runs: a run as the job API shows
it (its state and reason, its usage, lateness and result files), a schedule's fires,
and chunks of a run's output.

``X_to_proto`` turns a domain object from ``shardcron.client.types`` into its
``shardcron.v1`` message; ``X_from_proto`` reads one back, checking structure only and
raising ``InvalidArgument`` naming the field path (as ``jobs`` does).
"""

from __future__ import annotations

from datetime import datetime

from shardcron.client.codec.common import (
    RUN_REASON,
    RUN_STATE,
    get_required_time,
    get_time,
    lateness_from_proto,
    lateness_to_proto,
    set_time,
    usage_from_proto,
    usage_to_proto,
)
from shardcron.client.errors import InvalidArgument
from shardcron.client.types import (
    Fire,
    OutputChunk,
    Run,
    RunReason,
    RunResultFile,
    RunState,
)
from shardcron.v1 import types_pb2

__all__ = [
    "fire_from_proto",
    "fire_to_proto",
    "output_chunk_from_proto",
    "output_chunk_to_proto",
    "run_from_proto",
    "run_reason_from_proto",
    "run_reason_to_proto",
    "run_state_from_proto",
    "run_state_to_proto",
    "run_to_proto",
]

# --------------------------------------------------------------------------- enums used in requests


def run_state_to_proto(state: RunState) -> int:
    return RUN_STATE.to_proto(state)


def run_state_from_proto(number: int, field: str = "state") -> RunState:
    return RUN_STATE.from_proto(number, field)


def run_reason_to_proto(reason: RunReason) -> int:
    return RUN_REASON.to_proto(reason)


def run_reason_from_proto(number: int, field: str = "reason") -> RunReason:
    return RUN_REASON.from_proto(number, field)


# --------------------------------------------------------------------------- runs, fires, output


def run_to_proto(run: Run) -> types_pb2.Run:
    msg = types_pb2.Run(
        id=run.id,
        job_id=run.job_id,
        owner=run.owner,
        fire_key=run.fire_key,
        state=run_state_to_proto(run.state),
        attempt=run.attempt,
        priority=run.priority,
        shard=run.shard,
        worker_id=run.worker_id,
        lease_token=run.lease_token,
        has_exit_code=run.exit_code is not None,
        exit_code=run.exit_code or 0,
        reason=run_reason_to_proto(run.reason),
        error=run.error,
        output_bytes=run.output_bytes,
        replayed_from=run.replayed_from,
        dead_letter=run.dead_letter,
        schedule_version=run.schedule_version,
        waiting_reason=run.waiting_reason,
        output_sha256=run.output_sha256,
        output_truncated=run.output_truncated,
        results_note=run.results_note,
    )
    for f in run.results:
        msg.results.add(name=f.name, size=f.size, sha256=f.sha256)
    set_time(msg, "fire_at", run.fire_at)
    set_time(msg, "due_at", run.due_at)
    set_time(msg, "lease_expires_at", run.lease_expires_at)
    set_time(msg, "created_at", run.created_at)
    set_time(msg, "started_at", run.started_at)
    set_time(msg, "ended_at", run.ended_at)
    if run.usage is not None:
        msg.usage.CopyFrom(usage_to_proto(run.usage))
    if run.lateness is not None:
        msg.lateness.CopyFrom(lateness_to_proto(run.lateness))
    return msg


def run_from_proto(msg: types_pb2.Run, field: str = "run") -> Run:
    return Run(
        id=msg.id,
        job_id=msg.job_id,
        owner=msg.owner,
        fire_key=msg.fire_key,
        fire_at=get_required_time(msg, "fire_at", field),
        due_at=get_required_time(msg, "due_at", field),
        state=run_state_from_proto(msg.state, f"{field}.state"),
        attempt=msg.attempt or 1,
        priority=msg.priority,
        shard=msg.shard,
        worker_id=msg.worker_id,
        lease_token=msg.lease_token,
        lease_expires_at=get_time(msg, "lease_expires_at", field),
        created_at=get_time(msg, "created_at", field),
        started_at=get_time(msg, "started_at", field),
        ended_at=get_time(msg, "ended_at", field),
        exit_code=msg.exit_code if msg.has_exit_code else None,
        reason=run_reason_from_proto(msg.reason, f"{field}.reason"),
        error=msg.error,
        output_bytes=msg.output_bytes,
        replayed_from=msg.replayed_from,
        dead_letter=msg.dead_letter,
        schedule_version=msg.schedule_version,
        waiting_reason=msg.waiting_reason,
        usage=usage_from_proto(msg, field),
        lateness=lateness_from_proto(msg, field),
        output_sha256=msg.output_sha256,
        output_truncated=msg.output_truncated,
        results=tuple(
            RunResultFile(name=f.name, size=f.size, sha256=f.sha256) for f in msg.results
        ),
        results_note=msg.results_note,
    )


def fire_to_proto(fire: Fire) -> types_pb2.Fire:
    msg = types_pb2.Fire(
        key=fire.key,
        local_time=fire.local.isoformat(),
        skip_reason=run_reason_to_proto(fire.skip_reason),
    )
    set_time(msg, "at", fire.at)
    return msg


def fire_from_proto(msg: types_pb2.Fire, field: str = "fire") -> Fire:
    """``local`` comes back with the fixed UTC offset written in ``local_time`` (the zone
    name is not on the wire); an empty ``local_time`` reads as ``at`` in UTC."""
    at = get_required_time(msg, "at", field)
    local = at
    if msg.local_time:
        try:
            local = datetime.fromisoformat(msg.local_time)
        except ValueError:
            raise InvalidArgument(f"{field}.local_time", "not an ISO 8601 time") from None
        if local.utcoffset() is None:
            raise InvalidArgument(f"{field}.local_time", "must carry a UTC offset")
    return Fire(
        key=msg.key,
        at=at,
        local=local,
        skip_reason=run_reason_from_proto(msg.skip_reason, f"{field}.skip_reason"),
    )


def output_chunk_to_proto(chunk: OutputChunk) -> types_pb2.OutputChunk:
    return types_pb2.OutputChunk(
        run_id=chunk.run_id,
        offset=chunk.offset,
        data=chunk.data,
        stream=chunk.stream,
        eof=chunk.eof,
    )


def output_chunk_from_proto(msg: types_pb2.OutputChunk, field: str = "chunk") -> OutputChunk:
    return OutputChunk(
        run_id=msg.run_id,
        offset=msg.offset,
        data=bytes(msg.data),
        stream=msg.stream or "stdout",
        eof=msg.eof,
    )
