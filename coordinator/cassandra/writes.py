"""The writes of one Cassandra store call: planned by partition, sent in ordered phases.

The statements of one partition go together, in one unlogged batch (atomic and
isolated in Cassandra, no batch log) with those of the phase's other partitions
held by the same replicas (``batches``), so each request needs only a quorum of
one replica set.

Writes of one call go in ordered phases; a phase starts once every write of the
previous one was acknowledged. The process may die, or the call fail, between any
two phases; the caller then reloads from the store and recomputes (new runs have
deterministic ids, so a recompute rewrites the same rows). Every prefix of the
phases is a consistent store:

1. rows of new runs (and of runs this call puts in the due index) with their
   ``runs_by_id`` rows: a run without a due row is never scanned;
2. due rows and ``shard_buckets`` rows: now the poller finds those runs;
3. job rows and their owner index (``create_jobs``), job progress (next fire,
   failure streak, state), dead-letter index entries (harmless before the run
   says ``dead_letter``: readers check the run);
4. rows of existing runs (state changes);
5. removal of dead-letter index entries (a stale entry is skipped by readers).

1 and 2 before 3: a job's next fire is written only once its run is findable, and
a created job becomes visible only once its first runs are findable (a run whose
job row never landed is cancelled as JOB_DELETED by the poller; its create was
never acknowledged). A create writes 2 first, then each job with its runs in 3:
the statements of one partition key in one batch are one mutation in Cassandra,
whatever their tables, applied whole on each replica (``flush``), so the job and its
first runs land together or not at all (``Writes.beside_job``; a job whose runs do
not fit one batch with it has them written with the due rows). A due row lands
before its run's row, and a scan skips a due row whose run it cannot read (the run's
hint, sent once the create is written, or the next re-read of the recent past holds
it), so such a prefix is consistent too. A create that fails between them leaves at
most due rows naming no run, which every reader skips.

3 before 4: when progress (the next fire) lands without the state change of the run
that fired, that run is still PENDING and runs as a plain run on reload; the other
way round (the run moved on, the next fire not written) would stop a cron schedule.
A dead-letter entry is added before, and removed after, the run row that says so,
so no dead letter goes unlisted. Unlike SQLite, a call
that fails on the infrastructure can leave some of its phases written: a caller
retries (creates with an idempotency key dedupe, see
``creates.settle_failed_create``; run writes are idempotent upserts). A call that
fails on its input (a value no store can encode) writes nothing: every row is
encoded first.

The order is an order between the writes of one job. A poller's commit takes the
state changes of the runs of jobs with no other write in it (``Writes.early``) out
of phase 4 and writes them first: a lease among them is durable, and goes out, after
one round trip. A job whose only other write is its progress (a one-off job's end)
has the progress written with them, one mutation: the order of 3 before 4 is then
moot, as neither lands without the other.

A run's records are written whole (every cell, so no null and no tombstone, and
the final one gives each cell the run's TTL), but for a lease: a run this store holds
PENDING and leased is written as the columns a lease changes (``LEASE_COLUMNS``), a
third of the cells of a whole record.

Timestamps: the poller's run rows and progress carry its ``write_time`` (store.py
docstring); the api writes a new run as of one second ago, so the poller's first
write of the run beats its creation even when the two hosts' clocks are a little
apart; a state moved by progress goes to the poller's own columns as of now, and a
read weighs it against the user's by their write times (``reads.job_row``).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from cassandra.query import UNSET_VALUE, BoundStatement

from shardcron.client.types import Job, Run, RunState
from shardcron.coordinator.cassandra.batches import (
    Partition,
    bound_size,
    fits_one_batch,
    phase_batches,
)
from shardcron.coordinator.cassandra.run_states import StoredState
from shardcron.coordinator.cassandra.session import Cql
from shardcron.coordinator.cassandra.statements import NONE, ROWS
from shardcron.coordinator.ids import bucket_for
from shardcron.coordinator.rows import _RUN_COLS, _spec_to_json, _us
from shardcron.coordinator.store import JobProgress
from shardcron.coordinator.store_rules import progress_write, run_expires_at, run_state_order

MAX_TTL = 630_720_000  # Cassandra's maximum TTL (20 years); longer rows get no TTL
_CREATE_BACKDATE_US = 1_000_000  # an api's new run row: written as of 1 s ago
# A run's runs_by_id row is written once with a TTL that outlives the run by this
# past its retention when the run ends within about this of its due instant (or of
# when it was made): almost every run, whose final record then writes no second row
# (``WritePlanner.id_ttl``).
ID_SLACK = timedelta(days=1)
ID_MARGIN = timedelta(hours=1)  # how far the clocks of an api and a poller may differ

# Write phases (module docstring): each phase starts once the previous one is written.
P_RUNS = 0  # new runs and runs indexed by the call, runs_by_id; shard cursors
P_DUE = 1  # due rows, shard_buckets rows
P_JOBS = 2  # job rows, owner index, job progress; dead-letter index entries added
P_STATES = 3  # rows of existing runs
P_UNINDEX = 4  # dead-letter index entries removed


# What a lease changes of a PENDING run (``RunTable.lease``), in ``lease_run``'s order
LEASE_COLUMNS = (
    "state",
    "worker_id",
    "lease_token",
    "lease_expires_at",
    "late_reason",
    "late_text",
    "late_waited_micros",
)
_LEASE_AT = tuple([c.strip() for c in _RUN_COLS.split(",")].index(c) for c in LEASE_COLUMNS)
_PENDING = run_state_order(RunState.PENDING)


def now_us() -> int:
    """Now as a Cassandra write timestamp (µs since the epoch, as the driver's own)."""
    return time.time_ns() // 1000


@dataclasses.dataclass(slots=True)
class Writes:
    """Statements of one call by (phase, partition): ``flush`` sends them phase by
    phase, those of one partition together (module docstring)."""

    # (phase, partition) -> [(statement, size)]
    parts: dict[tuple[int, Any], Partition] = dataclasses.field(default_factory=dict)
    after: list[Callable[[], None]] = dataclasses.field(default_factory=list)  # once written
    # shard_buckets rows planned by this call: each is written once, not once per run
    buckets: set[tuple[int, int]] = dataclasses.field(default_factory=set)
    # job id -> the runs of it whose rows this call writes in P_STATES (``early``)
    state_runs: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    # jobs with a write of this call that is ordered against their run states: rows
    # of new or re-indexed runs, due rows, job rows, dead-letter index entries
    ordered_jobs: set[str] = dataclasses.field(default_factory=set)

    def add(
        self, phase: int, partition: tuple[Any, ...], stmt: BoundStatement, size: int = 0
    ) -> None:
        """``partition``: the table and the partition key the statement writes; ``size``
        its weight in a batch, when known to be small (else ``bound_size`` weighs it)."""
        self.parts.setdefault((phase, partition), []).append((stmt, size or bound_size(stmt)))

    def __bool__(self) -> bool:
        return bool(self.parts)

    def merge(self, phase: int, into: int) -> None:
        """The writes of ``phase`` go with those of ``into`` (one phase fewer)."""
        for key in [k for k in self.parts if k[0] == phase]:
            self.parts.setdefault((into, key[1]), []).extend(self.parts.pop(key))

    def early(self, held: Collection[str]) -> tuple[Writes, list[str], list[str]]:
        """Takes out the run rows that need not wait for an earlier phase: the state
        changes (P_STATES) of the runs of jobs that have no other write in this call
        (``ordered_jobs``), and of the jobs of ``held`` (those whose progress the caller
        will plan) that have none either. Returns them, to be written at once, with the
        ids of their runs and the jobs of ``held`` taken: the caller plans the progress
        of each of those beside its runs (``plan_progress(..., phase=P_STATES)``), so
        that the job's progress and its runs' states are one mutation of the job's
        partition key (``flush``), applied whole: neither lands without the other, which
        is what the order of the phases guarded. A job whose run rows would not fit one
        batch with its progress is not taken. What stays is written in phases as before;
        every prefix of what is written is still consistent (module docstring): the
        order of the phases is an order between writes of one job (its new runs, due
        rows, progress, dead-letter entries and the state changes of its runs), and
        these jobs have no such other write."""
        taken = Writes()
        ids: list[str] = []
        joined: list[str] = []
        for job_id, run_ids in self.state_runs.items():
            if job_id in self.ordered_jobs:
                continue
            key = (P_STATES, ("runs", job_id))
            statements = self.parts.get(key)
            if statements is None:
                continue
            if job_id in held:
                if not fits_one_batch(statements, 2 * _PROGRESS_WEIGHT, 2):
                    continue
                joined.append(job_id)
            taken.parts[key] = self.parts.pop(key)
            ids += run_ids
        return taken, ids, joined

    def beside_job(self, job_id: str, runs_phase: int, job_phase: int) -> None:
        """Moves the job's run rows planned in ``runs_phase`` to ``job_phase``, beside its
        job row, when the two fit one batch: the job and its runs are then one mutation
        of one partition key (``flush``), applied whole on each replica."""
        runs = self.parts.get((runs_phase, ("runs", job_id)))
        job = self.parts.get((job_phase, ("jobs", job_id)))
        if (
            runs is None
            or job is None
            or not fits_one_batch(runs, sum(s for _, s in job), len(job))
        ):
            return
        target = self.parts.setdefault((job_phase, ("runs", job_id)), [])
        target.extend(self.parts.pop((runs_phase, ("runs", job_id))))


_PROGRESS_WEIGHT = 100  # each of a job's two progress statements (``plan_progress``), weighed high


async def flush(cql: Cql, writes: Writes) -> None:
    """Sends the statements phase by phase (module docstring): in a phase, as unlogged
    batches of partitions that share their replicas (``batches``), the batches
    concurrently; the next phase once all of them were acknowledged."""
    phases: dict[int, dict[tuple[Any, ...], Partition]] = {}
    for (phase, partition), statements in writes.parts.items():
        # the partitions of one key, whatever their tables, go together: Cassandra makes
        # one mutation of a batch's statements of one partition key
        phases.setdefault(phase, {}).setdefault(partition[1:], []).extend(statements)
    for phase in sorted(phases):
        batches = phase_batches(phases[phase].values(), cql.replicas)
        await cql.all_written(cql.send(batch) for batch in batches)
    for done in writes.after:
        done()


def encode_runs(runs: Iterable[Run]) -> list[tuple[Any, ...]]:
    """The rows of ``runs`` as written to ``runs``, in their order; raises on a value
    no store can encode. Encoded once per call, before anything is read or written."""
    return [ROWS.run_row(run) for run in runs]


class WritePlanner:
    """Plans the writes of jobs, runs, due rows and progress into a ``Writes``. Keeps
    which ``shard_buckets`` rows this process already wrote, so that a bucket's row
    is not rewritten with every due row."""

    def __init__(
        self,
        cql: Cql,
        *,
        bucket_seconds: int,
        due_ttl: timedelta,
        retention: timedelta | None = None,
    ) -> None:
        self._cql = cql
        self._bucket_seconds = bucket_seconds
        self._due_ttl = due_ttl
        self._retention = retention
        # (shard, bucket) -> until when (epoch seconds) its shard_buckets row is known to live
        self._buckets_written: dict[tuple[int, int], float] = {}

    def plan_job(self, writes: Writes, job: Job, texts: dict[int, str] | None = None) -> None:
        """``texts``: the JSON of the specs a call already encoded, by ``id()`` of the spec
        (a batch created from one spec shares it: encoded once, not once per job)."""
        text = None
        if texts is not None:
            text = texts.get(id(job.spec))
            if text is None:
                text = texts[id(job.spec)] = _spec_to_json(job.spec)
        row = ROWS.job_row(job, text)
        stmt = self._cql.bind("insert_job", row)
        writes.add(P_JOBS, ("jobs", job.id), stmt)
        writes.ordered_jobs.add(job.id)
        stmt = self._cql.bind("insert_owner", (job.owner, job.id))
        writes.add(P_JOBS, ("jobs_by_owner", job.owner), stmt, 64)

    def _plan_run(
        self,
        writes: Writes,
        run: Run,
        row: tuple[Any, ...],
        *,
        new: bool,
        was_dead: bool,
        indexed: bool,
        write_us: int | None,
        leased: bool = False,
    ) -> None:
        """``indexed``: the call also writes a due row for the run (its row goes first).
        ``write_us``: the poller's write time (module docstring), None for the api.
        ``leased``: the run is stored PENDING (as this store last wrote or read it) and
        this writes its lease: only the columns a lease changes are written
        (``LEASE_COLUMNS``; the rest of the row is the one stored, and its final record,
        written whole, gives every cell its TTL)."""
        self._cql.run_jobs.add(run.id, run.job_id)
        # the api (no write_us): now, and a new run a second earlier (module docstring)
        backdate = _CREATE_BACKDATE_US if new else 0
        ts = write_us if write_us is not None else now_us() - backdate
        phase = P_RUNS if new or indexed else P_STATES
        now = time.time()
        if leased and phase == P_STATES and not (run.dead_letter or was_dead):
            values = (ts, *[row[i] for i in _LEASE_AT], run.job_id, run.id)
            stmt = self._cql.bind("lease_run", values)
            writes.add(phase, ("runs", run.job_id), stmt)
            writes.state_runs.setdefault(run.job_id, []).append(run.id)
            return
        ttl = self.run_ttl(run, now)
        stmt = self._cql.bind("insert_run", (*row, ts, ttl))
        writes.add(phase, ("runs", run.job_id), stmt)
        if phase == P_STATES:
            writes.state_runs.setdefault(run.job_id, []).append(run.id)
        if phase != P_STATES or run.dead_letter or was_dead:
            writes.ordered_jobs.add(run.job_id)
        id_ttl = self.id_ttl(run, now, ttl, new=new, was_dead=was_dead)
        if id_ttl is not None:
            stmt = self._cql.bind("insert_run_id", (run.id, run.job_id, run.owner, id_ttl))
            writes.add(P_RUNS if new else phase, ("runs_by_id", run.id), stmt, 120)
        if run.dead_letter:
            stmt = self._cql.bind("insert_dead", (run.owner, run.id, run.job_id))
            writes.add(P_JOBS, ("dead_letters", run.owner), stmt, 120)
        elif was_dead:
            stmt = self._cql.bind("delete_dead", (run.owner, run.id))
            writes.add(P_UNINDEX, ("dead_letters", run.owner), stmt, 80)

    def run_ttl(self, run: Run, now: float) -> int:
        """The TTL (seconds) of a run's rows: until the retention after it ended
        (``store_rules.run_expires_at``), at least 1 s; 0 = none (not final, a dead
        letter, no retention, or longer than Cassandra's longest TTL)."""
        at = run_expires_at(
            state=run.state,
            dead_letter=run.dead_letter,
            ended_at=run.ended_at,
            due_at=run.due_at,
            retention=self._retention,
        )
        if at is None:
            return 0
        ttl = max(1, math.ceil(at.timestamp() - now))
        return 0 if ttl > MAX_TTL else ttl

    def id_ttl(
        self, run: Run, now: float, run_ttl: int, *, new: bool, was_dead: bool
    ) -> int | None:
        """The TTL (seconds, 0 = none) of the run's ``runs_by_id`` row when this write of
        the run writes it, else None.

        The row is written with the run's first record and outlives the run: under a
        retention, it lives until ``ID_SLACK`` past the end of the run's retention had
        the run ended when it was due (or made, or written, if later). Only a run that ends too late
        for that (``ID_MARGIN`` before, for the api's and the poller's clocks), or that
        the row's TTL cannot cover (past ``MAX_TTL``), has its final record rewrite the
        row with its own TTL; and so does a dead letter (kept for ever) and a run whose
        dead letter was cleared. A row that outlives its run names a run that is no
        longer there: a read by id finds nothing, as for any expired run."""
        if self._retention is None:
            return 0 if new else None  # no TTLs: written once
        final = run.is_final
        if new and not final:  # a run made or due long ago gets as long from now
            keep = (self._retention + ID_SLACK).total_seconds()
            return self._ttl_until(max(_id_expiry(run, self._retention), now + keep), now)
        if new:
            return run_ttl
        if not final:
            return None
        if run.dead_letter or was_dead:
            return run_ttl
        covered = _id_expiry(run, self._retention) - ID_MARGIN.total_seconds()
        made = run.created_at.timestamp()
        expires = run_expires_at(
            state=run.state,
            dead_letter=False,
            ended_at=run.ended_at,
            due_at=run.due_at,
            retention=self._retention,
        )
        if expires is None or expires.timestamp() > covered or covered - made > MAX_TTL:
            return run_ttl
        return None

    def _ttl_until(self, until: float, now: float) -> int:
        """A TTL (seconds) keeping a row until ``until`` (epoch seconds), 1 s at least;
        0 = none (past ``MAX_TTL``)."""
        ttl = max(1, math.ceil(until - now))
        return 0 if ttl > MAX_TTL else ttl

    def _ttl(self, until: float, now: float) -> int:
        """A TTL (seconds) keeping a row until ``until`` (epoch seconds) + due_ttl; 0 = none."""
        ttl = int(max(until, now) - now + self._due_ttl.total_seconds()) + 1
        return 0 if ttl > MAX_TTL else ttl

    def _plan_due(self, writes: Writes, run: Run, now: float) -> None:
        b = bucket_for(run.due_at, self._bucket_seconds)
        due_at = _us(run.due_at)
        values = (
            run.shard,
            b,
            due_at,
            run.id,
            run.job_id,
            run.priority,
            self._ttl(due_at / 1e6, now),
        )
        writes.add(P_DUE, ("due_runs", run.shard, b), self._cql.bind("insert_due", values), 120)
        writes.ordered_jobs.add(run.job_id)
        # The bucket's row in shard_buckets must outlive every due row of the bucket: it
        # lives until the bucket's end (or now, if later) + due_ttl, plus an hour for skew.
        # Rewritten only when this process has not already written one living that long
        # (nor planned one in this call: a call of 1,000 creates planned it per run).
        need = max(b + self._bucket_seconds, now) + self._due_ttl.total_seconds()
        key = (run.shard, b)
        if key not in writes.buckets and self._buckets_written.get(key, 0.0) < need:
            writes.buckets.add(key)
            ttl = self._ttl(b + self._bucket_seconds + 3600, now)
            stmt = self._cql.bind("insert_bucket", (run.shard, b, ttl))
            writes.add(P_DUE, ("shard_buckets", run.shard), stmt, 40)
            lives = float("inf") if ttl == 0 else now + ttl
            writes.after.append(lambda k=key, v=lives: self._remember_bucket(k, v))

    def _remember_bucket(self, key: tuple[int, int], lives: float) -> None:
        if len(self._buckets_written) > 100_000:  # old buckets are not written again
            self._buckets_written.clear()
        self._buckets_written[key] = max(lives, self._buckets_written.get(key, 0.0))

    async def put_runs(
        self,
        writes: Writes,
        runs: Sequence[Run],
        rows: Sequence[tuple[Any, ...]],
        due: Sequence[Run],
        *,
        known_new: bool,
        write_us: int | None = None,
    ) -> None:
        """Plans the upsert of ``runs`` (never moving a stored run to an earlier state) and
        the due rows of ``due``. ``rows``: the runs' rows (``encode_runs``), encoded by
        the caller before it read or wrote anything, so that bad input writes nothing.
        ``known_new``: the runs belong to jobs created in this call."""
        indexed = {run.id for run in due}
        stored: dict[str, StoredState] = {}
        if runs and not known_new:
            # the poller's commits (they carry its write time) trust what this store
            # last wrote or read of a run (``run_states``); the api's writes read
            stored = await self._stored_runs(runs, remembered=write_us is not None)
        for run, row in zip(runs, rows, strict=True):
            current = stored.get(run.id)
            order = run_state_order(run.state)
            if current is not None and order < current[0]:
                continue  # a replayed or late write of an earlier state: dropped
            self._plan_run(
                writes,
                run,
                row,
                new=current is None,
                was_dead=current is not None and current[1],
                indexed=run.id in indexed,
                write_us=write_us,
                leased=current is not None
                and current[0] == _PENDING
                and run.state == RunState.LEASED,
            )
            stored[run.id] = (order, run.dead_letter)
        now = time.time()
        for run in due:
            self._plan_due(writes, run, now)
        # remembered once acknowledged; unknown (read again) if the call fails
        states = self._cql.run_states
        written = [(run.id, stored[run.id]) for run in runs if run.id in stored]
        states.forget(run_id for run_id, _ in written)
        writes.after.append(lambda: states.learn(written))

    async def _stored_runs(
        self, runs: Sequence[Run], *, remembered: bool
    ) -> dict[str, StoredState]:
        """(state order, dead_letter) of those of ``runs`` that exist.

        ``remembered``: a run whose stored state this store knows (``run_states``) is
        not read. The others: one read per group of job partitions (``Cql.cross``: a
        run id exists under one job only, so the cross product finds exactly the
        stored runs). Read-then-write is safe for ``commit``: the poller owning a
        shard is the only writer of its runs, so nothing changes them between this
        read and the write."""
        stored: dict[str, StoredState] = {}
        by_job: dict[str, dict[str, None]] = {}
        known = self._cql.run_states
        for run in runs:
            state = known.get(run.id) if remembered else None
            if state is None:
                by_job.setdefault(run.job_id, {})[run.id] = None
            else:
                stored[run.id] = state
        if by_job:
            rows = await self._cql.cross("run_states", by_job)
            read = [(rid, (run_state_order(state), bool(dead))) for rid, state, dead in rows]
            known.learn(read)
            stored.update(read)
        return stored

    def plan_progress(
        self, writes: Writes, p: JobProgress, write_us: int, phase: int = P_JOBS
    ) -> None:
        """The poller's fields of one job, as plain column updates
        (``store_rules.progress_write``), none of them read first.

        A move of the state (ACTIVE -> COMPLETED | PAUSED) goes to the poller's own
        columns, ``poller_state`` and ``poller_reason``, at the time of now: a read takes
        it only over an ACTIVE state the user wrote before it (``reads.job_row``), so a
        job the user paused or deleted stays so, and a user's update or resume written
        after it wins. A job with no row gets a row without an owner, which no read
        takes for a job."""
        write = progress_write(p)
        if write.columns:
            reason = write.columns.get("pause_reason", UNSET_VALUE)
            values = (write_us, *progress_values(write.columns), reason, p.job_id)
            stmt = self._cql.bind("progress", values)
            writes.add(phase, ("jobs", p.job_id), stmt, _PROGRESS_WEIGHT)
        if write.state is not None:
            reason = UNSET_VALUE if write.state_reason is None else write.state_reason
            values = (now_us(), str(write.state), reason, p.job_id)
            stmt = self._cql.bind("progress_state", values)
            writes.add(phase, ("jobs", p.job_id), stmt, _PROGRESS_WEIGHT)


def _id_expiry(run: Run, retention: timedelta) -> float:
    """Until when (epoch seconds) a run's first ``runs_by_id`` row lives under
    ``retention`` (``WritePlanner.id_ttl``)."""
    start = max(run.created_at, run.due_at).timestamp()
    return start + (retention + ID_SLACK).total_seconds()


def progress_values(columns: Mapping[str, Any]) -> tuple[Any, ...]:
    """(next_fire_at, next_fire_key, consecutive_failures) of a progress write as bound
    values: a cleared time is the sentinel, a column not written is unset."""
    fire_at = columns.get("next_fire_at", UNSET_VALUE)
    if "next_fire_at" in columns:
        fire_at = NONE if fire_at is None else _us(fire_at)
    return (
        fire_at,
        columns.get("next_fire_key", UNSET_VALUE),
        columns.get("consecutive_failures", UNSET_VALUE),
    )
