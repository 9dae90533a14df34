"""Runs the JobStore contract suite (tests/store_contract.py) against every backend.

A backend is one entry of ``BACKENDS``: a name and a function that, given the test's
``tmp_path``, returns a factory making a new (unopened) store on one location — the
same location each call, so a test can close a store and reopen it. Backends that need
a server call ``pytest.skip`` from that function when the server is absent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import cassandra_fixtures
import pytest
from store_contract import *  # noqa: F403 - collects the contract tests into this module
from store_contract import CONTRACT_CONFIG

from shardcron.coordinator.sqlite.store import SqliteStore
from shardcron.coordinator.store import JobStore

StoreFactory = Callable[[], JobStore]


def sqlite_backend(tmp_path: Path) -> StoreFactory:
    path = tmp_path / "shardcron.db"
    return lambda: SqliteStore(path, **CONTRACT_CONFIG)


# One entry per backend. Cassandra (tests/cassandra_fixtures.py): the node named by
# SHARDCRON_TEST_CASSANDRA, or one started for the session (it fails, never skips, when
# it cannot start); one keyspace per session, its tables truncated before each test.
BACKENDS: dict[str, Callable[[Path], StoreFactory]] = {
    "sqlite": sqlite_backend,
    "cassandra": cassandra_fixtures.backend(CONTRACT_CONFIG),
}
# Stops the session's Cassandra at the end, if a cassandra test started one.
cassandra_session_cleanup = cassandra_fixtures.cassandra_session_cleanup


@pytest.fixture(params=list(BACKENDS))
async def store_factory(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[Callable[[], Awaitable[JobStore]]]:
    make = BACKENDS[request.param](tmp_path)
    made: list[JobStore] = []

    async def open_store() -> JobStore:
        store = make()
        made.append(store)
        await store.open()
        return store

    yield open_store
    for store in reversed(made):
        await store.close()


@pytest.fixture
async def store(store_factory: Callable[[], Awaitable[JobStore]]) -> JobStore:
    return await store_factory()


# --------------------------------------------------------------------------- SQLite only


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

    from store_contract import make_job

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

    from store_contract import make_job, make_run

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
