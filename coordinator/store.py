"""The JobStore seam: everything shardcron keeps durably, behind one Protocol.

Two implementations hold the same logical tables (docs/data-layout.md): SQLite, the
embedded default, and Cassandra for a cluster. One contract suite
(tests/test_store_contract.py) runs unchanged against each. No caller may use what
only one implementation has.

Write ownership, which keeps the store free of cross-process locks on the hot path:
- the api role creates jobs and their first runs, and changes a job's spec and
  state (``update_job``, compare-and-set on ``version``);
- the poller that owns a run's shard is the only writer of that run once it
  exists (``commit``), and of a job's progress fields (next fire, failure count,
  COMPLETED, auto-pause) through ``JobProgress``.

Every write method returns only once its data is durable (SQLite committed with
``synchronous=FULL``; Cassandra acknowledged at the configured consistency).
Implementations group-commit concurrent writes: many callers, one transaction.

Unreadable rows: a job or run row this version cannot decode (an enum value or a
spec written by a newer version, a corrupted spec) fails alone. Reading it by id
(``get_job``, ``get_run``, and a create whose idempotency key names it) raises
``UnreadableRow`` (a ``FailedPrecondition``: "job X cannot be read: reason"); every
read of many rows (``get_jobs``, ``get_runs``, the listings) skips it, logs it
once per row id and counts it once in ``shardcron_store_bad_rows_total{table}``
through ``bad_rows``. A poller therefore never sees it: a run whose row is
unreadable is absent, as if never written, and a run whose job row is unreadable
is a run whose job is missing (cancelled as JOB_DELETED once the job row's grace
has passed). The due index holds no spec, so ``scan_due`` never meets one.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol, runtime_checkable

from shardcron.client.dataclass_copies import fast_init
from shardcron.client.types import Delivery, Job, JobState, OutputChunk, Page, Run, RunState
from shardcron.coordinator.notify.settings import OwnerSettings
from shardcron.coordinator.rows import BadRowLog

DEFAULT_SHARD_COUNT = 64
DEFAULT_BUCKET_SECONDS = 60
DEFAULT_OUTPUT_CAP_BYTES = 1 << 20  # per run; the tail is kept
DELIVERY_KEPT = timedelta(days=7)  # how long a delivery's record is listed


@dataclass(frozen=True, slots=True, kw_only=True)
class DueEntry:
    """One row of the due index: partition (shard, bucket), clustered by (due_at, run_id)."""

    shard: int
    due_at: datetime
    run_id: str
    job_id: str
    priority: int = 0


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class NewJob:
    """A job to create with its first runs (the first fire; SKIPPED records before it)."""

    job: Job
    runs: Sequence[Run] = ()


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class JobProgress:
    """Poller-owned fields of a job. ``None`` leaves a field as it is.

    These never touch ``spec``, ``version`` or ``schedule_version``, so a poller's
    progress write never clashes with a user's update. ``state`` may only move an
    ACTIVE job to COMPLETED or PAUSED (auto-pause); on a job in any other state it
    is ignored.
    """

    job_id: str
    next_fire_at: datetime | None = None
    next_fire_key: str | None = None  # "" clears the next fire (schedule exhausted)
    consecutive_failures: int | None = None
    state: JobState | None = None
    pause_reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ArtifactRef:
    """A job that may name an artifact (``CommandTask.artifact``) of its owner: written
    before the job is, so no job names an artifact without one; one whose job no longer
    names it is removed by the artifact sweep (``artifact_retention``)."""

    owner: str
    sha256: str
    job_id: str


@runtime_checkable
class JobStore(Protocol):
    """Durable jobs, runs, due index, run output and per-shard cursors.

    Errors: ``NotFound`` for an unknown (or other owner's) job or run;
    ``VersionConflict`` for a stale expected version; ``InvalidArgument`` with
    field ``page_token`` for a page token this store did not issue;
    ``UnreadableRow`` for one row read by id that cannot be decoded (reads of
    many rows skip such rows: see the module docstring). Anything else is an
    infrastructure failure and propagates as is.
    """

    shard_count: int
    bucket_seconds: int
    output_cap_bytes: int
    # How long a final run (not a dead letter) is kept after it ended; None = forever.
    retention: timedelta | None
    # The rows this store skipped as unreadable; ``bad_rows.count_into`` counts them.
    bad_rows: BadRowLog

    async def open(self) -> None:
        """Connects and creates the schema if it is missing. Idempotent."""

    async def close(self) -> None:
        """Flushes pending writes and releases connections."""

    # --- jobs -------------------------------------------------------------

    async def create_jobs(self, items: Sequence[NewJob]) -> list[tuple[Job, bool]]:
        """Writes every new job, its runs and their due-index rows, all or nothing.

        An item whose (owner, idempotency_key) already names a job writes nothing
        and yields ``(existing_job, False)``; the others yield ``(job, True)``.
        Results come in the order of ``items``. Runs are written as given; those
        in state PENDING also get a due-index row. Raises ``UnreadableRow`` when
        the job an idempotency key names cannot be decoded; then nothing is written.
        """

    async def count_jobs(self, owner: str) -> int:
        """How many of ``owner``'s jobs are not DELETED: what a ``max_jobs`` quota counts,
        read cheaply (SQLite: a count on an index; Cassandra: a counter row, kept by
        ``create_jobs`` and by each ``update_job`` that writes a job DELETED, which the
        api does once per job: it never updates a DELETED job). A count for a quota,
        not an audit: on Cassandra a write that failed part way may leave it off by
        the jobs of that write."""

    async def get_job(self, owner: str, job_id: str) -> Job:
        """The job, if it belongs to ``owner``. Raises NotFound otherwise, and
        ``UnreadableRow`` when its row cannot be decoded."""

    async def get_jobs(self, job_ids: Sequence[str]) -> dict[str, Job]:
        """Jobs by id whatever their owner or state (for pollers); missing ids, and
        rows that cannot be decoded (skipped, logged and counted), are absent."""

    async def list_jobs(
        self,
        owner: str,
        *,
        states: frozenset[JobState] = frozenset(),
        name_prefix: str = "",
        labels: dict[str, str] | None = None,
        page_size: int = 100,
        page_token: str = "",
    ) -> Page[Job]:
        """The owner's jobs in creation order. Empty ``states`` = every state but DELETED.
        Rows that cannot be decoded are skipped (a page may hold fewer than
        ``page_size`` items and still carry a token)."""

    async def update_job(
        self,
        job: Job,
        *,
        expected_version: int,
        progress: JobProgress | None = None,
        runs: Sequence[Run] = (),
        due: Sequence[Run] = (),
    ) -> Job:
        """Replaces the job's user-owned fields if its stored version is ``expected_version``.

        Writes ``spec`` (and name), ``state``, ``schedule_version``,
        ``pause_reason`` and ``updated_at`` from ``job``, sets ``version =
        expected_version + 1``, applies ``progress`` when given (its ``state``
        rule does not apply here: the state comes from ``job``), upserts ``runs``
        and adds a due-index row for each run in ``due``, all in one transaction.
        Poller-owned fields (next fire, failure streak) change only through
        ``progress``, never from ``job``, so an update cannot undo a poller's
        progress. Returns the job as stored. Raises NotFound (no such job for
        ``job.owner``) or VersionConflict; then nothing is written.
        """

    # --- runs -------------------------------------------------------------

    async def commit(
        self,
        *,
        runs: Sequence[Run] = (),
        due: Sequence[Run] = (),
        progress: Sequence[JobProgress] = (),
        write_time: datetime | None = None,
        durable: Callable[[Collection[str]], None] | None = None,
        deliveries: Sequence[Delivery] = (),
    ) -> None:
        """The poller's group commit: upserts ``runs`` (whole records), adds a
        due-index row for each run in ``due``, applies ``progress`` and adds the
        notification ``deliveries`` the runs' ends made, durably, in one transaction
        (Cassandra: the deliveries before the runs' final records, so a run whose end
        is durable has its deliveries durable). A delivery whose id is stored already is
        left as it is (a replayed end never resets one that was sent). A run inserted here that already exists with the same
        id is overwritten only by a run of the same or a later state order, so a
        replayed materialisation never resets a run that moved on. A run the store holds
        PENDING (as it last wrote or read it) and that ``runs`` gives LEASED may be
        written as its lease alone: its state, worker, token, lease expiry and lateness,
        the rest of its record as stored (a lease changes nothing else of a run:
        ``RunTable.lease``).

        ``write_time``: when the caller last made sure it alone owns the shards of
        these runs. A store shared by several processes applies the writes as of
        that time (a later write wins), so writes that reach it late, because the
        process froze in the middle of them, lose to every write of the shard's
        next owner, which took it over only after that time. Several calls by one
        caller carry increasing times.

        ``durable``: a store that writes in steps may call it, before it returns, with
        the ids of runs of ``runs`` whose new records are already durable (and
        readable), so the caller can act on them (send their leases) while the rest is
        written. Called at most once; a store that writes all at once never calls it.
        If the call then fails, those records stay written."""

    async def get_run(self, owner: str, run_id: str) -> Run:
        """The run, if its job belongs to ``owner``. Raises NotFound otherwise, and
        ``UnreadableRow`` when its row cannot be decoded."""

    async def get_runs(
        self, run_ids: Sequence[str], *, job_ids: Mapping[str, str] | None = None
    ) -> dict[str, Run]:
        """Runs by id whatever their owner (for pollers); missing ids, and rows that
        cannot be decoded (skipped, logged and counted), are absent. ``job_ids`` (run
        id -> job id, as a caller was told) lets a store read those runs under their
        jobs without looking the jobs up; a run not stored under the job named for it
        is absent."""

    async def list_runs(
        self,
        owner: str,
        job_id: str,
        *,
        states: frozenset[RunState] = frozenset(),
        page_size: int = 100,
        page_token: str = "",
    ) -> Page[Run]:
        """Runs of one job, newest due first; rows that cannot be decoded are
        skipped. Raises NotFound for an unknown job."""

    async def list_owner_runs(
        self,
        owner: str,
        *,
        states: frozenset[RunState] = frozenset(),
        page_size: int = 100,
        page_token: str = "",
    ) -> Page[Run]:
        """Runs of every job of the owner in ``states`` (none = all), by job id, then
        newest first within a job; rows that cannot be decoded are skipped. A page may
        hold fewer than ``page_size`` runs, even none, while it has a next token: a
        store that has no index of runs by owner and state stops at a scan budget
        (``store_rules.owner_runs_token`` says where it stopped). Raises InvalidArgument
        for a token of another listing."""

    async def list_active_runs(self, job_id: str) -> list[Run]:
        """Runs of the job that are not final (PENDING, LEASED, RUNNING); rows that
        cannot be decoded are skipped."""

    async def list_dead_letters(
        self, owner: str, *, job_id: str = "", page_size: int = 100, page_token: str = ""
    ) -> Page[Run]:
        """Runs with ``dead_letter`` set, newest first; of one job or of every job of
        the owner. Rows that cannot be decoded are skipped."""

    # --- notification deliveries ---------------------------------------------

    async def save_deliveries(self, deliveries: Sequence[Delivery]) -> None:
        """Writes what attempts to send these deliveries changed (status, attempts,
        times, last error); a DELIVERED or DROPPED one leaves the shard's pending ones."""

    async def pending_deliveries(self, shard: int, *, limit: int = 1000) -> list[Delivery]:
        """The PENDING deliveries of ``shard``, oldest id first, at most ``limit``."""

    async def list_deliveries(
        self, owner: str, *, job_id: str = "", page_size: int = 100, page_token: str = ""
    ) -> Page[Delivery]:
        """The owner's deliveries (of one job, or of all), newest id first. Kept for
        ``DELIVERY_KEPT`` after they were made."""

    # --- owner settings ----------------------------------------------------------

    async def put_owner_settings(self, settings: OwnerSettings) -> None:
        """Writes the owner's settings record whole (``notify/settings``)."""

    async def get_owner_settings(self, owner: str) -> OwnerSettings | None:
        """The owner's settings record; None when it never set any."""

    async def list_owner_settings(self) -> list[OwnerSettings]:
        """Every owner's settings record (one per owner that set something: few)."""

    # --- due index ----------------------------------------------------------

    async def scan_due(
        self,
        shard: int,
        *,
        due_from: datetime,
        due_until: datetime,
        after: tuple[datetime, str] | None = None,
        limit: int = 1000,
    ) -> list[DueEntry]:
        """Due-index rows of ``shard`` with ``due_from <= due_at < due_until``,
        ordered by (due_at, run_id), strictly after ``after`` when given, at most
        ``limit``. Rows stay until their bucket expires: callers skip runs that
        are already final."""

    async def load_cursors(self, shards: Sequence[int]) -> dict[int, datetime]:
        """Per shard, the start of the oldest bucket that may still hold unfinished
        runs; shards with no cursor are absent (start from the oldest row)."""

    async def save_cursors(self, cursors: dict[int, datetime]) -> None:
        """Persists cursors; a cursor never moves backwards (a lower value is ignored).
        Due-index rows of buckets before a shard's cursor may be dropped from then on."""

    async def expire_runs(self, now: datetime) -> list[tuple[str, str]]:
        """Deletes what the store's ``retention`` says is expired at ``now``: every run
        that is final, not a dead letter, and ended (or, never started, was due) more
        than ``retention`` before ``now``, with its output. Never a run that is not
        final; never a job. Returns the deleted runs' (owner, run id), for their blobs
        to follow (``retention.RetentionSweeper``); none without a retention, or for a
        store whose rows expire by themselves (Cassandra: a TTL written with the final
        run, see ``cassandra/writes``)."""

    async def oldest_due(self, shard: int) -> datetime | None:
        """The due time of the oldest due-index row of ``shard`` (where a shard with no cursor starts)."""

    # --- artifact references ------------------------------------------------

    async def add_artifact_refs(self, refs: Sequence[ArtifactRef]) -> None:
        """Records each reference (idempotent), durably before it returns."""

    async def artifact_refs(self, owner: str, sha256: str, *, limit: int = 100) -> list[str]:
        """The ids of the first ``limit`` jobs recorded as referring to the owner's
        artifact, in id order: one read of one partition, however many jobs the store
        holds."""

    async def remove_artifact_refs(self, refs: Sequence[ArtifactRef]) -> None:
        """Removes each reference; one not recorded is no error."""

    # --- output -------------------------------------------------------------

    async def append_output(self, chunks: Sequence[OutputChunk]) -> None:
        """Appends each chunk's data (``offset`` ignored) to its run's output and
        keeps at most ``output_cap_bytes`` per run, dropping the oldest bytes: the kept
        tail starts where ``store_rules.output_head`` says (a line start when one is
        near), and bytes that fall before it are never written."""

    async def read_output(
        self, run_id: str, *, offset: int = 0, limit: int = 1 << 16
    ) -> list[OutputChunk]:
        """Kept output from byte ``offset`` (absolute; clamped to the oldest byte
        kept; negative = that many bytes before the end), at most about ``limit``
        bytes, as chunks with their absolute offsets. ``eof`` is never set here."""
