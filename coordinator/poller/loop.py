"""The poller role's loop: from the due index of its shards to leases on workers.

One asyncio task owns all mutable state; everything else (worker streams, the
api's hints and cancels, assignment changes) reaches it through an inbox of typed
events. Each turn of the loop drains the inbox, holds what the scans found, takes
back expired leases and misses starting deadlines, triggers what is due (``due``),
leases ready runs to worker slots (``leasing``), places the retries it decided,
and writes everything the turn decided in ONE store commit (group commit) before
it sends anything that depends on it: a lease is durable before the worker sees
it, a result is durable before the worker is told it was accepted. Every run held
is in the ``RunTable``; after each turn the table's invariants hold (the tests
check them through ``after_turn``).

This is, with the scan's and the jobs' reads (``scans``, ``job_reads``: they go on
beside the turns, and the loop holds what they found), the part of the poller that
calls the store, and its
only place that reads the clock for the rules (each decider is given ``now``).

Never twice at once: a lease carries a fencing token (epoch << 32 | sequence);
a worker holds a run only while it keeps renewing; a result or heartbeat whose
token is not the current lease's is refused; a run that was leased under an
earlier epoch (a crashed or deposed poller) is re-leased only one full TTL after
this poller took the shard over (``lease_book``). A poller that cannot confirm its
hold on its shards writes and sends nothing (``shards``).

One failure stays one failure: a fault while handling an inbox event, a run or a
job's rules fails that event, run or job alone (``Ends.isolated``; a worker
stream that faults is closed) and the turn goes on; each is counted in
``shardcron_poller_faults_total{where}``. Only a failure of the store itself (a
read the turn needs, or the commit) resets the poller: it voids what it holds and
reloads its shards (``Shards.void``, ``shardcron_poller_resets_total``). A cancel waiting on a turn
always gets its answer: the run as it stands, or an error if the turn was not
written, the poller reset or stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections import deque
from collections.abc import Callable, Collection, Iterator, Sequence
from datetime import datetime, timedelta
from functools import partial

from shardcron.client.errors import FailedPrecondition, NotFound, ShardcronError, Unavailable
from shardcron.client.overview import OverviewPart, OverviewWindow
from shardcron.client.saturating import saturating_add
from shardcron.client.types import Job, Run, RunReason, RunState, ShardInfo, WorkerInfo
from shardcron.coordinator.coordination import Assignment
from shardcron.coordinator.ids import shard_for
from shardcron.coordinator.metrics import Metrics
from shardcron.coordinator.notify.hooks import NotifyHooks
from shardcron.coordinator.poller.clock import Clock, SystemClock
from shardcron.coordinator.poller.config import MAX_DEFERRED, PollerConfig
from shardcron.coordinator.poller.due import Due
from shardcron.coordinator.poller.end_rules import Outcome
from shardcron.coordinator.poller.ends import Ends
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
from shardcron.coordinator.poller.faults import fault_text
from shardcron.coordinator.poller.history import RunHistory
from shardcron.coordinator.poller.job_reads import JobReads, coming
from shardcron.coordinator.poller.leasing import Leasing
from shardcron.coordinator.poller.placement import free_slots, lease_lead
from shardcron.coordinator.poller.scans import SCAN_WAIT, CursorSaves, ScanReads
from shardcron.coordinator.poller.shards import Shards
from shardcron.coordinator.poller.streams import WorkerStreams
from shardcron.coordinator.poller.table import LAG_PHASES, Phase, Place, RunTable
from shardcron.coordinator.poller.turn import Turn
from shardcron.coordinator.poller.workers import WorkerLink
from shardcron.coordinator.store import JobStore
from shardcron.coordinator.store_lanes import mark_poller

log = logging.getLogger("shardcron.poller")


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
        runs_ended: Callable[[list[Run]], object] | None = None,
        after_turn: Callable[[RunTable], object] | None = None,
        notify: NotifyHooks | None = None,
    ) -> None:
        self.store = store
        # told the runs each turn made final, once they are durable (WaitRun wakes on it)
        self._runs_ended = runs_ended
        # called with the runs held after every turn that ran to its end (tests check
        # the invariants of what is held there)
        self._after_turn = after_turn
        self._notify = notify  # told each turn's deliveries once durable; owners' defaults
        self.poller_id = poller_id
        self.config = config
        self.metrics = metrics
        self._turns_written = metrics.poller_turns.labels(kind="commit")
        self._turns_idle = metrics.poller_turns.labels(kind="idle")
        self._clock: Clock = clock or SystemClock()
        self._table = table = RunTable(config=config, clock=self._clock)
        self._history = RunHistory(since=self._clock.now())
        self._ends = ends = Ends(table, metrics=metrics, history=self._history, notify=notify)
        self._due = Due(
            table,
            ends,
            config=config,
            metrics=metrics,
            clock=self._clock,
            shard_count=store.shard_count,
        )
        self._leasing = Leasing(table, ends, config=config, metrics=metrics, clock=self._clock)
        self._streams = WorkerStreams(
            table,
            ends,
            config=config,
            metrics=metrics,
            poller_id=poller_id,
            settled=lambda: self._shards.settled(),
            active=lambda: self._shards.active,
            serves=lambda job_id: self._shards.owns(shard_for(job_id, store.shard_count)),
            output_cap=store.output_cap_bytes,
        )
        self._shards = Shards(
            poller_id,
            config=config,
            metrics=metrics,
            table=table,
            streams=self._streams,
            ownership_valid=ownership_valid,
            session_generation=session_generation,
            new_scans=self._new_scans,
            forget_reads=self._forget_reads,
        )
        self._windows = self._shards.windows
        self._inbox: deque[InboxEvent] = deque()
        self._wake = asyncio.Event()
        # the scan's reads, beside the turns (``scans``); what they found is held
        # only if ``_generation`` (bumped on a reset or a new assignment) is unchanged
        self._scans = ScanReads(store, self._windows, table, config=config, wake=self._wake.set)
        self._job_reads = JobReads(  # ``job_reads``
            store, table, stale_jobs=self._due.stale_jobs, wake=self._wake.set
        )
        self._cursor_saves = CursorSaves(store)
        self._generation = 0
        self._early_hints: list[Run] = []  # hinted while its shard's first scan was read
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self.turns = 0  # turns completed (written and sent), for tests and status

    # --- inputs (any task) ---------------------------------------------------

    def submit(self, event: InboxEvent) -> None:
        self._inbox.append(event)
        self._wake.set()

    def output_owner(self, link: WorkerLink, run_id: str, token: int) -> tuple[str, int] | None:
        """Whose run's output ``link`` sends under ``token``, and its job's output limit,
        when it counts (else None): asked by the lease stream's edge, in this loop's
        thread, before it writes the output to the blob store (``WorkerStreams.output_owner``)."""
        return self._streams.output_owner(link, run_id, token)

    def artifact_of(
        self, run_id: str, token: int, worker_id: str, principal: str, sha256: str
    ) -> str | None:
        """The run's owner when a stream of ``worker_id`` and ``principal`` holds its
        lease under ``token`` and its job names the artifact ``sha256`` (else None):
        asked by the ``ReadArtifact`` edge, in this loop's thread."""
        return self._streams.artifact_of(run_id, token, worker_id, principal, sha256)

    def results_owner(self, link: WorkerLink, run_id: str, token: int) -> str | None:
        """Whose run's result files ``link`` sends under ``token``, while its stream holds
        that lease (else None): asked by the lease stream's edge, as ``output_owner``."""
        return self._streams.results_owner(link, run_id, token)

    def on_assignment(self, assignment: Assignment) -> asyncio.Future[None]:
        """Takes a new assignment; the future is done once it is applied and what the
        turn decided before it is written (or failed): only then may a shard taken
        away be handed to another poller, which reads what this one wrote."""
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
        return self._table.leases.fencing_epoch

    @property
    def epoch(self) -> int:
        return self._shards.epoch

    @property
    def active(self) -> bool:
        """Coordination holds this poller's session: it may serve its shards."""
        return self._shards.active

    def owns(self, shard: int) -> bool:
        return self._shards.owns(shard)

    def may_lease(self) -> bool:
        """Leases may be written to workers now: active, ownership confirmed, not
        standing still (checked again as they go out)."""
        return self._shards.may_send_leases()

    # --- lifecycle -----------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="poller")

    async def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._forget_reads()
        for event in self._inbox:
            if isinstance(event, AssignmentChanged) and not event.applied.done():
                event.applied.set_result(None)
            elif isinstance(event, CancelRun) and not event.done.done():
                event.done.set_exception(Unavailable("the poller stopped; try again"))
        self._table.clear()  # a cancel waiting for a run's worker is told to try again
        self._streams.close_all()

    async def _loop(self) -> None:
        mark_poller()  # its store calls never queue behind the api's (store_lanes)
        while not self._stopping:
            try:
                await self._turn()
            except Exception:
                # a store call failed (its other faults are isolated where they happen)
                log.exception("poller turn failed; reloading its shards from the store")
                self._shards.void(self._clock.now())
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
        """True while ownership is unconfirmed or the session was replaced: nothing is
        written or sent (``shards``)."""
        return self._shards.stand_still(self._clock.now())

    def _new_scans(self) -> None:
        """A scan begun for the shards of before is not held (a run waiting for its
        job's read leaves the table if its shard is released)."""
        self._generation += 1
        self._scans.cancel()

    def _forget_reads(self) -> None:
        """Nothing read or saved beside the turns is held any more: the poller voids
        what it held or stops (``scans``, ``job_reads``)."""
        self._generation += 1
        self._scans.cancel()
        self._job_reads.cancel()
        self._cursor_saves.cancel()
        self._early_hints.clear()

    def _settled(self) -> bool:
        """Every owned shard was loaded once: a run not held now is not ours."""
        return self._shards.settled()

    def _sleep_for(self) -> float:
        now = self._clock.now()
        candidates = [0.5]
        scan = None if self._scans.busy else self._windows.seconds_to_scan(self._clock.monotonic())
        if scan is not None:
            candidates.append(scan)
        table = self._table
        for at in (
            table.next_due(self._lead()),
            table.next_at_instant(),
            table.leases.next_expiry(),
            table.next_deadline(),
            table.next_not_due(),
            table.next_start_write(),
        ):
            if at is not None:
                candidates.append((at - now).total_seconds())
        if table.ready.worth_a_pass() and free_slots(self._streams.workers.values()) > 0:
            candidates.append(0.05)
        return max(0.0, min(candidates))

    # --- one turn --------------------------------------------------------------

    async def _turn(self) -> None:
        turn = Turn()
        try:
            await self._run_turn(turn)
            if self._after_turn is not None:
                self._after_turn(self._table)
        finally:
            for fut in turn.answers:  # not written, or failed: the caller tries again
                if not fut.done():
                    fut.set_exception(Unavailable("the poller could not record it; try again"))
            for fut in turn.applied:  # the turn's writes landed or never will
                if not fut.done():
                    fut.set_result(None)

    async def _run_turn(self, turn: Turn) -> None:
        now = self._clock.now()
        while self._inbox:
            event = self._inbox.popleft()
            try:
                await self._handle(event, turn, now)
            except Exception as error:
                self._event_failed(event, error)
        if self._stand_still():
            return
        now = self._clock.now()
        scans = self._scans
        if not scans.busy and self._windows.scan_due(self._clock.monotonic()):
            scans.begin(now, self._clock.monotonic(), self._generation)
            await scans.settle(SCAN_WAIT)
        self._hold_scanned()
        with self._isolated("replay"):
            self._streams.replay_deferred(turn, now)
        self._leasing.expire(now, turn)
        self._due.miss_deadlines(now, turn)
        await self._trigger_due(now, turn)
        if self.active:
            with self._isolated("dispatch"):
                self._leasing.dispatch(self._streams.workers.values(), now, turn)
        with self._isolated("demand"):
            soon = partial(coming, self._due, self._table, now, self._lead())
            at = self._clock.monotonic()
            self._streams.update_demand(active=self.active, at=at, coming=soon)
        if self._table.retries:
            await self._place_retries(turn)
        for run in self._table.starts_to_write(now):
            turn.runs[run.id] = run
        if not turn.empty():
            if self._stand_still():
                return  # nothing of this turn is written, nothing is sent
            confirmed = self._shards.write_time(self._clock.now())
            if turn.output:
                await self.store.append_output(turn.output)
            await self.store.commit(
                runs=list(turn.runs.values()),
                due=turn.due,
                progress=list(turn.progress.values()),
                write_time=confirmed,
                durable=partial(self._send_durable_leases, turn) if turn.leases else None,
                deliveries=turn.deliveries,
            )
            if turn.deliveries and self._notify is not None:
                self._notify.made(turn.deliveries)
            ended = [r for r in turn.runs.values() if r.state.is_final]
            if ended and self._runs_ended is not None:
                self._runs_ended(ended)
        if self._stand_still():
            return  # frozen or cut off during the turn: send nothing it decided
        sent_at = self._clock.now()
        for slot in turn.leases:
            if slot.run.id not in turn.leases_sent:
                self._leasing.send_lease(slot, sent_at)
        for action in turn.after:
            action()
        for link, ack in turn.acks:
            link.ack(ack)
        self._streams.flush()
        self._cursor_saves.check()  # a save that failed fails this turn
        if self._windows.save_cursors_due(self._clock.monotonic()) and not self._cursor_saves.busy:
            self._save_cursors(now)
        self._update_gauges()
        self.turns += 1
        (self._turns_idle if turn.empty() else self._turns_written).inc()

    def _send_durable_leases(self, turn: Turn, run_ids: Collection[str]) -> None:
        """The store wrote these runs of the turn while the rest of its commit goes on
        (``JobStore.commit``): their leases go out now, if this poller may still send
        any (checked again as they are written to the stream); the others once the
        commit is over."""
        if not self.may_lease():
            return
        durable = set(run_ids)
        sent_at = self._clock.now()
        for slot in turn.leases:
            if slot.run.id in durable:
                self._leasing.send_lease(slot, sent_at)
                turn.leases_sent.add(slot.run.id)
        self._streams.flush_leases()

    @contextlib.contextmanager
    def _isolated(self, where: str) -> Iterator[None]:
        """A step of the turn that holds no one run: if it raises, it is counted and
        skipped this turn; the rest of the turn goes on."""
        try:
            yield
        except Exception:
            log.exception("poller step %s failed; skipped this turn", where)
            self.metrics.poller_faults.labels(where=where).inc()

    def _event_failed(self, event: InboxEvent, error: Exception) -> None:
        """Handling one inbox event raised: that event alone fails. A worker stream that
        faults is closed (the worker reconnects), a cancel is answered with the error,
        an assignment half applied is applied again from the store (a reset)."""
        where = "".join(f"_{c.lower()}" if c.isupper() else c for c in type(event).__name__)[1:]
        log.error("poller failed handling %s", where, exc_info=error)
        self.metrics.poller_faults.labels(where=where).inc()
        match event:
            case WorkerConnected(link=link) | WorkerMessage(link=link):
                link.close()
            case CancelRun(done=done) if not done.done():
                if isinstance(error, ShardcronError):
                    done.set_exception(error)
                else:
                    done.set_exception(Unavailable(f"cancel failed: {fault_text(error)}"))
            case AssignmentChanged():
                # applied again from the store; answered as the turn ends (``shards``)
                self._shards.void(self._clock.now())

    async def _handle(self, event: InboxEvent, turn: Turn, now: datetime) -> None:
        table = self._table
        match event:
            case WorkerMessage(link=link, event=message):
                self._streams.message(link, message, turn, now)
            case RunsCreated(runs=created, jobs=jobs):
                for run in created:
                    self._admit_new(run, now)
                for job in jobs:
                    table.cache_job(job)
            case JobChanged(job=job):
                if job.id in table.jobs:
                    table.cache_job(job)
            case WorkerConnected() as connected:
                self._streams.connected(connected, epoch=self.epoch, turn=turn, now=now)
            case WorkerClosed(link=link):
                self._streams.closed(link)
            case CancelRun(run=run, reason=reason, done=done):
                await self._on_cancel(run, reason, done, turn, now)
            case CancelJob(job_id=job_id, reason=reason):
                self._ends.cancel_job(job_id, reason, turn, now)
            case AssignmentChanged(assignment=assignment, applied=applied):
                self._shards.apply(assignment, applied, turn, now)

    def _admit_new(self, run: Run, now: datetime) -> None:
        """A hinted new run. The hint travels from another node's api and may come late:
        after a scan found the run and it ran and ended here (its copy is still PENDING)."""
        if (
            run.shard not in self._windows.shards
            or self._table.known(run.id)
            or run.state != RunState.PENDING
        ):
            return
        edge = self._windows.loaded_until(run.shard)
        if edge is None and self._scans.busy and len(self._early_hints) < MAX_DEFERRED:
            # the shard's first scan may have read past the run already: it is looked
            # at again once that scan's runs are held
            self._early_hints.append(run)
            return
        if run.due_at >= (edge or now) and (
            edge is None  # the shard's first scan will load it
            or run.due_at >= saturating_add(now, self.config.hint_horizon)
            or len(self._table) >= self.config.max_loaded
        ):
            return  # the scan will load it in time
        # held now, also beyond the loaded edge: the scan then skips it (known) instead
        # of reading it and its job back from the store
        self._table.hold(run)

    # --- loading -----------------------------------------------------------------

    def _hold_scanned(self) -> None:
        """Holds what the scan's reads found, once they are over (``scans``); then
        looks again at the hints met while a shard's first scan was read."""
        if self._scans.hold(self._generation):
            early, self._early_hints = self._early_hints, []
            now = self._clock.now()
            for run in early:
                self._admit_new(run, now)

    def _save_cursors(self, now: datetime) -> None:
        """Saves each loaded shard's cursor, beside the turns (``scans``)."""
        clock = self._clock.monotonic()
        oldest = self._table.oldest_due()
        cursors = self._windows.cursors(oldest, now, self.store.bucket_seconds, clock)
        if cursors:
            self._cursor_saves.start(cursors)
        window = self.config.recheck_window + self.config.lookahead
        self._table.prune_ended(window.total_seconds() + 60)

    # --- what needs the store in the middle of a turn --------------------------------

    async def _trigger_due(self, now: datetime, turn: Turn) -> None:
        """Triggers the runs due whose job copies are current; the others wait for
        their jobs to be read beside the turns (``job_reads``)."""
        due = self._due.take(now, self._lead())
        ready = await self._job_reads.ready(due, self._clock.monotonic(), wait=turn.empty())
        for slot in ready:
            with self._ends.isolated(slot, turn, now, where="trigger"):
                self._due.trigger(slot, now, turn)

    def _lead(self) -> timedelta:
        return lease_lead(self._streams.workers.values(), self.config.lease_lead)

    async def _place_retries(self, turn: Turn) -> None:
        """Writes the retries decided this turn, each unless the store has it already.

        A retry's id comes from the failed run alone, so deciding a failure again
        decides the same retry: this poller or an earlier owner may have written it
        before, in a commit that landed only in part (the retry, not the failed run's
        end), and then the failed run is taken over and ends once more. Written again,
        the retry would be PENDING again and run a second time."""
        table = self._table
        retries = table.retries
        stored = await self.store.get_runs([s.run.id for s in retries])
        for slot in retries:
            have = stored.get(slot.run.id)
            if have is None:
                turn.runs[slot.run.id] = slot.run
                turn.due.append(slot.run)
                table.place_retry(slot)
            elif have.state == RunState.PENDING:
                turn.due.append(have)  # its due row may be what did not land: index it again
                table.place_retry(slot, have)
            else:
                log.info("retry %s of run stored already (%s)", have.id, have.state.value)
                table.drop(slot, "the retry was stored already")
                if have.state.is_final:
                    table.remember_ended(have.id)

    async def _on_cancel(
        self, run: Run, reason: RunReason, fut: asyncio.Future[Run], turn: Turn, now: datetime
    ) -> None:
        slot = self._table.slots.get(run.id)
        if slot is not None:
            self._ends.cancel(slot, reason, turn, now)
            if slot.place is Place.LEASED:  # told to stop: answered at its end
                slot.cancel_waiters.append(fut)
            else:
                final = turn.runs.get(run.id, slot.run)
                turn.answers.append(fut)
                turn.after.append(lambda: fut.done() or fut.set_result(final))
            return
        if not self.owns(run.shard):
            fut.set_exception(Unavailable(f"shard {run.shard} of run {run.id} is not served here"))
            return
        stored = (await self.store.get_runs([run.id])).get(run.id)
        if stored is None:
            fut.set_exception(NotFound(f"run {run.id} not found"))
        elif stored.state.is_final:
            fut.set_exception(FailedPrecondition(f"run {run.id} is already {stored.state.value}"))
        else:
            cancelled = Outcome(state=RunState.CANCELLED, reason=reason)
            self._ends.end_unheld(stored, cancelled, turn, now, waiter=fut)

    # --- status ------------------------------------------------------------------------

    def _update_gauges(self) -> None:
        workers = self._streams.workers.values()
        self.metrics.active_leases.set(sum(len(w.leases) for w in workers))
        self.metrics.ready_runs.set(len(self._table.ready))
        self._leasing.count_waiting(workers, self._clock.now())
        used = sum(w.used for w in workers)
        total = sum(w.slots for w in workers)
        self.metrics.worker_slots.labels(use="used").set(used)
        self.metrics.worker_slots.labels(use="free").set(total - used)

    async def waiting_reasons(self, runs: Sequence[Run]) -> dict[str, str]:
        return self.reasons_for([r.id for r in runs])

    def reasons_for(self, run_ids: Sequence[str]) -> dict[str, str]:
        """Why each of these runs, held here and due, is not on a worker yet, by run id
        (read between turns, on the loop that owns the state: nothing is awaited)."""
        return self._leasing.waiting_reasons(run_ids, self._streams.workers.values())

    async def overview_parts(self, owner: str, window: OverviewWindow) -> list[OverviewPart]:
        return [self.overview_part(owner, window)]

    def overview_part(self, owner: str, window: OverviewWindow) -> OverviewPart:
        """This poller's part of ``owner``'s overview (``history``): what its runs did over
        ``window``, its runs on workers, those waiting and why, its failing jobs (read
        between turns, as ``reasons_for``)."""
        workers = self._streams.workers.values()
        return self._history.part(
            owner,
            window,
            self._clock.now(),
            running=self._leasing.running_of(owner),
            waiting=self._leasing.waiting_of(owner, workers),
        )

    def phase_of(self, run_id: str) -> Phase | None:
        """Where a run held here stands (None: not held)."""
        slot = self._table.slots.get(run_id)
        return None if slot is None else slot.phase

    def workers(self) -> list[WorkerInfo]:
        return [
            dataclasses.replace(w.info(), pollers=(self.poller_id,))
            for w in self._streams.workers.values()
        ]

    def shard_lag(self, now: datetime | None = None) -> list[ShardInfo]:
        now = now or self._clock.now()
        oldest = self._table.oldest_due(LAG_PHASES)
        return [
            ShardInfo(
                shard=s,
                owner=self.poller_id,
                lag_seconds=max(0.0, (now - oldest[s]).total_seconds()) if s in oldest else 0.0,
            )
            for s in sorted(self._windows.shards)
        ]
