"""A run this worker holds on a lease: its context, its poller, its deadline.

A lease given ahead of its run's due instant (the poller's lease lead; this worker
says ``Hello.waits_for_due``) is held until ``due_at`` on this machine's clock
before the run starts, and ``Started`` goes out only then (``hold_until_due``): the
run's start, its recorded ``started_at`` and the start lag are the real ones. A
cancel or a lost lease during the wait ends it without starting it.

The deadline is the lease's ``expires_at`` read on this machine's clock less
``LEASE_SAFETY_MARGIN`` (``lease_deadline``); the run must be dead by then unless a
renewal moves it. A run whose poller no longer serves its shard, or whose stream is
down, is ``seeking``: its lease is named to every poller until one renews it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from shardcron.client.stream import LeaseRef, RunOutcome

from .context import stopped_result
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
        )


def lease_deadline(expires_at: datetime) -> float:
    """The ``time.monotonic()`` by which a run leased until ``expires_at`` (on the
    poller's clock, read as this machine's) must be dead."""
    return time.monotonic() + (expires_at - utcnow()).total_seconds() - LEASE_SAFETY_MARGIN


def start_or_hold(run: HeldRun, due_at: datetime | None) -> float:
    """How long a new lease is held before its run starts: until its ``due_at`` on this
    machine's clock. 0 (due already, or not said): the run is reported ``Started`` now."""
    now = utcnow()
    wait = 0.0 if due_at is None else (due_at - now).total_seconds()
    if wait <= 0:
        run.link.outbox.started(run.ref, now)
    return max(0.0, wait)


async def hold_until_due(run: HeldRun, seconds: float) -> ExecResult | None:
    """Holds a lease given ``seconds`` ahead of its run's due instant until then, then
    reports the run ``Started`` (None: start it now). Stopped meanwhile (a cancel, or
    its lease lost), the run never starts: its result says so, with no start time."""
    if seconds <= 0:
        return None
    ctx = run.ctx
    # a timer and a callback on the shared stop future (never cancelled): half the
    # work of asyncio.wait, for each of a fleet's fires
    loop = asyncio.get_running_loop()
    woken = loop.create_future()

    def wake(_: object = None) -> None:
        if not woken.done():
            woken.set_result(None)

    timer = loop.call_later(seconds, wake)
    stopped = ctx.stopped()
    stopped.add_done_callback(wake)
    try:
        await woken
    finally:
        timer.cancel()
        stopped.remove_done_callback(wake)
    if ctx.stopping:
        return dataclasses.replace(stopped_result(ctx, False, utcnow()), started_at=None)
    run.link.outbox.started(run.ref, utcnow())  # its poller now, if the shard moved
    return None


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
