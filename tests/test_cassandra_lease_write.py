"""Cassandra store: a run stored PENDING and written LEASED is written as its lease, the
columns a lease changes (``writes.LEASE_COLUMNS``) and no others; the run reads back
whole, as the poller holds it, and its final record is written whole, so every cell of
the row gets its TTL.

SQLite updates a row in place; this is Cassandra's alone.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from shardcron.client.types import LateReason, RunLateness, RunState
from shardcron.coordinator.cassandra.store import CassandraStore
from shardcron.coordinator.ids import utcnow
from tests.support.store_builders import ALICE, create, make_job, make_run


@pytest.fixture
def store(cassandra_store: CassandraStore) -> CassandraStore:
    return cassandra_store


def _write_times(store: CassandraStore, job_id: str, run_id: str) -> dict[str, int]:
    session = store._cql._session
    assert session is not None
    row = session.execute(
        "SELECT WRITETIME(state), WRITETIME(worker_id), WRITETIME(late_text),"
        " WRITETIME(due_at), WRITETIME(fire_key), WRITETIME(created_at)"
        " FROM runs WHERE job_id = %s AND id = %s",
        (job_id, run_id),
    ).one()
    names = ("state", "worker_id", "late_text", "due_at", "fire_key", "created_at")
    return dict(zip(names, row, strict=True))


async def test_a_lease_writes_the_lease_columns_and_the_run_reads_back_whole(
    store: CassandraStore,
) -> None:
    job = await create(store, make_job())
    run = make_run(job)
    t = utcnow()
    await store.commit(runs=[run], due=[run], write_time=t)
    leased = dataclasses.replace(
        run,
        state=RunState.LEASED,
        worker_id="w1",
        lease_token=7,
        lease_expires_at=t + timedelta(seconds=30),
        lateness=RunLateness(
            reason=LateReason.NO_FREE_SLOT, text="waited", waited=timedelta(seconds=2)
        ),
    )
    later = t + timedelta(seconds=1)
    await store.commit(runs=[leased], write_time=later)
    assert await store.get_run(ALICE, run.id) == leased
    times = _write_times(store, job.id, run.id)
    lease_us = int(later.timestamp() * 1_000_000)
    create_us = int(t.timestamp() * 1_000_000)
    assert times["state"] == times["worker_id"] == times["late_text"] == lease_us
    assert times["due_at"] == times["fire_key"] == times["created_at"] == create_us
    # a lease again (after a refusal, the row says LEASED): written whole
    again = dataclasses.replace(leased, worker_id="w2", lease_token=8)
    end = later + timedelta(seconds=1)
    await store.commit(runs=[again], write_time=end)
    assert await store.get_run(ALICE, run.id) == again
    assert _write_times(store, job.id, run.id)["due_at"] == int(end.timestamp() * 1_000_000)
