"""The SQLite store beyond the contract: its schema and pragmas, and its group commit.

The rules every store keeps are in tests/test_store_contract.py; these are how the
SQLite store keeps them (one writer, transactions shared by concurrent callers).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from shardcron.client.types import OutputChunk
from shardcron.coordinator.sqlite import committer
from shardcron.coordinator.sqlite.store import SqliteStore
from tests.support.store_builders import CONTRACT_CONFIG, joined, make_job, make_run


async def test_sqlite_schema_and_pragmas(tmp_path: Path) -> None:
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


async def test_a_file_made_before_runs_recorded_usage_gets_the_columns_on_open(
    tmp_path: Path,
) -> None:
    """The usage columns came after files were made: opening such a file adds them; its
    runs read with no usage, and new ones keep theirs."""
    from shardcron.client.types import RunState, RunUsage
    from shardcron.coordinator.store import NewJob

    path = tmp_path / "old.db"
    store = SqliteStore(path, **CONTRACT_CONFIG)
    await store.open()
    job = make_job()
    old = make_run(job, state=RunState.SUCCEEDED)
    await store.create_jobs([NewJob(job=job, runs=[old])])
    await store.close()
    with sqlite3.connect(path) as conn:  # the runs table as files had it then
        for column in ("peak_memory_bytes", "cpu_micros", "limits_enforced"):
            conn.execute(f"ALTER TABLE runs DROP COLUMN {column}")

    reopened = SqliteStore(path, **CONTRACT_CONFIG)
    await reopened.open()
    try:
        assert (await reopened.get_run(job.owner, old.id)).usage is None
        used = make_run(job, attempt=2, state=RunState.FAILED, usage=RunUsage(cpu_seconds=0.5))
        await reopened.commit(runs=[used])
        assert (await reopened.get_run(job.owner, used.id)).usage == used.usage
    finally:
        await reopened.close()


async def test_a_file_made_before_runs_recorded_lateness_gets_the_columns_on_open(
    tmp_path: Path,
) -> None:
    """The lateness columns came after files were made: opening such a file adds them;
    its runs read with no lateness, and new ones keep theirs."""
    from shardcron.client.types import LateReason, RunLateness, RunState
    from shardcron.coordinator.store import NewJob

    path = tmp_path / "old.db"
    store = SqliteStore(path, **CONTRACT_CONFIG)
    await store.open()
    job = make_job()
    old = make_run(job, state=RunState.SUCCEEDED)
    await store.create_jobs([NewJob(job=job, runs=[old])])
    await store.close()
    with sqlite3.connect(path) as conn:  # the runs table as files had it then
        for column in ("late_reason", "late_text", "late_waited_micros"):
            conn.execute(f"ALTER TABLE runs DROP COLUMN {column}")

    reopened = SqliteStore(path, **CONTRACT_CONFIG)
    await reopened.open()
    try:
        assert (await reopened.get_run(job.owner, old.id)).lateness is None
        paused = RunLateness(reason=LateReason.PAUSED, text="paused")
        late = make_run(job, attempt=2, state=RunState.SKIPPED, lateness=paused)
        await reopened.commit(runs=[late])
        assert (await reopened.get_run(job.owner, late.id)).lateness == paused
    finally:
        await reopened.close()


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


async def test_output_floods_leave_a_bounded_file_that_gives_freed_pages_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 10 item 4: 60 MiB output messages grew the file and its WAL by their size,
    for good. Now bytes past the cap are never written, the WAL is truncated after a
    checkpoint, and freed pages go back to the file system."""
    monkeypatch.setattr(committer, "_VACUUM_EVERY_SECONDS", 0.0)
    path = tmp_path / "s.db"
    store = SqliteStore(path, output_cap_bytes=1 << 20)
    await store.open()
    line = b"y" * 99 + b"\n"
    for i in range(8):  # eight 16 MiB pieces of two runs: each run keeps its last 1 MiB
        flood = line * ((16 << 20) // len(line))
        await store.append_output([OutputChunk(run_id=f"r{i % 2}", offset=0, data=flood)])
    await store.append_output([OutputChunk(run_id="r0", offset=0, data=b"end\n")])
    offset, kept = joined(await store.read_output("r0", offset=0, limit=4 << 20))
    assert len(kept) <= 1 << 20 and kept.endswith(b"y\nend\n") and kept.startswith(b"y")
    files = sum(p.stat().st_size for p in tmp_path.iterdir() if p.name.startswith("s.db"))
    assert files < 16 << 20, files
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA auto_vacuum").fetchone() == (2,)  # INCREMENTAL
        assert conn.execute("PRAGMA freelist_count").fetchone()[0] < 64
    await store.close()


async def test_a_store_file_made_without_auto_vacuum_is_converted_on_open(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:  # an existing file: tables, auto_vacuum NONE
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        assert conn.execute("PRAGMA auto_vacuum").fetchone() == (0,)
    store = SqliteStore(path, **CONTRACT_CONFIG)
    await store.open()
    await store.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA auto_vacuum").fetchone() == (2,)


async def test_a_file_made_before_runs_recorded_their_outputs_digest_gets_the_columns(
    tmp_path: Path,
) -> None:
    """The output digest and truncation columns came after files were made: opening such
    a file adds them; its runs read them as empty, and new ones keep theirs."""
    from shardcron.client.types import RunState
    from shardcron.coordinator.store import NewJob

    path = tmp_path / "old.db"
    store = SqliteStore(path, **CONTRACT_CONFIG)
    await store.open()
    job = make_job()
    old = make_run(job, state=RunState.SUCCEEDED)
    await store.create_jobs([NewJob(job=job, runs=[old])])
    await store.close()
    with sqlite3.connect(path) as conn:  # the runs table as files had it then
        for column in ("output_sha256", "output_truncated"):
            conn.execute(f"ALTER TABLE runs DROP COLUMN {column}")

    reopened = SqliteStore(path, **CONTRACT_CONFIG)
    await reopened.open()
    try:
        got = await reopened.get_run(job.owner, old.id)
        assert (got.output_sha256, got.output_truncated) == ("", "")
        cut = make_run(
            job, attempt=2, state=RunState.SUCCEEDED, output_sha256="ab" * 32,
            output_truncated="blob store unavailable for 3 s",
        )  # fmt: skip
        await reopened.commit(runs=[cut])
        assert await reopened.get_run(job.owner, cut.id) == cut
    finally:
        await reopened.close()
