"""The embedded ``JobStore``: one SQLite file in WAL mode, written through a group commit.

Every write goes to one writer thread that owns the only writing connection. It takes
everything queued, runs each operation inside its own SAVEPOINT (so one caller's
``VersionConflict`` undoes only that caller's work), COMMITs once with
``synchronous=FULL`` and then resolves every caller's future: many callers, one fsync
(BENCHMARKS.md, "Group-commit state changes"). Reads run on a small thread pool with
their own connections; WAL lets them proceed while the writer commits.

Times are stored as integer microseconds since the epoch (UTC); a job's spec is JSON.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import os
import queue
import sqlite3
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any, TypeVar

from shardcron.client.errors import InvalidArgument, NotFound, VersionConflict
from shardcron.client.types import (
    Job,
    JobState,
    OutputChunk,
    Page,
    Run,
    RunState,
)
from shardcron.coordinator.ids import bucket_for
from shardcron.coordinator.rows import (
    _JOB_COLS,
    _RUN_COLS,
    RowCodec,
    _dt,
    _spec_to_json,
    _us,
)
from shardcron.coordinator.store import (
    DEFAULT_BUCKET_SECONDS,
    DEFAULT_OUTPUT_CAP_BYTES,
    DEFAULT_SHARD_COUNT,
    DueEntry,
    JobProgress,
    NewJob,
)

T = TypeVar("T")
Conn = sqlite3.Connection

SCHEMA_VERSION = 1
_IN_CHUNK = 500  # values per IN (...) list
_MAX_BATCH_ROWS = 50_000  # a group commit stops taking callers past this many rows
_READ_THREADS = 2
_SCHEMA = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY, owner TEXT NOT NULL, name TEXT NOT NULL, state TEXT NOT NULL,
    version INTEGER NOT NULL, schedule_version INTEGER NOT NULL, spec TEXT NOT NULL,
    next_fire_at INTEGER, next_fire_key TEXT NOT NULL, idempotency_key TEXT NOT NULL,
    consecutive_failures INTEGER NOT NULL, pause_reason TEXT NOT NULL,
    created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS jobs_by_owner ON jobs (owner, id);
CREATE UNIQUE INDEX IF NOT EXISTS jobs_by_idempotency_key
    ON jobs (owner, idempotency_key) WHERE idempotency_key != '';
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY, job_id TEXT NOT NULL, owner TEXT NOT NULL, shard INTEGER NOT NULL,
    state TEXT NOT NULL, dead_letter INTEGER NOT NULL, due_at INTEGER NOT NULL,
    fire_key TEXT NOT NULL, fire_at INTEGER NOT NULL, attempt INTEGER NOT NULL,
    priority INTEGER NOT NULL, worker_id TEXT NOT NULL, lease_token INTEGER NOT NULL,
    lease_expires_at INTEGER, created_at INTEGER, started_at INTEGER, ended_at INTEGER,
    exit_code INTEGER, reason TEXT NOT NULL, error TEXT NOT NULL,
    output_bytes INTEGER NOT NULL, replayed_from TEXT NOT NULL,
    schedule_version INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS runs_by_job ON runs (job_id, id DESC);
CREATE INDEX IF NOT EXISTS runs_dead_letters ON runs (owner, dead_letter, id)
    WHERE dead_letter = 1;
CREATE TABLE IF NOT EXISTS due_runs (
    shard INTEGER NOT NULL, bucket INTEGER NOT NULL, due_at INTEGER NOT NULL,
    run_id TEXT NOT NULL, job_id TEXT NOT NULL, priority INTEGER NOT NULL,
    PRIMARY KEY (shard, bucket, due_at, run_id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS run_output (
    run_id TEXT NOT NULL, seq INTEGER NOT NULL, "offset" INTEGER NOT NULL,
    stream TEXT NOT NULL, data BLOB NOT NULL, PRIMARY KEY (run_id, seq));
CREATE TABLE IF NOT EXISTS shard_cursors (
    shard INTEGER PRIMARY KEY, bucket_start INTEGER NOT NULL);
INSERT INTO schema_version SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM schema_version);
"""

# --------------------------------------------------------------------------- rows

_STATE_ORDER = (
    "CASE {}.state WHEN 'PENDING' THEN 0 WHEN 'LEASED' THEN 1 WHEN 'RUNNING' THEN 2 ELSE 3 END"
)
# An existing run is overwritten only by the same or a later state. job_id, owner and
# shard follow from the run id (it hashes the job id), so the upsert leaves them, and
# the indexes on them, alone.
_UPSERT_RUN = (
    f"INSERT INTO runs ({_RUN_COLS}) VALUES ({', '.join('?' * 23)}) ON CONFLICT(id) DO UPDATE"
    f" SET {', '.join(f'{c} = excluded.{c}' for c in _RUN_COLS.replace(' ', '').split(',')[4:])}"
    f" WHERE {_STATE_ORDER.format('excluded')} >= {_STATE_ORDER.format('runs')}"
)
_SELECT_JOB = f"SELECT {_JOB_COLS} FROM jobs"
_SELECT_RUN = f"SELECT {_RUN_COLS} FROM runs"
_INSERT_JOB = f"INSERT INTO jobs ({_JOB_COLS}) VALUES ({', '.join('?' * 14)})"
_UPDATE_JOB = (
    "UPDATE jobs SET name = ?, state = ?, version = ?, schedule_version = ?, spec = ?,"
    " pause_reason = ?, updated_at = ? WHERE id = ? AND owner = ? AND version = ?"
)
_INSERT_DUE = (
    "INSERT INTO due_runs (shard, bucket, due_at, run_id, job_id, priority)"
    " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
)


_ROWS = RowCodec(null=None)
_job_row, _row_job = _ROWS.job_row, _ROWS.row_job
_run_row, _row_run = _ROWS.run_row, _ROWS.row_run


def _marks(n: int) -> str:
    return ", ".join("?" * n)


def _select_in(conn: Conn, sql: str, values: Sequence[Any]) -> list[Any]:
    """Runs ``sql`` (with one ``IN ({})``) over ``values`` in chunks SQLite accepts."""
    values = list(dict.fromkeys(values))
    rows: list[Any] = []
    for i in range(0, len(values), _IN_CHUNK):
        part = values[i : i + _IN_CHUNK]
        rows += conn.execute(sql.format(_marks(len(part))), part).fetchall()
    return rows


# --------------------------------------------------------------------------- pages
# A page token is the last id of the previous page, tagged with the listing it came from.


def _keyset(
    kind: str, where: list[str], args: list[Any], size: int, token: str, *, desc: bool
) -> tuple[str, list[Any], int]:
    """WHERE/ORDER BY/LIMIT of one page (one extra row tells whether another follows)."""
    size = max(1, min(1000, size))
    if token:
        try:
            prefix, _, after = base64.urlsafe_b64decode(token.encode()).decode().partition(":")
        except ValueError:
            prefix, after = "", ""
        if prefix != kind or not after:
            raise InvalidArgument("page_token", "malformed page token")
        where, args = [*where, "id < ?" if desc else "id > ?"], [*args, after]
    order = "DESC" if desc else "ASC"
    return f"WHERE {' AND '.join(where)} ORDER BY id {order} LIMIT ?", [*args, size + 1], size


def _page(kind: str, rows: list[Any], size: int, decode: Callable[[Any], T]) -> Page[T]:
    items = [decode(r) for r in rows[:size]]
    if len(rows) <= size:
        return Page(items=items)
    token = base64.urlsafe_b64encode(f"{kind}:{rows[size - 1][0]}".encode()).decode()
    return Page(items=items, next_page_token=token)


def _state_filter(states: frozenset[Any] | None, where: list[str], args: list[Any]) -> None:
    """Adds ``state IN (states)``; ``None`` means every job state but DELETED."""
    if states is None:
        where.append("state != 'DELETED'")
    elif states:
        where.append(f"state IN ({_marks(len(states))})")
        args += sorted(str(s) for s in states)


# --------------------------------------------------------------------------- the store


@dataclasses.dataclass(slots=True)
class _Op:
    fn: Callable[[Conn], Any]
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop
    rows: int


def _resolve(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if future.done():  # the caller gave up waiting; its write happened anyway
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


def _connect(path: str) -> Conn:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout = 10000")
    conn.execute("PRAGMA synchronous = FULL")
    return conn


class SqliteStore:
    """``JobStore`` on one SQLite file; see the module docstring for how writes flow."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        shard_count: int = DEFAULT_SHARD_COUNT,
        bucket_seconds: int = DEFAULT_BUCKET_SECONDS,
        output_cap_bytes: int = DEFAULT_OUTPUT_CAP_BYTES,
    ) -> None:
        if shard_count < 1 or bucket_seconds < 1 or output_cap_bytes < 0:
            raise ValueError("shard_count and bucket_seconds must be >= 1, output cap >= 0")
        self.path = os.fspath(path)
        self.shard_count = shard_count
        self.bucket_seconds = bucket_seconds
        self.output_cap_bytes = output_cap_bytes
        self._queue: queue.SimpleQueue[_Op | None] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._readers: ThreadPoolExecutor | None = None
        self._local = threading.local()  # each read thread's own connection
        self._read_conns: list[Conn] = []
        self._transactions = 0  # group commits so far

    # --- lifecycle ----------------------------------------------------------

    async def open(self) -> None:
        if self._writer is not None:
            return
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        writer = threading.Thread(target=self._write_loop, args=(ready, loop), daemon=True)
        writer.start()
        await ready  # the schema exists, or its error is raised here
        self._writer = writer
        self._readers = ThreadPoolExecutor(_READ_THREADS, initializer=self._open_reader)

    async def close(self) -> None:
        writer, readers = self._writer, self._readers
        if writer is None or readers is None:
            return
        self._writer = self._readers = None
        self._queue.put(None)  # behind every write already queued: those commit first
        await asyncio.to_thread(writer.join)
        await asyncio.to_thread(readers.shutdown)
        for conn in self._read_conns:
            conn.close()
        self._read_conns.clear()

    # --- the writer thread and the read pool ----------------------------------

    def _write_loop(self, ready: asyncio.Future[None], loop: asyncio.AbstractEventLoop) -> None:
        try:
            conn = _connect(self.path)
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA cache_size = -32768")
            conn.executescript(f"BEGIN IMMEDIATE; {_SCHEMA} COMMIT;")
            (version,) = conn.execute("SELECT max(version) FROM schema_version").fetchone()
            if version != SCHEMA_VERSION:
                raise RuntimeError(f"store schema {version}, this code knows {SCHEMA_VERSION}")
        except Exception as e:
            loop.call_soon_threadsafe(_resolve, ready, False, e)
            return
        loop.call_soon_threadsafe(_resolve, ready, True, None)
        while True:
            batch, rows = [], 0
            op = self._queue.get()
            while op is not None:  # take every caller waiting now, up to _MAX_BATCH_ROWS
                batch.append(op)
                rows += op.rows
                if rows >= _MAX_BATCH_ROWS or self._queue.empty():
                    break
                op = self._queue.get()
            if batch:
                self._run_batch(conn, batch)
            if op is None:
                conn.close()
                return

    def _run_batch(self, conn: Conn, batch: list[_Op]) -> None:
        results: list[tuple[bool, Any]] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            for op in batch:
                conn.execute("SAVEPOINT op")
                try:
                    results.append((True, op.fn(conn)))
                except Exception as e:  # this caller's error: undo only its writes
                    conn.execute("ROLLBACK TO op")
                    results.append((False, e))
                conn.execute("RELEASE op")
            conn.execute("COMMIT")
            self._transactions += 1
        except Exception as e:  # the transaction itself failed: nothing in it is durable
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            results = [(False, e)] * len(batch)
        for op, (ok, value) in zip(batch, results, strict=True):
            with contextlib.suppress(RuntimeError):  # the caller's loop is closed
                op.loop.call_soon_threadsafe(_resolve, op.future, ok, value)

    async def _write(self, fn: Callable[[Conn], T], rows: int = 1) -> T:
        if self._writer is None:
            raise RuntimeError("SqliteStore is not open")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.put(_Op(fn, future, loop, rows))
        return await future

    def _open_reader(self) -> None:
        self._local.conn = _connect(self.path)
        self._local.conn.execute("PRAGMA query_only = ON")
        self._read_conns.append(self._local.conn)

    def _snapshot(self, fn: Callable[[Conn], T]) -> T:
        conn = self._local.conn
        conn.execute("BEGIN")  # one consistent view for every query of fn
        try:
            return fn(conn)
        finally:
            conn.execute("COMMIT")

    async def _read(self, fn: Callable[[Conn], T]) -> T:
        if self._readers is None:
            raise RuntimeError("SqliteStore is not open")
        return await asyncio.get_running_loop().run_in_executor(self._readers, self._snapshot, fn)

    async def _all(self, sql: str, args: Sequence[Any]) -> list[Any]:
        return await self._read(lambda c: c.execute(sql, args).fetchall())

    async def _one(self, sql: str, args: Sequence[Any]) -> Any:
        return await self._read(lambda c: c.execute(sql, args).fetchone())

    # --- jobs -------------------------------------------------------------

    async def create_jobs(self, items: Sequence[NewJob]) -> list[tuple[Job, bool]]:
        items = list(items)
        rows = sum(1 + len(item.runs) for item in items)
        return await self._write(lambda conn: self._create_jobs(conn, items), rows)

    def _create_jobs(self, conn: Conn, items: list[NewJob]) -> list[tuple[Job, bool]]:
        results: list[tuple[Job, bool]] = []
        jobs, runs = [], []
        created: dict[tuple[str, str], Job] = {}  # this call's new jobs by idempotency key
        for item in items:
            job, key = item.job, (item.job.owner, item.job.idempotency_key)
            if job.idempotency_key:
                existing = created.get(key)
                if existing is None:
                    sql = f"{_SELECT_JOB} WHERE owner = ? AND idempotency_key = ?"
                    row = conn.execute(sql, key).fetchone()
                    existing = row and _row_job(row)
                if existing:
                    results.append((existing, False))
                    continue
                created[key] = job
            results.append((job, True))
            jobs.append(_job_row(job))
            runs += item.runs
        conn.executemany(_INSERT_JOB, jobs)
        self._put_runs(conn, runs, [r for r in runs if r.state == RunState.PENDING])
        return results

    def _put_runs(self, conn: Conn, runs: Sequence[Run], due: Sequence[Run]) -> None:
        conn.executemany(_UPSERT_RUN, [_run_row(r) for r in runs])
        b = self.bucket_seconds
        conn.executemany(
            _INSERT_DUE,
            [
                (r.shard, bucket_for(r.due_at, b), _us(r.due_at), r.id, r.job_id, r.priority)
                for r in due
            ],
        )

    async def get_job(self, owner: str, job_id: str) -> Job:
        row = await self._one(_SELECT_JOB + " WHERE id = ? AND owner = ?", (job_id, owner))
        if row is None:
            raise NotFound(f"job {job_id} not found")
        return _row_job(row)

    async def get_jobs(self, job_ids: Sequence[str]) -> dict[str, Job]:
        rows = await self._read(lambda c: _select_in(c, _SELECT_JOB + " WHERE id IN ({})", job_ids))
        return {r[0]: _row_job(r) for r in rows}

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
        where, args = ["owner = ?"], [owner]
        _state_filter(states or None, where, args)  # none given: every state but DELETED
        if name_prefix:
            where.append("substr(name, 1, length(?)) = ?")
            args += [name_prefix, name_prefix]
        for key, value in (labels or {}).items():
            where.append(
                "EXISTS (SELECT 1 FROM json_each(spec, '$.labels') WHERE key = ? AND value = ?)"
            )
            args += [key, value]
        tail, args, size = _keyset("job", where, args, page_size, page_token, desc=False)
        return _page("job", await self._all(f"{_SELECT_JOB} {tail}", args), size, _row_job)

    async def update_job(
        self,
        job: Job,
        *,
        expected_version: int,
        progress: JobProgress | None = None,
        runs: Sequence[Run] = (),
        due: Sequence[Run] = (),
    ) -> Job:
        spec = _spec_to_json(job.spec)
        values = (job.spec.name, str(job.state), expected_version + 1, job.schedule_version, spec)
        values += (job.pause_reason, _us(job.updated_at), job.id, job.owner, expected_version)
        runs, due = list(runs), list(due)

        def op(conn: Conn) -> Job:
            if conn.execute(_UPDATE_JOB, values).rowcount:
                if progress is not None:
                    _apply_progress(
                        conn, dataclasses.replace(progress, job_id=job.id, state=None), force=True
                    )
                self._put_runs(conn, runs, due)
                return _row_job(conn.execute(f"{_SELECT_JOB} WHERE id = ?", (job.id,)).fetchone())
            sql = "SELECT version FROM jobs WHERE id = ? AND owner = ?"
            found = conn.execute(sql, (job.id, job.owner)).fetchone()
            if found is None:
                raise NotFound(f"job {job.id} not found")
            raise VersionConflict(f"job {job.id} is at version {found[0]}, not {expected_version}")

        return await self._write(op, 1 + len(runs) + len(due))

    # --- runs -------------------------------------------------------------

    async def commit(
        self,
        *,
        runs: Sequence[Run] = (),
        due: Sequence[Run] = (),
        progress: Sequence[JobProgress] = (),
        write_time: datetime | None = None,  # one process writes this file: not needed
    ) -> None:
        runs, due, progress = list(runs), list(due), list(progress)
        if not (runs or due or progress):
            return

        def op(conn: Conn) -> None:
            self._put_runs(conn, runs, due)
            for p in progress:
                _apply_progress(conn, p)

        await self._write(op, len(runs) + len(due) + len(progress))

    async def get_run(self, owner: str, run_id: str) -> Run:
        row = await self._one(_SELECT_RUN + " WHERE id = ? AND owner = ?", (run_id, owner))
        if row is None:
            raise NotFound(f"run {run_id} not found")
        return _row_run(row)

    async def get_runs(self, run_ids: Sequence[str]) -> dict[str, Run]:
        rows = await self._read(lambda c: _select_in(c, _SELECT_RUN + " WHERE id IN ({})", run_ids))
        return {r[0]: _row_run(r) for r in rows}

    async def list_runs(
        self,
        owner: str,
        job_id: str,
        *,
        states: frozenset[RunState] = frozenset(),
        page_size: int = 100,
        page_token: str = "",
    ) -> Page[Run]:
        where, args = ["job_id = ?"], [job_id]
        _state_filter(states, where, args)
        tail, args, size = _keyset("run", where, args, page_size, page_token, desc=True)

        def read(conn: Conn) -> list[Any] | None:
            known = "SELECT 1 FROM jobs WHERE id = ? AND owner = ?"
            if conn.execute(known, (job_id, owner)).fetchone() is None:
                return None
            return conn.execute(f"{_SELECT_RUN} {tail}", args).fetchall()

        rows = await self._read(read)
        if rows is None:
            raise NotFound(f"job {job_id} not found")
        return _page("run", rows, size, _row_run)

    async def list_active_runs(self, job_id: str) -> list[Run]:
        # Walks the job's runs (runs_by_job): an index of active runs would have to change on
        # every state change, and measured, it halved the throughput of those writes.
        active = "state IN ('PENDING', 'LEASED', 'RUNNING')"
        rows = await self._all(f"{_SELECT_RUN} WHERE job_id = ? AND {active}", (job_id,))
        return [_row_run(r) for r in rows]

    async def list_dead_letters(
        self, owner: str, *, job_id: str = "", page_size: int = 100, page_token: str = ""
    ) -> Page[Run]:
        where, args = ["owner = ?", "dead_letter = 1"], [owner]
        if job_id:
            where, args = [*where, "job_id = ?"], [*args, job_id]
        tail, args, size = _keyset("dead", where, args, page_size, page_token, desc=True)
        return _page("dead", await self._all(f"{_SELECT_RUN} {tail}", args), size, _row_run)

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
        # Buckets grow with due_at, so (bucket, due_at, run_id) order, read straight off
        # the primary key, is (due_at, run_id) order.
        b = self.bucket_seconds
        where = "shard = ? AND bucket BETWEEN ? AND ? AND due_at >= ? AND due_at < ?"
        args = [shard, bucket_for(due_from, b), bucket_for(due_until, b)]
        args += [_us(due_from), _us(due_until)]
        if after is not None:
            where += " AND (due_at, run_id) > (?, ?)"
            args += [_us(after[0]), after[1]]
        sql = f"SELECT due_at, run_id, job_id, priority FROM due_runs WHERE {where}"
        sql += " ORDER BY bucket, due_at, run_id LIMIT ?"
        rows = await self._all(sql, (*args, max(0, limit)))
        return [DueEntry(shard=shard, due_at=_dt(t), run_id=r, job_id=j, priority=p)
                for t, r, j, p in rows]  # fmt: skip

    async def load_cursors(self, shards: Sequence[int]) -> dict[int, datetime]:
        sql = "SELECT shard, bucket_start FROM shard_cursors WHERE shard IN ({})"
        rows = await self._read(lambda c: _select_in(c, sql, shards))
        return {shard: _dt(us) for shard, us in rows}

    async def save_cursors(self, cursors: dict[int, datetime]) -> None:
        rows = [(shard, _us(at)) for shard, at in cursors.items()]
        if not rows:
            return
        sql = (
            "INSERT INTO shard_cursors (shard, bucket_start) VALUES (?, ?) ON CONFLICT(shard)"
            " DO UPDATE SET bucket_start = excluded.bucket_start"
            " WHERE excluded.bucket_start > shard_cursors.bucket_start"  # never backwards
        )
        prune = "DELETE FROM due_runs WHERE shard = ? AND bucket < (SELECT bucket_start / 1000000 FROM shard_cursors WHERE shard = ?)"

        def op(conn: Conn) -> None:
            conn.executemany(sql, rows).close()
            conn.executemany(prune, [(shard, shard) for shard, _ in rows]).close()

        await self._write(op, len(rows))

    async def oldest_due(self, shard: int) -> datetime | None:
        sql = "SELECT due_at FROM due_runs WHERE shard = ? ORDER BY bucket, due_at LIMIT 1"
        row = await self._one(sql, (shard,))
        return None if row is None else _dt(row[0])

    # --- output -------------------------------------------------------------
    # Rows (run_id, seq) hold a run's chunks in order; a chunk's offset counts every byte
    # appended to the run before it, so offsets stay absolute when the head is trimmed.

    async def append_output(self, chunks: Sequence[OutputChunk]) -> None:
        by_run: dict[str, list[OutputChunk]] = {}
        for chunk in chunks:
            if chunk.data:
                by_run.setdefault(chunk.run_id, []).append(chunk)
        if by_run:
            await self._write(lambda conn: self._append(conn, by_run), len(chunks))

    def _append(self, conn: Conn, by_run: dict[str, list[OutputChunk]]) -> None:
        insert = (
            'INSERT INTO run_output (run_id, seq, "offset", stream, data) VALUES (?, ?, ?, ?, ?)'
        )
        last = (
            'SELECT seq + 1, "offset" + length(data) FROM run_output WHERE run_id = ?'
            " ORDER BY seq DESC LIMIT 1"
        )
        for run_id, chunks in by_run.items():
            seq, end = conn.execute(last, (run_id,)).fetchone() or (0, 0)
            for chunk in chunks:
                conn.execute(insert, (run_id, seq, end, chunk.stream, bytes(chunk.data)))
                seq, end = seq + 1, end + len(chunk.data)
            self._trim(conn, run_id, seq - 1, end)

    def _trim(self, conn: Conn, run_id: str, last_seq: int, end: int) -> None:
        """Drops whole chunks from the head while more than the cap is kept; the last
        chunk, when it alone exceeds the cap, keeps only its last cap bytes."""
        cap, kept, cut = self.output_cap_bytes, None, None
        sql = 'SELECT seq, "offset", length(data) FROM run_output WHERE run_id = ? ORDER BY seq'
        cur = conn.execute(sql, (run_id,))
        for seq, offset, size in cur:
            kept = end - offset if kept is None else kept
            if kept <= cap or seq == last_seq:
                break
            kept, cut = kept - size, seq
        cur.close()
        if cut is not None:
            conn.execute("DELETE FROM run_output WHERE run_id = ? AND seq <= ?", (run_id, cut))
        if kept is not None and kept > cap:
            conn.execute(
                "UPDATE run_output SET data = substr(data, length(data) - ?1 + 1),"
                ' "offset" = ?2 - ?1 WHERE run_id = ?3 AND seq = ?4',
                (cap, end, run_id, last_seq),
            )

    async def read_output(
        self, run_id: str, *, offset: int = 0, limit: int = 1 << 16
    ) -> list[OutputChunk]:
        def read(conn: Conn) -> list[OutputChunk]:
            kept = 'SELECT min("offset"), max("offset" + length(data)) FROM run_output'
            head, end = conn.execute(kept + " WHERE run_id = ?", (run_id,)).fetchone()
            if head is None:
                return []
            start, out, room = max(head, end + offset if offset < 0 else offset), [], limit
            cur = conn.execute(
                'SELECT "offset", stream, data FROM run_output'
                ' WHERE run_id = ? AND "offset" + length(data) > ? ORDER BY seq',
                (run_id, start),
            )
            for at, stream, data in cur:
                if room <= 0:
                    break
                skip = max(0, start - at)
                piece = bytes(data[skip : skip + room])
                out.append(OutputChunk(run_id=run_id, offset=at + skip, data=piece, stream=stream))
                room -= len(piece)
            cur.close()
            return out

        return await self._read(read)


def _apply_progress(conn: Conn, p: JobProgress, *, force: bool = False) -> None:
    """The poller's fields of one job. The state moves only ACTIVE -> COMPLETED | PAUSED,
    and a pause reason sent along with a state goes only where the state goes.
    ``force``: an api update's progress, whose pause reason is written as given."""
    sets: dict[str, Any] = {}
    if p.next_fire_key == "":  # the schedule is exhausted
        sets |= {"next_fire_at": None, "next_fire_key": ""}
    elif p.next_fire_key is not None:
        sets["next_fire_key"] = p.next_fire_key
    if p.next_fire_at is not None and p.next_fire_key != "":
        sets["next_fire_at"] = _us(p.next_fire_at)
    if p.consecutive_failures is not None:
        sets["consecutive_failures"] = p.consecutive_failures
    if p.pause_reason is not None and p.state is None and not force:
        sets["pause_reason"] = p.pause_reason
    if sets:
        assignments = ", ".join(f"{column} = ?" for column in sets)
        conn.execute(f"UPDATE jobs SET {assignments} WHERE id = ?", (*sets.values(), p.job_id))
    if p.state in (JobState.COMPLETED, JobState.PAUSED):
        moved = {"state": str(p.state)}
        if p.pause_reason is not None:
            moved["pause_reason"] = p.pause_reason
        assignments = ", ".join(f"{column} = ?" for column in moved)
        sql = f"UPDATE jobs SET {assignments} WHERE id = ? AND state = 'ACTIVE'"
        conn.execute(sql, (*moved.values(), p.job_id))
