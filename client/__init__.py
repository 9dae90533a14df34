"""shardcron.client: the Python SDK of shardcron.

``Client`` (blocking) and ``AsyncClient`` (asyncio) speak to any api node; they take and
return the domain dataclasses re-exported here and raise the ``ShardcronError`` family.
The wire mapping lives in ``shardcron.client.codec``, the CLI in ``shardcron.client.cli``.
The clients are imported on first use, so importing ``shardcron.client.types`` (as the
server roles do) does not load gRPC through this package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from shardcron.client.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    ShardcronError,
    StaleLease,
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
    MisfirePolicy,
    OutputChunk,
    OverlapPolicy,
    Page,
    Resources,
    RetryPolicy,
    Run,
    RunReason,
    RunState,
    Schedule,
    ScheduleKind,
    ShardInfo,
    Task,
    WorkerInfo,
)

if TYPE_CHECKING:
    from shardcron.client.sdk import AsyncClient, Client


def __getattr__(name: str) -> Any:
    if name in ("AsyncClient", "Client"):
        from shardcron.client import sdk

        return getattr(sdk, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AlreadyExists",
    "AsyncClient",
    "Client",
    "ClusterStatus",
    "CommandTask",
    "ConcurrencyPolicy",
    "DstGap",
    "DstOverlap",
    "FailedPrecondition",
    "Fire",
    "HandlerTask",
    "InvalidArgument",
    "Job",
    "JobSpec",
    "JobState",
    "MisfirePolicy",
    "NotFound",
    "OutputChunk",
    "OverlapPolicy",
    "Page",
    "Resources",
    "RetryPolicy",
    "Run",
    "RunReason",
    "RunState",
    "Schedule",
    "ScheduleKind",
    "ShardInfo",
    "ShardcronError",
    "StaleLease",
    "Task",
    "Unavailable",
    "VersionConflict",
    "WorkerInfo",
]
