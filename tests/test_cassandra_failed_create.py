"""Cassandra store: a create with an idempotency key that fails part way.

Cassandra may report a write failed (a timeout) that landed, or lands later. A retry
with the same key must then find the one job, never make a second: if the job row is
stored, the key stays with it; if not, the job is erased for good (a late landing of
its write cannot bring it back) before the key is freed for the retry.

SQLite writes a create in one transaction and needs no such rule; this is Cassandra's.
Faults are injected by failing the store's write step around the real writes.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from shardcron.client.errors import Unavailable
from shardcron.client.types import Job
from shardcron.coordinator.cassandra.store import CassandraStore
from shardcron.coordinator.store import NewJob
from tests.support.store_builders import ALICE, make_job


@pytest.fixture
def store(cassandra_store: CassandraStore) -> CassandraStore:
    return cassandra_store


def _keyed(key: str) -> Job:
    return dataclasses.replace(make_job(), idempotency_key=key)


async def _create(store: CassandraStore, job: Job) -> tuple[Job, bool]:
    [(stored, created)] = await store.create_jobs([NewJob(job=job)])
    return stored, created


def _failing_flush(
    store: CassandraStore, monkeypatch: pytest.MonkeyPatch, *, lands: bool
) -> Callable[[Any], Awaitable[None]]:
    real = store._flush

    async def flush(writes: Any) -> None:
        if lands:
            await real(writes)  # written, yet reported failed: a timeout after the fact
        raise Unavailable("injected: the write timed out")

    monkeypatch.setattr(store, "_flush", flush)
    return real


async def test_a_failed_create_whose_job_landed_keeps_its_key(
    store: CassandraStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _keyed("k-landed")
    real = _failing_flush(store, monkeypatch, lands=True)
    with pytest.raises(Unavailable):
        await _create(store, first)
    monkeypatch.setattr(store, "_flush", real)
    retry = dataclasses.replace(_keyed("k-landed"), spec=first.spec)
    got, created = await _create(store, retry)
    assert (got.id, created) == (first.id, False), "the retry made a second job"
    ids = {j.id for j in (await store.list_jobs(ALICE, page_size=100)).items}
    assert first.id in ids and retry.id not in ids


async def test_a_failed_create_whose_job_did_not_land_frees_its_key_for_good(
    store: CassandraStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _keyed("k-lost")
    real = _failing_flush(store, monkeypatch, lands=False)
    written_at = int(time.time() * 1_000_000)  # when the failed write was made
    with pytest.raises(Unavailable):
        await _create(store, first)
    monkeypatch.setattr(store, "_flush", real)
    # The failed write of the job row reaches a replica only now, with its own time.
    assert store._session is not None
    store._session.execute(
        "INSERT INTO jobs (id, owner) VALUES (%s, %s) USING TIMESTAMP %s",
        (first.id, ALICE, written_at),
    )
    assert await store.get_jobs([first.id]) == {}, "the failed job came back"
    retry = dataclasses.replace(_keyed("k-lost"), spec=first.spec)
    got, created = await _create(store, retry)  # at once, not after the claim goes stale
    assert (got.id, created) == (retry.id, True)
