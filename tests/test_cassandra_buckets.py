"""A call's due rows name each (shard, bucket) of ``shard_buckets`` once: a create of
many jobs in one shard plans one bucket row, not one per run (``WritePlanner``), and a
later call of this process, once that row is written, plans none. A scan over a few
buckets reads them without that index; a longer one goes by it. A create writes its
due rows first, then each job with its runs, one partition key in one batch."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from shardcron.client.types import HandlerTask, JobSpec
from shardcron.coordinator.cassandra.reads import DIRECT_BUCKETS
from shardcron.coordinator.cassandra.store import CassandraStore
from shardcron.coordinator.cassandra.writes import P_DUE, Writes, encode_runs
from shardcron.coordinator.ids import bucket_for
from shardcron.coordinator.store import NewJob
from tests.support.cassandra_sent import sent_batches
from tests.support.store_builders import T0, make_job, make_run


def _statements(writes: Writes, table: str) -> int:
    return sum(
        len(p) for (phase, key), p in writes.parts.items() if (phase, key[0]) == (P_DUE, table)
    )


async def test_a_call_plans_each_bucket_row_once(cassandra_store: CassandraStore) -> None:
    planner = cassandra_store._planner
    runs = [make_run(make_job(shard=3)) for _ in range(50)]
    writes = Writes()
    await planner.put_runs(writes, runs, encode_runs(runs), runs, known_new=True)
    assert _statements(writes, "due_runs") == 50
    assert _statements(writes, "shard_buckets") == 1
    for done in writes.after:  # as once the call's writes landed
        done()
    again = [make_run(make_job(shard=3)) for _ in range(5)]
    later = Writes()
    await planner.put_runs(later, again, encode_runs(again), again, known_new=True)
    assert _statements(later, "due_runs") == 5
    assert _statements(later, "shard_buckets") == 0


async def test_a_scan_of_a_few_buckets_reads_them_without_the_index(
    cassandra_store: CassandraStore,
) -> None:
    """Shown with the index row taken away: a scan within the run's bucket still finds
    it, a scan of several buckets (which asks the index) does not."""
    job = make_job(shard=3)
    run = make_run(job, due_at=T0 + timedelta(seconds=90))  # the second bucket from T0
    await cassandra_store.create_jobs([NewJob(job=job, runs=[run])])
    bucket = bucket_for(run.due_at, cassandra_store.bucket_seconds)
    assert cassandra_store._session is not None
    cassandra_store._session.execute(
        "DELETE FROM shard_buckets WHERE shard = %s AND bucket = %s", (3, bucket)
    )

    async def scan(start: datetime, seconds: int) -> list[str]:
        until = start + timedelta(seconds=seconds)
        entries = await cassandra_store.scan_due(
            3, due_from=start, due_until=until, after=None, limit=10
        )
        return [e.run_id for e in entries]

    start = T0 + timedelta(seconds=60)  # the run's bucket
    assert await scan(start, DIRECT_BUCKETS * 60 - 1) == [run.id]
    assert await scan(T0, (DIRECT_BUCKETS + 2) * 60) == []


async def test_a_create_writes_its_due_rows_then_each_job_with_its_runs_in_one_batch(
    cassandra_store: CassandraStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job and its runs are one partition key, so one mutation of a batch: they land
    together, once the runs' due rows are there (writes.py)."""
    flushes = sent_batches(cassandra_store, monkeypatch)
    job = make_job(shard=3)
    run = make_run(job, due_at=T0)
    await cassandra_store.create_jobs([NewJob(job=job, runs=[run])])
    [batches] = flushes
    tables = [{table for table, _ in batch} for batch in batches]
    assert "due_runs" in tables[0] and not tables[0] & {"runs", "jobs"}
    key = job.id.encode()
    [together] = [b for b in batches if ("jobs", key) in b]
    assert ("runs", key) in together
    assert batches.index(together) > 0
    entries = await cassandra_store.scan_due(
        3, due_from=T0, due_until=T0 + timedelta(seconds=1), after=None, limit=10
    )
    assert [e.run_id for e in entries] == [run.id]


async def test_a_job_whose_runs_do_not_fit_a_batch_beside_it_has_them_with_its_due_rows(
    cassandra_store: CassandraStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    flushes = sent_batches(cassandra_store, monkeypatch)
    spec = JobSpec(name="big", task=HandlerTask(name="h", payload=b"x" * 12_000))
    job = make_job(shard=3, spec=spec)
    runs = [make_run(job, due_at=T0, fire_key=f"k{i}") for i in range(60)]  # ~16 KB
    await cassandra_store.create_jobs([NewJob(job=job, runs=runs)])
    [batches] = flushes
    key = job.id.encode()
    with_runs = [i for i, b in enumerate(batches) if ("runs", key) in b]
    [with_job] = [i for i, b in enumerate(batches) if ("jobs", key) in b]
    assert with_runs and max(with_runs) < with_job
    stored = await cassandra_store.get_runs([r.id for r in runs])
    assert set(stored) == {r.id for r in runs}
