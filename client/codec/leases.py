"""The leases of the lease stream: ``LeaseGrant`` <-> ``worker_pb2.Lease``, one batch at a
time (``stream`` calls these for a ``Leases`` message).

A turn's leases mostly share their task, resources, instants and job name, so each
side does that part once per batch: the encoder serializes it once and merges it into
each lease before setting the lease's own fields; the decoder reads each distinct
task, resources and instant once. Errors name the field from the message's body down,
as everywhere in the stream codec.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from shardcron.client.codec.common import (
    each,
    fencing_token,
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
from shardcron.client.dataclass_copies import copy_with
from shardcron.client.errors import InvalidArgument
from shardcron.client.stream import LeaseGrant, Leases
from shardcron.v1 import worker_pb2

T = TypeVar("T")

# Durations the poller may leave unset read as timedelta(0), "not said": the worker
# then keeps what it had (its default lease TTL, a third of it between heartbeats,
# the Welcome's TTL for a lease or a renewal), as it always has.
NOT_SAID = timedelta(0)


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
    instants of the jobs created together (a dict lookup instead of a conversion)."""
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


def grant_from_proto(
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
        lease_ttl=get_duration(msg, "lease_ttl", path, NOT_SAID),  # type: ignore[arg-type]
        resources=_read_once(resources_from_proto, msg.resources, f"{path}.resources", memo),
        job_name=msg.job_name,
        expires_at=_time_once(msg, "expires_at", path, memo),
    )


def grant_to_proto(
    grant: LeaseGrant, path: str, memo: dict[Any, Any] | None = None
) -> worker_pb2.Lease:
    memo = {} if memo is None else memo
    return worker_pb2.Lease(
        run_id=grant.run_id,
        job_id=grant.job_id,
        owner=grant.owner,
        fencing_token=fencing_token(grant.fencing_token, path),
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


def leases_to_proto(grants: Sequence[LeaseGrant]) -> worker_pb2.PollerMessage:
    """The ``Leases`` message of ``grants``. What a grant shares with others of the
    batch (task, resources, times, job name: a turn's leases mostly share all of it) is
    built and serialized once; each lease is those bytes merged, then its own fields
    set, instead of building each lease whole."""
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
            common = shared[key] = grant_to_proto(alone, path, memo).SerializeToString()
        lease = out.add()
        lease.MergeFromString(common)
        lease.run_id = g.run_id
        lease.job_id = g.job_id
        lease.owner = g.owner
        lease.fencing_token = fencing_token(g.fencing_token, "leases.leases", i)
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


def leases_from_proto(msg: worker_pb2.Leases, path: str) -> Leases:
    memo: dict[Any, Any] = {}
    read = functools.partial(grant_from_proto, memo=memo)
    return Leases(grants=each(msg.leases, f"{path}.leases", read))
