"""The poller role: from the due index of its shards to leases on workers.

One asyncio task owns all mutable state; everything else (worker streams, the
api's hints and cancels, assignment changes) reaches it through an inbox. Each
turn of the loop drains the inbox, loads what became due soon, triggers what is
due, matches ready runs to worker slots, and writes everything the turn decided
in ONE store commit (group commit) before it sends anything that depends on it:
a lease is durable before the worker sees it, a result is durable before the
worker is told it was accepted.

Never twice at once: a lease carries a fencing token (epoch << 32 | sequence);
a worker holds a run only while it keeps renewing; a result or heartbeat whose
token is not the current lease's is refused; a run that was leased under an
earlier epoch (a crashed or deposed poller) is re-leased only one full TTL after
this poller took the shard over.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import heapq
import logging
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from shardcron.client.errors import FailedPrecondition, NotFound, Unavailable
from shardcron.client.stream import (
    CancelOrder,
    Credits,
    Heartbeat,
    Hello,
    LeaseGrant,
    LeaseRef,
    Output,
    Refused,
    Renewal,
    ResultAck,
    Results,
    RunOutcome,
    Started,
    Welcome,
    WorkerEvent,
)
from shardcron.client.types import (
    Job,
    JobState,
    OutputChunk,
    Run,
    RunReason,
    RunState,
    ScheduleKind,
    ShardInfo,
    WorkerInfo,
)
from shardcron.coordinator.coordination import Assignment
from shardcron.coordinator.ids import bucket_for
from shardcron.coordinator.metrics import Metrics
from shardcron.coordinator.poller.admission import (
    Admission,
    Verdict,
    free_slots,
    past_deadline,
)
from shardcron.coordinator.poller.clock import Clock, SystemClock
from shardcron.coordinator.poller.config import (
    JOB_ROW_GRACE,
    JOB_ROW_RETRY,
    MAX_DEFERRED,
    PollerConfig,
)
from shardcron.coordinator.poller.events import (
    AssignmentChanged,
    CancelJob,
    CancelRun,
    InboxEvent,
    JobChanged,
    RunsCreated,
    WorkerClosed,
    WorkerConnected,
    WorkerMessage,
)
from shardcron.coordinator.poller.fires import is_extra_run, on_fire_due, retry_run
from shardcron.coordinator.poller.leases import LeaseBook
from shardcron.coordinator.poller.state import Phase, Slot
from shardcron.coordinator.poller.workers import WorkerBook, WorkerLink
from shardcron.coordinator.store import JobProgress, JobStore

log = logging.getLogger("shardcron.poller")


@dataclass(slots=True)
class _Turn:
    """What one turn of the loop writes, and what it does once that is durable."""

    runs: dict[str, Run] = field(default_factory=dict)
    due: list[Run] = field(default_factory=list)
    progress: dict[str, JobProgress] = field(default_factory=dict)
    output: list[OutputChunk] = field(default_factory=list)
    after: list[Any] = field(default_factory=list)  # callables run after the commit
    acks: list[tuple[WorkerLink, ResultAck]] = field(default_factory=list)  # sent after it
    leases: list[Slot] = field(default_factory=list)  # leased: sent after it
    retries: list[Slot] = field(default_factory=list)  # decided, not yet placed

    def progress_for(self, job_id: str) -> JobProgress:
        return self.progress.get(job_id) or JobProgress(job_id=job_id)

    def set_progress(self, job_id: str, **changes: Any) -> None:
        self.progress[job_id] = dataclasses.replace(self.progress_for(job_id), **changes)

    def empty(self) -> bool:
        return not (self.runs or self.due or self.progress or self.output or self.retries)


class Poller:
    def __init__(
        self,
        store: JobStore,
        *,
        poller_id: str,
        config: PollerConfig,
        metrics: Metrics,
        ownership_valid: Callable[[], bool] = lambda: True,
        session_generation: Callable[[], int] = lambda: 0,
        clock: Clock | None = None,
    ) -> None:
        self.store = store
        self._clock: Clock = clock or SystemClock()
        self.poller_id = poller_id
        # False while coordination cannot confirm this poller still holds its shards
        self._ownership_valid = ownership_valid
        self._session_generation = session_generation
        self._generation = session_generation()  # the session this state was built under
        self._fencing_generation = self._generation  # the session of self.fencing_epoch
        self._standing_still = False
        self._last_write_time: datetime | None = None
        self.config = config
        self.metrics = metrics
        self.epoch = 0
        self.active = False
        self._leases = LeaseBook(lease_ttl=config.lease_ttl, expiry_grace=config.expiry_grace)
        self._shards: frozenset[int] = frozenset()
        self._taken_at: dict[int, datetime] = {}
        self._loaded_until: dict[int, datetime] = {}
        # when each shard's recent past was last re-read (recheck_interval)
        self._rechecked_at: dict[int, datetime] = {}
        self._slots: dict[str, Slot] = {}
        self._timers: list[tuple[datetime, str]] = []
        self._admission = Admission(self._slots)
        self._job_slots: dict[str, int] = {}
        # jobs of the runs held in memory, with when they were read from the store
        self._jobs: dict[str, Job] = {}
        self._job_read_at: dict[str, float] = {}
        self._recent_final: dict[str, float] = {}
        self._workers: dict[str, WorkerBook] = {}  # by worker id: the latest stream of each
        self._streams: dict[WorkerLink, WorkerBook] = {}  # every open stream
        self._inbox: deque[InboxEvent] = deque()
        # held leases and results named before this poller loaded its shards
        self._deferred: list[tuple[WorkerBook, LeaseRef | RunOutcome]] = []
        self._wake = asyncio.Event()
        self._next_scan = 0.0
        self._next_recheck = 0.0
        self._next_cursor_save = 0.0
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    # --- inputs (any task) ---------------------------------------------------

    def submit(self, event: InboxEvent) -> None:
        self._inbox.append(event)
        self._wake.set()

    def on_assignment(self, assignment: Assignment) -> asyncio.Future[None]:
        """Takes a new assignment; the future is done once it is applied, that is
        after the turn in flight (and its commit) finished: only then may a shard
        taken away be handed to another poller."""
        applied: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.submit(AssignmentChanged(assignment=assignment, applied=applied))
        return applied

    def runs_created(self, runs: Sequence[Run], jobs: Sequence[Job] = ()) -> None:
        """Hint from the api: these PENDING runs (of these jobs) were just written."""
        self.submit(RunsCreated(runs=tuple(runs), jobs=tuple(jobs)))

    def job_changed(self, job: Job) -> None:
        """Hint from the api: the job as stored after a change of spec or state."""
        self.submit(JobChanged(job=job))

    async def cancel(self, run: Run, reason: RunReason) -> Run:
        """Cancels a run of an owned shard; returns the run as it stands after the request."""
        fut: asyncio.Future[Run] = asyncio.get_running_loop().create_future()
        self.submit(CancelRun(run=run, reason=reason, done=fut))
        return await fut

    def cancel_job(self, job_id: str, reason: RunReason) -> None:
        self.submit(CancelJob(job_id=job_id, reason=reason))

    @property
    def fencing_epoch(self) -> int:
        """The fencing epoch this poller's lease tokens carry."""
        return self._leases.fencing_epoch

    def owns(self, shard: int) -> bool:
        return shard in self._shards

    def may_lease(self) -> bool:
        """Leases may be written to workers now: ownership confirmed, not standing still
        (checked again as they go out: a process frozen after it queued them must not
        send them when it runs again)."""
        return (
            self.active
            and not self._standing_still
            and self._session_generation() == self._generation == self._fencing_generation
            and self._ownership_valid()
        )

    # --- lifecycle -----------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="poller")

    async def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for event in self._inbox:
            if isinstance(event, AssignmentChanged) and not event.applied.done():
                event.applied.set_result(None)
        for book in list(self._streams.values()):
            book.link.close()

    async def _loop(self) -> None:
        while not self._stopping:
            try:
                await self._turn()
            except Exception:
                log.exception("poller turn failed; reloading its shards from the store")
                self._reset()
                await asyncio.sleep(0.5)
                continue
            timeout = self._sleep_for()
            if timeout > 0 and not self._inbox:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout)
            else:
                await asyncio.sleep(0)  # let the rest of the node run between turns
            self._wake.clear()

    def _stand_still(self) -> bool:
        """True while ownership is unconfirmed: this poller may have been frozen or cut
        off long enough for its shards to move, so it writes and leases nothing, and
        forgets what it held (reloaded from the store once confirmed again). The same
        when the session was replaced meanwhile: what it decided before is void."""
        generation = self._session_generation()
        if generation != self._generation:
            log.warning("poller %s: coordination session replaced; reloading", self.poller_id)
            self._generation = generation
            self._reset()
            return True
        if self._shards and self._fencing_generation != generation:
            return True  # shards of the old session: the new one's assignment is on its way
        if self._ownership_valid():
            self._standing_still = False
            return False
        if not self._standing_still:
            log.warning("poller %s: shard ownership not confirmed; standing still", self.poller_id)
            self._standing_still = True
            self._reset()
        return True

    def _write_time(self) -> datetime:
        """Now, as the time this turn's writes are made at (increasing): ownership was
        just confirmed, and a next owner of these shards took them only later."""
        now = self._clock.now()
        if self._last_write_time is not None and now <= self._last_write_time:
            now = self._last_write_time + timedelta(microseconds=1)
        self._last_write_time = now
        return now

    def _reset(self) -> None:
        """Forgets everything held in memory; the next scan reloads it from the store,
        as a poller taking the shards over would (leases are waited out or renewed)."""
        now = self._clock.now()
        for slot in self._slots.values():
            for fut in slot.cancel_waiters:
                if not fut.done():
                    fut.set_exception(Unavailable("the poller reloaded its shards; try again"))
        self._slots.clear()
        self._timers.clear()
        self._leases.clear()
        self._admission.clear()
        self._job_slots.clear()
        self._jobs.clear()
        self._job_read_at.clear()
        self._recent_final.clear()
        self._loaded_until.clear()
        self._rechecked_at.clear()
        self._taken_at = {shard: now for shard in self._shards}
        self._next_scan = 0.0
        for book in self._streams.values():
            book.clear()
            book.link.forget()

    def _sleep_for(self) -> float:
        clock = self._clock.monotonic()
        now = self._clock.now()
        candidates = [0.5]
        if self._shards:
            candidates.append(self._next_scan - clock)
        if self._timers:
            candidates.append((self._timers[0][0] - now).total_seconds())
        expiry = self._leases.next_expiry()
        if expiry is not None:
            candidates.append((expiry - now).total_seconds())
        deadline = self._admission.next_deadline()
        if deadline is not None:
            candidates.append((deadline - now).total_seconds())
        if self._admission.has_ready() and free_slots(self._workers.values()) > 0:
            candidates.append(0.05)
        return max(0.0, min(candidates))

    # --- one turn --------------------------------------------------------------

    async def _turn(self) -> None:
        turn = _Turn()
        now = self._clock.now()
        while self._inbox:
            await self._handle(self._inbox.popleft(), turn, now)
        if self._stand_still():
            return
        now = self._clock.now()
        if self._shards and self._clock.monotonic() >= self._next_scan:
            await self._scan(now)
        if self._deferred and self._settled():
            self._replay_deferred(turn, now)
        self._expire(now, turn)
        self._miss_deadlines(now, turn)
        await self._trigger_due(now, turn)
        if self.active:
            self._dispatch(now, turn)
        self._update_demand()
        if turn.retries:
            await self._place_retries(turn)
        if not turn.empty():
            if self._stand_still():
                return  # nothing of this turn is written, nothing is sent
            confirmed = self._write_time()
            if turn.output:
                await self.store.append_output(turn.output)
            await self.store.commit(
                runs=list(turn.runs.values()),
                due=turn.due,
                progress=list(turn.progress.values()),
                write_time=confirmed,
            )
        if self._stand_still():
            return  # frozen or cut off during the turn: send nothing it decided
        for slot in turn.leases:
            self._send_lease(slot)
        for action in turn.after:
            action()
        for link, ack in turn.acks:
            link.ack(ack)
        for book in self._workers.values():
            book.link.flush()
        if self._clock.monotonic() >= self._next_cursor_save and self._shards:
            await self._save_cursors(now)
        self._update_gauges()

    async def _handle(self, event: InboxEvent, turn: _Turn, now: datetime) -> None:
        match event:
            case WorkerMessage(link=link, event=message):
                book = self._streams.get(link)
                if book is not None:
                    self._on_worker_message(book, message, turn, now)
            case RunsCreated(runs=runs, jobs=jobs):
                for run in runs:
                    self._admit_new(run, now)
                for job in jobs:
                    if job.id in self._job_slots:
                        self._cache_job(job)
            case JobChanged(job=job):
                if job.id in self._jobs:
                    self._cache_job(job)
            case WorkerConnected(link=link, hello=hello, address=address):
                self._on_hello(link, hello, address, turn, now)
            case WorkerClosed(link=link):
                self._on_closed(link)
            case CancelRun(run=run, reason=reason, done=done):
                await self._on_cancel(run, reason, done, turn, now)
            case CancelJob(job_id=job_id, reason=reason):
                for slot in [s for s in self._slots.values() if s.run.job_id == job_id]:
                    self._cancel_slot(slot, reason, turn, now)
            case AssignmentChanged(assignment=assignment, applied=applied):
                self._on_assignment_event(assignment, now)
                if not applied.done():
                    applied.set_result(None)

    # --- assignment and loading ---------------------------------------------------

    def _on_assignment_event(self, a: Assignment, now: datetime) -> None:
        if a.fencing_epoch != self.fencing_epoch:
            self._fencing_generation = self._session_generation()
        self.epoch = a.epoch
        self._leases.set_fencing_epoch(a.fencing_epoch)
        self.active = a.active
        lost = self._shards - a.shards
        for shard in a.shards - self._shards:
            self._taken_at[shard] = now
            self._loaded_until.pop(shard, None)
        for shard in lost:
            self._taken_at.pop(shard, None)
            self._loaded_until.pop(shard, None)
            self._rechecked_at.pop(shard, None)
        self._shards = a.shards
        if lost:
            for slot in [s for s in self._slots.values() if s.run.shard in lost]:
                self._forget(slot)
            for book in self._streams.values():
                book.link.drop_unsent_leases()
        self._next_scan = 0.0
        self.metrics.epoch.set(self.epoch)
        self.metrics.owned_shards.set(len(self._shards))

    async def _scan(self, now: datetime) -> None:
        """Loads runs that come due before now + lookahead from every owned shard."""
        until = now + self.config.lookahead
        recheck = (
            self.config.recheck_interval is not None
            and self._clock.monotonic() >= self._next_recheck
        )
        for shard in sorted(self._shards):
            if len(self._slots) >= self.config.max_loaded:
                break
            start = self._loaded_until.get(shard)
            if start is None:
                start = await self._shard_start(shard, now)
            if recheck:
                # The recent past, back from the previous re-read: a run written after
                # that read, due before the loaded window, is found only here when its
                # hint was lost, however long this poller was held up in between.
                since = min(now, self._rechecked_at.get(shard, now))
                start = min(start, since - self.config.recheck_window)
            loaded = await self._load_range(shard, start, until, now)
            if loaded:
                self._loaded_until[shard] = max(until, self._loaded_until.get(shard, until))
                if recheck:
                    self._rechecked_at[shard] = now
        self._next_scan = self._clock.monotonic() + self.config.scan_interval.total_seconds()
        if recheck:
            assert self.config.recheck_interval is not None
            self._next_recheck = (
                self._clock.monotonic() + self.config.recheck_interval.total_seconds()
            )

    async def _shard_start(self, shard: int, now: datetime) -> datetime:
        cursors = await self.store.load_cursors([shard])
        if shard in cursors:
            return cursors[shard]
        oldest = await self.store.oldest_due(shard)
        return min(oldest, now) if oldest is not None else now

    async def _load_range(
        self, shard: int, start: datetime, until: datetime, now: datetime
    ) -> bool:
        """Reads [start, until) of a shard's due index; False if memory filled up first."""
        after: tuple[datetime, str] | None = None
        while True:
            entries = await self.store.scan_due(
                shard, due_from=start, due_until=until, after=after, limit=2000
            )
            fresh = [
                e.run_id
                for e in entries
                if e.run_id not in self._slots and e.run_id not in self._recent_final
            ]
            if fresh:
                runs = await self.store.get_runs(fresh)
                jobs = await self.store.get_jobs(list({r.job_id for r in runs.values()}))
                for run in runs.values():
                    if run.id in self._slots:
                        continue
                    if run.state.is_final:
                        self._recent_final[run.id] = self._clock.monotonic()
                        continue
                    if run.state == RunState.PENDING:
                        self._add_waiting(Slot(run=run, job=jobs.get(run.job_id)))
                    else:
                        self._adopt_orphan(run, jobs.get(run.job_id), now)
                for job in jobs.values():
                    if job.id in self._job_slots:
                        self._cache_job(job)
            if len(entries) < 2000:
                return True
            if len(self._slots) >= self.config.max_loaded:
                return False
            last = entries[-1]
            after = (last.due_at, last.run_id)

    def _adopt_orphan(self, run: Run, job: Job | None, now: datetime) -> None:
        """A run leased before this poller held the shard: wait out its lease, one TTL at least."""
        taken = self._taken_at.get(run.shard, now)
        expires = self._leases.adopt(
            run.id, run.lease_token, run.worker_id, run.lease_expires_at, taken_at=taken, now=now
        )
        run = dataclasses.replace(run, lease_expires_at=expires)
        slot = Slot(run=run, job=job, phase=Phase.LEASED)
        self._track(slot)
        self._admission.adopt(slot)

    def _admit_new(self, run: Run, now: datetime) -> None:
        """A hinted new run. The hint travels from another node's api and may come late:
        after a scan found the run and it ran and ended here (its copy is still PENDING)."""
        if run.shard not in self._shards or self._known(run.id) or run.state != RunState.PENDING:
            return
        if run.due_at >= self._loaded_until.get(run.shard, now):
            return  # the scan will load it in time
        self._add_waiting(Slot(run=run))

    def _known(self, run_id: str) -> bool:
        """The run is held here, or ended here lately."""
        return run_id in self._slots or run_id in self._recent_final

    def _track(self, slot: Slot) -> None:
        self._slots[slot.run.id] = slot
        self._job_slots[slot.run.job_id] = self._job_slots.get(slot.run.job_id, 0) + 1

    def _add_waiting(self, slot: Slot) -> None:
        self._track(slot)
        slot.phase = Phase.WAITING
        heapq.heappush(self._timers, (slot.run.due_at, slot.run.id))

    def _forget(self, slot: Slot) -> None:
        rid = slot.run.id
        if self._slots.pop(rid, None) is None:
            return
        job_id = slot.run.job_id
        left = self._job_slots.get(job_id, 1) - 1
        if left <= 0:
            self._job_slots.pop(job_id, None)
            self._jobs.pop(job_id, None)
            self._job_read_at.pop(job_id, None)
        else:
            self._job_slots[job_id] = left
        self._admission.forget(slot)
        self._leases.release(rid)
        if slot.worker is not None:
            slot.worker.release(slot.run.id)
            slot.worker = None

    async def _save_cursors(self, now: datetime) -> None:
        bucket = self.store.bucket_seconds
        oldest: dict[int, datetime] = {}
        for slot in self._slots.values():
            s = slot.run.shard
            if s not in oldest or slot.run.due_at < oldest[s]:
                oldest[s] = slot.run.due_at
        cursors = {}
        for shard in self._shards:
            if shard not in self._loaded_until:
                continue
            low = min(oldest.get(shard, self._loaded_until[shard]), self._loaded_until[shard], now)
            cursors[shard] = datetime.fromtimestamp(bucket_for(low, bucket), low.tzinfo)
        if cursors:
            await self.store.save_cursors(cursors)
        cutoff = (
            self._clock.monotonic()
            - (self.config.recheck_window + self.config.lookahead).total_seconds()
            - 60
        )
        self._recent_final = {k: v for k, v in self._recent_final.items() if v > cutoff}
        self._next_cursor_save = (
            self._clock.monotonic() + self.config.cursor_save_interval.total_seconds()
        )

    # --- triggering --------------------------------------------------------------

    async def _trigger_due(self, now: datetime, turn: _Turn) -> None:
        due: list[Slot] = []
        while self._timers and self._timers[0][0] <= now and len(due) < self.config.max_batch:
            _, rid = heapq.heappop(self._timers)
            slot = self._slots.get(rid)
            if slot is not None and slot.phase == Phase.WAITING:
                due.append(slot)
        if not due:
            return
        ttl = self.config.job_cache_ttl
        oldest = -math.inf if ttl is None else self._clock.monotonic() - ttl.total_seconds()
        stale = {
            s.run.job_id
            for s in due
            if s.run.job_id not in self._jobs
            or self._job_read_at.get(s.run.job_id, -math.inf) < oldest
        }
        if stale:
            for job in (await self.store.get_jobs(list(stale))).values():
                self._cache_job(job)
        for slot in due:
            slot.job = self._jobs.get(slot.run.job_id)
            self._trigger(slot, now, turn)

    def _cache_job(self, job: Job) -> None:
        self._jobs[job.id] = job
        self._job_read_at[job.id] = self._clock.monotonic()

    def _trigger(self, slot: Slot, now: datetime, turn: _Turn) -> None:
        run, job = slot.run, slot.job
        if job is None and now - run.created_at < JOB_ROW_GRACE:
            # A store that writes a create in steps (Cassandra: runs, due rows, then the
            # job row) can show the run before its job: look again shortly. A run whose
            # job never appears belonged to a create that failed.
            heapq.heappush(self._timers, (now + JOB_ROW_RETRY, run.id))
            return
        if job is None or job.state == JobState.DELETED:
            self._finish(slot, RunState.CANCELLED, RunReason.JOB_DELETED, turn, now)
            return
        scheduled = run.schedule_version > 0 and run.attempt == 1
        if scheduled and run.schedule_version < job.schedule_version:
            self._finish(slot, RunState.CANCELLED, RunReason.SUPERSEDED, turn, now)
            return
        paused = job.state == JobState.PAUSED
        # The fire the job's progress names, or a later one: a run of a later fire
        # exists only if the fire before it was triggered, so the progress naming it
        # was lost or is late (a poller froze between its writes); carry the chain on.
        behind = job.next_fire_at is not None and run.fire_at > job.next_fire_at
        fresh = (
            scheduled
            and job.spec.schedule.recurring
            and (job.next_fire_key == run.fire_key or behind)
            and job.state in (JobState.ACTIVE, JobState.PAUSED)
        )
        if fresh:
            out = on_fire_due(
                job,
                run,
                now=now,
                shard_count=self.store.shard_count,
                paused=paused,
                grace=self.config.misfire_grace,
            )
            for reason, n in out.skipped.items():
                self.metrics.fires_skipped.labels(reason=reason.value).inc(n)
            known = set()
            for r in out.runs:
                if r.id == run.id:
                    self._forget(slot)
                    self._recent_final[run.id] = self._clock.monotonic()
                elif self._known(r.id):
                    # a fire whose run is already held or done here (written by a commit
                    # that landed only in part): keep that one, do not write it again
                    known.add(r.id)
                    continue
                turn.runs[r.id] = r
            for r in out.due:
                if r.id not in known:
                    turn.due.append(r)
                    self._add_waiting(Slot(run=r, job=job))
            nxt = out.next_fire
            slot.job = job = dataclasses.replace(
                job, next_fire_at=nxt.at if nxt else None, next_fire_key=nxt.key if nxt else ""
            )
            self._jobs[job.id] = job
            turn.set_progress(
                job.id,
                next_fire_at=nxt.at if nxt else None,
                next_fire_key=nxt.key if nxt else "",
            )
            if nxt is None and not out.run_this and self._job_slots.get(job.id, 0) == 0:
                turn.set_progress(job.id, state=JobState.COMPLETED)
            if not out.run_this:
                return
        elif paused:
            # a one-off, retry or manual run of a paused job waits in the store;
            # ResumeJob indexes it again
            self._forget(slot)
            return
        if past_deadline(job, run, now):
            self._finish(slot, RunState.MISSED, RunReason.DEADLINE, turn, now)
            return
        self._admit(slot, fresh, turn, now)

    def _admit(self, slot: Slot, fresh_fire: bool, turn: _Turn, now: datetime) -> None:
        verdict = self._admission.admit(slot, fresh_fire=fresh_fire)
        if verdict == Verdict.SKIP:
            self._finish(slot, RunState.SKIPPED, RunReason.OVERLAP, turn, now)
            self.metrics.fires_skipped.labels(reason=RunReason.OVERLAP.value).inc()
        elif verdict == Verdict.REPLACE:
            assert slot.job is not None
            victim = self._admission.replaced(slot.job.id)
            if victim is not None:
                self._cancel_slot(victim, RunReason.REPLACED, turn, now)

    def _miss_deadlines(self, now: datetime, turn: _Turn) -> None:
        for slot in self._admission.missed(now):
            self._finish(slot, RunState.MISSED, RunReason.DEADLINE, turn, now)

    # --- dispatch ---------------------------------------------------------------

    def _dispatch(self, now: datetime, turn: _Turn) -> None:
        leased = 0
        for slot, worker in self._admission.place(
            self._workers.values(), now, self.config.max_batch
        ):
            if worker is None:
                self._finish(slot, RunState.MISSED, RunReason.DEADLINE, turn, now)
                continue
            assert slot.job is not None
            token, expires = self._leases.grant(slot.run.id, worker.id, now)
            run = dataclasses.replace(
                slot.run,
                state=RunState.LEASED,
                worker_id=worker.id,
                lease_token=token,
                lease_expires_at=expires,
            )
            slot.run = run
            slot.phase = Phase.LEASED
            slot.worker = worker
            worker.hold(run.id, slot.job.spec.resources)
            turn.runs[run.id] = run
            turn.leases.append(slot)
            leased += 1
        if leased:
            self.metrics.runs_leased.inc(leased)

    def _update_demand(self) -> None:
        """Tells each worker that shares its slots among pollers how many slots of ready
        runs it could take from this one (it hands out its free slots by that), until
        it was last told 0: a demand left standing would keep slots from other pollers."""
        restricted = [
            w
            for w in self._workers.values()
            if (w.restricted or w.link.demand_standing) and not w.link.closed
        ]
        if not restricted:
            return
        if self.active:
            for w, slots in self._admission.demand(restricted).items():
                w.link.demand(slots)
        else:
            for w in restricted:
                w.link.demand(0)

    def _send_lease(self, slot: Slot) -> None:
        """Sends a lease once it is durable; its TTL counts from now, as the worker's will."""
        worker, job = slot.worker, slot.job
        if worker is None or job is None:
            return  # refused or ended meanwhile
        expires = self._leases.sent(slot.run.id, slot.run.lease_token, self._clock.now())
        if expires is None:
            return  # ended meanwhile
        run = slot.run = dataclasses.replace(slot.run, lease_expires_at=expires)
        spec = job.spec
        worker.link.lease(
            LeaseGrant(
                run_id=run.id,
                job_id=run.job_id,
                owner=run.owner,
                fencing_token=run.lease_token,
                attempt=run.attempt,
                fire_at=run.fire_at,
                due_at=run.due_at,
                task=spec.task,
                timeout=spec.timeout,
                lease_ttl=self.config.lease_ttl,
                resources=spec.resources,
                job_name=spec.name,
            )
        )

    # --- leases and results -------------------------------------------------------

    def _expire(self, now: datetime, turn: _Turn) -> None:
        for rid in self._leases.expired(now):
            slot = self._slots[rid]
            self.metrics.leases_expired.inc()
            if slot.cancel_reason is not None:
                self._finish(slot, RunState.CANCELLED, slot.cancel_reason, turn, now)
            else:
                self._finish(
                    slot,
                    RunState.FAILED,
                    RunReason.WORKER_LOST,
                    turn,
                    now,
                    error="lease expired: worker lost",
                )

    def _on_hello(
        self, link: WorkerLink, hello: Hello, address: str, turn: _Turn, now: datetime
    ) -> None:
        book = WorkerBook(hello, address=address, link=link, connected_at=now)
        old = self._workers.get(book.id)
        if old is not None:
            old.link.close()
        self._workers[book.id] = book
        self._streams[link] = book
        link.welcome(
            Welcome(
                poller_id=self.poller_id,
                epoch=self.epoch,
                lease_ttl=self.config.lease_ttl,
                heartbeat_interval=self.config.heartbeat_interval,
            )
        )
        self._renew(book, hello.held, turn, now)
        for outcome in hello.pending_results:
            self._on_result(book, outcome, turn, now)
        self.metrics.workers.set(len(self._workers))

    def _on_closed(self, link: WorkerLink) -> None:
        book = self._streams.pop(link, None)
        if book is not None and self._workers.get(book.id) is book:
            del self._workers[book.id]
        self.metrics.workers.set(len(self._workers))
        # its leases stay until they expire: the worker may come back and renew them

    def _on_worker_message(
        self, book: WorkerBook, message: WorkerEvent, turn: _Turn, now: datetime
    ) -> None:
        match message:
            case Heartbeat(leases=refs):
                self._renew(book, refs, turn, now)
            case Started(leases=refs, at=at):
                at = at or now
                for ref in refs:
                    slot = self._held_slot(ref.run_id, ref.fencing_token)
                    if slot is None or slot.run.state != RunState.LEASED:
                        continue
                    slot.run = dataclasses.replace(slot.run, state=RunState.RUNNING, started_at=at)
                    turn.runs[slot.run.id] = slot.run
                    lag = (at - slot.run.due_at).total_seconds()
                    self.metrics.schedule_lag.observe(max(0.0, lag))
            case Results(outcomes=outcomes):
                for outcome in outcomes:
                    self._on_result(book, outcome, turn, now)
            case Output(pieces=pieces):
                for piece in pieces:
                    slot = self._slots.get(piece.run_id)
                    if slot is not None and slot.phase == Phase.LEASED:
                        slot.output_bytes += len(piece.data)
                    elif piece.run_id not in self._recent_final:
                        continue  # not a run of ours, or long over
                    turn.output.append(
                        OutputChunk(
                            run_id=piece.run_id, offset=0, data=piece.data, stream=piece.stream
                        )
                    )
            case Credits(limit=limit):
                book.set_credits(limit)
            case Refused(leases=refs):
                for ref in refs:
                    self._on_refused(book, ref, turn, now)

    def _on_refused(self, book: WorkerBook, ref: LeaseRef, turn: _Turn, now: datetime) -> None:
        slot = self._held_slot(ref.run_id, ref.fencing_token)
        if slot is None or slot.worker is not book or slot.run.state != RunState.LEASED:
            return
        self.metrics.leases_refused.inc()
        book.release(slot.run.id)
        slot.worker = None
        if slot.cancel_reason is not None:
            self._finish(slot, RunState.CANCELLED, slot.cancel_reason, turn, now)
            return
        # nothing of it ran: lease it again (the stored LEASED row is superseded
        # by the next lease's token)
        self._leases.release(slot.run.id)
        self._admission.requeue(slot)

    def _held_slot(self, run_id: str, token: int) -> Slot | None:
        return self._slots[run_id] if self._leases.holds(run_id, token) else None

    def _renew(
        self, book: WorkerBook, refs: Sequence[LeaseRef], turn: _Turn, now: datetime
    ) -> None:
        if not refs:
            return
        answers = []
        settled = self._settled()
        for ref in refs:
            run_id, token = ref.run_id, ref.fencing_token
            slot = self._held_slot(run_id, token)
            if slot is None and not settled and len(self._deferred) < MAX_DEFERRED:
                # maybe a lease of a shard not loaded yet: answer once it is
                self._deferred.append((book, ref))
                continue
            expires = (
                None
                if slot is None
                else self._leases.renew(run_id, token, book.id, now, active=self.active)
            )
            if slot is not None and expires is not None:
                if slot.worker is not book:
                    if slot.worker is not None:
                        slot.worker.release(run_id)
                    assert slot.job is not None
                    book.hold(run_id, slot.job.spec.resources)
                    slot.worker = book
                slot.run = dataclasses.replace(slot.run, lease_expires_at=expires)
                if slot.cancel_reason is not None:
                    book.link.cancel(
                        CancelOrder(run_id=run_id, fencing_token=token, reason=slot.cancel_reason)
                    )
            answers.append(Renewal(run_id=run_id, fencing_token=token, ok=expires is not None))
        if answers:
            book.link.renewals(answers, self.config.lease_ttl)

    def _settled(self) -> bool:
        """Every owned shard was loaded once: a run not held now is not ours."""
        return self.active and all(shard in self._loaded_until for shard in self._shards)

    def _replay_deferred(self, turn: _Turn, now: datetime) -> None:
        deferred, self._deferred = self._deferred, []
        for book, item in deferred:
            if book.link.closed:
                continue
            if isinstance(item, LeaseRef):
                self._renew(book, [item], turn, now)
            else:
                self._on_result(book, item, turn, now)

    def _on_result(self, book: WorkerBook, outcome: RunOutcome, turn: _Turn, now: datetime) -> None:
        slot = self._held_slot(outcome.run_id, outcome.fencing_token)
        if slot is None and not self._settled() and len(self._deferred) < MAX_DEFERRED:
            self._deferred.append((book, outcome))
            return
        if slot is None:
            self.metrics.results_rejected.inc()
            book.link.ack(
                ResultAck(
                    run_id=outcome.run_id,
                    fencing_token=outcome.fencing_token,
                    accepted=False,
                    reason="stale fencing token",
                )
            )
            return
        started = outcome.started_at
        if slot.run.started_at is None and started is not None:
            self.metrics.schedule_lag.observe(max(0.0, (started - slot.run.due_at).total_seconds()))
        reason = outcome.reason
        if slot.cancel_reason is not None and outcome.state == RunState.CANCELLED:
            reason = slot.cancel_reason
        self._finish(
            slot,
            outcome.state,
            reason,
            turn,
            now,
            exit_code=outcome.exit_code,
            error=outcome.error,
            started_at=started or slot.run.started_at or now,
            ended_at=outcome.ended_at or now,
        )
        ack = ResultAck(run_id=outcome.run_id, fencing_token=outcome.fencing_token, accepted=True)
        turn.acks.append((book.link, ack))

    async def _place_retries(self, turn: _Turn) -> None:
        """Writes the retries decided this turn, each unless the store has it already.

        A retry's id comes from the failed run alone, so deciding a failure again
        decides the same retry: this poller or an earlier owner may have written it
        before, in a commit that landed only in part (the retry, not the failed run's
        end), and then the failed run is taken over and ends once more. Written again,
        the retry would be PENDING again and run a second time."""
        slots, turn.retries = turn.retries, []
        stored = await self.store.get_runs([s.run.id for s in slots])
        for slot in slots:
            if self._slots.get(slot.run.id) is not slot:
                continue  # forgotten meanwhile (its job cancelled)
            have = stored.get(slot.run.id)
            if have is None:
                turn.runs[slot.run.id] = slot.run
                turn.due.append(slot.run)
            elif have.state == RunState.PENDING:
                slot.run = have  # its due row may be what did not land: index it again
                turn.due.append(have)
            else:
                log.info("retry %s of run stored already (%s)", have.id, have.state.value)
                self._forget(slot)
                if have.state.is_final:
                    self._recent_final[have.id] = self._clock.monotonic()
                continue
            slot.phase = Phase.WAITING
            heapq.heappush(self._timers, (slot.run.due_at, slot.run.id))

    # --- cancel ---------------------------------------------------------------------

    async def _on_cancel(
        self, run: Run, reason: RunReason, fut: asyncio.Future[Run], turn: _Turn, now: datetime
    ) -> None:
        slot = self._slots.get(run.id)
        if slot is not None:
            self._cancel_slot(slot, reason, turn, now)
            if slot.phase == Phase.LEASED and slot.run.state != RunState.CANCELLED:
                slot.cancel_waiters.append(fut)
            else:
                final = turn.runs.get(run.id, slot.run)
                turn.after.append(lambda: fut.done() or fut.set_result(final))
            return
        if run.shard not in self._shards:
            fut.set_exception(Unavailable(f"shard {run.shard} of run {run.id} is not served here"))
            return
        stored = (await self.store.get_runs([run.id])).get(run.id)
        if stored is None:
            fut.set_exception(NotFound(f"run {run.id} not found"))
        elif stored.state.is_final:
            fut.set_exception(FailedPrecondition(f"run {run.id} is already {stored.state.value}"))
        else:
            final = dataclasses.replace(
                stored, state=RunState.CANCELLED, reason=reason, ended_at=now
            )
            turn.runs[final.id] = final
            self._recent_final[final.id] = self._clock.monotonic()
            self.metrics.runs_final.labels(state=final.state.value, reason=reason.value).inc()
            turn.after.append(lambda: fut.done() or fut.set_result(final))

    def _cancel_slot(self, slot: Slot, reason: RunReason, turn: _Turn, now: datetime) -> None:
        if slot.phase == Phase.LEASED:
            if slot.cancel_reason is None:
                slot.cancel_reason = reason
                worker = slot.worker
                if worker is not None:
                    token = slot.run.lease_token
                    order = CancelOrder(run_id=slot.run.id, fencing_token=token, reason=reason)
                    turn.after.append(lambda: worker.link.cancel(order))
            return
        self._finish(slot, RunState.CANCELLED, reason, turn, now)

    # --- the end of a run ------------------------------------------------------------------

    def _finish(
        self,
        slot: Slot,
        state: RunState,
        reason: RunReason,
        turn: _Turn,
        now: datetime,
        *,
        exit_code: int | None = None,
        error: str = "",
        started_at: datetime | None = None,
        ended_at: datetime | None = None,
    ) -> None:
        job = slot.job
        final = dataclasses.replace(
            slot.run,
            state=state,
            reason=reason,
            exit_code=exit_code,
            error=error,
            started_at=started_at or slot.run.started_at,
            ended_at=ended_at or now,
            output_bytes=slot.run.output_bytes + slot.output_bytes,
        )
        self._forget(slot)
        self._recent_final[final.id] = self._clock.monotonic()
        self.metrics.runs_final.labels(state=state.value, reason=reason.value).inc()
        if state in (RunState.SKIPPED, RunState.MISSED):
            self.metrics.fires_skipped.labels(reason=reason.value).inc()
        if job is not None:
            final = self._follow_up(job, final, turn, now)
            self._admission.unblock(job.id)
        turn.runs[final.id] = final
        for fut in slot.cancel_waiters:
            turn.after.append(lambda f=fut, r=final: f.done() or f.set_result(r))

    def _follow_up(self, job: Job, final: Run, turn: _Turn, now: datetime) -> Run:
        """Retries, dead letters, failure streaks, auto-pause and completion after a run ends."""
        failed = final.state in (RunState.FAILED, RunState.TIMED_OUT)
        if failed and job.state != JobState.DELETED:
            nxt = retry_run(job, final, now=now)
            if nxt is not None:
                if not self._known(nxt.id):
                    slot = Slot(run=nxt, job=job)
                    self._track(slot)  # counted now; written (or not) by _place_retries
                    turn.retries.append(slot)
                return final
            final = dataclasses.replace(final, dead_letter=True)
        job = self._jobs.get(job.id, job)
        if final.state in (RunState.SUCCEEDED, RunState.FAILED, RunState.TIMED_OUT):
            streak = 0 if final.state == RunState.SUCCEEDED else job.consecutive_failures + 1
            if streak != job.consecutive_failures:
                job = dataclasses.replace(job, consecutive_failures=streak)
                turn.set_progress(job.id, consecutive_failures=streak)
            limit = job.spec.pause_after_failures
            if limit and streak >= limit and job.state == JobState.ACTIVE:
                reason = f"paused after {streak} consecutive failed runs"
                job = dataclasses.replace(job, state=JobState.PAUSED, pause_reason=reason)
                turn.set_progress(job.id, state=JobState.PAUSED, pause_reason=reason)
        kind = job.spec.schedule.kind
        one_off = kind in (ScheduleKind.IMMEDIATE, ScheduleKind.AT) and not is_extra_run(final)
        exhausted = (
            job.spec.schedule.recurring and job.next_fire_key == "" and job.next_fire_at is None
        )
        done = one_off or (exhausted and self._job_slots.get(job.id, 0) == 0)
        if done and job.state == JobState.ACTIVE:
            job = dataclasses.replace(job, state=JobState.COMPLETED)
            turn.set_progress(job.id, state=JobState.COMPLETED)
        if job.id in self._jobs:
            self._jobs[job.id] = job
        return final

    # --- status ------------------------------------------------------------------------

    def _update_gauges(self) -> None:
        self.metrics.active_leases.set(sum(len(w.leases) for w in self._workers.values()))
        self.metrics.ready_runs.set(len(self._admission))
        used = sum(w.used for w in self._workers.values())
        total = sum(w.slots for w in self._workers.values())
        self.metrics.worker_slots.labels(use="used").set(used)
        self.metrics.worker_slots.labels(use="free").set(total - used)

    def workers(self) -> list[WorkerInfo]:
        return [
            dataclasses.replace(w.info(), pollers=(self.poller_id,)) for w in self._workers.values()
        ]

    def shard_lag(self, now: datetime | None = None) -> list[ShardInfo]:
        now = now or self._clock.now()
        oldest: dict[int, datetime] = {}
        for slot in self._slots.values():
            if slot.phase in (Phase.READY, Phase.BLOCKED):
                s = slot.run.shard
                if s not in oldest or slot.run.due_at < oldest[s]:
                    oldest[s] = slot.run.due_at
        return [
            ShardInfo(
                shard=s,
                owner=self.poller_id,
                lag_seconds=max(0.0, (now - oldest[s]).total_seconds()) if s in oldest else 0.0,
            )
            for s in sorted(self._shards)
        ]
