"""Cassandra store: a poller's commit writes the state changes of runs whose jobs have
no other write in the call first, and names those runs to ``durable`` once they are
acknowledged, so the turn's leases go out after one round trip. A job whose only other
write is its progress has it written with them, in the same batch: one mutation of the
job's partition key. Every other write ordered against a job's run states (a new run
and its due row, a dead-letter entry) keeps its phase, and that job's run states wait
for it as before."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from typing import Any

import pytest

from shardcron.client.types import JobState, RunReason, RunState
from shardcron.coordinator.cassandra.store import CassandraStore
from shardcron.coordinator.cassandra.writes import P_STATES, Writes
from shardcron.coordinator.ids import utcnow
from shardcron.coordinator.store import JobProgress
from tests.support.cassandra_sent import sent_batches
from tests.support.store_builders import ALICE, create, make_job, make_run


@pytest.fixture
def store(cassandra_store: CassandraStore) -> CassandraStore:
    return cassandra_store


@pytest.fixture
def log(store: CassandraStore, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What the store flushed, in order: the run ids of each flush's run state rows
    (P_STATES), and each ``durable`` call as ("durable", ids)."""
    events: list[Any] = []
    flush = store._flush

    async def recording(writes: Writes) -> None:
        staged = {key for key in writes.parts if key[0] == P_STATES and key[1][0] == "runs"}
        await flush(writes)
        events.append(("flushed", {job_id for _, (_, job_id) in staged}))

    monkeypatch.setattr(store, "_flush", recording)
    return events


def _durable(log: list[Any]) -> Any:
    def called(ids: Collection[str]) -> None:
        log.append(("durable", set(ids)))

    return called


async def test_lease_rows_of_jobs_without_other_writes_are_durable_before_the_rest(
    store: CassandraStore, log: list[Any]
) -> None:
    leasing = await create(store, make_job(name="leasing"))
    ending = await create(store, make_job(name="ending"))
    retrying = await create(store, make_job(name="retrying"))
    to_lease, to_end, to_fail = make_run(leasing), make_run(ending), make_run(retrying)
    for run in (to_lease, to_end, to_fail):
        await store.commit(runs=[run], due=[run])
    log.clear()

    leased = dataclasses.replace(to_lease, state=RunState.LEASED, worker_id="w", lease_token=7)
    ended = dataclasses.replace(to_end, state=RunState.SUCCEEDED, ended_at=utcnow())
    failed = dataclasses.replace(
        to_fail, state=RunState.FAILED, reason=RunReason.WORKER_LOST, ended_at=utcnow()
    )
    retry = make_run(retrying, attempt=2, fire_key=to_fail.fire_key, due_at=to_fail.due_at)
    await store.commit(
        runs=[leased, ended, failed, retry],
        due=[retry],
        progress=[JobProgress(job_id=ending.id, state=JobState.COMPLETED)],
        write_time=utcnow(),
        durable=_durable(log),
    )

    # the lease first, with the end of the completing job (its progress beside it),
    # named once written; then the phases of the rest, the retried run's state last
    assert log[0] == ("flushed", {leasing.id, ending.id})
    assert log[1] == ("durable", {leased.id, ended.id})
    assert log[2:] == [("flushed", {retrying.id})]
    assert await store.get_run(ALICE, leased.id) == leased
    assert (await store.get_run(ALICE, ended.id)).state == RunState.SUCCEEDED
    assert (await store.get_job(ALICE, ending.id)).state == JobState.COMPLETED
    assert (await store.get_run(ALICE, failed.id)).state == RunState.FAILED
    assert (await store.get_run(ALICE, retry.id)).state == RunState.PENDING


async def test_a_call_of_one_phase_is_written_as_before_and_names_nothing(
    store: CassandraStore, log: list[Any]
) -> None:
    """Leases alone are one phase already: nothing to write ahead of the rest."""
    jobs = [await create(store, make_job(name=f"only-leases-{i}")) for i in range(2)]
    pending = [make_run(job) for job in jobs]
    await store.commit(runs=pending, due=pending)
    log.clear()
    leased = [dataclasses.replace(r, state=RunState.LEASED, worker_id="w") for r in pending]
    await store.commit(runs=leased, write_time=utcnow(), durable=_durable(log))
    assert log == [("flushed", {job.id for job in jobs})]  # one flush, nothing named
    for run in leased:
        assert await store.get_run(ALICE, run.id) == run


async def test_a_dead_letter_keeps_its_runs_state_after_its_index_entry(
    store: CassandraStore, log: list[Any]
) -> None:
    dead_job = await create(store, make_job(name="dead"))
    leasing = await create(store, make_job(name="leasing"))
    to_die, to_lease = make_run(dead_job), make_run(leasing)
    for run in (to_die, to_lease):
        await store.commit(runs=[run], due=[run])
    log.clear()
    dead = dataclasses.replace(to_die, state=RunState.FAILED, dead_letter=True, ended_at=utcnow())
    leased = dataclasses.replace(to_lease, state=RunState.LEASED, worker_id="w", lease_token=3)
    await store.commit(runs=[dead, leased], write_time=utcnow(), durable=_durable(log))
    assert log[:2] == [("flushed", {leasing.id}), ("durable", {leased.id})]
    assert log[2:] == [("flushed", {dead_job.id})]
    assert (await store.get_run(ALICE, dead.id)).dead_letter


async def test_a_one_off_jobs_end_and_its_completion_are_one_batch(
    store: CassandraStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = await create(store, make_job(name="one-off"))
    run = make_run(job)
    await store.commit(runs=[run], due=[run])
    flushes = sent_batches(store, monkeypatch)
    ended = dataclasses.replace(run, state=RunState.SUCCEEDED, ended_at=utcnow())
    await store.commit(
        runs=[ended],
        progress=[JobProgress(job_id=job.id, state=JobState.COMPLETED)],
        write_time=utcnow(),
        durable=lambda ids: None,
    )
    [[batch]] = flushes  # one round trip
    key = job.id.encode()
    assert ("runs", key) in batch and ("jobs", key) in batch
    assert (await store.get_run(ALICE, ended.id)).state == RunState.SUCCEEDED
    assert (await store.get_job(ALICE, job.id)).state == JobState.COMPLETED


async def test_with_no_one_waiting_a_jobs_end_still_goes_beside_its_progress(
    store: CassandraStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn with results and no lease names nothing durable ahead, and still writes a
    one-off job's end and its COMPLETED in one batch; a job with a new run keeps its
    phases (the new run and its due row, then its progress, then its run's state)."""
    one_off = await create(store, make_job(name="one-off"))
    cron = await create(store, make_job(name="cron"))
    runs = [make_run(one_off), make_run(cron)]
    await store.commit(runs=runs, due=runs)
    flushes = sent_batches(store, monkeypatch)
    ended = [dataclasses.replace(r, state=RunState.SUCCEEDED, ended_at=utcnow()) for r in runs]
    following = make_run(cron, fire_key="next")
    await store.commit(
        runs=[*ended, following],
        due=[following],
        progress=[
            JobProgress(job_id=one_off.id, state=JobState.COMPLETED),
            JobProgress(job_id=cron.id, consecutive_failures=0),
        ],
        write_time=utcnow(),
    )
    [batches] = flushes
    one, other = one_off.id.encode(), cron.id.encode()
    [together] = [b for b in batches if ("jobs", one) in b]
    assert ("runs", one) in together
    [progress] = [i for i, b in enumerate(batches) if ("jobs", other) in b]
    assert ("runs", other) not in batches[progress]
    assert any(("runs", other) in b for b in batches[progress + 1 :])  # its run's end after
    assert (await store.get_job(ALICE, one_off.id)).state == JobState.COMPLETED
    assert (await store.get_run(ALICE, following.id)).state == RunState.PENDING
