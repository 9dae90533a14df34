"""A run this worker holds on a lease: its context, its poller, its deadline.

A lease given ahead of its run's due instant (the poller's lease lead; this worker
says ``Hello.waits_for_due``) is held until ``due_at`` on this machine's clock
before the run starts, and ``Started`` goes out only then (``due_gate``): the
run's start, its recorded ``started_at`` and the start lag are the real ones. A
cancel or a lost lease during the wait ends it without starting it.

The deadline is the lease's ``expires_at`` read on this machine's clock less
``LEASE_SAFETY_MARGIN`` (``lease_deadline``); the run must be dead by then unless a
renewal moves it. A run whose poller no longer serves its shard, or whose stream is
down, is ``seeking``: its lease is named to every poller until one renews it.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from shardcron.client.stream import LeaseRef, RunOutcome

from .executor import ExecResult, RunContext, utcnow
from .link import PollerLink

MAX_ERROR_CHARS = 4096  # of a result's error text; the rest is cut (bounded_error)
# Seconds a run is killed before its lease's expires_at: this worker's clock may be
# behind the poller's by this much (plus the poller's expiry grace) without two
# attempts overlapping.
LEASE_SAFETY_MARGIN = 0.25


@dataclass(eq=False)
class HeldRun:
    ctx: RunContext
    link: PollerLink
    token: int
    slots: int
    deadline: float  # monotonic: the run must be dead by then unless renewed
    task: asyncio.Task | None = None
    lost: bool = False  # lease gone: killed, result never reported
    # its poller said it does not serve the run's shard: the lease is named to every
    # poller until one renews it (``seeking``)
    adrift: bool = False
    abandoned: bool = False  # worker stopping without drain: result never reported
    # Send times of heartbeats (or Hello.held) naming this run, not yet answered.
    pending_renewals: deque[float] = field(default_factory=deque)

    @property
    def ref(self) -> LeaseRef:
        return LeaseRef(run_id=self.ctx.run_id, fencing_token=self.token, job_id=self.ctx.job_id)

    @property
    def seeking(self) -> bool:
        """No poller renews the lease now: its shard moved, or its stream is down."""
        return self.adrift or not self.link.connected

    def outcome(self, res: ExecResult) -> RunOutcome:
        return RunOutcome(
            run_id=self.ctx.run_id,
            fencing_token=self.token,
            job_id=self.ctx.job_id,
            state=res.state,
            reason=res.reason,
            exit_code=res.exit_code,
            error=bounded_error(res.error),
            started_at=res.started_at,
            ended_at=res.ended_at,
            usage=res.usage,
            results_note=res.results_note,
        )


def lease_deadline(expires_at: datetime) -> float:
    """The ``time.monotonic()`` by which a run leased until ``expires_at`` (on the
    poller's clock, read as this machine's) must be dead."""
    return time.monotonic() + (expires_at - utcnow()).total_seconds() - LEASE_SAFETY_MARGIN


def bounded_error(error: str) -> str:
    """``error`` cut to ``MAX_ERROR_CHARS``, keeping its start (the exception's type and
    message): results travel in messages a node must accept, and are stored."""
    if len(error) <= MAX_ERROR_CHARS:
        return error
    return f"{error[:MAX_ERROR_CHARS]}... ({len(error) - MAX_ERROR_CHARS} characters cut)"


def lapsed(runs: Iterable[HeldRun], now: float, period: float) -> tuple[list[HeldRun], float]:
    """The runs not yet lost whose deadline is ``now`` or past, and when to look again:
    the earliest deadline still ahead, at most ``period`` after ``now``."""
    expired, wake = [], now + period
    for run in runs:
        if run.lost:
            continue
        if run.deadline <= now:
            expired.append(run)
        else:
            wake = min(wake, run.deadline)
    return expired, wake
