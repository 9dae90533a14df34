"""The writing connection of one SQLite file and its group commits, as the writer
thread and the writer process (``writer_process``) both run them (``group_commit``'s
docstring says how writes flow)."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

Conn = sqlite3.Connection

_MAX_BATCH_ROWS = 50_000  # a group commit stops taking callers past this many rows
_WAL_LIMIT_BYTES = 64 << 20  # the WAL file is truncated back to this after a checkpoint
_VACUUM_EVERY_SECONDS = 10.0
_VACUUM_PAGES = 4096  # pages freed per incremental vacuum: bounds the pause it makes
_INCREMENTAL = 2  # PRAGMA auto_vacuum's value for INCREMENTAL


def connect(path: str) -> Conn:
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


def take_batch(get: Callable[[], Op | None], empty: Callable[[], bool]) -> tuple[list[Op], bool]:
    """Every write waiting now (at least one: ``get`` blocks), up to ``_MAX_BATCH_ROWS``
    rows; and whether the end marker (None) was reached."""
    batch: list[Op] = []
    rows = 0
    op = get()
    while op is not None:
        batch.append(op)
        rows += op.rows
        if rows >= _MAX_BATCH_ROWS or empty():
            return batch, False
        op = get()
    return batch, True


class Op(Protocol):
    fn: Callable[[Conn], Any]
    rows: int


class Committer:
    """The writing connection and its group commits: what the writer thread, or the
    writer process (``writer_process``), runs."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.transactions = 0  # group commits so far
        self._conn: Conn | None = None
        self._next_vacuum = time.monotonic() + _VACUUM_EVERY_SECONDS

    def open(self, prepare: Callable[[Conn], None]) -> None:
        """Opens the file in WAL mode and runs ``prepare`` (the schema); raises its error."""
        conn = self._conn = connect(self.path)
        _reclaim_freed_pages(conn)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA journal_size_limit = {_WAL_LIMIT_BYTES}")
        conn.execute("PRAGMA cache_size = -32768")
        prepare(conn)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def run_batch(self, batch: Sequence[Op]) -> list[tuple[bool, Any]]:
        """Runs every write of ``batch`` in one transaction, each in a SAVEPOINT of its
        own, and commits it: per write, (True, its result) or (False, its error)."""
        conn = self._conn
        assert conn is not None
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
        return results

    def between_batches(self) -> None:
        if self._conn is not None and time.monotonic() >= self._next_vacuum:
            self._next_vacuum = time.monotonic() + _VACUUM_EVERY_SECONDS
            _vacuum_step(self._conn)
