"""Cassandra store: runs across an owner's jobs are a bounded scan (no index by owner
and state), so a call stops at its scan budget and answers a short page, even an empty
one, with a token that goes on where it stopped; following the tokens lists every run.

SQLite reads an index and always fills its pages; this is Cassandra's alone.
"""

from __future__ import annotations

import pytest

from shardcron.client.types import RunState
from shardcron.coordinator.cassandra.store import CassandraStore
from tests.support.store_builders import ALICE, T0, S, all_pages, create, make_job, make_run


@pytest.fixture
def store(cassandra_store: CassandraStore) -> CassandraStore:
    return cassandra_store


async def test_owner_runs_stop_at_the_scan_budget_and_resume_from_the_token(
    store: CassandraStore,
) -> None:
    jobs = [await create(store, make_job()) for _ in range(5)]
    runs = [
        make_run(job, due_at=T0 + i * S, fire_key=f"f{i}", state=state)
        for job in jobs
        for i, state in enumerate([RunState.SUCCEEDED, RunState.SUCCEEDED, RunState.RUNNING])
    ]
    await store.commit(runs=runs)
    store.owner_runs_scan_rows = 2  # less than one job's runs: one job per call
    running = frozenset({RunState.RUNNING})
    first = await store.list_owner_runs(ALICE, states=running, page_size=10)
    assert len(first.items) == 1 and first.next_page_token
    got = await all_pages(lambda **kw: store.list_owner_runs(ALICE, states=running, **kw), 10)
    want = sorted((r for r in runs if r.state == RunState.RUNNING), key=lambda r: r.job_id)
    assert got == want
    only_done = frozenset({RunState.FAILED})
    empty = await store.list_owner_runs(ALICE, states=only_done, page_size=10)
    assert empty.items == [] and empty.next_page_token
    assert (
        await all_pages(lambda **kw: store.list_owner_runs(ALICE, states=only_done, **kw), 3) == []
    )


async def test_owner_runs_read_a_hundred_jobs_to_a_request_and_only_the_runs_a_page_needs(
    store: CassandraStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 230 jobs whose runs all ended, then 3 with PENDING runs (one with 150 of them):
    # a page of PENDING runs is a few requests, not one per job walked.
    done = [await create(store, make_job()) for _ in range(230)]
    busy = [await create(store, make_job()) for _ in range(3)]
    ended = [make_run(job, due_at=T0, fire_key="f", state=RunState.SUCCEEDED) for job in done]
    counts = [2, 150, 2]
    pending = [
        make_run(job, due_at=T0 + i * S, fire_key=f"p{i}", state=RunState.PENDING)
        for job, n in zip(busy, counts, strict=True)
        for i in range(n)
    ]
    await store.commit(runs=ended)
    await store.commit(runs=pending)
    requests = 0
    exec_ = store._cql.exec

    async def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal requests
        requests += 1
        return await exec_(*args, **kwargs)

    monkeypatch.setattr(store._cql, "exec", counted)
    only_pending = frozenset({RunState.PENDING})
    first = await store.list_owner_runs(ALICE, states=only_pending, page_size=20)
    # jobs in id order, each one's runs newest first
    want = [
        r
        for job in busy
        for r in sorted(pending, key=lambda r: r.id, reverse=True)
        if r.job_id == job.id
    ]
    assert first.items == want[:20] and first.next_page_token
    # the job ids (one read), their (job, id, state) rows (three, at once); the whole
    # runs: the first job's with others' (one), the one with 150 alone (two): 7, where a
    # request per job walked made 236
    assert requests <= 7, requests
    got = await all_pages(lambda **kw: store.list_owner_runs(ALICE, states=only_pending, **kw), 20)
    assert got == want
