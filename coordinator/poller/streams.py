"""The workers' lease streams, as the poller's loop meets them.

``WorkerStreams`` keeps a ``WorkerBook`` per open stream and applies what a
worker says to the runs held (through the ``RunTable``'s transitions, and ``Ends``):

- Hello: the worker is booked, welcomed, its held leases answered as a heartbeat
  and its pending results handled as results. A Hello naming a connected worker
  replaces that worker's stream only when it comes from the same process (same
  ``instance_id``: a reconnect); from another it is refused with ALREADY_EXISTS and
  the connected worker is left alone. With an auth file a worker id is bound to the
  principal of its first stream: a Hello naming it under another principal is
  refused with PERMISSION_DENIED, connected or not. The stream's pool (the owners
  its principal may take runs of) goes into its ``WorkerBook``.
- Heartbeat (and Hello.held): one ``Renewal`` per ref, in order, granted by the
  lease book; a granted lease counts on this worker's slots, and a pending cancel
  is sent again.
- Started, results and output count only from the stream that holds the run's
  lease (``_holds``), under its current token. Started: a LEASED run becomes
  RUNNING, its record written ``start_write_delay`` later unless its end carries
  it first (``RunTable.start``). Results: a result under the current token ends its run and is
  acknowledged once that is durable; any other is refused at once ("stale fencing
  token", or "not the lease holder" from another stream, which changes nothing).
  Refused: nothing of the run ran, it is leased again. Output is kept for runs
  leased here, or ended here lately by a result of the same lease and worker
  process, each piece cut to its last
  ``output_cap + 1`` bytes before it enters the turn (``store_rules.keep_tail``: the
  store keeps exactly what it would have kept of the whole piece, and a flood of
  output is never held whole). Credits set the stream's slot limit.
- A held lease or result naming a run not held while some owned shard is not
  loaded yet is kept (up to ``MAX_DEFERRED``) and answered once every shard is.
- A shard move costs no re-execution: a lease or result naming a job whose shard
  this poller does not serve (it moved away, or not here yet) is answered
  ``not_owner`` — neither renewed nor revoked, nor refused as stale — and the worker
  offers it to its other pollers; so is a renewal while this poller is suspended.
  The new owner adopted the run from the store under the previous owner's token
  (``RunTable.adopt``), and renews it and records its result for the worker
  it was granted to (``_holds``). A lease truly stale (re-leased, or ended) is still
  refused by the shard's owner.

A result whose handling raises fails its run alone (``Ends.isolated``) and is
acknowledged; anything else that raises while applying a message is a fault of
that stream: the loop counts it and closes the stream, and nothing else changes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime

from shardcron.client.errors import AlreadyExists, PermissionDenied
from shardcron.client.stream import (
    CancelOrder,
    Credits,
    Heartbeat,
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
from shardcron.client.types import CommandTask, JobSpec, OutputChunk, RunState
from shardcron.coordinator.metrics import Metrics
from shardcron.coordinator.poller.config import COMING_EVERY, MAX_DEFERRED, PollerConfig
from shardcron.coordinator.poller.end_rules import Outcome
from shardcron.coordinator.poller.ends import Ends
from shardcron.coordinator.poller.events import WorkerConnected
from shardcron.coordinator.poller.placement import coming_classes, demand
from shardcron.coordinator.poller.table import RunTable, Slot
from shardcron.coordinator.poller.turn import Turn
from shardcron.coordinator.poller.workers import WorkerBook, WorkerLink
from shardcron.coordinator.store_rules import keep_tail

# worker ids whose principal a poller remembers: far more than live workers, so only
# ids long gone are forgotten
MAX_BOUND_WORKER_IDS = 100_000


class WorkerStreams:
    def __init__(
        self,
        table: RunTable,
        ends: Ends,
        *,
        config: PollerConfig,
        metrics: Metrics,
        poller_id: str,
        settled: Callable[[], bool],
        active: Callable[[], bool],
        serves: Callable[[str], bool],
        output_cap: int,
    ) -> None:
        self._table = table
        self._ends = ends
        self._poller_id = poller_id
        self._config = config
        self._metrics = metrics
        self._settled = settled  # every owned shard loaded: a run not held is not ours
        self._active = active  # the poller holds its shards (renewals may be granted)
        self._serves = serves  # the shard of this job id is one of this poller's
        self._output_cap = output_cap  # bytes of output the store keeps per run
        self.workers: dict[str, WorkerBook] = {}  # by worker id: the latest stream of each
        self._books: dict[WorkerLink, WorkerBook] = {}  # every open stream
        # held leases and results named before this poller loaded its shards
        self._deferred: list[tuple[WorkerBook, LeaseRef | RunOutcome]] = []
        # worker id -> the principal its first stream authenticated as (auth file only)
        self._principals: dict[str, str] = {}
        # run id -> (token, worker id, instance id) of the result that ended it here, and
        # its owner and output limit: its late output is kept from that process alone
        # (while ``recent_final``)
        self._ended: dict[str, tuple[int, str, str, tuple[str, int]]] = {}
        # the runs coming due by placement class, as last counted (``update_demand``)
        self._coming: list[tuple[JobSpec, str, int]] = []
        self._coming_at = -math.inf  # monotonic: when

    # --- what the loop does to every stream ---------------------------------------

    def flush(self) -> None:
        for book in self.workers.values():
            book.link.flush()

    def flush_leases(self) -> None:
        """Only the leases queued so far go out (the rest of the turn's messages wait
        for its commit)."""
        for book in self.workers.values():
            book.link.flush_leases()

    def close_all(self) -> None:
        for book in list(self._books.values()):
            book.link.close()

    def drop_unsent_leases(self) -> None:
        for book in self._books.values():
            book.link.drop_unsent_leases()

    def forget_all(self) -> None:
        """The poller reloads its shards: no run is held on a worker, nothing decided
        before goes out."""
        for book in self._books.values():
            book.clear()
            book.link.forget()
        self._ended.clear()

    # --- what a worker says ------------------------------------------------------------

    def connected(self, event: WorkerConnected, *, epoch: int, turn: Turn, now: datetime) -> None:
        link, hello = event.link, event.hello
        book = WorkerBook(
            hello,
            address=event.address,
            link=link,
            connected_at=now,
            principal=event.principal,
            owners=event.owners,
        )
        bound = self._principals.get(book.id)
        if bound is not None and bound != book.principal:
            # a worker id is its principal's: another credential may not speak for its
            # leases nor cut it off
            link.fail(
                PermissionDenied(
                    f"worker id {book.id} belongs to another principal: use a worker id of your own"
                )
            )
            return
        old = self.workers.get(book.id)
        if old is not None and not old.link.closed:
            if not old.same_process(book):
                # another process naming a connected worker: replacing it would let
                # anyone cut a worker off (and speak for its leases)
                link.fail(
                    AlreadyExists(
                        f"worker {book.id} is connected from another process (instance_id "
                        "differs): use a unique worker id"
                    )
                )
                return
            old.link.close()  # the same process reconnecting: its new stream wins
        self.workers[book.id] = book
        self._books[link] = book
        self._bind(book)
        link.welcome(
            Welcome(
                poller_id=self._poller_id,
                epoch=epoch,
                lease_ttl=self._config.lease_ttl,
                heartbeat_interval=self._config.heartbeat_interval,
            )
        )
        self._renew(book, hello.held, turn, now)
        for outcome in hello.pending_results:
            self._on_result(book, outcome, turn, now)
        self._metrics.workers.set(len(self.workers))

    def _bind(self, book: WorkerBook) -> None:
        """Binds the worker id to its stream's principal, for as long as the poller
        lives (the oldest of ``MAX_BOUND_WORKER_IDS`` ids are forgotten first)."""
        if not book.principal:
            return
        self._principals.pop(book.id, None)
        self._principals[book.id] = book.principal
        while len(self._principals) > MAX_BOUND_WORKER_IDS:
            del self._principals[next(iter(self._principals))]

    def closed(self, link: WorkerLink) -> None:
        book = self._books.pop(link, None)
        if book is not None and self.workers.get(book.id) is book:
            del self.workers[book.id]
        self._metrics.workers.set(len(self.workers))
        # its leases stay until they expire: the worker may come back and renew them

    def message(self, link: WorkerLink, message: WorkerEvent, turn: Turn, now: datetime) -> None:
        book = self._books.get(link)
        if book is None:
            return  # the stream was closed meanwhile
        match message:
            case Heartbeat(leases=refs):
                self._renew(book, refs, turn, now)
            case Started(leases=refs, at=at):
                self._started(book, refs, at or now, turn, now)
            case Results(outcomes=outcomes):
                for outcome in outcomes:
                    self._on_result(book, outcome, turn, now)
            case Output(pieces=pieces):
                for piece in pieces:
                    run_id = piece.run_id
                    slot = self._table.held_slot(run_id, piece.fencing_token)
                    if self.output_owner(link, run_id, piece.fencing_token) is None:
                        continue  # not a lease of this stream's, or long over
                    if slot is not None:
                        slot.output_bytes += len(piece.data)
                    data = keep_tail(piece.data, self._output_cap)
                    turn.output.append(
                        OutputChunk(run_id=run_id, offset=0, data=data, stream=piece.stream)
                    )
            case Credits(limit=limit):
                book.set_credits(limit)
            case Refused(leases=refs):
                for ref in refs:
                    self._on_refused(book, ref, turn, now)

    def output_owner(self, link: WorkerLink, run_id: str, token: int) -> tuple[str, int] | None:
        """The run's owner and its job's output limit (0: none set) when output under
        ``token`` from ``link`` counts: the stream holds that lease, or the run ended
        here lately by a result of that lease from the same worker process; else None."""
        book = self._books.get(link)
        if book is None:
            return None
        slot = self._table.held_slot(run_id, token)
        if slot is not None:
            return _owner_and_limit(slot) if self._holds(book, slot) else None
        ended = self._ended.get(run_id)
        if run_id not in self._table.recent_final or ended is None:
            return None
        return ended[3] if ended[:3] == (token, book.id, book.instance_id) else None

    def artifact_of(
        self, run_id: str, token: int, worker_id: str, principal: str, sha256: str
    ) -> str | None:
        """The run's owner when its lease under ``token`` is held here by a stream of
        ``worker_id`` opened by ``principal`` (or, taken over from an earlier owner and
        not renewed here yet, was granted to ``worker_id``), and its job's command
        names the artifact ``sha256``; else None."""
        slot = self._table.held_slot(run_id, token)
        if slot is None or not sha256:
            return None
        holder = slot.worker
        if holder is None:
            if slot.run.worker_id != worker_id:
                return None
        elif holder.id != worker_id or holder.principal != principal:
            return None
        task = slot.job.spec.task if slot.job is not None else None
        if not isinstance(task, CommandTask) or task.artifact != sha256:
            return None
        return slot.run.owner

    def results_owner(self, link: WorkerLink, run_id: str, token: int) -> str | None:
        """The run's owner when result files under ``token`` from ``link`` count: while
        the stream holds that lease, and never after the run ended (its files are listed
        on its record then, and stay as listed)."""
        book = self._books.get(link)
        slot = self._table.held_slot(run_id, token)
        if book is None or slot is None or not self._holds(book, slot):
            return None
        return slot.run.owner

    def replay_deferred(self, turn: Turn, now: datetime) -> None:
        """Answers what was kept until every owned shard was loaded."""
        if not self._deferred or not self._settled():
            return
        deferred, self._deferred = self._deferred, []
        for book, item in deferred:
            if book.link.closed:
                continue
            if isinstance(item, LeaseRef):
                self._renew(book, [item], turn, now)
            else:
                self._on_result(book, item, turn, now)

    def update_demand(
        self,
        *,
        active: bool,
        at: float,
        coming: Callable[[], Iterable[tuple[JobSpec, str]]] = tuple,
    ) -> None:
        """Tells each worker that shares its slots among pollers how many slots of ready
        runs, and of runs ``coming()`` due ((spec, owner) each; asked only if a worker
        shares), it could take from this one (it hands out its free slots by that),
        until it was last told 0: a demand left standing would keep slots from other
        pollers. The runs coming due are counted again at most every ``COMING_EVERY``
        (``at``: monotonic seconds), by placement class: they are asked for
        ``DEMAND_AHEAD`` ahead, and counting them in every turn cost a busy poller a
        tenth of its time (and changed its demand, so a message and a worker's
        rebalance, nearly every turn)."""
        sharing = [
            w
            for w in self.workers.values()
            if (w.restricted or w.link.demand_standing) and not w.link.closed
        ]
        if not sharing:
            return
        if active:
            if not self._coming_at <= at < self._coming_at + COMING_EVERY:
                self._coming, self._coming_at = coming_classes(coming()), at
            for w, slots in demand(self._table.ready, sharing, self._coming).items():
                w.link.demand(slots)
        else:
            for w in sharing:
                w.link.demand(0)

    # --- the rules ------------------------------------------------------------------------

    def _elsewhere(self, job_id: str) -> bool:
        """The job's shard is not this poller's (an older worker names no job: it is)."""
        return bool(job_id) and not self._serves(job_id)

    def _holds(self, book: WorkerBook, slot: Slot) -> bool:
        """The stream holds the run's lease: it was granted or renewed on it; or the
        stream it was on closed and this one is the same worker process's (a
        reconnect); or no stream holds it here yet (taken over from an earlier owner)
        and it was granted to this worker id."""
        holder = slot.worker
        if holder is None:
            return slot.run.worker_id == book.id
        return holder is book or (holder.link.closed and holder.same_process(book))

    def _started(
        self, book: WorkerBook, refs: Sequence[LeaseRef], at: datetime, turn: Turn, now: datetime
    ) -> None:
        for ref in refs:
            slot = self._table.held_slot(ref.run_id, ref.fencing_token)
            if slot is None or slot.run.state != RunState.LEASED or not self._holds(book, slot):
                continue
            written = self._table.start(slot, at, now)  # else written later, or by its end
            if written is not None:
                turn.runs[written.id] = written
            run = slot.run
            if slot.job is not None:
                self._ends.notify_start(slot.job, run, turn, at)
            self._metrics.schedule_lag.observe(max(0.0, (at - run.due_at).total_seconds()))

    def _on_refused(self, book: WorkerBook, ref: LeaseRef, turn: Turn, now: datetime) -> None:
        slot = self._table.held_slot(ref.run_id, ref.fencing_token)
        if slot is None or slot.worker is not book or slot.run.state != RunState.LEASED:
            return
        self._metrics.leases_refused.inc()
        if slot.cancel_reason is not None:
            cancelled = Outcome(state=RunState.CANCELLED, reason=slot.cancel_reason)
            self._ends.end(slot, cancelled, turn, now)
            return
        self._table.refuse(slot)  # nothing of it ran: it is leased again

    def _renew(self, book: WorkerBook, refs: Sequence[LeaseRef], turn: Turn, now: datetime) -> None:
        if not refs:
            return
        answers = []
        settled = self._settled()
        active = self._active()
        table = self._table
        for ref in refs:
            run_id, token = ref.run_id, ref.fencing_token
            slot = table.held_slot(run_id, token)
            if (slot is None and self._elsewhere(ref.job_id)) or (slot is not None and not active):
                # not this poller's to renew or revoke now: its shard moved (the new
                # owner adopts the lease), or this poller is suspended
                answers.append(
                    Renewal(run_id=run_id, fencing_token=token, ok=False, not_owner=True)
                )
                continue
            if slot is None and not settled and len(self._deferred) < MAX_DEFERRED:
                # maybe a lease of a shard not loaded yet: answer once it is
                self._deferred.append((book, ref))
                continue
            expires = None
            if slot is not None and self._holds(book, slot):
                expires, claimed = table.renew(slot, book, token, now, active=active)
                if claimed:  # an orphan's worker renewed it: the run goes on
                    self._ends.overlap.claimed(slot.run.job_id, turn, now)
                if expires is not None and (reason := slot.cancel_reason) is not None:
                    book.link.cancel(CancelOrder(run_id=run_id, fencing_token=token, reason=reason))
            answers.append(
                Renewal(
                    run_id=run_id, fencing_token=token, ok=expires is not None, expires_at=expires
                )
            )
        if answers:
            book.link.renewals(answers, self._config.lease_ttl)

    def _on_result(self, book: WorkerBook, outcome: RunOutcome, turn: Turn, now: datetime) -> None:
        slot = self._table.held_slot(outcome.run_id, outcome.fencing_token)
        if slot is None and self._elsewhere(outcome.job_id):
            # its shard moved: the worker offers the result to the new owner
            book.link.ack(
                ResultAck(
                    run_id=outcome.run_id,
                    fencing_token=outcome.fencing_token,
                    accepted=False,
                    reason="the run's shard is not served here",
                    not_owner=True,
                )
            )
            return
        if slot is None and not self._settled() and len(self._deferred) < MAX_DEFERRED:
            self._deferred.append((book, outcome))
            return
        if slot is None or not self._holds(book, slot):
            self._metrics.results_rejected.inc()
            book.link.ack(
                ResultAck(
                    run_id=outcome.run_id,
                    fencing_token=outcome.fencing_token,
                    accepted=False,
                    reason="stale fencing token" if slot is None else "not the lease holder",
                )
            )
            return
        started = outcome.started_at
        if slot.run.started_at is None and started is not None:
            lag = (started - slot.run.due_at).total_seconds()
            self._metrics.schedule_lag.observe(max(0.0, lag))
        reason = outcome.reason
        if slot.cancel_reason is not None and outcome.state == RunState.CANCELLED:
            reason = slot.cancel_reason
        ended = Outcome(
            state=outcome.state,
            reason=reason,
            exit_code=outcome.exit_code,
            error=outcome.error,
            # CANCELLED with no start anywhere: stopped before it started (while its
            # worker waited for its due instant)
            started_at=started or slot.run.started_at or _start_unless_cancelled(outcome, now),
            ended_at=outcome.ended_at or now,
            reported=True,
            usage=outcome.usage,
            output_sha256=outcome.output_sha256,
            output_truncated=outcome.output_truncated,
            results=outcome.results,
            results_note=outcome.results_note,
        )
        with self._ends.isolated(slot, turn, now, where="result"):
            self._ends.end(slot, ended, turn, now)
        self._ended_by(book, outcome, _owner_and_limit(slot))
        ack = ResultAck(run_id=outcome.run_id, fencing_token=outcome.fencing_token, accepted=True)
        turn.acks.append((book.link, ack))

    def _ended_by(self, book: WorkerBook, outcome: RunOutcome, owner: tuple[str, int]) -> None:
        """Remembers whose result ended the run, for its late output; entries whose run
        left ``recent_final`` are dropped whenever they outnumber it twice over."""
        self._ended[outcome.run_id] = (outcome.fencing_token, book.id, book.instance_id, owner)
        recent = self._table.recent_final
        if len(self._ended) > 2 * len(recent) + 1024:
            self._ended = {k: v for k, v in self._ended.items() if k in recent}


def _owner_and_limit(slot: Slot) -> tuple[str, int]:
    """The run's owner, and the output limit its job sets (0: the node's)."""
    job = slot.job
    return slot.run.owner, job.spec.resources.output_limit_bytes if job is not None else 0


def _start_unless_cancelled(outcome: RunOutcome, now: datetime) -> datetime | None:
    """The start a result that says none is recorded with: the poller's time, except for a
    cancel: that run may never have started."""
    return None if outcome.state == RunState.CANCELLED else now
