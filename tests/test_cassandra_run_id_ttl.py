"""Cassandra store under a retention: a run's ``runs_by_id`` row is written once, with a
TTL that outlives the run, and rewritten by the run's final record only when that
record needs it to live longer (``WritePlanner.id_ttl``): a run that ended late, a dead
letter. A store that never saw a run finds it by its id either way."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from shardcron.client.types import Run, RunState
from shardcron.coordinator.cassandra.store import CassandraStore
from shardcron.coordinator.cassandra.writes import ID_SLACK
from shardcron.coordinator.ids import utcnow
from tests.support.cassandra import cassandra_backend, cassandra_node
from tests.support.store_builders import CONTRACT_CONFIG, create, make_job, make_run

RETENTION = timedelta(days=30)
CONFIG = {**CONTRACT_CONFIG, "retention": RETENTION}
DAY = 86_400


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[CassandraStore]:
    s = cassandra_backend(CONFIG)(tmp_path)()
    await s.open()
    try:
        yield s
    finally:
        await s.close()


def id_ttl(store: CassandraStore, run_id: str) -> int | None:
    """The TTL left (seconds) of the run's ``runs_by_id`` row; None: it has none."""
    row = (
        cassandra_node()
        .session()
        .execute(f"SELECT TTL(job_id) FROM {store.keyspace}.runs_by_id WHERE id = %s", (run_id,))
        .one()
    )
    assert row is not None, f"no runs_by_id row for {run_id}"
    return row[0]


def made(run: Run, at: datetime) -> Run:
    return dataclasses.replace(run, created_at=at)


def ended(run: Run, at: datetime, **fields: object) -> Run:
    return dataclasses.replace(run, state=RunState.SUCCEEDED, started_at=at, ended_at=at, **fields)  # type: ignore[arg-type]


async def test_a_run_that_ends_on_time_writes_its_id_row_once(store: CassandraStore) -> None:
    now = utcnow()
    job = await create(store, make_job())
    run = made(make_run(job, due_at=now), now)
    await store.commit(runs=[run], due=[run])
    first = id_ttl(store, run.id)
    assert first is not None and first > (RETENTION + ID_SLACK).total_seconds() - 60
    await store.commit(runs=[ended(run, utcnow())])
    # not rewritten: a rewrite with the run's own TTL would leave the retention alone
    assert (id_ttl(store, run.id) or 0) > RETENTION.total_seconds() + DAY / 2


async def test_a_run_that_ends_late_rewrites_its_id_row_to_outlive_it(
    store: CassandraStore,
) -> None:
    now = utcnow()
    job = await create(store, make_job())
    late = made(make_run(job, due_at=now, fire_key="late"), now)
    await store.commit(runs=[late], due=[late])
    first = id_ttl(store, late.id)
    assert first is not None
    await store.commit(runs=[ended(late, now + 2 * ID_SLACK)])  # ends two days after its due
    got = id_ttl(store, late.id)
    assert got is not None and got > first + DAY / 2  # as long as the run: retention past its end


async def test_a_run_made_long_after_its_due_gets_its_id_row_from_then(
    store: CassandraStore,
) -> None:
    now = utcnow()
    job = await create(store, make_job())
    old = made(make_run(job, due_at=now - 2 * RETENTION, fire_key="old"), now - 2 * RETENTION)
    await store.commit(runs=[old], due=[old])
    assert (id_ttl(store, old.id) or 0) > (RETENTION + ID_SLACK).total_seconds() - 60


async def test_a_dead_letter_keeps_its_id_row_for_ever(store: CassandraStore) -> None:
    now = utcnow()
    job = await create(store, make_job())
    run = made(make_run(job, due_at=now, fire_key="dead"), now)
    await store.commit(runs=[run], due=[run])
    dead = dataclasses.replace(
        ended(run, utcnow()), state=RunState.FAILED, dead_letter=True, error="boom"
    )
    await store.commit(runs=[dead])
    assert id_ttl(store, run.id) is None


async def test_a_store_that_never_saw_the_runs_finds_them_by_id(store: CassandraStore) -> None:
    now = utcnow()
    job = await create(store, make_job())
    runs = [made(make_run(job, due_at=now, fire_key=key), now) for key in ("a", "b")]
    await store.commit(runs=runs, due=runs)
    finals = [ended(runs[0], utcnow()), ended(runs[1], now + 2 * ID_SLACK)]  # on time; late
    await store.commit(runs=finals)
    fresh = cassandra_node().store(store.keyspace, **CONFIG)
    await fresh.open()
    try:
        got = await fresh.get_runs([r.id for r in finals])
    finally:
        await fresh.close()
    assert got == {r.id: r for r in finals}
