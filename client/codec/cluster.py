"""The mapping between domain types and protobuf for the cluster's status: its mode,
members and epoch, each shard's poller and lag, and the workers connected.

``X_to_proto`` turns a domain object from ``shardcron.client.types`` into its
``shardcron.v1`` message; ``X_from_proto`` reads one back (as ``jobs`` does).
"""

from __future__ import annotations

from shardcron.client.codec.common import get_time, set_time
from shardcron.client.types import ClusterStatus, ShardInfo, WorkerInfo
from shardcron.v1 import cluster_pb2

__all__ = [
    "cluster_status_from_proto",
    "cluster_status_to_proto",
    "shard_info_from_proto",
    "shard_info_to_proto",
    "worker_info_from_proto",
    "worker_info_to_proto",
]

# --------------------------------------------------------------------------- cluster


def worker_info_to_proto(w: WorkerInfo) -> cluster_pb2.WorkerInfo:
    msg = cluster_pb2.WorkerInfo(
        id=w.id,
        address=w.address,
        slots_total=w.slots_total,
        slots_used=w.slots_used,
        labels=w.labels,
        handlers=list(w.handlers),
        pollers=list(w.pollers),
        owners=list(w.owners),
        handlers_omitted=w.handlers_omitted,
    )
    set_time(msg, "connected_at", w.connected_at)
    return msg


def worker_info_from_proto(msg: cluster_pb2.WorkerInfo, field: str = "worker") -> WorkerInfo:
    return WorkerInfo(
        id=msg.id,
        address=msg.address,
        slots_total=msg.slots_total,
        slots_used=msg.slots_used,
        labels=dict(msg.labels),
        handlers=tuple(msg.handlers),
        connected_at=get_time(msg, "connected_at", field),
        pollers=tuple(msg.pollers),
        owners=tuple(msg.owners),
        handlers_omitted=msg.handlers_omitted,
    )


def shard_info_to_proto(s: ShardInfo) -> cluster_pb2.ShardInfo:
    return cluster_pb2.ShardInfo(shard=s.shard, owner=s.owner, lag_seconds=s.lag_seconds)


def shard_info_from_proto(msg: cluster_pb2.ShardInfo) -> ShardInfo:
    return ShardInfo(shard=msg.shard, owner=msg.owner, lag_seconds=msg.lag_seconds)


def cluster_status_to_proto(status: ClusterStatus) -> cluster_pb2.ClusterStatus:
    return cluster_pb2.ClusterStatus(
        mode=status.mode,
        leader=status.leader,
        epoch=status.epoch,
        members=status.members,
        shards=[shard_info_to_proto(s) for s in status.shards],
        workers=[worker_info_to_proto(w) for w in status.workers],
        workers_omitted=status.workers_omitted,
    )


def cluster_status_from_proto(msg: cluster_pb2.ClusterStatus) -> ClusterStatus:
    """An empty ``mode`` reads as ``"dev"``."""
    return ClusterStatus(
        mode=msg.mode or "dev",
        leader=msg.leader,
        epoch=msg.epoch,
        members=list(msg.members),
        shards=[shard_info_from_proto(s) for s in msg.shards],
        workers=[worker_info_from_proto(w, f"workers[{i}]") for i, w in enumerate(msg.workers)],
        workers_omitted=msg.workers_omitted,
    )
