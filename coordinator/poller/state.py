"""What the poller holds of each run it serves, and where the run stands.

A run held here is in exactly one phase: WAITING (in the timer heap until due),
READY (due and admitted, waiting for a worker's slot), BLOCKED (due, waiting for
its job's concurrency limit) or LEASED (on a worker: the lease book holds its
token). The loop owns these objects; the deciders read them and move a run
between the phases they own (admission: READY and BLOCKED).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from enum import Enum

from shardcron.client.types import Job, Run, RunReason
from shardcron.coordinator.poller.workers import WorkerBook


class Phase(Enum):
    WAITING = 1  # in the timer heap until due
    READY = 2  # due, admitted, waiting for a worker slot
    BLOCKED = 3  # due, waiting for the job's concurrency limit
    LEASED = 4  # on a worker


# What shard lag measures: runs past due and not on a worker for want of the poller or
# a worker. A run BLOCKED by its job's concurrency limit waits by the job's own policy.
LAG_PHASES = frozenset({Phase.WAITING, Phase.READY})


@dataclass(slots=True, eq=False)
class Slot:
    """One run held in memory (mutable: it moves through its phases)."""

    run: Run
    job: Job | None = None
    phase: Phase = Phase.WAITING
    # None while LEASED: an orphan adopted from an earlier owner, not renewed here yet
    worker: WorkerBook | None = None
    cancel_reason: RunReason | None = None  # a cancel was sent to its worker
    cancel_waiters: list[asyncio.Future[Run]] = field(default_factory=list)
    output_bytes: int = 0  # output received since the run was loaded
