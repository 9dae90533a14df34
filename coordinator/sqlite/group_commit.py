"""One SQLite file shared by asyncio callers: one writer thread, a small read pool.

Every write goes to the writer thread, which owns the only writing connection. It
takes everything queued, runs each operation inside its own SAVEPOINT (so one
caller's error, such as a ``VersionConflict``, undoes only that caller's work),
COMMITs once with ``synchronous=FULL`` and then resolves every caller's future: many
callers, one fsync (BENCHMARKS.md, "Group-commit state changes"). A write returns
only once its transaction is durable; if the transaction fails, every caller in it
gets the error and nothing of it is kept.

The file gives back what it no longer needs: the WAL is truncated to
``_WAL_LIMIT_BYTES`` after each checkpoint, and pages freed by deletes (trimmed run
output, pruned due entries) are returned to the file system by an incremental vacuum
at most every ``_VACUUM_EVERY_SECONDS``, a bounded number of pages at a time, so that a
burst of output does not leave the file at its high-water mark for good.

Reads run on a small thread pool, each thread with its own read-only connection and
each read in one transaction (one consistent view); WAL lets them proceed while the
writer commits.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from shardcron.coordinator.store_rules import resolve_future

T = TypeVar("T")
Conn = sqlite3.Connection

_MAX_BATCH_ROWS = 50_000  # a group commit stops taking callers past this many rows
_READ_THREADS = 2
_WAL_LIMIT_BYTES = 64 << 20  # the WAL file is truncated back to this after a checkpoint
_VACUUM_EVERY_SECONDS = 10.0
_VACUUM_PAGES = 4096  # pages freed per incremental vacuum: bounds the pause it makes
_INCREMENTAL = 2  # PRAGMA auto_vacuum's value for INCREMENTAL


@dataclasses.dataclass(slots=True)
class _Op:
    fn: Callable[[Conn], Any]
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop
    rows: int


def _connect(path: str) -> Conn:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout = 10000")
    conn.execute("PRAGMA synchronous = FULL")
    return conn


def _reclaim_freed_pages(conn: Conn) -> None:
    """Puts the file in ``auto_vacuum = INCREMENTAL`` mode. A new file takes it at
    once; a file made before (mode NONE) only through a full VACUUM, which rewrites it
    once, here, before anything else uses it."""
    if conn.execute("PRAGMA auto_vacuum").fetchone()[0] == _INCREMENTAL:
        return
    conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
    if conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
        conn.execute("VACUUM")


def _vacuum_step(conn: Conn) -> None:
    """Returns up to ``_VACUUM_PAGES`` free pages to the file system (its own short
    transaction, between group commits); a failure is left for the next step."""
    with contextlib.suppress(sqlite3.Error):
        if conn.execute("PRAGMA freelist_count").fetchone()[0]:
            conn.execute(f"PRAGMA incremental_vacuum({_VACUUM_PAGES})").fetchall()


class GroupCommitDb:
    """The writer thread and the read pool of one file (module docstring)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.transactions = 0  # group commits so far
        self._queue: queue.SimpleQueue[_Op | None] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._readers: ThreadPoolExecutor | None = None
        self._local = threading.local()  # each read thread's own connection
        self._read_conns: list[Conn] = []

    async def open(self, prepare: Callable[[Conn], None]) -> None:
        """Starts the writer, which first runs ``prepare`` (the schema) in a transaction
        of its own; its error is raised here. Idempotent."""
        if self._writer is not None:
            return
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        writer = threading.Thread(target=self._write_loop, args=(prepare, ready, loop), daemon=True)
        writer.start()
        await ready
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

    async def write(self, fn: Callable[[Conn], T], rows: int = 1) -> T:
        """Runs ``fn`` on the writer's connection in the next group commit; returns its
        result once committed. ``rows``: about how many rows it writes."""
        if self._writer is None:
            raise RuntimeError("SqliteStore is not open")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.put(_Op(fn, future, loop, rows))
        return await future

    async def read(self, fn: Callable[[Conn], T]) -> T:
        """Runs ``fn`` on a reader's connection, in one read transaction."""
        if self._readers is None:
            raise RuntimeError("SqliteStore is not open")
        return await asyncio.get_running_loop().run_in_executor(self._readers, self._snapshot, fn)

    # --- the writer thread ----------------------------------------------------

    def _write_loop(
        self,
        prepare: Callable[[Conn], None],
        ready: asyncio.Future[None],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        try:
            conn = _connect(self.path)
            _reclaim_freed_pages(conn)
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA journal_size_limit = {_WAL_LIMIT_BYTES}")
            conn.execute("PRAGMA cache_size = -32768")
            prepare(conn)
        except Exception as e:
            loop.call_soon_threadsafe(resolve_future, ready, False, e)
            return
        loop.call_soon_threadsafe(resolve_future, ready, True, None)
        next_vacuum = time.monotonic() + _VACUUM_EVERY_SECONDS
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
            if time.monotonic() >= next_vacuum:
                next_vacuum = time.monotonic() + _VACUUM_EVERY_SECONDS
                _vacuum_step(conn)
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
            self.transactions += 1
        except Exception as e:  # the transaction itself failed: nothing in it is durable
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            results = [(False, e)] * len(batch)
        for op, (ok, value) in zip(batch, results, strict=True):
            with contextlib.suppress(RuntimeError):  # the caller's loop is closed
                op.loop.call_soon_threadsafe(resolve_future, op.future, ok, value)

    # --- the read pool ----------------------------------------------------------

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
