"""The SQLite store beyond the contract: its schema and pragmas, and its group commit.

The rules every store keeps are in tests/test_store_contract.py; these are how the
SQLite store keeps them (one writer, transactions shared by concurrent callers).
"""

from __future__ import annotations

from pathlib import Path

from shardcron.coordinator.sqlite.store import SqliteStore
from tests.support.store_builders import CONTRACT_CONFIG, make_job, make_run


async def test_sqlite_schema_and_pragmas(tmp_path: Path) -> None:
    import sqlite3

    store = SqliteStore(tmp_path / "s.db", **CONTRACT_CONFIG)
    await store.open()
    await store.close()
    conn = sqlite3.connect(tmp_path / "s.db")
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert conn.execute("SELECT version FROM schema_version").fetchall() == [(1,)]
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"jobs", "runs", "due_runs", "run_output", "shard_cursors"} <= tables
    conn.close()
    again = SqliteStore(tmp_path / "s.db", **CONTRACT_CONFIG)
    await again.open()  # an existing schema is kept, not re-created
    await again.close()


async def test_sqlite_group_commit_shares_transactions(tmp_path: Path) -> None:
    import asyncio

    from shardcron.coordinator.store import NewJob

    store = SqliteStore(tmp_path / "g.db", **CONTRACT_CONFIG)
    await store.open()
    try:
        before = store._transactions
        await asyncio.gather(*(store.create_jobs([NewJob(job=make_job())]) for _ in range(200)))
        assert store._transactions - before < 20  # typically 1 or 2
    finally:
        await store.close()


async def test_sqlite_a_failing_operation_is_undone_alone_within_a_group_commit(
    tmp_path: Path,
) -> None:
    """Its SAVEPOINT is rolled back after it wrote rows; its neighbours still commit."""
    import asyncio
    import dataclasses

    from shardcron.coordinator.store import NewJob

    store = SqliteStore(tmp_path / "s.db", **CONTRACT_CONFIG)
    await store.open()
    try:
        taken, before, after, fresh = make_job(), make_job(), make_job(), make_job()
        await store.create_jobs([NewJob(job=taken)])
        clash = dataclasses.replace(make_job(), id=taken.id)  # fails after `fresh` is written
        results = await asyncio.gather(
            store.create_jobs([NewJob(job=before)]),
            store.create_jobs([NewJob(job=fresh, runs=[make_run(fresh)]), NewJob(job=clash)]),
            store.create_jobs([NewJob(job=after)]),
            return_exceptions=True,
        )
        assert isinstance(results[1], Exception) and not isinstance(results[0], Exception)
        got = await store.get_jobs([before.id, fresh.id, after.id, taken.id])
        assert set(got) == {before.id, after.id, taken.id}
        assert await store.get_runs([make_run(fresh).id]) == {}
    finally:
        await store.close()
