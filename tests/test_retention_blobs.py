"""Expired runs' output blobs follow them (``coordinator/retention``), on a real SQLite
store and real blob stores: deleted with the run, a newer run's kept (a directory
store), and kept to try again when the blob store fails, within a bound (a bucket of
the session's S3-compatible service, taken away and given back)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from deploy.versitygw import VersityGateway
from shardcron.blobs.files import FileBlobStore
from shardcron.blobs.layout import output_part_key, output_prefix, result_key, results_prefix
from shardcron.blobs.s3 import S3BlobStore
from shardcron.blobs.store import BlobStore
from shardcron.client.types import Run, RunState
from shardcron.coordinator.retention import MAX_PENDING_BLOBS, OrphanWalk, RetentionSweeper
from shardcron.coordinator.sqlite.store import SqliteStore
from shardcron.coordinator.store import JobStore
from tests.support.blob_stores import gateway_options
from tests.support.cassandra import cassandra_backend
from tests.support.store_builders import CONTRACT_CONFIG, create, make_job, make_run

OWNER = "acme"
NOW = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)
RETENTION = timedelta(hours=1)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    s = SqliteStore(tmp_path / "db", shard_count=4, bucket_seconds=60, retention=RETENTION)
    await s.open()
    yield s
    await s.close()


@pytest.fixture
async def blobs(tmp_path: Path) -> AsyncIterator[FileBlobStore]:
    b = FileBlobStore(tmp_path / "blobs")
    await b.open()
    yield b
    await b.close()


class Bucket:
    """A bucket of its own on the session's gateway, which a test can take away (every
    call then fails) and give back: on its POSIX backend a bucket is a directory."""

    def __init__(self, gateway: VersityGateway) -> None:
        self.name = f"ret-{uuid.uuid4().hex[:12]}"
        self.dir = gateway.data_dir / self.name
        self.away = gateway.data_dir.parent / f"{self.name}-away"
        self.dir.mkdir()
        self.store = S3BlobStore(self.name, "", gateway_options(gateway))

    def take_away(self) -> None:
        self.dir.rename(self.away)

    def give_back(self) -> None:
        self.away.rename(self.dir)


@pytest.fixture
async def bucket(s3_gateway: VersityGateway) -> AsyncIterator[Bucket]:
    b = Bucket(s3_gateway)
    await b.store.open()
    yield b
    if b.away.exists():
        b.give_back()
    await b.store.close()


async def runs_with_parts(store: SqliteStore, blobs: BlobStore) -> tuple[list[Run], Run]:
    """Two runs ended long ago and one still running, each with parts of two attempts."""
    job = await create(store, make_job(OWNER))
    long_ago = NOW - 2 * RETENTION
    old = [
        make_run(job, due_at=long_ago, state=RunState.SUCCEEDED, ended_at=long_ago, fire_key=k)
        for k in ("a", "b")
    ]
    running = make_run(job, due_at=NOW, state=RunState.RUNNING, fire_key="c")
    await store.commit(runs=[*old, running])
    for run in [*old, running]:
        for token in (1, 2):
            await blobs.put(output_part_key(OWNER, run.id, token, "stdout", 0), b"out")
        await blobs.put(result_key(OWNER, run.id, "report.json"), b"{}")
    return old, running


def counting_sweeper(
    store: SqliteStore, blobs: BlobStore, max_pending: int = MAX_PENDING_BLOBS
) -> tuple[RetentionSweeper, list[str]]:
    """A sweeper at ``NOW`` and the outcomes it counts, in a list."""
    failures: list[str] = []
    sweeper = RetentionSweeper(
        store,
        interval=RETENTION,
        clock=lambda: NOW,
        blobs=blobs,
        on_blob_failure=failures.append,
        max_pending=max_pending,
    )
    return sweeper, failures


async def keys_of(blobs: BlobStore, run: Run) -> list[str]:
    """The run's output parts and result files."""
    keys = [e.key for e in (await blobs.list(output_prefix(OWNER, run.id))).items]
    return keys + [e.key for e in (await blobs.list(results_prefix(OWNER, run.id))).items]


async def test_a_sweep_deletes_the_expired_runs_output_and_keeps_the_others(
    store: SqliteStore, blobs: FileBlobStore
) -> None:
    old, running = await runs_with_parts(store, blobs)
    sweeper = RetentionSweeper(store, interval=RETENTION, clock=lambda: NOW, blobs=blobs)

    assert await sweeper.sweep() == 2
    for run in old:
        assert await keys_of(blobs, run) == []  # every attempt's parts, its result files
    assert len(await keys_of(blobs, running)) == 3
    assert sweeper.pending == {}


async def test_a_failing_blob_store_keeps_the_prefixes_for_the_next_sweep(
    store: SqliteStore, bucket: Bucket
) -> None:
    blobs = bucket.store
    old, running = await runs_with_parts(store, blobs)
    sweeper, failures = counting_sweeper(store, blobs)
    bucket.take_away()

    assert await sweeper.sweep() == 2  # the job store's sweep went on
    assert await store.get_runs([r.id for r in old]) == {}
    assert failures == ["failed"]  # one call failed; the rest waited
    assert sorted(sweeper.pending) == sorted(output_prefix(OWNER, r.id) for r in old)

    bucket.give_back()
    assert await sweeper.sweep() == 0  # no run expired this time: the kept ones go
    assert sweeper.pending == {}
    for run in old:
        assert await keys_of(blobs, run) == []
    assert len(await keys_of(blobs, running)) == 3


async def test_the_prefixes_kept_are_bounded_and_those_dropped_counted(
    store: SqliteStore, bucket: Bucket
) -> None:
    old, _ = await runs_with_parts(store, bucket.store)
    sweeper, failures = counting_sweeper(store, bucket.store, max_pending=1)
    bucket.take_away()

    assert await sweeper.sweep() == 2
    assert sorted(failures) == ["dropped", "failed"]
    # runs are swept in id order, and the oldest kept is dropped first
    assert list(sweeper.pending) == [output_prefix(OWNER, max(r.id for r in old))]


async def orphans_and_kept(store: JobStore, blobs: BlobStore) -> tuple[list[Run], list[Run]]:
    """Blobs of runs the store no longer has (due long ago: gone), and of runs it keeps
    (due long ago but still stored: a dead letter, a paused job's; or due recently and
    never stored yet: being created)."""
    job = await create(store, make_job(OWNER))
    long_ago = NOW - 3 * RETENTION
    gone = [make_run(job, due_at=long_ago, fire_key=f"gone-{i}") for i in range(3)]
    dead = make_run(
        job, due_at=long_ago, state=RunState.FAILED, ended_at=long_ago, fire_key="dead",
        dead_letter=True,
    )  # fmt: skip
    pending = make_run(job, due_at=long_ago, fire_key="paused")
    recent = make_run(job, due_at=NOW - RETENTION / 2, fire_key="recent")
    await store.commit(runs=[dead, pending])
    for run in [*gone, dead, pending, recent]:
        await blobs.put(output_part_key(OWNER, run.id, 1, "stdout", 0), b"out")
        await blobs.put(result_key(OWNER, run.id, "report.json"), b"{}")
    return gone, [dead, pending, recent]


@pytest.fixture(params=["sqlite", "cassandra"])
async def jobs(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[JobStore]:
    """A real job store of either kind (Cassandra: the session's node)."""
    if request.param == "sqlite":
        s: JobStore = SqliteStore(tmp_path / "db", shard_count=4, bucket_seconds=60)
    else:
        s = cassandra_backend(CONTRACT_CONFIG)(tmp_path)()
    await s.open()
    yield s
    await s.close()


async def test_the_orphan_walk_deletes_the_blobs_of_runs_no_longer_stored(
    jobs: JobStore, blobs: FileBlobStore
) -> None:
    """Cassandra's rows expire by TTL and name no run: the walk finds their blobs by
    listing, asks the store, and deletes only those of runs due before the retention
    that the store no longer has; a key not of the layout is left alone."""
    gone, kept = await orphans_and_kept(jobs, blobs)
    await blobs.put("output/acme/not-a-run-id/1", b"?")
    walk = OrphanWalk(jobs, blobs, RETENTION, pages=1)
    deleted = 0
    for _ in range(6):  # a page per step: a whole walk spans steps, then starts again
        deleted += await walk.step(NOW)
    assert deleted == 2 * len(gone)  # each run's output prefix and results prefix
    for run in gone:
        assert await keys_of(blobs, run) == []
    for run in kept:
        assert len(await keys_of(blobs, run)) == 2
    assert await blobs.get("output/acme/not-a-run-id/1") == b"?"


async def test_a_sweep_walks_for_orphans_when_given_the_retention(
    store: SqliteStore, blobs: FileBlobStore
) -> None:
    gone, kept = await orphans_and_kept(store, blobs)
    sweeper = RetentionSweeper(
        store, interval=RETENTION, clock=lambda: NOW, blobs=blobs, retention=RETENTION
    )
    await sweeper.sweep()
    assert all([await keys_of(blobs, r) == [] for r in gone])
    assert all([len(await keys_of(blobs, r)) == 2 for r in kept])
    without = RetentionSweeper(store, interval=RETENTION, clock=lambda: NOW, blobs=blobs)
    assert without.orphans is None  # no retention: no walk
