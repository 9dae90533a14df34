"""The cluster ``JobStore``: Apache Cassandra through cassandra-driver, driven from asyncio.

Schema and the reasons for its tables: ``cassandra_schema``. How it keeps the
contract of ``store.py`` without a lock or a lightweight transaction (LWT) on the
hot path:

- Every statement is prepared once at ``open`` and runs at the configured
  consistency (default QUORUM); LWTs use SERIAL (LOCAL_SERIAL under a LOCAL_*
  consistency). A call returns once Cassandra acknowledged its writes.
- LWTs are used only for mutual exclusion between independent api processes:
  claiming an idempotency key on create (only when a key is given) and the
  version compare-and-set of ``update_job``.
- ``commit`` keeps the run upsert rule (never back to an earlier state) by reading
  the stored state of the runs it writes (cross-product reads over groups of job
  partitions, ``job_id IN ? AND id IN ?``), dropping regressions and then writing.
  This read-then-write is safe because the poller that owns a shard is the single
  writer of that shard's runs (store.py, "Write ownership"); the same read tells
  which runs are new (they get their ``runs_by_id`` row) and which dead letters to
  index or unindex.
- A job's progress is plain column updates. The ACTIVE-only state rule reads the
  state first and writes the new state with the write time it read + 1 µs, so a
  user's update landing in between (a later timestamp) still wins.
- The poller's run rows and progress carry its ``write_time`` as their timestamp
  (``USING TIMESTAMP``): when it last confirmed it owns the shards. Cassandra keeps
  the cell with the latest timestamp whatever the order of arrival, so a commit
  that lands late (its process froze in the middle of it, its session expired, the
  shards moved) loses to every write of the next owner, which took them over only
  after that time; the single-writer rule above holds for what ends up stored. The
  api writes a new run with a timestamp one second before now (nothing writes a
  run before it exists), so the poller's first write of the run beats its creation
  even when the two hosts' clocks are a little apart.
- No write spans partitions: a call's writes go as single-partition requests (the
  statements of one partition together, as one unlogged batch: atomic and isolated
  in Cassandra, with no batch log), so each needs only a quorum of its own replicas.
  A multi-partition logged batch needs two batch-log replicas besides the
  coordinator, chosen among the nodes it believes alive: with 3 nodes a lost one is
  always chosen until the failure detector convicts it (15-20 s of batches failing
  with WriteTimeout BATCH_LOG). Requests of a call run concurrently
  (``max_concurrency`` in flight per store); plain writes are retried on timeouts
  and missing replicas for a few seconds, LWTs never (their caller reads the outcome).
- Writes of one call go in ordered phases; a phase starts once every write of the
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
  never acknowledged). 3 before 4: when progress (the next fire) lands without the
  state change of the run that fired, that run is still PENDING and runs as a plain
  run on reload; the other way round (the run moved on, the next fire not written)
  would stop a cron schedule. A dead-letter entry is added before, and removed after,
  the run row that says so, so no dead letter goes unlisted. Unlike SQLite, a call
  that fails on the infrastructure can leave some of its phases written: a caller
  retries (creates with an idempotency key dedupe, see ``_settle_failed_create``;
  run writes are idempotent upserts). A call that fails on its input (a value no store can encode) writes
  nothing: every row is encoded first.
- The due index is insert-only: rows expire (TTL = due time + ``due_ttl``), cursors
  only tell the poller where to start; nothing deletes due rows, so no reader ever
  walks tombstones of drained buckets. A cursor is written ``USING TIMESTAMP`` =
  its value, so a lower cursor loses without a read.
- Clocks: like any Cassandra application, this relies on the clocks of the
  shardcron hosts and the Cassandra nodes being NTP-synchronised (write timestamps
  order the writes of one row, including LWT ballots against plain writes).

Times are bigint microseconds; "no value" is a sentinel (never null), so rewriting
a whole run record writes no tombstones.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from cassandra import ConsistencyLevel, OperationTimedOut, ReadTimeout, WriteTimeout
from cassandra import Unavailable as CassandraUnavailable
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, Session
from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy
from cassandra.query import (
    UNSET_VALUE,
    BatchStatement,
    BatchType,
    BoundStatement,
    PreparedStatement,
    tuple_factory,
)

from shardcron.client.errors import InvalidArgument, NotFound, Unavailable, VersionConflict
from shardcron.client.types import (
    Job,
    JobState,
    OutputChunk,
    Page,
    Run,
    RunState,
)
from shardcron.coordinator.cassandra_schema import (
    DEFAULT_DUE_TTL,
    DEFAULT_REPLICATION,
    SCHEMA_VERSION,
    keyspace_cql,
    schema_cql,
)
from shardcron.coordinator.ids import bucket_for
from shardcron.coordinator.rows import _JOB_COLS, _RUN_COLS, RowCodec, _dt, _spec_to_json, _us
from shardcron.coordinator.store import (
    DEFAULT_BUCKET_SECONDS,
    DEFAULT_OUTPUT_CAP_BYTES,
    DEFAULT_SHARD_COUNT,
    DueEntry,
    JobProgress,
    NewJob,
)

T = TypeVar("T")

_NONE = -(1 << 63)  # bigint sentinel for "no value" (datetime or int)
_MAX_TTL = 630_720_000  # Cassandra's maximum TTL (20 years); longer rows get no TTL
# A batch stays under Cassandra's default batch_size_fail_threshold (50 KiB), by the
# estimate of _size, which is within a few % of what Cassandra counts.
_BATCH_BYTES = 20_000
_BATCH_STATEMENTS = 250
_IN_CHUNK = 100  # keys per multi-partition IN
_CROSS = 256  # (job, run) pairs per cross-product read of stored run states
_PAGE = 1000  # rows per page of a partition scan
_RETRY_BACKOFF = (0.05, 0.2, 0.8)  # seconds before each retry of an idempotent read
_WRITE_BACKOFF = (0.05, 0.2, 0.5, 1.0, 2.0)  # of a plain write: a few seconds of trouble
_RETRYABLE = (WriteTimeout, ReadTimeout, CassandraUnavailable, OperationTimedOut)
_CREATE_BACKDATE_US = 1_000_000  # an api's new run row: written as of 1 s ago
_CLAIM_STALE = timedelta(seconds=60)  # an idempotency claim without its job, this old, is dead
_CLAIM_WAIT = 5.0  # seconds to wait for a concurrent create of the same key to land


# Write phases (module docstring): each phase starts once the previous one is written.
_P_RUNS = 0  # new runs and runs indexed by the call, runs_by_id; shard cursors
_P_DUE = 1  # due rows, shard_buckets rows
_P_JOBS = 2  # job rows, owner index, job progress; dead-letter index entries added
_P_STATES = 3  # rows of existing runs
_P_UNINDEX = 4  # dead-letter index entries removed


class SchemaMismatch(RuntimeError):
    """The keyspace holds another schema version, shard count or bucket size."""


_STATE_ORDER = {
    RunState.PENDING: 0,
    RunState.LEASED: 1,
    RunState.RUNNING: 2,
}


def _now_us() -> int:
    """Now as a Cassandra write timestamp (µs since the epoch, as the driver's own)."""
    return time.time_ns() // 1000


def _order(state: str | RunState) -> int:
    return _STATE_ORDER.get(RunState(state), 3)


# --------------------------------------------------------------------------- rows

_ROWS = RowCodec(null=_NONE)
_job_row, _row_job = _ROWS.job_row, _ROWS.row_job
_run_row, _row_run = _ROWS.run_row, _ROWS.row_run


def _size(values: Iterable[Any]) -> int:
    """About how many bytes a statement's values add to a batch (as Cassandra counts
    them for ``batch_size_fail_threshold``: the data, plus a little per cell)."""
    n = 40
    for v in values:
        if isinstance(v, str):
            n += (len(v) if v.isascii() else len(v.encode())) + 17
        elif isinstance(v, bytes):
            n += len(v) + 17
        else:
            n += 21
    return n


def _chunks(values: Sequence[T], n: int) -> Iterable[Sequence[T]]:
    for i in range(0, len(values), n):
        yield values[i : i + n]


# --------------------------------------------------------------------------- page tokens
# A page token is the last id of the previous page, tagged with the listing it came from.


def _token_after(kind: str, token: str) -> str | None:
    if not token:
        return None
    try:
        prefix, _, after = base64.urlsafe_b64decode(token.encode()).decode().partition(":")
    except ValueError:
        prefix, after = "", ""
    if prefix != kind or not after:
        raise InvalidArgument("page_token", "malformed page token")
    return after


def _make_page(kind: str, items: list[T], size: int, key: Callable[[T], str]) -> Page[T]:
    if len(items) <= size:
        return Page(items=items)
    items = items[:size]
    token = base64.urlsafe_b64encode(f"{kind}:{key(items[-1])}".encode()).decode()
    return Page(items=items, next_page_token=token)


def _page_size(size: int) -> int:
    return max(1, min(1000, size))


# --------------------------------------------------------------------------- driver bridge


@dataclasses.dataclass(slots=True)
class _Result:
    rows: list[tuple[Any, ...]]
    columns: list[str]
    paging_state: bytes | None

    @property
    def applied(self) -> bool:
        """An LWT's ``[applied]``."""
        return bool(self.rows and self.rows[0][0])

    def column(self, name: str) -> Any:
        return self.rows[0][self.columns.index(name)] if name in self.columns else None


def _resolve(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if not future.done():
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)


@dataclasses.dataclass(slots=True)
class _Writes:
    """Statements of one call by (phase, partition): ``_flush`` sends them phase by
    phase, those of one partition together (module docstring)."""

    # (phase, partition) -> [(statement, size)]
    parts: dict[tuple[int, Any], list[tuple[BoundStatement, int]]] = dataclasses.field(
        default_factory=dict
    )
    after: list[Callable[[], None]] = dataclasses.field(default_factory=list)  # once written

    def add(self, phase: int, partition: tuple[Any, ...], stmt: BoundStatement, size: int) -> None:
        """``partition``: the table and the partition key the statement writes."""
        self.parts.setdefault((phase, partition), []).append((stmt, size))

    def __bool__(self) -> bool:
        return bool(self.parts)


class CassandraStore:
    """``JobStore`` on Apache Cassandra; see the module docstring."""

    def __init__(
        self,
        contact_points: Sequence[str],
        *,
        keyspace: str,
        consistency: str = "QUORUM",
        shard_count: int = DEFAULT_SHARD_COUNT,
        bucket_seconds: int = DEFAULT_BUCKET_SECONDS,
        output_cap_bytes: int = DEFAULT_OUTPUT_CAP_BYTES,
        replication: dict[str, Any] | None = None,
        due_ttl: timedelta = DEFAULT_DUE_TTL,
        max_concurrency: int = 64,
        port: int = 9042,
        request_timeout: float = 12.0,
        create_schema: bool = True,
    ) -> None:
        if shard_count < 1 or bucket_seconds < 1 or output_cap_bytes < 0:
            raise ValueError("shard_count and bucket_seconds must be >= 1, output cap >= 0")
        if max_concurrency < 1 or due_ttl <= timedelta(0):
            raise ValueError("max_concurrency must be >= 1 and due_ttl positive")
        self.contact_points = list(contact_points)
        self.keyspace = keyspace
        self.consistency = ConsistencyLevel.name_to_value[consistency.upper()]
        self.serial_consistency = (
            ConsistencyLevel.LOCAL_SERIAL
            if consistency.upper().startswith("LOCAL_")
            else ConsistencyLevel.SERIAL
        )
        self.shard_count = shard_count
        self.bucket_seconds = bucket_seconds
        self.output_cap_bytes = output_cap_bytes
        self.replication = dict(replication or DEFAULT_REPLICATION)
        self.due_ttl = due_ttl
        self.max_concurrency = max_concurrency
        self.port = port
        self.request_timeout = request_timeout
        # False for cluster nodes: the schema comes from `shardcron store init`, run once,
        # because nodes creating the same tables at the same moment can disagree on them.
        self.create_schema = create_schema
        self._cluster: Cluster | None = None
        self._session: Session | None = None
        self._sem: asyncio.Semaphore | None = None
        self._ps: dict[str, PreparedStatement] = {}
        self._lwt: list[PreparedStatement] = []
        # (shard, bucket) -> until when (epoch seconds) its shard_buckets row is known to live
        self._buckets_written: dict[tuple[int, int], float] = {}

    # --- lifecycle ----------------------------------------------------------

    async def open(self) -> None:
        if self._session is not None:
            return
        self._sem = asyncio.Semaphore(self.max_concurrency)
        await asyncio.to_thread(self._connect)

    async def close(self) -> None:
        cluster, self._cluster, self._session = self._cluster, None, None
        if cluster is not None:
            await asyncio.to_thread(cluster.shutdown)

    def _connect(self) -> None:
        profile = ExecutionProfile(
            load_balancing_policy=TokenAwarePolicy(DCAwareRoundRobinPolicy()),
            consistency_level=self.consistency,
            serial_consistency_level=self.serial_consistency,
            request_timeout=self.request_timeout,
            row_factory=tuple_factory,
        )
        points: list[Any] = []
        for point in self.contact_points:
            host, _, port = point.partition(":")
            points.append((host, int(port)) if port else host)
        cluster = Cluster(
            points,
            port=self.port,
            execution_profiles={EXEC_PROFILE_DEFAULT: profile},
            protocol_version=5,
        )
        try:
            session = cluster.connect()
            self._ensure_schema(session)
            session.set_keyspace(self.keyspace)
            self._prepare(session)
        except BaseException:
            cluster.shutdown()
            raise
        self._cluster, self._session = cluster, session

    def _ensure_schema(self, session: Session) -> None:
        ks = self.keyspace
        version_sql = (
            f"SELECT version, shard_count, bucket_seconds FROM {ks}.schema_version WHERE id = 0"
        )
        row = None
        tables = session.execute(
            "SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s", (ks,)
        )
        if "schema_version" in {r[0] for r in tables}:
            row = session.execute(version_sql).one()
        if row is None and not self.create_schema:
            raise SchemaMismatch(
                f"keyspace {ks} has no shardcron schema: run `shardcron store init`"
            )
        if row is None:  # no schema yet, or one whose creation did not finish
            session.execute(keyspace_cql(ks, self.replication))
            for ddl in schema_cql(ks, due_ttl=self.due_ttl):
                session.execute(ddl)
            session.execute(
                f"INSERT INTO {ks}.schema_version (id, version, shard_count, bucket_seconds,"
                " created_at) VALUES (0, %s, %s, %s, %s) IF NOT EXISTS",
                (SCHEMA_VERSION, self.shard_count, self.bucket_seconds, int(time.time() * 1e6)),
            )
            row = session.execute(version_sql).one()
        version, shards, bucket = row
        if version != SCHEMA_VERSION:
            raise SchemaMismatch(f"store schema {version}, this code knows {SCHEMA_VERSION}")
        if (shards, bucket) != (self.shard_count, self.bucket_seconds):
            raise SchemaMismatch(
                f"keyspace {ks} was created with shard_count={shards} and"
                f" bucket_seconds={bucket}, not {self.shard_count} and {self.bucket_seconds}"
            )

    def _prepare(self, session: Session) -> None:
        statements = {
            # jobs
            "insert_job": f"INSERT INTO jobs ({_JOB_COLS}) VALUES ({', '.join('?' * 14)})",
            "insert_owner": "INSERT INTO jobs_by_owner (owner, id) VALUES (?, ?)",
            "select_job": f"SELECT {_JOB_COLS} FROM jobs WHERE id = ?",
            "select_jobs": f"SELECT {_JOB_COLS} FROM jobs WHERE id IN ?",
            "job_states": (
                "SELECT id, state, WRITETIME(state), WRITETIME(pause_reason) FROM jobs"
                " WHERE id IN ?"
            ),
            "owner_ids": "SELECT id FROM jobs_by_owner WHERE owner = ? AND id > ? LIMIT ?",
            "update_job": (
                "UPDATE jobs SET name = ?, state = ?, version = ?, schedule_version = ?,"
                " spec = ?, pause_reason = ?, updated_at = ?, next_fire_at = ?,"
                " next_fire_key = ?, consecutive_failures = ? WHERE id = ?"
                " IF owner = ? AND version = ?"
            ),
            "progress": (
                "UPDATE jobs USING TIMESTAMP ? SET next_fire_at = ?, next_fire_key = ?,"
                " consecutive_failures = ?, pause_reason = ? WHERE id = ?"
            ),
            "progress_state": (
                "UPDATE jobs USING TIMESTAMP ? SET state = ?, pause_reason = ? WHERE id = ?"
            ),
            "claim": (
                "INSERT INTO idempotency (owner, key, job_id, claimed_at) VALUES (?, ?, ?, ?)"
                " IF NOT EXISTS"
            ),
            "take_over": (
                "UPDATE idempotency SET job_id = ?, claimed_at = ? WHERE owner = ? AND key = ?"
                " IF job_id = ?"
            ),
            "release": "DELETE FROM idempotency WHERE owner = ? AND key = ? IF job_id = ?",
            "drop_job": "DELETE FROM jobs WHERE id = ?",
            "drop_owner": "DELETE FROM jobs_by_owner WHERE owner = ? AND id = ?",
            # runs
            "insert_run": (
                f"INSERT INTO runs ({_RUN_COLS}) VALUES ({', '.join('?' * 23)}) USING TIMESTAMP ?"
            ),
            "insert_run_id": "INSERT INTO runs_by_id (id, job_id, owner) VALUES (?, ?, ?)",
            "run_ids": "SELECT id, job_id, owner FROM runs_by_id WHERE id IN ?",
            "run_states": "SELECT id, state, dead_letter FROM runs WHERE job_id IN ? AND id IN ?",
            "select_runs": f"SELECT {_RUN_COLS} FROM runs WHERE job_id = ? AND id IN ?",
            "job_runs": f"SELECT {_RUN_COLS} FROM runs WHERE job_id = ?",
            "job_runs_before": f"SELECT {_RUN_COLS} FROM runs WHERE job_id = ? AND id < ?",
            "job_run_states": "SELECT id, state FROM runs WHERE job_id = ?",
            "insert_dead": "INSERT INTO dead_letters (owner, run_id, job_id) VALUES (?, ?, ?)",
            "delete_dead": "DELETE FROM dead_letters WHERE owner = ? AND run_id = ?",
            "dead": "SELECT run_id, job_id FROM dead_letters WHERE owner = ? AND run_id < ? LIMIT ?",
            "dead_first": "SELECT run_id, job_id FROM dead_letters WHERE owner = ? LIMIT ?",
            # due index
            "insert_due": (
                "INSERT INTO due_runs (shard, bucket, due_at, run_id, job_id, priority)"
                " VALUES (?, ?, ?, ?, ?, ?) USING TTL ?"
            ),
            "insert_bucket": "INSERT INTO shard_buckets (shard, bucket) VALUES (?, ?) USING TTL ?",
            "buckets": (
                "SELECT bucket FROM shard_buckets WHERE shard = ? AND bucket >= ? AND bucket <= ?"
            ),
            "first_buckets": "SELECT bucket FROM shard_buckets WHERE shard = ? AND bucket >= ?",
            "scan": (
                "SELECT due_at, run_id, job_id, priority FROM due_runs WHERE shard = ?"
                " AND bucket = ? AND due_at >= ? AND due_at < ? LIMIT ?"
            ),
            "scan_after": (
                "SELECT due_at, run_id, job_id, priority FROM due_runs WHERE shard = ?"
                " AND bucket = ? AND (due_at, run_id) > (?, ?) AND due_at < ? LIMIT ?"
            ),
            "first_due": "SELECT due_at FROM due_runs WHERE shard = ? AND bucket = ? LIMIT 1",
            "cursors": "SELECT shard, bucket_start FROM shard_cursors WHERE shard IN ?",
            "cursor": "SELECT bucket_start FROM shard_cursors WHERE shard = ?",
            # The cursor is its own write timestamp: the highest one wins, with no read.
            "save_cursor": (
                "INSERT INTO shard_cursors (shard, bucket_start) VALUES (?, ?) USING TIMESTAMP ?"
            ),
            # output
            "output_ends": "SELECT head_offset, end_offset FROM run_output WHERE run_id = ? LIMIT 1",
            "output_first_from": (
                "SELECT byte_offset FROM run_output WHERE run_id = ? AND byte_offset >= ? LIMIT 1"
            ),
            "output_insert": (
                "INSERT INTO run_output (run_id, byte_offset, stream, data) VALUES (?, ?, ?, ?)"
            ),
            "output_trim": "DELETE FROM run_output WHERE run_id = ? AND byte_offset < ?",
            "output_set_ends": (
                "UPDATE run_output SET head_offset = ?, end_offset = ? WHERE run_id = ?"
            ),
            "output_at": (
                "SELECT byte_offset, stream, data FROM run_output WHERE run_id = ?"
                " AND byte_offset <= ? ORDER BY byte_offset DESC LIMIT 1"
            ),
            "output_from": (
                "SELECT byte_offset, stream, data FROM run_output WHERE run_id = ?"
                " AND byte_offset > ?"
            ),
        }
        self._ps = {name: session.prepare(cql) for name, cql in statements.items()}
        self._lwt = [self._ps[n] for n in ("update_job", "claim", "take_over", "release")]
        for name in ("job_runs", "job_runs_before", "job_run_states", "output_from"):
            self._ps[name].fetch_size = _PAGE

    # --- requests -----------------------------------------------------------

    async def _exec(
        self,
        stmt: Any,
        params: Any = None,
        paging_state: bytes | None = None,
        *,
        backoff: Sequence[float] = _RETRY_BACKOFF,
    ) -> _Result:
        """Runs one statement (one page of it) with at most ``max_concurrency`` in flight.

        Every statement but an LWT is idempotent here (upserts of whole values, reads),
        so a timeout or a missing replica is retried with ``backoff`` (seconds before
        each retry); an LWT is not retried (its caller reads the outcome)."""
        prepared = stmt.prepared_statement if isinstance(stmt, BoundStatement) else stmt
        lwt = any(prepared is p for p in self._lwt)
        for attempt in range(1 if lwt else len(backoff) + 1):
            try:
                return await self._exec_once(stmt, params, paging_state)
            except _RETRYABLE:
                if lwt or attempt == len(backoff):
                    raise
                await asyncio.sleep(backoff[attempt])
        raise AssertionError("unreachable")

    async def _exec_once(self, stmt: Any, params: Any, paging_state: bytes | None) -> _Result:
        session, sem = self._session, self._sem
        if session is None or sem is None:
            raise RuntimeError("CassandraStore is not open")
        loop = asyncio.get_running_loop()
        async with sem:
            future: asyncio.Future[_Result] = loop.create_future()
            rf = session.execute_async(stmt, params, paging_state=paging_state)

            def ok(rows: list[tuple[Any, ...]]) -> None:
                result = _Result(list(rows or ()), list(rf._col_names or ()), rf._paging_state)
                with contextlib.suppress(RuntimeError):  # the loop is closed
                    loop.call_soon_threadsafe(_resolve, future, True, result)

            def err(exc: BaseException) -> None:
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(_resolve, future, False, exc)

            rf.add_callbacks(ok, err)
            return await future

    async def _all(self, stmt: Any, params: Any = None) -> list[tuple[Any, ...]]:
        """Every row, following pages."""
        result = await self._exec(stmt, params)
        rows = result.rows
        while result.paging_state:
            result = await self._exec(stmt, params, result.paging_state)
            rows += result.rows
        return rows

    async def _pages(self, stmt: Any, params: Any) -> Any:
        """Async iterator over the pages of a statement."""
        result = await self._exec(stmt, params)
        yield result.rows
        while result.paging_state:
            result = await self._exec(stmt, params, result.paging_state)
            yield result.rows

    async def _gather(self, calls: Iterable[Any]) -> list[Any]:
        return list(await asyncio.gather(*calls))

    async def _in(self, name: str, keys: Sequence[Any], *prefix: Any) -> list[tuple[Any, ...]]:
        """Rows of a ``... IN ?`` statement over ``keys``, in chunks run concurrently."""
        keys = list(dict.fromkeys(keys))
        if not keys:
            return []
        stmt = self._ps[name]
        parts = await self._gather(
            self._all(stmt, (*prefix, list(chunk))) for chunk in _chunks(keys, _IN_CHUNK)
        )
        return [row for part in parts for row in part]

    def _bind(self, name: str, values: Sequence[Any]) -> BoundStatement:
        return self._ps[name].bind(values)

    async def _flush(self, writes: _Writes) -> None:
        """Sends the statements phase by phase (module docstring): in a phase, those of
        one partition as one unlogged batch (split when bigger than a batch), the
        batches concurrently; the next phase once all of them were acknowledged."""
        phases: dict[int, list[list[BoundStatement]]] = {}
        for (phase, _), statements in writes.parts.items():
            batches = phases.setdefault(phase, [])
            current: list[BoundStatement] = []
            size = 0
            for stmt, s in statements:
                if current and (size + s > _BATCH_BYTES or len(current) >= _BATCH_STATEMENTS):
                    batches.append(current)
                    current, size = [], 0
                current.append(stmt)
                size += s
            batches.append(current)
        for phase in sorted(phases):
            await self._all_written(self._send(batch) for batch in phases[phase])
        for done in writes.after:
            done()

    async def _all_written(self, calls: Iterable[Any]) -> None:
        """Awaits every write; on the first failure cancels the others (no retry of them
        lands after the call failed: its caller may reload and write again) and raises."""
        tasks = [asyncio.ensure_future(call) for call in calls]
        try:
            await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    async def _send(self, statements: list[BoundStatement]) -> None:
        """Statements of one partition: alone, or as an unlogged batch (a single-partition
        batch is atomic and isolated, and needs no batch log)."""
        if len(statements) == 1:
            await self._exec(statements[0], backoff=_WRITE_BACKOFF)
            return
        batch = BatchStatement(batch_type=BatchType.UNLOGGED, consistency_level=self.consistency)
        for stmt in statements:
            batch.add(stmt)
        await self._exec(batch, backoff=_WRITE_BACKOFF)

    # --- write plans ----------------------------------------------------------

    def _plan_job(self, writes: _Writes, job: Job) -> None:
        row = _job_row(job)
        writes.add(_P_JOBS, ("jobs", job.id), self._bind("insert_job", row), _size(row))
        stmt = self._bind("insert_owner", (job.owner, job.id))
        writes.add(_P_JOBS, ("jobs_by_owner", job.owner), stmt, 64)

    def _plan_run(
        self,
        writes: _Writes,
        run: Run,
        *,
        new: bool,
        was_dead: bool,
        indexed: bool,
        write_us: int | None,
    ) -> None:
        """``indexed``: the call also writes a due row for the run (its row goes first).
        ``write_us``: the poller's write time (module docstring), None for the api."""
        row = _run_row(run)
        # the api (no write_us): now, and a new run a second earlier (module docstring)
        backdate = _CREATE_BACKDATE_US if new else 0
        ts = write_us if write_us is not None else _now_us() - backdate
        phase = _P_RUNS if new or indexed else _P_STATES
        stmt = self._bind("insert_run", (*row, ts))
        writes.add(phase, ("runs", run.job_id), stmt, _size(row))
        if new:
            stmt = self._bind("insert_run_id", (run.id, run.job_id, run.owner))
            writes.add(_P_RUNS, ("runs_by_id", run.id), stmt, 120)
        if run.dead_letter:
            stmt = self._bind("insert_dead", (run.owner, run.id, run.job_id))
            writes.add(_P_JOBS, ("dead_letters", run.owner), stmt, 120)
        elif was_dead:
            stmt = self._bind("delete_dead", (run.owner, run.id))
            writes.add(_P_UNINDEX, ("dead_letters", run.owner), stmt, 80)

    def _ttl(self, until: float, now: float) -> int:
        """A TTL (seconds) keeping a row until ``until`` (epoch seconds) + due_ttl; 0 = none."""
        ttl = int(max(until, now) - now + self.due_ttl.total_seconds()) + 1
        return 0 if ttl > _MAX_TTL else ttl

    def _plan_due(self, writes: _Writes, run: Run, now: float) -> None:
        b = bucket_for(run.due_at, self.bucket_seconds)
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
        writes.add(_P_DUE, ("due_runs", run.shard, b), self._bind("insert_due", values), 120)
        # The bucket's row in shard_buckets must outlive every due row of the bucket: it
        # lives until the bucket's end (or now, if later) + due_ttl, plus an hour for skew.
        # Rewritten only when this process has not already written one living that long.
        need = max(b + self.bucket_seconds, now) + self.due_ttl.total_seconds()
        if self._buckets_written.get((run.shard, b), 0.0) < need:
            ttl = self._ttl(b + self.bucket_seconds + 3600, now)
            stmt = self._bind("insert_bucket", (run.shard, b, ttl))
            writes.add(_P_DUE, ("shard_buckets", run.shard), stmt, 40)
            lives = float("inf") if ttl == 0 else now + ttl
            writes.after.append(lambda k=(run.shard, b), v=lives: self._remember_bucket(k, v))

    def _remember_bucket(self, key: tuple[int, int], lives: float) -> None:
        if len(self._buckets_written) > 100_000:  # old buckets are not written again
            self._buckets_written.clear()
        self._buckets_written[key] = max(lives, self._buckets_written.get(key, 0.0))

    async def _put_runs(
        self,
        writes: _Writes,
        runs: Sequence[Run],
        due: Sequence[Run],
        *,
        known_new: bool,
        write_us: int | None = None,
    ) -> None:
        """Plans the upsert of ``runs`` (never moving a stored run to an earlier state) and
        the due rows of ``due``. ``known_new``: the runs belong to jobs created in this call."""
        indexed = {run.id for run in due}
        stored: dict[str, tuple[int, bool]] = {}
        if runs and not known_new:
            stored = await self._stored_runs(runs)
        for run in runs:
            current = stored.get(run.id)
            order = _order(run.state)
            if current is not None and order < current[0]:
                continue  # a replayed or late write of an earlier state: dropped
            self._plan_run(
                writes,
                run,
                new=current is None,
                was_dead=current is not None and current[1],
                indexed=run.id in indexed,
                write_us=write_us,
            )
            stored[run.id] = (order, run.dead_letter)
        now = time.time()
        for run in due:
            self._plan_due(writes, run, now)

    async def _stored_runs(self, runs: Sequence[Run]) -> dict[str, tuple[int, bool]]:
        """(state order, dead_letter) of those of ``runs`` that exist.

        One read per group of job partitions (``job_id IN ? AND id IN ?``: a run id
        exists under one job only, so the cross product finds exactly the stored runs),
        groups kept to about ``_CROSS`` lookups. Read-then-write is safe for ``commit``:
        the poller owning a shard is the only writer of its runs, so nothing changes
        them between this read and the write."""
        by_job: dict[str, dict[str, None]] = {}
        for run in runs:
            by_job.setdefault(run.job_id, {})[run.id] = None
        groups: list[tuple[list[str], list[str]]] = []
        jobs: list[str] = []
        ids: list[str] = []
        for job_id, run_ids in by_job.items():
            if jobs and (len(jobs) + 1) * (len(ids) + len(run_ids)) > _CROSS:
                groups.append((jobs, ids))
                jobs, ids = [], []
            jobs.append(job_id)
            ids += run_ids
        if jobs:
            groups.append((jobs, ids))
        parts = await self._gather(
            self._all(self._ps["run_states"], (list(group_jobs), list(group_ids)))
            for group_jobs, group_ids in groups
        )
        return {rid: (_order(state), bool(dead)) for part in parts for rid, state, dead in part}

    # --- jobs -------------------------------------------------------------

    async def create_jobs(self, items: Sequence[NewJob]) -> list[tuple[Job, bool]]:
        items = list(items)
        if not items:
            return []
        # Encode every row before anything is written: bad input writes nothing.
        writes = _Writes()
        for item in items:
            self._plan_job(writes, item.job)
            for run in item.runs:
                _run_row(run)
        # Idempotency keys: the first item with a key claims it (an LWT, only here).
        first: dict[tuple[str, str], int] = {}
        for i, item in enumerate(items):
            if item.job.idempotency_key:
                first.setdefault((item.job.owner, item.job.idempotency_key), i)
        claims = {key: items[i].job.id for key, i in first.items()}
        try:
            existing = await self._claim(claims)  # key -> existing job, for keys taken
        except BaseException:
            await self._release(claims)
            raise
        results: list[tuple[Job, bool]] = []
        created: list[NewJob] = []
        for i, item in enumerate(items):
            key = (item.job.owner, item.job.idempotency_key)
            if item.job.idempotency_key and (key in existing or first[key] != i):
                results.append((existing.get(key) or items[first[key]].job, False))
            else:
                results.append((item.job, True))
                created.append(item)
        if len(created) != len(items):  # re-plan without the items that were not created
            writes = _Writes()
            for item in created:
                self._plan_job(writes, item.job)
        runs = [run for item in created for run in item.runs]
        await self._put_runs(
            writes, runs, [r for r in runs if r.state == RunState.PENDING], known_new=True
        )
        try:
            await self._flush(writes)
        except BaseException:
            await self._settle_failed_create([i.job for i in created if i.job.idempotency_key])
            raise
        return results

    async def _settle_failed_create(self, jobs: list[Job]) -> None:
        """After a create failed part way, decides each key it claimed.

        A write reported failed (a timeout) may have landed, or land later. A job whose
        row is stored keeps its key: a retry with the key gets that job, which may
        already be running, instead of creating a second one. A job not stored is
        erased (a tombstone newer than any of its writes, so a late one cannot bring
        it back) and only then its key freed, so a retry creates the job afresh. When
        Cassandra cannot tell or erase, the key stays claimed; a claim whose job never
        appears is taken over once stale (``_claim``)."""
        if not jobs:
            return
        with contextlib.suppress(Exception):
            stored = await self.get_jobs([j.id for j in jobs])
            gone = [j for j in jobs if j.id not in stored]
            await self._gather(
                self._exec(self._ps[name], args)
                for j in gone
                for name, args in (("drop_job", (j.id,)), ("drop_owner", (j.owner, j.id)))
            )
            await self._release({(j.owner, j.idempotency_key): j.id for j in gone})

    async def _release(self, claims: dict[tuple[str, str], str]) -> None:
        """Best effort: frees the keys still claimed for jobs that were not written."""
        with contextlib.suppress(Exception):
            await self._gather(
                self._exec(self._ps["release"], (owner, key, job_id))
                for (owner, key), job_id in claims.items()
                if key
            )

    async def _claim(self, keys: dict[tuple[str, str], str]) -> dict[tuple[str, str], Job]:
        """Claims each (owner, key) for its job id; returns the existing job of every key
        that another job holds. A claim whose job never appeared (its creator died
        between claim and write) is taken over once it is ``_CLAIM_STALE`` old."""
        if not keys:
            return {}
        now = int(time.time() * 1_000_000)
        items = list(keys.items())
        results = await self._gather(
            self._exec(self._ps["claim"], (owner, key, job_id, now))
            for (owner, key), job_id in items
        )
        taken = {
            key: (r.column("job_id"), r.column("claimed_at"))
            for (key, _), r in zip(items, results, strict=True)
            if not r.applied
        }
        existing: dict[tuple[str, str], Job] = {}
        deadline = time.monotonic() + _CLAIM_WAIT
        while taken:
            jobs = await self.get_jobs([job_id for job_id, _ in taken.values()])
            for key, (job_id, _) in list(taken.items()):
                if job_id in jobs:
                    existing[key] = jobs[job_id]
                    del taken[key]
            for key, (job_id, claimed_at) in list(taken.items()):
                age = timedelta(microseconds=max(0, now - (claimed_at or 0)))
                if age < _CLAIM_STALE:
                    continue
                mine = keys[key]
                r = await self._exec(self._ps["take_over"], (mine, now, *key, job_id))
                if r.applied:
                    del taken[key]
                else:
                    taken[key] = (r.column("job_id"), now)
            if not taken:
                break
            if time.monotonic() > deadline:
                raise Unavailable("a create with the same idempotency key is in progress; retry")
            await asyncio.sleep(0.05)
        return existing

    async def get_job(self, owner: str, job_id: str) -> Job:
        rows = (await self._exec(self._ps["select_job"], (job_id,))).rows
        if not rows or rows[0][1] != owner:
            raise NotFound(f"job {job_id} not found")
        return _row_job(rows[0])

    async def get_jobs(self, job_ids: Sequence[str]) -> dict[str, Job]:
        rows = await self._in("select_jobs", job_ids)
        return {r[0]: _row_job(r) for r in rows if r[1] is not None}

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
        size = _page_size(page_size)
        after = _token_after("job", page_token) or ""
        labels = labels or {}

        def wanted(job: Job) -> bool:
            if states and job.state not in states:
                return False
            if not states and job.state == JobState.DELETED:
                return False
            if not job.spec.name.startswith(name_prefix):
                return False
            return all(job.spec.labels.get(k) == v for k, v in labels.items())

        found: list[Job] = []
        chunk = min(1000, 2 * (size + 1))
        while len(found) <= size:
            ids = [
                r[0] for r in (await self._exec(self._ps["owner_ids"], (owner, after, chunk))).rows
            ]
            if not ids:
                break
            jobs = await self.get_jobs(ids)
            found += [j for i in ids if (j := jobs.get(i)) and j.owner == owner and wanted(j)]
            after = ids[-1]
            if len(ids) < chunk:
                break
        return _make_page("job", found, size, lambda j: j.id)

    async def update_job(
        self,
        job: Job,
        *,
        expected_version: int,
        progress: JobProgress | None = None,
        runs: Sequence[Run] = (),
        due: Sequence[Run] = (),
    ) -> Job:
        unset = UNSET_VALUE
        fire_at, fire_key, failures = unset, unset, unset
        if progress is not None:  # the poller's fields, written as given (no state rule)
            if progress.next_fire_key == "":
                fire_at, fire_key = _NONE, ""
            else:
                if progress.next_fire_key is not None:
                    fire_key = progress.next_fire_key
                if progress.next_fire_at is not None:
                    fire_at = _us(progress.next_fire_at)
            if progress.consecutive_failures is not None:
                failures = progress.consecutive_failures
        values = (
            job.spec.name, str(job.state), expected_version + 1, job.schedule_version,
            _spec_to_json(job.spec), job.pause_reason, _us(job.updated_at),
            fire_at, fire_key, failures, job.id, job.owner, expected_version,
        )  # fmt: skip
        for run in runs:
            _run_row(run)  # encode before the compare-and-set: bad input changes nothing
        # The one LWT of an update: compare-and-set on the version (user updates are rare).
        result = await self._exec(self._ps["update_job"], values)
        if not result.applied:
            if result.column("owner") != job.owner:
                raise NotFound(f"job {job.id} not found")
            stored = result.column("version")
            raise VersionConflict(f"job {job.id} is at version {stored}, not {expected_version}")
        writes = _Writes()
        await self._put_runs(writes, list(runs), list(due), known_new=False)
        await self._flush(writes)
        return await self.get_job(job.owner, job.id)

    # --- runs -------------------------------------------------------------

    async def commit(
        self,
        *,
        runs: Sequence[Run] = (),
        due: Sequence[Run] = (),
        progress: Sequence[JobProgress] = (),
        write_time: datetime | None = None,
    ) -> None:
        runs, due, progress = list(runs), list(due), list(progress)
        if not (runs or due or progress):
            return
        write_us = None if write_time is None else _us(write_time)
        for run in runs:
            _run_row(run)
        writes = _Writes()
        states: dict[str, tuple[str, int]] = {}

        async def job_states() -> None:
            rows = await self._in("job_states", [p.job_id for p in progress])
            for job_id, state, state_ts, reason_ts in rows:
                if state is not None:
                    states[job_id] = (state, max(state_ts or 0, reason_ts or 0))

        await asyncio.gather(
            self._put_runs(writes, runs, due, known_new=False, write_us=write_us),
            job_states() if progress else asyncio.sleep(0),
        )
        for p in progress:
            self._plan_progress(writes, p, states, _now_us() if write_us is None else write_us)
        await self._flush(writes)

    def _plan_progress(
        self, writes: _Writes, p: JobProgress, states: dict[str, tuple[str, int]], write_us: int
    ) -> None:
        """The poller's fields of one job that exists, as plain column updates.

        The state moves only ACTIVE -> COMPLETED | PAUSED, as read just before, and a
        pause reason sent with a state goes only where the state goes. That state write
        carries the write time of the state it read + 1 µs: a user's update (the
        version compare-and-set) that lands between the read and this write has a later
        timestamp and wins, as if it came after, so the poller never undoes it."""
        stored = states.get(p.job_id)
        if stored is None:
            return  # an unknown job: an UPDATE would create a stray row
        unset = UNSET_VALUE
        fire_at, fire_key, failures, reason = unset, unset, unset, unset
        if p.next_fire_key == "":
            fire_at, fire_key = _NONE, ""
        else:
            if p.next_fire_key is not None:
                fire_key = p.next_fire_key
            if p.next_fire_at is not None:
                fire_at = _us(p.next_fire_at)
        if p.consecutive_failures is not None:
            failures = p.consecutive_failures
        if p.pause_reason is not None and p.state is None:
            reason = p.pause_reason
        values = (write_us, fire_at, fire_key, failures, reason, p.job_id)
        if any(v is not unset for v in values[1:5]):
            writes.add(_P_JOBS, ("jobs", p.job_id), self._bind("progress", values), 100)
        state, written_at = stored
        if p.state in (JobState.COMPLETED, JobState.PAUSED) and state == JobState.ACTIVE:
            reason = unset if p.pause_reason is None else p.pause_reason
            values = (written_at + 1, str(p.state), reason, p.job_id)
            stmt = self._bind("progress_state", values)
            writes.add(_P_JOBS, ("jobs", p.job_id), stmt, 100)

    async def get_run(self, owner: str, run_id: str) -> Run:
        run = (await self.get_runs([run_id])).get(run_id)
        if run is None or run.owner != owner:
            raise NotFound(f"run {run_id} not found")
        return run

    async def get_runs(self, run_ids: Sequence[str]) -> dict[str, Run]:
        by_job: dict[str, list[str]] = {}
        for rid, job_id, _owner in await self._in("run_ids", run_ids):
            by_job.setdefault(job_id, []).append(rid)
        parts = await self._gather(
            self._all(self._ps["select_runs"], (job_id, ids)) for job_id, ids in by_job.items()
        )
        return {r[0]: _row_run(r) for part in parts for r in part}

    async def list_runs(
        self,
        owner: str,
        job_id: str,
        *,
        states: frozenset[RunState] = frozenset(),
        page_size: int = 100,
        page_token: str = "",
    ) -> Page[Run]:
        size = _page_size(page_size)
        after = _token_after("run", page_token)
        job = (await self._exec(self._ps["select_job"], (job_id,))).rows
        if not job or job[0][1] != owner:
            raise NotFound(f"job {job_id} not found")
        if after is None:
            pages = self._pages(self._ps["job_runs"], (job_id,))
        else:
            pages = self._pages(self._ps["job_runs_before"], (job_id, after))
        found: list[Run] = []
        async for rows in pages:
            found += [_row_run(r) for r in rows if not states or RunState(r[4]) in states]
            if len(found) > size:
                break
        return _make_page("run", found, size, lambda r: r.id)

    async def list_active_runs(self, job_id: str) -> list[Run]:
        # Walks the job's partition reading (id, state) only, then reads the active runs
        # whole: an index of active runs would be rewritten on every state change.
        active = {"PENDING", "LEASED", "RUNNING"}
        ids = [
            rid
            for rid, state in await self._all(self._ps["job_run_states"], (job_id,))
            if state in active
        ]
        rows = await self._in("select_runs", ids, job_id) if ids else []
        return [_row_run(r) for r in rows]

    async def list_dead_letters(
        self, owner: str, *, job_id: str = "", page_size: int = 100, page_token: str = ""
    ) -> Page[Run]:
        size = _page_size(page_size)
        after = _token_after("dead", page_token)
        found: list[Run] = []
        cursor = after
        chunk = min(1000, 2 * (size + 1))
        while len(found) <= size:
            if cursor is None:
                rows = (await self._exec(self._ps["dead_first"], (owner, chunk))).rows
            else:
                rows = (await self._exec(self._ps["dead"], (owner, cursor, chunk))).rows
            if not rows:
                break
            ids = [rid for rid, jid in rows if not job_id or jid == job_id]
            runs = await self.get_runs(ids) if ids else {}
            # The index is checked against the runs: an entry left by an interrupted
            # write whose run is no longer a dead letter is skipped.
            found += [
                r for rid in ids if (r := runs.get(rid)) and r.dead_letter and r.owner == owner
            ]
            cursor = rows[-1][0]
            if len(rows) < chunk:
                break
        return _make_page("dead", found, size, lambda r: r.id)

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
        lo, hi = _us(due_from), _us(due_until)
        if limit <= 0 or hi <= lo:
            return []
        b = self.bucket_seconds
        first = bucket_for(due_from, b)
        if after is not None and after[0] >= due_from:
            first = max(first, bucket_for(after[0], b))
        # Only the buckets this shard ever had rows in (shard_buckets), oldest first.
        buckets = [
            row[0]
            for row in await self._all(
                self._ps["buckets"], (shard, first, bucket_for(due_until, b))
            )
        ]
        out: list[DueEntry] = []
        for bucket in buckets:
            room = limit - len(out)
            if room <= 0:
                break
            if after is not None and after[0] >= due_from:
                params: tuple[Any, ...] = (shard, bucket, _us(after[0]), after[1], hi, room)
                rows = await self._all(self._ps["scan_after"], params)
            else:
                rows = await self._all(self._ps["scan"], (shard, bucket, lo, hi, room))
            out += [
                DueEntry(shard=shard, due_at=_dt(t), run_id=r, job_id=j, priority=p)
                for t, r, j, p in rows
            ]
        return out[:limit]

    async def load_cursors(self, shards: Sequence[int]) -> dict[int, datetime]:
        rows = await self._in("cursors", list(shards))
        return {shard: _dt(us) for shard, us in rows if us is not None}

    async def save_cursors(self, cursors: dict[int, datetime]) -> None:
        # USING TIMESTAMP = the cursor: Cassandra keeps the cell with the highest
        # timestamp, so a lower cursor is ignored, with no read and no LWT.
        writes = _Writes()
        for shard, at in cursors.items():
            us = _us(at)
            stmt = self._bind("save_cursor", (shard, us, max(us, 1)))
            writes.add(_P_RUNS, ("shard_cursors", shard), stmt, 40)
        if writes:
            await self._flush(writes)

    async def oldest_due(self, shard: int) -> datetime | None:
        # From the shard's cursor (rows before it are drained, and may as well be gone),
        # through the buckets the shard has rows in, to the first row still there.
        cursor = (await self._exec(self._ps["cursor"], (shard,))).rows
        start = bucket_for(_dt(cursor[0][0]), self.bucket_seconds) if cursor else -(1 << 62)
        async for rows in self._pages(self._ps["first_buckets"], (shard, start)):
            for (bucket,) in rows:
                found = (await self._exec(self._ps["first_due"], (shard, bucket))).rows
                if found:
                    return _dt(found[0][0])
        return None

    # --- output -------------------------------------------------------------
    # Rows (run_id, byte_offset) hold a run's chunks; the offset counts every byte
    # appended before it, so offsets stay absolute when the head is trimmed. Static
    # columns hold the oldest kept byte and the end. The poller that owns a run's shard
    # is the only writer of its output, so read-then-write of the ends is safe.

    async def append_output(self, chunks: Sequence[OutputChunk]) -> None:
        by_run: dict[str, list[OutputChunk]] = {}
        for chunk in chunks:
            if chunk.data:
                by_run.setdefault(chunk.run_id, []).append(chunk)
        await self._gather(self._append(run_id, cs) for run_id, cs in by_run.items())

    async def _append(self, run_id: str, chunks: list[OutputChunk]) -> None:
        ends = (await self._exec(self._ps["output_ends"], (run_id,))).rows
        head, end = ends[0] if ends and ends[0][1] is not None else (0, 0)
        head = head or 0
        new: list[tuple[int, str, bytes]] = []
        at = end
        for chunk in chunks:
            new.append((at, chunk.stream, bytes(chunk.data)))
            at += len(chunk.data)
        cap, new_end, new_head = self.output_cap_bytes, at, head
        if new_end - head > cap:
            # The first chunk kept is the first starting at or after new_end - cap (then
            # at most cap bytes are kept); if none does, the last chunk alone, cut to cap.
            threshold = new_end - cap
            if threshold <= end:
                found = (await self._exec(self._ps["output_first_from"], (run_id, threshold))).rows
                new_head = found[0][0] if found and found[0][0] < end else new[0][0]
            else:
                new_head = next((o for o, _, _ in new if o >= threshold), new[-1][0])
            if new_head < threshold:  # only the last chunk is left, bigger than the cap
                _, stream, data = new[-1]
                new[-1] = (threshold, stream, data[len(data) - cap :])
                new_head = threshold
            new = [c for c in new if c[0] >= new_head]
        statements = [self._bind("output_insert", (run_id, o, s, d)) for o, s, d in new]
        size = sum(len(d) + 64 for _, _, d in new)
        if new_head > head:
            statements.append(self._bind("output_trim", (run_id, new_head)))
        statements.append(self._bind("output_set_ends", (new_head, new_end, run_id)))
        if size + 200 <= _BATCH_BYTES:
            await self._send(statements)  # one partition: atomic, isolated
        else:  # too big for a batch: chunks first, then the ends that make them visible
            await self._all_written(self._send([s]) for s in statements[: len(new)])
            for stmt in statements[len(new) :]:
                await self._send([stmt])

    async def read_output(
        self, run_id: str, *, offset: int = 0, limit: int = 1 << 16
    ) -> list[OutputChunk]:
        ends = (await self._exec(self._ps["output_ends"], (run_id,))).rows
        if not ends or ends[0][1] is None:
            return []
        head, end = ends[0]
        start = max(head, end + offset if offset < 0 else offset)
        if start >= end:
            return []
        out: list[OutputChunk] = []
        room = limit
        covered = head  # chunks are contiguous; anything overlapping or past the end is stray
        first = (await self._exec(self._ps["output_at"], (run_id, start))).rows

        def take(at: int, stream: str, data: bytes) -> None:
            nonlocal room, covered
            if at < covered or at >= end or room <= 0:
                return
            data = data[: end - at]
            covered = at + len(data)
            skip = max(0, start - at)
            piece = bytes(data[skip : skip + room])
            if piece:
                out.append(OutputChunk(run_id=run_id, offset=at + skip, data=piece, stream=stream))
                room -= len(piece)

        if first:
            take(*first[0])
        async for rows in self._pages(self._ps["output_from"], (run_id, start)):
            for row in rows:
                take(*row)
            if room <= 0:
                break
        return out
