"""Cassandra store: a finished request leaves no cyclic garbage. Each request left its
ResponseFuture tied to itself (through the callbacks it holds and its timeout timer),
rows and all, for the cyclic collector: under a steady 1,000 jobs/s a cluster node's
young collections freed 15,000 such objects at a time, 10-24 ms of CPU each."""

from __future__ import annotations

import gc

import pytest
from cassandra.cluster import ResponseFuture

from shardcron.coordinator.cassandra.store import CassandraStore
from tests.support.store_builders import create, make_job

ROUNDS = 50


@pytest.fixture
def store(cassandra_store: CassandraStore) -> CassandraStore:
    return cassandra_store


async def test_requests_leave_no_cyclic_garbage(store: CassandraStore) -> None:
    job = await create(store, make_job())
    await store.get_jobs([job.id])  # the statement prepared, the connections warm
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what the collector finds unreachable is kept to count
    try:
        for _ in range(ROUNDS):
            assert (await store.get_jobs([job.id]))[job.id].id == job.id
        gc.collect()
        left = sum(1 for o in gc.garbage if isinstance(o, ResponseFuture))
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert left < ROUNDS // 10, f"{left} of {ROUNDS} requests were cyclic garbage"
