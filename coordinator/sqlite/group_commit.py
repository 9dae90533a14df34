"""One SQLite file shared by asyncio callers: one writer, a small read pool.

Every write goes to the writer (a thread, or with ``process`` a child process:
``writer_process``), which owns the only writing connection (``committer``). It
takes everything queued, runs each operation inside its own SAVEPOINT (so one
caller's error, such as a ``VersionConflict``, undoes only that caller's work),
COMMITs once with ``synchronous=FULL`` and then resolves every caller's future: many
callers, one fsync (docs/benchmarks.md, "Group commit"). A write returns
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
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from shardcron.coordinator.sqlite.committer import Committer, Conn, connect, take_batch
from shardcron.coordinator.sqlite.writer_process import WriterProcess
from shardcron.coordinator.store_rules import resolve_future

T = TypeVar("T")

_READ_THREADS = 2


@dataclasses.dataclass(slots=True)
class _Op:
    fn: Callable[[Conn], Any]
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop
    rows: int


class GroupCommitDb:
    """The writer and the read pool of one file (module docstring). With ``process``,
    the writer is a child process (``writer_process``) rather than a thread."""

    def __init__(self, path: str, *, process: bool = False) -> None:
        self.path = path
        self._queue: queue.SimpleQueue[_Op | None] = queue.SimpleQueue()
        self._committer = Committer(path)
        self._writer: threading.Thread | None = None
        self._child: WriterProcess | None = WriterProcess(path) if process else None
        self._open = False
        self._readers: ThreadPoolExecutor | None = None
        self._local = threading.local()  # each read thread's own connection
        self._read_conns: list[Conn] = []

    def count_restarts_into(self, count: Callable[[], object]) -> None:
        """Calls ``count()`` each time the writer process is replaced (none in a thread)."""
        if self._child is not None:
            self._child.count_restarts = count

    @property
    def transactions(self) -> int:
        """Group commits so far."""
        if self._child is not None:
            return self._child.transactions
        return self._committer.transactions

    async def open(self, prepare: Callable[[Conn], None]) -> None:
        """Starts the writer, which first runs ``prepare`` (the schema) in a transaction
        of its own; its error is raised here. Idempotent."""
        if self._open:
            return
        if self._child is not None:
            await self._child.open(prepare)
        else:
            loop = asyncio.get_running_loop()
            ready: asyncio.Future[None] = loop.create_future()
            writer = threading.Thread(
                target=self._write_loop, args=(prepare, ready, loop), daemon=True
            )
            writer.start()
            await ready
            self._writer = writer
        self._open = True
        self._readers = ThreadPoolExecutor(_READ_THREADS, initializer=self._open_reader)

    async def close(self) -> None:
        readers = self._readers
        if not self._open or readers is None:
            return
        self._open, self._readers = False, None
        if self._child is not None:
            await self._child.close()
        elif self._writer is not None:
            self._queue.put(None)  # behind every write already queued: those commit first
            await asyncio.to_thread(self._writer.join)
            self._writer = None
        await asyncio.to_thread(readers.shutdown)
        for conn in self._read_conns:
            conn.close()
        self._read_conns.clear()

    async def write(self, fn: Callable[[Conn], T], rows: int = 1) -> T:
        """Runs ``fn`` on the writer's connection in the next group commit; returns its
        result once committed. ``rows``: about how many rows it writes. In a writer
        process, ``fn`` and what it returns or raises must pickle."""
        if not self._open:
            raise RuntimeError("SqliteStore is not open")
        if self._child is not None:
            return await self._child.write(fn, rows)  # type: ignore[no-any-return]
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
        committer = self._committer
        try:
            committer.open(prepare)
        except Exception as e:
            committer.close()
            loop.call_soon_threadsafe(resolve_future, ready, False, e)
            return
        loop.call_soon_threadsafe(resolve_future, ready, True, None)
        while True:
            batch, end = take_batch(self._queue.get, self._queue.empty)
            if batch:
                results = committer.run_batch(batch)
                for op, (ok, value) in zip(batch, results, strict=True):
                    with contextlib.suppress(RuntimeError):  # the caller's loop is closed
                        op.loop.call_soon_threadsafe(resolve_future, op.future, ok, value)
            committer.between_batches()
            if end:
                committer.close()
                return

    # --- the read pool ----------------------------------------------------------

    def _open_reader(self) -> None:
        self._local.conn = connect(self.path)
        self._local.conn.execute("PRAGMA query_only = ON")
        self._read_conns.append(self._local.conn)

    def _snapshot(self, fn: Callable[[Conn], T]) -> T:
        conn = self._local.conn
        conn.execute("BEGIN")  # one consistent view for every query of fn
        try:
            return fn(conn)
        finally:
            conn.execute("COMMIT")
