"""Cassandra store: a poller's writes apply as of the time it last confirmed it owns
the shard (``commit(write_time=...)``), so a commit that lands late, because its
process froze in the middle of it, loses to everything the shard's next owner wrote.

SQLite has one writer process and needs no such rule; this is Cassandra's alone.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from shardcron.client.types import RunState
from shardcron.coordinator.cassandra.store import CassandraStore
from shardcron.coordinator.ids import utcnow
from shardcron.coordinator.store import JobProgress
from tests.support.store_builders import ALICE, create, make_job, make_run


@pytest.fixture
def store(cassandra_store: CassandraStore) -> CassandraStore:
    return cassandra_store


async def test_a_late_commit_of_a_deposed_owner_loses_to_the_next_owner(
    store: CassandraStore,
) -> None:
    job = await create(store, make_job())
    run = make_run(job)
    await store.commit(runs=[run], due=[run])
    deposed_at = utcnow()  # the old owner's last confirmation
    taken_at = deposed_at + timedelta(seconds=3)  # its session expired; the shard moved
    mine = dataclasses.replace(run, state=RunState.LEASED, worker_id="w2", lease_token=2 << 32 | 1)
    await store.commit(
        runs=[mine],
        progress=[JobProgress(job_id=job.id, next_fire_key="next-owner", consecutive_failures=0)],
        write_time=taken_at,
    )
    # The old owner's commit, decided before it froze, reaches Cassandra only now.
    stale = dataclasses.replace(run, state=RunState.LEASED, worker_id="w1", lease_token=1 << 32 | 7)
    await store.commit(
        runs=[stale],
        progress=[JobProgress(job_id=job.id, next_fire_key="old-owner", consecutive_failures=3)],
        write_time=deposed_at,
    )
    assert await store.get_run(ALICE, run.id) == mine
    got = await store.get_job(ALICE, job.id)
    assert (got.next_fire_key, got.consecutive_failures) == ("next-owner", 0)


async def test_one_owners_commits_apply_in_the_order_of_their_write_times(
    store: CassandraStore,
) -> None:
    job = await create(store, make_job())
    run = make_run(job)
    t = utcnow()
    leased = dataclasses.replace(run, state=RunState.LEASED, worker_id="w", lease_token=5)
    await store.commit(runs=[leased], due=[run], write_time=t)
    done = dataclasses.replace(leased, state=RunState.SUCCEEDED, ended_at=t)
    await store.commit(
        runs=[done],
        progress=[JobProgress(job_id=job.id, consecutive_failures=0, next_fire_key="f2")],
        write_time=t + timedelta(microseconds=1),
    )
    assert await store.get_run(ALICE, run.id) == done
    assert (await store.get_job(ALICE, job.id)).next_fire_key == "f2"
