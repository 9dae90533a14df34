"""Cassandra store: a poller's commit takes the stored state of the runs it writes from
what the store last wrote or read of them (``run_states``) and reads only the others;
the upsert rule (never back to an earlier state) still holds, also for a run another
store moved on, once this store has read it."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from datetime import timedelta
from typing import Any

import pytest

from shardcron.client.types import RunState
from shardcron.coordinator.cassandra.store import CassandraStore
from shardcron.coordinator.ids import utcnow
from tests.support.cassandra import cassandra_node
from tests.support.store_builders import ALICE, CONTRACT_CONFIG, create, make_job, make_run


@pytest.fixture
def store(cassandra_store: CassandraStore) -> CassandraStore:
    return cassandra_store


@pytest.fixture
def state_reads(store: CassandraStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The run ids whose stored state the store reads before writing them."""
    read: list[str] = []
    cross = store._cql.cross

    async def counting(name: str, by_partition: Mapping[Any, Any]) -> list[Any]:
        if name == "run_states":
            read.extend(rid for ids in by_partition.values() for rid in ids)
        return await cross(name, by_partition)

    monkeypatch.setattr(store._cql, "cross", counting)
    return read


@pytest.fixture
def other(store: CassandraStore) -> Iterator[CassandraStore]:
    """A second store on the same keyspace: another node."""
    yield cassandra_node().store(store.keyspace, **CONTRACT_CONFIG)


async def test_a_poller_commit_reads_no_state_of_runs_its_store_wrote(
    store: CassandraStore, state_reads: list[str]
) -> None:
    job = await create(store, make_job())
    runs = [make_run(job, fire_key=f"k{i}") for i in range(3)]
    await store.commit(runs=runs, due=runs)
    state_reads.clear()
    t = utcnow()
    leased = [
        dataclasses.replace(r, state=RunState.LEASED, worker_id="w", lease_token=i + 1)
        for i, r in enumerate(runs)
    ]
    await store.commit(runs=leased, write_time=t)
    ended = [dataclasses.replace(r, state=RunState.SUCCEEDED, ended_at=t) for r in leased]
    await store.commit(runs=ended, write_time=t + timedelta(microseconds=1))
    assert state_reads == []
    got = await store.get_runs([r.id for r in runs])
    assert got == {r.id: r for r in ended}
    # a replayed commit of an earlier state is still dropped, without a read
    await store.commit(runs=leased[:1], write_time=t + timedelta(microseconds=2))
    assert state_reads == []
    assert await store.get_run(ALICE, runs[0].id) == ended[0]


async def test_a_run_moved_on_by_another_store_and_read_here_is_not_moved_back(
    store: CassandraStore, other: CassandraStore, state_reads: list[str]
) -> None:
    job = await create(store, make_job())
    run = make_run(job)
    t = utcnow()
    leased = dataclasses.replace(run, state=RunState.LEASED, worker_id="w", lease_token=1)
    await store.commit(runs=[leased], due=[run], write_time=t)
    # the shard moved: the next owner ended the run, later
    await other.open()
    try:
        done = dataclasses.replace(leased, state=RunState.SUCCEEDED, ended_at=t)
        await other.commit(runs=[done], write_time=t + timedelta(seconds=1))
    finally:
        await other.close()
    # back here, the run is read before it is written (the scan, a hint, a retry)
    assert (await store.get_runs([run.id]))[run.id] == done
    state_reads.clear()
    running = dataclasses.replace(leased, state=RunState.RUNNING, started_at=t)
    await store.commit(runs=[running], write_time=t + timedelta(seconds=2))
    assert state_reads == []
    assert await store.get_run(ALICE, run.id) == done


async def test_runs_unknown_to_the_store_are_read_and_the_api_always_reads(
    store: CassandraStore, other: CassandraStore, state_reads: list[str]
) -> None:
    job = await create(store, make_job())
    run = make_run(job)
    await other.open()
    try:
        await other.commit(runs=[run], due=[run])  # written by another node's api
    finally:
        await other.close()
    t = utcnow()
    leased = dataclasses.replace(run, state=RunState.LEASED, worker_id="w", lease_token=1)
    await store.commit(runs=[leased], write_time=t)
    assert state_reads == [run.id]  # never seen here: read
    await store.commit(runs=[dataclasses.replace(leased, dead_letter=False)])
    assert state_reads == [run.id, run.id]  # the api's writes read
    assert await store.get_run(ALICE, run.id) == leased


async def test_a_commit_that_failed_leaves_its_runs_to_be_read_again(
    store: CassandraStore, state_reads: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    job = await create(store, make_job())
    run = make_run(job)
    await store.commit(runs=[run], due=[run])
    state_reads.clear()

    async def failing(*args: Any, **kwargs: Any) -> None:
        raise TimeoutError("write timed out")

    t = utcnow()
    leased = dataclasses.replace(run, state=RunState.LEASED, worker_id="w", lease_token=1)
    with monkeypatch.context() as m:
        m.setattr(store._cql, "send", failing)
        with pytest.raises(TimeoutError):
            await store.commit(runs=[leased], write_time=t)
    assert state_reads == []
    await store.commit(runs=[leased], write_time=t)
    assert state_reads == [run.id]  # what the failed call wrote, if anything, is unknown
    assert await store.get_run(ALICE, run.id) == leased
