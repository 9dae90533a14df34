"""The jobs of runs coming due, read beside the turns; room asked for them ahead.

In a cluster a job copy older than ``job_cache_ttl`` (1 s) is read again when its run
triggers: another node's api may have changed the job. Read in the turn, that read
held up every lease and result of the turn, on a busy Cassandra as long as the
turn's commit. So a run due whose job copy is too old waits (WAITING: its place
AWAITING_JOB, then JOB_READ) while its job is read beside the turns,
during their commits (``JobReads``), and triggers in the first turn after the read
with the copy it read: a copy read after the run came due sees every change made
before. A turn that begins the read with nothing else to write waits ``READ_WAIT``
for it, so a fast read (SQLite, a quiet Cassandra) serves that turn as before; a slow
one holds up its runs, not the turn; a turn with writes of its own does not wait. One
read is in flight at a time; a run that waits meanwhile goes into the next. A copy
read so is held unless the one held was read later (``RunTable.cache_job``); a job
with no row is looked for again at set times, as before (``Due.trigger``).
A run loaded (hinted or scanned) due later than ``PollerConfig.job_read_until`` is
held without its job: a copy read then would be read again here anyway (on a
cluster such reads made a large part of all the reads of jobs).

A worker that shares its slots among pollers grants them by each poller's demand,
one round trip after it is asked. The runs coming due within ``DEMAND_AHEAD`` of the
lease lead count in the demand (``coming``, ``placement.demand``), so the room is
granted by the time they are ready.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta

from shardcron.client.saturating import saturating_add
from shardcron.client.types import Job, JobSpec
from shardcron.coordinator.poller.config import DEMAND_AHEAD
from shardcron.coordinator.poller.due import Due
from shardcron.coordinator.poller.scans import retrieve
from shardcron.coordinator.poller.table import RunTable, Slot
from shardcron.coordinator.store import JobStore

READ_WAIT = 0.05  # seconds the turn that begins a read of jobs waits for it


def coming(due: Due, table: RunTable, now: datetime, lead: timedelta) -> list[tuple[JobSpec, str]]:
    """(spec, owner) of each run coming due within ``DEMAND_AHEAD`` of the lead whose job is held."""
    jobs = table.jobs
    soon = due.coming(saturating_add(now, lead + DEMAND_AHEAD))
    return [(job.spec, s.run.owner) for s in soon if (job := jobs.get(s.run.job_id))]


class JobReads:
    """The read in flight of the jobs of runs due (the runs waiting for it are held in
    the table: ``RunTable.await_job``)."""

    def __init__(
        self,
        store: JobStore,
        table: RunTable,
        *,
        stale_jobs: Callable[[list[Slot]], set[str]],
        wake: Callable[[], None],
    ):
        self._store = store
        self._table = table
        self._stale_jobs = stale_jobs  # the jobs of runs due to read again
        self._wake = wake  # the loop goes on once a read is over
        self._task: asyncio.Task[dict[str, Job]] | None = None
        self._read_at = 0.0  # monotonic: when the read in flight began

    async def ready(self, due: list[Slot], monotonic: float, *, wait: bool = True) -> list[Slot]:
        """Of the runs ``due`` and those that waited for a read now over, the ones to
        trigger now (their job copies are current); the others wait for a read. A read
        begun here is waited for ``READ_WAIT`` if ``wait``: a fast one serves this turn.
        A turn that has something to write anyway does not wait (``wait`` False): on a
        busy store the wait would hold up the turn's commit, and the leases of fresh
        runs in it; the runs read trigger in the turn its end wakes."""
        table = self._table
        out = self._read_over()
        if due:
            stale = self._stale_jobs(due)
            for s in due:
                if s.run.job_id in stale:
                    table.await_job(s)
                else:
                    out.append(s)
        if self._task is None and table.awaiting_job:
            self._read_at = monotonic
            job_ids = list({s.run.job_id for s in table.begin_job_read()})
            task = self._task = asyncio.create_task(self._store.get_jobs(job_ids))
            task.add_done_callback(lambda _: self._wake())
            if wait:
                await asyncio.wait({task}, timeout=READ_WAIT)
                out += self._read_over()
        return out

    def _read_over(self) -> list[Slot]:
        """Holds the jobs of a read that is over; returns the runs that waited for it."""
        task = self._task
        if task is None or not task.done():
            return []
        self._task = None
        table = self._table
        for job in task.result().values():  # a store error resets the poller
            table.cache_job(job, read_at=self._read_at)
        return table.job_read_over()

    def cancel(self) -> None:
        """Nothing waits any more (the poller reset or stopped: its runs are forgotten)."""
        if self._task is not None:
            self._task.cancel()
            self._task.add_done_callback(retrieve)
        self._task = None
