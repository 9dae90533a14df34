"""Cassandra store: a phase's writes go as bounded unlogged batches per replica set.

The grouping itself is a pure function (``batches.phase_batches``); against the real
server, calls whose writes fill many batches, and a partition bigger than one
batch, are written whole: no batch reaches Cassandra's size limit.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from shardcron.client.types import HandlerTask, JobSpec, RunState
from shardcron.coordinator.cassandra.batches import BATCH_BYTES, BATCH_STATEMENTS, phase_batches
from shardcron.coordinator.cassandra.store import CassandraStore
from shardcron.coordinator.store import NewJob
from tests.support.store_builders import (
    ALICE,
    T0,
    create,
    make_job,
    make_run,
)


def _partition(replicas: str, name: str, n: int, size: int) -> list[tuple[object, int]]:
    return [((replicas, name, i), size) for i in range(n)]


def _replicas(stmt: object) -> str:
    return stmt[0]  # type: ignore[index]


def test_partitions_held_by_the_same_replicas_share_a_batch() -> None:
    parts = [_partition("ab", "p1", 2, 100), _partition("bc", "p2", 1, 100)]
    parts.append(_partition("ab", "p3", 3, 100))
    batches = phase_batches(parts, _replicas)  # type: ignore[arg-type]
    assert sorted(len(b) for b in batches) == [1, 5]
    assert all(len({_replicas(s) for s in b}) == 1 for b in batches)


def test_batches_stay_bounded_and_keep_a_partition_whole_when_it_fits() -> None:
    parts = [_partition("a", f"p{i}", 3, 1_500) for i in range(40)]
    batches = phase_batches(parts, _replicas)  # type: ignore[arg-type]
    assert sum(len(b) for b in batches) == 120
    for batch in batches:
        assert len(batch) * 1_500 <= BATCH_BYTES
        names = [s[1] for s in batch]  # type: ignore[index]
        assert all(names.count(n) == 3 for n in names)  # no partition cut in two


def test_a_partition_bigger_than_a_batch_is_split() -> None:
    big = _partition("a", "big", BATCH_STATEMENTS * 2 + 1, 10)
    batches = phase_batches([big], _replicas)  # type: ignore[arg-type]
    assert [len(b) for b in batches] == [BATCH_STATEMENTS, BATCH_STATEMENTS, 1]


@pytest.fixture
def store(cassandra_store: CassandraStore) -> CassandraStore:
    return cassandra_store


async def test_a_create_filling_many_batches_is_written_whole(store: CassandraStore) -> None:
    spec = JobSpec(name="big", task=HandlerTask(name="h", payload=b"x" * 3_000))
    jobs = [make_job(spec=spec) for _ in range(300)]  # about 1 MB of job rows
    items = [NewJob(job=job, runs=(make_run(job),)) for job in jobs]
    assert all(created for _, created in await store.create_jobs(items))
    got = await store.get_jobs([j.id for j in jobs])
    assert {j.id for j in jobs} == set(got)
    runs = await store.get_runs([item.runs[0].id for item in items])
    assert len(runs) == len(items)
    due = []
    for shard in range(store.shard_count):
        due += await store.scan_due(
            shard, due_from=T0 - timedelta(hours=1), due_until=T0 + timedelta(hours=1)
        )
    assert {d.run_id for d in due} >= set(runs)


async def test_a_commit_of_one_partition_bigger_than_a_batch_is_written_whole(
    store: CassandraStore,
) -> None:
    job = await create(store, make_job())
    runs = [make_run(job, fire_key=f"k{i}") for i in range(BATCH_STATEMENTS + 50)]
    await store.commit(runs=runs, due=runs)
    leased = [dataclasses.replace(r, state=RunState.LEASED, worker_id="w") for r in runs]
    await store.commit(runs=leased, write_time=None)
    page = await store.list_runs(ALICE, job.id, page_size=1000)
    assert {r.id: r.state for r in page.items} == {r.id: RunState.LEASED for r in runs}
