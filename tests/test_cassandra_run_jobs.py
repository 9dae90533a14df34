"""Cassandra store: runs are read by id through the jobs the store has seen them under
(``run_jobs``); a store that never saw a run finds its job in ``runs_by_id``."""

from __future__ import annotations

from shardcron.coordinator.cassandra.store import CassandraStore
from tests.support.cassandra import cassandra_node
from tests.support.store_builders import CONTRACT_CONFIG, create, make_job, make_run


async def test_runs_are_found_by_id_by_a_store_that_never_saw_them(
    cassandra_store: CassandraStore,
) -> None:
    store = cassandra_store
    job = await create(store, make_job())
    runs = [make_run(job, fire_key=f"k{i}") for i in range(3)]
    await store.commit(runs=runs, due=runs)
    fresh = cassandra_node().store(store.keyspace, **CONTRACT_CONFIG)  # knows no run's job
    await fresh.open()
    try:
        got = await fresh.get_runs([r.id for r in runs] + [make_run(job, fire_key="none").id])
    finally:
        await fresh.close()
    assert got == {r.id: r for r in runs}
