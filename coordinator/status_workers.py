"""The workers a cluster status lists: those its caller may see, and no more than one
reply holds, however many connect.

A worker's pool is the owners its credential lets it take (``Caller.worker_pool``),
``ANY_OWNER`` for every owner (every worker of a node without an auth file). A
caller sees the workers whose pool holds one of the owners its credential acts for,
or every owner; an admin, a principal of ``"*"`` and every caller of a node without
an auth file (``Viewer`` None) see them all. A worker whose pool is not said (an older
node's) is seen only by those.

One status lists at most ``MAX_LISTED_WORKERS`` of the workers its caller sees, by id,
within ``LISTED_WORKER_BYTES`` of their encoding, each with at most
``MAX_LISTED_HANDLERS`` handler names; what is left out is counted
(``ClusterStatus.workers_omitted``, ``WorkerInfo.handlers_omitted``; a worker that
streams to several pollers, left out by each, is counted once for each), so that the
reply stays far below gRPC's 4 MiB. A poller lists its own workers the same way for the
caller the api node names (``GetPollerStatus``), so node-to-node replies stay as
small and a tenant's workers are never crowded out by workers it may not see.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from shardcron.client import codec
from shardcron.client.types import ANY_OWNER, WorkerInfo
from shardcron.coordinator.auth import Caller
from shardcron.v1 import cluster_pb2

MAX_LISTED_WORKERS = 1000
LISTED_WORKER_BYTES = 512 << 10
MAX_LISTED_HANDLERS = 50

# The owners whose workers a caller sees: those whose pool holds one of them or
# ANY_OWNER. None: every worker.
Viewer = frozenset[str] | None


def viewer_of(caller: Caller | None) -> Viewer:
    """Whose workers ``caller`` sees (None, ``current_caller()`` without an auth file:
    every worker)."""
    return None if caller is None else caller.acts_for


def sees(viewer: Viewer, worker: WorkerInfo) -> bool:
    if viewer is None:
        return True
    return ANY_OWNER in worker.owners or not viewer.isdisjoint(worker.owners)


def poller_request(viewer: Viewer) -> cluster_pb2.PollerStatusRequest:
    """What an api node asks a poller for: the workers ``viewer`` sees. ``ANY_OWNER``
    goes with the owners, so that only "every worker" is asked as no owner at all."""
    owners = [] if viewer is None else sorted({*viewer, ANY_OWNER})
    return cluster_pb2.PollerStatusRequest(owners=owners)


def requested_viewer(request: cluster_pb2.PollerStatusRequest) -> Viewer:
    return frozenset(request.owners) or None


def listed(
    workers: Iterable[WorkerInfo], viewer: Viewer, *, omitted: int = 0
) -> tuple[list[WorkerInfo], int]:
    """The workers ``viewer`` sees, by id, as many as one status lists, their handlers
    cut; and how many it sees that are left out, plus ``omitted`` (left out before)."""
    visible = sorted((w for w in workers if sees(viewer, w)), key=lambda w: w.id)
    out: list[WorkerInfo] = []
    size = 0
    for worker in visible[:MAX_LISTED_WORKERS]:
        worker = _handlers_cut(worker)
        size += codec.worker_info_to_proto(worker).ByteSize()
        if size > LISTED_WORKER_BYTES:
            break
        out.append(worker)
    return out, omitted + len(visible) - len(out)


def _handlers_cut(worker: WorkerInfo) -> WorkerInfo:
    extra = len(worker.handlers) - MAX_LISTED_HANDLERS
    if extra <= 0:
        return worker
    return dataclasses.replace(
        worker,
        handlers=worker.handlers[:MAX_LISTED_HANDLERS],
        handlers_omitted=worker.handlers_omitted + extra,
    )


def merge_workers(streams: Iterable[WorkerInfo]) -> list[WorkerInfo]:
    """One entry per worker from the pollers' views of its streams: its slots are one
    budget, so the slots each poller leased add up."""
    merged: dict[str, WorkerInfo] = {}
    for w in streams:
        seen = merged.get(w.id)
        if seen is None:
            merged[w.id] = w
            continue
        connected = [t for t in (seen.connected_at, w.connected_at) if t is not None]
        merged[w.id] = dataclasses.replace(
            seen,
            slots_used=seen.slots_used + w.slots_used,
            pollers=tuple(sorted({*seen.pollers, *w.pollers})),
            connected_at=min(connected) if connected else None,
        )
    return sorted(merged.values(), key=lambda w: w.id)
