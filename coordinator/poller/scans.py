"""The scan's store reads, off the loop's turn, and what is held of what they found.

A scan reads each owned shard's due index over its window (``ShardWindows``), and
the runs the index names that the poller does not hold yet, with the jobs of those
due by ``PollerConfig.job_read_until`` (a later one's job is read as it triggers). With a
Cassandra store, and worse under a burst of creates, those reads took longer than
many turns, the shards of a node read one after another; while the loop's turn
waited for them, no run was leased, started or ended. So a scan's reads go:

- in a task of their own (``ScanReads``), while the loop's turns go on; the turn
  that starts them waits ``SCAN_WAIT`` for them, so a fast store (SQLite) loads
  within the turn as before;
- ``IN_FLIGHT`` shards at once, each shard's pages in order.

The shards' cursors are saved beside the turns too (``CursorSaves``).

The reads only read: what they found is held by the loop's own task
(``hold_found``), in a later turn, and only if the poller's shards did not change
and it did not reset since the scan began (``ScanPlan.generation``). A run held or
ended here meanwhile (a hint, a turn) is known, and left as the loop has it; a job
is cached unless the copy held was read after the scan began. A store failure in
the reads is raised in the turn that takes them, as if the turn had read: the poller
resets.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from shardcron.client.types import Job, Run, RunState
from shardcron.coordinator.poller.config import PollerConfig
from shardcron.coordinator.poller.table import RunTable
from shardcron.coordinator.poller.windows import ShardWindows
from shardcron.coordinator.store import JobStore

PAGE = 2000  # due-index rows read per store call
IN_FLIGHT = 8  # shards read at once
SCAN_WAIT = 0.05  # seconds the turn that starts a scan waits for its reads


@dataclass(frozen=True, slots=True, kw_only=True)
class ScanPlan:
    """What one scan reads: each shard's window start (None: from its saved cursor,
    else its oldest due row), up to ``until``."""

    starts: dict[int, datetime | None]
    until: datetime
    now: datetime  # the time the scan began at (a re-read's time, an orphan's taking-over)
    read_at: float  # the loop's monotonic clock when the scan began
    recheck: bool  # the recent past is read again too
    generation: int  # the poller's shards and memory as of the scan's start


@dataclass(slots=True, kw_only=True)
class ShardFound:
    """What was read of one shard: its runs not held when read, in due order, and their jobs."""

    shard: int
    runs: list[Run] = field(default_factory=list)
    jobs: dict[str, Job] = field(default_factory=dict)
    complete: bool = False  # its whole window was read (False: memory filled up first)


class ScanReads:
    """At most one scan's reads in flight."""

    def __init__(
        self,
        store: JobStore,
        windows: ShardWindows,
        table: RunTable,
        *,
        config: PollerConfig,
        wake: Callable[[], None],
    ) -> None:
        self._store = store
        self._windows = windows
        self._table = table
        self._config = config
        self._wake = wake  # the loop goes on once the reads are over
        self._task: asyncio.Task[list[ShardFound]] | None = None
        self.plan: ScanPlan | None = None

    @property
    def busy(self) -> bool:
        return self._task is not None

    def begin(self, now: datetime, monotonic: float, generation: int) -> None:
        """Starts reading the runs that come due before the scan's edge from the shards
        the windows say (``ShardWindows.to_read``); runs held or ended here are not read,
        nor more than memory has room for. No shard to read: the scan is over at once."""
        windows, table = self._windows, self._table
        recheck = windows.recheck_due(monotonic)
        starts = windows.to_read(now, recheck=recheck)
        if not starts:
            windows.scanned(monotonic, rechecked=False)
            return
        plan = self.plan = ScanPlan(
            starts=starts,
            until=windows.scan_edge(now),
            now=now,
            read_at=monotonic,
            recheck=recheck,
            generation=generation,
        )
        room = self._config.max_loaded - len(table)
        self._task = asyncio.create_task(self._read(plan, table.known, room), name="poller-scan")
        self._task.add_done_callback(lambda _: self._wake())

    async def settle(self, timeout: float) -> bool:
        """Waits up to ``timeout`` seconds for the reads; True once they are over."""
        if self._task is None:
            return False
        await asyncio.wait({self._task}, timeout=timeout)
        return self._task.done()

    def hold(self, generation: int) -> bool:
        """Holds what the reads found, once they are over (raises their store error),
        unless the poller's shards changed or it reset since they began (``generation``);
        True if held."""
        task, plan = self._task, self.plan
        if task is None or plan is None or not task.done():
            return False
        self._task = self.plan = None
        found = task.result()
        if plan.generation != generation:
            return False
        hold_found(plan, found, self._table, self._windows)
        # the next scan is an interval after this one began: a run written before the
        # clock moved on is read by then however long these reads took
        self._windows.scanned(plan.read_at, rechecked=plan.recheck)
        return True

    def cancel(self) -> None:
        """The reads are not wanted any more (the poller reset or stopped)."""
        if self._task is not None:
            self._task.cancel()
            self._task.add_done_callback(retrieve)
        self._task = self.plan = None

    async def _read(
        self, plan: ScanPlan, known: Callable[[str], bool], room: int
    ) -> list[ShardFound]:
        limit = asyncio.Semaphore(IN_FLIGHT)
        budget = [room]

        async def one(shard: int, start: datetime | None) -> ShardFound:
            async with limit:
                return await self._read_shard(plan, shard, start, known, budget)

        return list(await asyncio.gather(*(one(s, start) for s, start in plan.starts.items())))

    async def _read_shard(
        self,
        plan: ScanPlan,
        shard: int,
        start: datetime | None,
        known: Callable[[str], bool],
        budget: list[int],
    ) -> ShardFound:
        found = ShardFound(shard=shard)
        if budget[0] <= 0:
            return found
        if start is None:
            start = await self._shard_start(shard, plan.now)
        start = self._windows.window_start(shard, start, plan.now, recheck=plan.recheck)
        read_until = self._config.job_read_until(plan.now)
        after: tuple[datetime, str] | None = None
        while True:
            entries = await self._store.scan_due(
                shard, due_from=start, due_until=plan.until, after=after, limit=PAGE
            )
            fresh = [
                e.run_id
                for e in entries
                if not known(e.run_id) and not self._windows.left_to_hint(shard, e.due_at, plan.now)
            ]
            if fresh:
                runs = await self._store.get_runs(fresh)
                jobs = await self._store.get_jobs(
                    list({r.job_id for r in runs.values() if _job_wanted(r, read_until)})
                )
                found.runs.extend(runs.values())
                found.jobs.update(jobs)
                budget[0] -= len(runs)
            if len(entries) < PAGE:
                found.complete = True
                return found
            if budget[0] <= 0:
                return found
            last = entries[-1]
            after = (last.due_at, last.run_id)

    async def _shard_start(self, shard: int, now: datetime) -> datetime:
        cursors = await self._store.load_cursors([shard])
        if shard in cursors:
            return cursors[shard]
        oldest = await self._store.oldest_due(shard)
        return min(oldest, now) if oldest is not None else now


def _job_wanted(run: Run, read_until: datetime) -> bool:
    """The run's job is read with it: it is due by ``read_until``, or not PENDING (a run
    taken over from another poller)."""
    return run.state != RunState.PENDING or run.due_at <= read_until


def hold_found(
    plan: ScanPlan,
    found: Iterable[ShardFound],
    table: RunTable,
    windows: ShardWindows,
) -> None:
    """Holds what a scan found (on the loop's task), and marks each shard read in whole
    as loaded up to the scan's edge. Runs known by now are left as the loop has them."""
    for shard in found:
        taken = windows.taken_at.get(shard.shard, plan.now)
        for run in shard.runs:
            if table.known(run.id):
                continue
            job = shard.jobs.get(run.job_id)
            if run.state.is_final:
                table.remember_ended(run.id)
            elif run.state == RunState.PENDING:
                table.hold(run, job)
            else:
                table.adopt(run, job, taken_at=taken, now=plan.now)
        for job in shard.jobs.values():
            table.cache_job(job, read_at=plan.read_at)
        if shard.complete:
            windows.loaded(shard.shard, plan.until, plan.now, recheck=plan.recheck)


class CursorSaves:
    """At most one save of the shards' cursors in flight, beside the turns: in the turn,
    it held up whole turns on a loaded Cassandra. A cursor is never past a run
    that is not final (``ShardWindows.cursors``), and runs written later are due later
    still, so a save that lands late is still safe for whoever reads it."""

    def __init__(self, store: JobStore) -> None:
        self._store = store
        self._task: asyncio.Task[None] | None = None

    @property
    def busy(self) -> bool:
        return self._task is not None

    def start(self, cursors: dict[int, datetime]) -> None:
        self._task = asyncio.create_task(self._store.save_cursors(cursors))

    def check(self) -> None:
        """Raises the store's error of a save over, once."""
        task = self._task
        if task is not None and task.done():
            self._task = None
            task.result()

    def cancel(self) -> None:
        if self._task is not None:
            self._task.add_done_callback(retrieve)  # left to land: it is safe whenever
        self._task = None


def retrieve(task: asyncio.Task[Any]) -> None:
    """Takes a cancelled read's outcome, so a failure no one waits for is not logged as lost."""
    with contextlib.suppress(BaseException):
        task.result()
