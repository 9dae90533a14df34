"""Rows a newer version or a corruption left behind, written straight into a store.

``spoil`` overwrites one column of one job or run row with raw SQL or CQL, past the
row codec, so a test can check that reads meet the row the way the store holds it.
"""

from __future__ import annotations

import asyncio
import sqlite3

from shardcron.coordinator.cassandra.store import CassandraStore
from shardcron.coordinator.sqlite.store import SqliteStore
from shardcron.coordinator.store import JobStore


async def spoil(store: JobStore, table: str, row_id: str, column: str, value: str) -> None:
    """Sets ``column`` of the ``table`` (``jobs`` or ``runs``) row ``row_id`` to ``value``."""
    assert table in ("jobs", "runs") and column.isidentifier()
    if isinstance(store, SqliteStore):
        with sqlite3.connect(store.path) as conn:
            conn.execute(f"UPDATE {table} SET {column} = ? WHERE id = ?", (value, row_id))
        return
    assert isinstance(store, CassandraStore)
    session, ks = store._session, store.keyspace
    assert session is not None

    def write() -> None:
        key, args = "id = %s", [row_id]
        if table == "runs":  # runs are partitioned by job
            [(job_id,)] = session.execute(
                f"SELECT job_id FROM {ks}.runs_by_id WHERE id = %s", [row_id]
            )
            key, args = "job_id = %s AND id = %s", [job_id, row_id]
        session.execute(f"UPDATE {ks}.{table} SET {column} = %s WHERE {key}", [value, *args])

    await asyncio.to_thread(write)
