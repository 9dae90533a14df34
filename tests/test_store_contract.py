"""The JobStore contract: every rule of ``shardcron.coordinator.store``, for any backend.

Written once, run unchanged against every implementation: each test takes the
``store`` fixture (an opened, empty ``JobStore`` configured with ``CONTRACT_CONFIG``)
or ``store_factory`` (an async callable returning a NEW opened instance on the same
location, to prove durability across a close and reopen; the fixture closes what it
made), and both are parametrized over ``BACKENDS``, so every test written here runs
on every backend. Nothing in a test may know which backend it talks to.

A backend is one entry of ``BACKENDS``: a name and a function that, given the test's
``tmp_path``, returns a factory making a new (unopened) store on one location — the
same location each call, so a test can close a store and reopen it. Cassandra
(tests/support/cassandra.py): the node named by SHARDCRON_TEST_CASSANDRA, or one
started for the session (it fails, never skips, when it cannot start); one keyspace
per session, its tables truncated before each test.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from pathlib import Path

import pytest

from shardcron.client.errors import FailedPrecondition, InvalidArgument, NotFound, VersionConflict
from shardcron.client.types import (
    Delivery,
    DeliveryStatus,
    HandlerTask,
    Job,
    JobSpec,
    JobState,
    LateReason,
    NotifyPolicy,
    NotifyRule,
    OutputChunk,
    Run,
    RunLateness,
    RunReason,
    RunResultFile,
    RunState,
    RunUsage,
)
from shardcron.coordinator.ids import new_job_id, run_id, utcnow
from shardcron.coordinator.notify.settings import OwnerSettings
from shardcron.coordinator.rows import UnreadableRow
from shardcron.coordinator.sqlite.store import SqliteStore
from shardcron.coordinator.store import ArtifactRef, DueEntry, JobProgress, JobStore, NewJob
from shardcron.coordinator.store_rules import PAGE_BYTES, PageKind, fit_page, page_token
from tests.support.bad_rows import spoil
from tests.support.cassandra import cassandra_backend
from tests.support.store_builders import (
    ALICE,
    BOB,
    CAP,
    CONTRACT_CONFIG,
    SHARDS,
    T0,
    S,
    all_pages,
    create,
    joined,
    make_job,
    make_run,
    rich_spec,
    unwritable_job,
)

StoreFactory = Callable[[], JobStore]


def sqlite_backend(tmp_path: Path) -> StoreFactory:
    path = tmp_path / "shardcron.db"
    return lambda: SqliteStore(path, **CONTRACT_CONFIG)


def sqlite_process_backend(tmp_path: Path) -> StoreFactory:
    """The store as ``shardcron dev`` opens it: its writer a process of its own."""
    path = tmp_path / "shardcron.db"
    return lambda: SqliteStore(path, **CONTRACT_CONFIG, writer_process=True)


BACKENDS: dict[str, Callable[[Path], StoreFactory]] = {
    "sqlite": sqlite_backend,
    "sqlite-process": sqlite_process_backend,
    "cassandra": cassandra_backend(CONTRACT_CONFIG),
}


@pytest.fixture(params=list(BACKENDS))
async def store_factory(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[Callable[[], Awaitable[JobStore]]]:
    make = BACKENDS[request.param](tmp_path)
    made: list[JobStore] = []

    async def open_store() -> JobStore:
        store = make()
        made.append(store)
        await store.open()
        return store

    yield open_store
    for store in reversed(made):
        await store.close()


@pytest.fixture
async def store(store_factory: Callable[[], Awaitable[JobStore]]) -> JobStore:
    return await store_factory()


# --------------------------------------------------------------------------- lifecycle


async def test_store_is_a_jobstore_with_the_contract_config(store: JobStore) -> None:
    assert isinstance(store, JobStore)
    assert (store.shard_count, store.bucket_seconds, store.output_cap_bytes) == (8, 60, 1024)
    await store.open()  # idempotent
    assert await store.get_jobs([new_job_id()]) == {}


async def test_everything_survives_close_and_reopen(store: JobStore, store_factory) -> None:
    job = make_job(spec=rich_spec(), idempotency_key="k1")
    run = make_run(job, due_at=T0 + 5 * S)
    await create(store, job, run)
    done = make_run(job, due_at=T0 + 9 * S, fire_key="f2", state=RunState.FAILED, dead_letter=True)
    await store.commit(
        runs=[done],
        progress=[JobProgress(job_id=job.id, next_fire_at=T0 + 60 * S, next_fire_key="f3")],
    )
    await store.save_cursors({3: T0})
    await store.append_output([OutputChunk(run_id=run.id, offset=0, data=b"hello")])
    await store.close()

    again = await store_factory()
    got = await again.get_job(ALICE, job.id)
    assert got == dataclasses.replace(job, next_fire_at=T0 + 60 * S, next_fire_key="f3")
    assert await again.get_runs([run.id, done.id]) == {run.id: run, done.id: done}
    entries = await again.scan_due(run.shard, due_from=T0, due_until=T0 + 60 * S)
    assert [e.run_id for e in entries] == [run.id]
    assert await again.load_cursors([3]) == {3: T0}
    assert [c.data for c in await again.read_output(run.id)] == [b"hello"]
    assert (await again.list_dead_letters(ALICE)).items == [done]
    [(existing, created)] = await again.create_jobs([NewJob(job=make_job(idempotency_key="k1"))])
    assert (existing.id, created) == (job.id, False)


# --------------------------------------------------------------------------- create and get


async def test_create_writes_job_runs_and_due_rows_for_pending_runs(store: JobStore) -> None:
    job = make_job()
    pending = make_run(job, due_at=T0 + 10 * S)
    skipped = make_run(
        job, due_at=T0 + 5 * S, fire_key="early", state=RunState.SKIPPED, reason=RunReason.PAUSED
    )
    [(stored, created)] = await store.create_jobs([NewJob(job=job, runs=[skipped, pending])])
    assert (stored, created) == (job, True)
    assert await store.get_job(ALICE, job.id) == job
    assert await store.get_runs([pending.id, skipped.id]) == {
        pending.id: pending,
        skipped.id: skipped,
    }
    entries = await store.scan_due(pending.shard, due_from=T0, due_until=T0 + 60 * S)
    assert entries == [
        DueEntry(shard=pending.shard, due_at=pending.due_at, run_id=pending.id, job_id=job.id)
    ]


async def test_runs_read_under_their_named_jobs_are_found_there_only(
    store_factory: Callable[[], Awaitable[JobStore]],
) -> None:
    job1, job2 = make_job(), make_job()
    r1, r2 = make_run(job1), make_run(job2)
    writer = await store_factory()
    await writer.create_jobs([NewJob(job=job1, runs=[r1]), NewJob(job=job2, runs=[r2])])
    await writer.close()
    # a store that never saw the runs finds them under the jobs named
    fresh = await store_factory()
    named = {r1.id: job1.id, r2.id: job2.id}
    assert await fresh.get_runs([r1.id, r2.id], job_ids=named) == {r1.id: r1, r2.id: r2}
    # named under another job, even one read beside it (and whatever the store learnt
    # of the run before): not stored there, so absent
    swapped = {r1.id: job2.id, r2.id: job2.id}
    assert await fresh.get_runs([r1.id, r2.id], job_ids=swapped) == {r2.id: r2}
    # a run without a job named is read as before
    assert await fresh.get_runs([r1.id, r2.id], job_ids={r2.id: job2.id}) == {r1.id: r1, r2.id: r2}


async def test_spec_round_trips_exactly(store: JobStore) -> None:
    spec = rich_spec()
    job = dataclasses.replace(
        make_job(spec=spec), next_fire_at=T0 + timedelta(microseconds=1), next_fire_key="k",
        consecutive_failures=2, pause_reason="why", schedule_version=3, version=7,
        updated_at=T0 + timedelta(hours=1, microseconds=999_999),
    )  # fmt: skip
    await create(store, job)
    got = await store.get_job(ALICE, job.id)
    assert got == job
    assert got.spec.task == spec.task and isinstance(got.spec.task.argv, tuple)
    assert got.created_at.utcoffset() == timedelta(0) and got.next_fire_at.tzinfo is not None
    binary = make_job(spec=JobSpec(name="b", task=HandlerTask(name="h", payload=bytes(range(256)))))
    await create(store, binary)
    assert (await store.get_job(ALICE, binary.id)).spec == binary.spec


async def test_run_round_trips_every_field(store: JobStore) -> None:
    job = await create(store, make_job())
    run = make_run(
        job, state=RunState.FAILED, attempt=3, worker_id="w-1", lease_token=(7 << 32) + 9,
        lease_expires_at=T0 + 30 * S, started_at=T0 + S, ended_at=T0 + 2 * S, exit_code=-9,
        reason=RunReason.TIMEOUT, error="killed\nafter 2s", output_bytes=12345,
        replayed_from="r-0", dead_letter=True, schedule_version=4, priority=9,
        usage=RunUsage(peak_memory_bytes=67_108_864, cpu_seconds=1.25, limits_enforced=False),
    )  # fmt: skip
    await store.commit(runs=[run])
    assert await store.get_run(ALICE, run.id) == run
    measured = make_run(job, attempt=4, state=RunState.SUCCEEDED, usage=RunUsage())
    unmeasured = make_run(job, attempt=5, state=RunState.SUCCEEDED)  # a handler's: None
    await store.commit(runs=[measured, unmeasured])
    assert await store.get_run(ALICE, measured.id) == measured
    assert await store.get_run(ALICE, unmeasured.id) == unmeasured


async def test_a_runs_lateness_round_trips_with_its_lease_and_its_end(store: JobStore) -> None:
    """Why a run was late rides on the records the poller writes anyway: it is kept as
    written on the LEASED record, on the final one after it, and a run on time has none."""
    job = await create(store, make_job())
    late = RunLateness(
        reason=LateReason.NO_WORKER_WITH_LABELS,
        text="no worker has label gpu=a100 for 12.5 s",
        waited=timedelta(seconds=12, microseconds=500_001),
    )
    leased = make_run(job, state=RunState.LEASED, worker_id="w-1", lease_token=5, lateness=late)
    await store.commit(runs=[leased])
    assert (await store.get_run(ALICE, leased.id)).lateness == late
    ended = dataclasses.replace(leased, state=RunState.SUCCEEDED, ended_at=T0 + S)
    skipped = make_run(
        job, attempt=2, state=RunState.SKIPPED, reason=RunReason.PAUSED,
        lateness=RunLateness(reason=LateReason.PAUSED, text="paused"),
    )  # fmt: skip
    on_time = make_run(job, attempt=3, state=RunState.SUCCEEDED)
    await store.commit(runs=[ended, skipped, on_time])
    assert await store.get_run(ALICE, leased.id) == ended
    assert (await store.get_runs([skipped.id]))[skipped.id] == skipped
    assert ended in (await store.list_runs(ALICE, job.id)).items
    assert (await store.get_run(ALICE, on_time.id)).lateness is None


async def test_a_runs_output_record_round_trips(store: JobStore) -> None:
    """The digest of a run's output and why it was cut are stored with the run, and a
    run without them reads them as empty."""
    job = await create(store, make_job())
    cut = make_run(
        job, state=RunState.SUCCEEDED, output_bytes=1 << 20, output_sha256="ab" * 32,
        output_truncated="blob store unavailable for 45 s",
    )  # fmt: skip
    whole = make_run(job, attempt=2, state=RunState.SUCCEEDED, output_sha256="0f" * 32)
    plain = make_run(job, attempt=3, state=RunState.FAILED)
    await store.commit(runs=[cut, whole, plain])
    assert await store.get_run(ALICE, cut.id) == cut
    got = await store.get_runs([cut.id, whole.id, plain.id])
    assert (got[cut.id], got[whole.id], got[plain.id]) == (cut, whole, plain)
    assert (got[plain.id].output_sha256, got[plain.id].output_truncated) == ("", "")
    listed = {r.id: r for r in (await store.list_runs(ALICE, job.id)).items}
    assert listed[cut.id].output_truncated == "blob store unavailable for 45 s"
    assert listed[whole.id].output_sha256 == "0f" * 32


async def test_a_runs_result_files_round_trip(store: JobStore) -> None:
    job = await create(store, make_job())
    files = (
        RunResultFile(name="a.json", size=12, sha256="ab" * 32),
        RunResultFile(name="big.bin", size=64 << 20, sha256="0" * 64),
    )
    kept = make_run(job, state=RunState.SUCCEEDED, results=files, results_note="x: left out")
    noted = make_run(job, attempt=2, state=RunState.FAILED, results_note="no blob store")
    await store.commit(runs=[kept, noted])
    assert await store.get_run(ALICE, kept.id) == kept
    assert await store.get_run(ALICE, noted.id) == noted
    assert (await store.get_runs([kept.id]))[kept.id].results == files
    listed = {r.id: r for r in (await store.list_runs(ALICE, job.id)).items}
    assert listed[kept.id].results == files and listed[noted.id].results == ()


async def test_a_runs_waiting_reason_is_never_stored(store: JobStore) -> None:
    """Why a run waits is the poller's answer when the run is read, not a stored field."""
    job = await create(store, make_job())
    run = make_run(job, waiting_reason="no connected worker serves handler resize")
    await store.commit(runs=[run], due=[run])
    stored = dataclasses.replace(run, waiting_reason="")
    assert await store.get_run(ALICE, run.id) == stored
    assert (await store.list_runs(ALICE, job.id)).items == [stored]
    assert (await store.get_runs([run.id]))[run.id] == stored


async def test_idempotency_key_returns_existing_job_and_writes_nothing(store: JobStore) -> None:
    first = make_job(idempotency_key="same")
    first_run = make_run(first, due_at=T0 + S)
    await create(store, first, first_run)
    retry = make_job(idempotency_key="same", name="other")
    retry_run = make_run(retry, due_at=T0 + 2 * S)
    results = await store.create_jobs([NewJob(job=retry, runs=[retry_run])])
    assert results == [(first, False)]
    assert await store.get_jobs([retry.id]) == {}
    assert await store.get_runs([retry_run.id]) == {}
    entries = await store.scan_due(retry_run.shard, due_from=T0, due_until=T0 + 60 * S)
    assert retry_run.id not in {e.run_id for e in entries}
    # Keys are per owner; an empty key never matches.
    other_owner = make_job(BOB, idempotency_key="same")
    no_key = [make_job(), make_job()]
    results = await store.create_jobs([NewJob(job=j) for j in [other_owner, *no_key]])
    assert [created for _, created in results] == [True, True, True]


async def test_create_batch_results_in_order_and_duplicate_keys_within_a_batch(
    store: JobStore,
) -> None:
    existing = await create(store, make_job(idempotency_key="a"))
    batch = [
        make_job(name="n0"),
        make_job(idempotency_key="a"),
        make_job(idempotency_key="b", name="first-b"),
        make_job(name="n3"),
        make_job(idempotency_key="b", name="second-b"),
    ]
    results = await store.create_jobs([NewJob(job=j, runs=[make_run(j)]) for j in batch])
    assert results == [
        (batch[0], True), (existing, False), (batch[2], True), (batch[3], True), (batch[2], False),
    ]  # fmt: skip
    assert set(await store.get_jobs([j.id for j in batch])) == {
        batch[0].id,
        batch[2].id,
        batch[3].id,
    }
    assert await store.get_runs([make_run(batch[4]).id]) == {}


async def test_create_batch_is_all_or_nothing(store: JobStore) -> None:
    fresh, last = make_job(), make_job()
    batch = [
        NewJob(job=fresh, runs=[make_run(fresh)]),
        NewJob(job=unwritable_job()),
        NewJob(job=last),
    ]
    with pytest.raises(Exception):  # noqa: B017 - the contract only says the call fails
        await store.create_jobs(batch)
    assert await store.get_jobs([fresh.id, last.id]) == {}
    assert await store.get_runs([make_run(fresh).id]) == {}
    assert (await store.list_jobs(ALICE)).items == []


async def test_get_is_owner_scoped(store: JobStore) -> None:
    job = make_job(ALICE)
    run = make_run(job)
    await create(store, job, run)
    with pytest.raises(NotFound):
        await store.get_job(BOB, job.id)
    with pytest.raises(NotFound):
        await store.get_run(BOB, run.id)
    with pytest.raises(NotFound):
        await store.get_job(ALICE, new_job_id())
    with pytest.raises(NotFound):
        await store.get_run(ALICE, run_id(job.id, "nope", 1, T0))
    assert await store.get_run(ALICE, run.id) == run
    with pytest.raises(NotFound):
        await store.list_runs(BOB, job.id)
    assert (await store.list_jobs(BOB)).items == []


async def test_get_jobs_and_get_runs_ignore_owner_and_state_and_skip_missing(
    store: JobStore,
) -> None:
    jobs = [make_job(ALICE), make_job(BOB, state=JobState.DELETED)]
    runs = [make_run(j) for j in jobs]
    for j, r in zip(jobs, runs, strict=True):
        await create(store, j, r)
    missing = new_job_id()
    assert await store.get_jobs([jobs[0].id, missing, jobs[1].id, jobs[0].id]) == {
        j.id: j for j in jobs
    }
    assert await store.get_runs([r.id for r in runs] + ["missing"]) == {r.id: r for r in runs}
    assert await store.get_jobs([]) == {} and await store.get_runs([]) == {}


async def test_get_many_ids_at_once(store: JobStore) -> None:
    jobs = [make_job() for _ in range(1200)]
    runs = [make_run(j) for j in jobs]
    await store.create_jobs([NewJob(job=j, runs=[r]) for j, r in zip(jobs, runs, strict=True)])
    assert len(await store.get_jobs([j.id for j in jobs])) == 1200
    assert len(await store.get_runs([r.id for r in runs])) == 1200


async def test_get_runs_of_many_jobs_with_many_runs_finds_exactly_those_asked(
    store: JobStore,
) -> None:
    """Runs are read by groups of jobs on Cassandra (jobs x run ids): the runs asked for
    come back, and no other run of the same jobs does."""
    jobs = [make_job() for _ in range(60)]
    runs = {
        j.id: [make_run(j, fire_key=f"k{k}", due_at=T0 + k * S) for k in range(8)] for j in jobs
    }
    await store.create_jobs([NewJob(job=j, runs=runs[j.id]) for j in jobs])
    asked = [r for i, j in enumerate(jobs) for r in runs[j.id][i % 8 :: 3]]
    assert await store.get_runs([r.id for r in asked]) == {r.id: r for r in asked}


async def test_an_unreadable_row_is_skipped_by_reads_of_many_and_named_by_a_read_by_id(
    store: JobStore,
) -> None:
    """A job or run row this version cannot decode (a spec that is not JSON, a state
    name from a newer version) fails alone: listings and reads by many ids skip it,
    logging and counting it once; a read by its id says which row and why."""
    good, not_json, newer = (make_job(name=n, labels={"team": "t"}) for n in "abc")
    kept, lost = make_run(good), make_run(good, fire_key="later", due_at=T0 + S)
    await create(store, good, kept, lost)
    for job in (not_json, newer):
        await create(store, job, make_run(job))
    await spoil(store, "jobs", not_json.id, "spec", "{not json")
    await spoil(store, "jobs", newer.id, "state", "ARCHIVED")
    await spoil(store, "runs", lost.id, "state", "PARKED")
    counted: list[str] = []
    store.bad_rows.count_into(counted.append)

    for _ in range(2):  # read again: logged and counted once per row
        assert await store.get_jobs([good.id, not_json.id, newer.id]) == {good.id: good}
        assert await store.get_runs([kept.id, lost.id]) == {kept.id: kept}
    assert sorted(counted) == ["jobs", "jobs", "runs"]
    listed = await all_pages(lambda **kw: store.list_jobs(ALICE, **kw), 1)
    assert listed == [good]
    assert (await store.list_jobs(ALICE, labels={"team": "t"})).items == [good]
    assert await all_pages(lambda **kw: store.list_runs(ALICE, good.id, **kw), 1) == [kept]
    assert await store.list_active_runs(good.id) == [kept]
    assert sorted(counted) == ["jobs", "jobs", "runs"]

    for read, noun, row_id, table in (
        (store.get_job(ALICE, not_json.id), "job", not_json.id, "jobs"),
        (store.get_job(ALICE, newer.id), "job", newer.id, "jobs"),
        (store.get_run(ALICE, lost.id), "run", lost.id, "runs"),
    ):
        with pytest.raises(UnreadableRow) as raised:
            await read
        assert isinstance(raised.value, FailedPrecondition)
        assert (raised.value.table, raised.value.row_id) == (table, row_id)
        assert raised.value.message.startswith(f"{noun} {row_id} cannot be read: ")
    with pytest.raises(NotFound):
        await store.get_job(BOB, not_json.id)  # another owner's row stays not found
    await store.commit(runs=[lost])  # an unknown stored state counts as final: kept
    with pytest.raises(UnreadableRow):
        await store.get_run(ALICE, lost.id)
    again = dataclasses.replace(make_job(), idempotency_key="k")
    await create(store, again)
    await spoil(store, "jobs", again.id, "spec", "[]")
    with pytest.raises(UnreadableRow):  # the key names a job that cannot be read
        await store.create_jobs([NewJob(job=dataclasses.replace(make_job(), idempotency_key="k"))])


# --------------------------------------------------------------------------- list_jobs


async def test_list_jobs_filters(store: JobStore) -> None:
    a = make_job(name="etl-daily", labels={"team": "data", "env": "prod"})
    b = make_job(name="etl-hourly", labels={"team": "data", "env": "dev"})
    c = make_job(name="backup", labels={"team": "ops"}, state=JobState.PAUSED)
    d = make_job(name="etl-old", state=JobState.DELETED, labels={"team": "data"})
    e = make_job(name="Etl-upper", state=JobState.COMPLETED)
    other = make_job(BOB, name="etl-bob")
    await store.create_jobs([NewJob(job=j) for j in (a, b, c, d, e, other)])

    async def ids(**kw: object) -> list[str]:
        return [j.id for j in (await store.list_jobs(ALICE, **kw)).items]  # type: ignore[arg-type]

    assert await ids() == [a.id, b.id, c.id, e.id]  # creation order, no DELETED
    assert await ids(states=frozenset({JobState.DELETED})) == [d.id]
    assert await ids(states=frozenset({JobState.PAUSED, JobState.ACTIVE})) == [a.id, b.id, c.id]
    assert await ids(name_prefix="etl-") == [a.id, b.id]
    assert await ids(name_prefix="etl-", states=frozenset(JobState)) == [a.id, b.id, d.id]
    assert await ids(labels={"team": "data"}) == [a.id, b.id]
    assert await ids(labels={"team": "data", "env": "dev"}) == [b.id]
    assert await ids(labels={"team": "data", "env": "qa"}) == []
    assert await ids(name_prefix="etl", labels={"env": "prod"}) == [a.id]
    assert (await store.list_jobs(ALICE)).items[0] == a


async def test_list_jobs_paginates_without_duplicates_or_gaps(store: JobStore) -> None:
    jobs = [make_job(name=f"j{i}") for i in range(23)]
    await store.create_jobs([NewJob(job=j) for j in jobs])
    await create(store, make_job(BOB))
    for size in (1, 5, 10, 23, 1000):
        got = await all_pages(lambda **kw: store.list_jobs(ALICE, **kw), size)
        assert [j.id for j in got] == sorted(j.id for j in jobs)
    page = await store.list_jobs(ALICE, page_size=23)
    assert len(page.items) == 23  # an exact fit may or may not offer an empty next page
    if page.next_page_token:
        assert (await store.list_jobs(ALICE, page_token=page.next_page_token)).items == []
    assert len((await store.list_jobs(ALICE, page_size=0)).items) >= 1  # clamped, not an error
    assert len((await store.list_jobs(ALICE, page_size=10_000)).items) == 23


async def test_a_page_cut_short_by_its_bytes_resumes_after_its_last_item(
    store: JobStore,
) -> None:
    """Pages are bounded in bytes at the edge (``store_rules.fit_page``): the token of a
    page cut after any item must resume right after it, in every listing."""
    job = await create(store, make_job())
    await create(store, make_job(name="other"))
    dead = [
        make_run(job, due_at=T0 + i * S, fire_key=f"f{i}", state=RunState.FAILED, dead_letter=True)
        for i in range(5)
    ]
    await store.commit(runs=dead)
    listings = [
        (PageKind.JOBS, lambda **kw: store.list_jobs(ALICE, **kw)),
        (PageKind.RUNS, lambda **kw: store.list_runs(ALICE, job.id, **kw)),
        (PageKind.DEAD_LETTERS, lambda **kw: store.list_dead_letters(ALICE, **kw)),
    ]
    for kind, listing in listings:
        whole = (await listing(page_size=100)).items
        assert len(whole) >= 2
        seen, token = [], ""
        while True:  # every item "weighs" the whole budget: pages of one item each
            page = await listing(page_size=100, page_token=token)
            cut = fit_page(kind, page, [PAGE_BYTES] * len(page.items), lambda x: x.id)
            assert len(cut.items) == 1
            seen += cut.items
            token = cut.next_page_token
            if not token:
                break
        assert seen == whole


@pytest.mark.parametrize("token", ["garbage!", "bm9wZQ==", "x" * 7, "%%%"])
async def test_bad_page_tokens_are_invalid_arguments(store: JobStore, token: str) -> None:
    job = await create(store, make_job())
    calls = [
        lambda: store.list_jobs(ALICE, page_token=token),
        lambda: store.list_runs(ALICE, job.id, page_token=token),
        lambda: store.list_dead_letters(ALICE, page_token=token),
    ]
    for call in calls:
        with pytest.raises(InvalidArgument) as err:
            await call()
        assert err.value.field == "page_token"


# --------------------------------------------------------------------------- update_job


async def test_update_job_compare_and_set(store: JobStore) -> None:
    job = await create(store, make_job(name="v1"))
    run = make_run(job, due_at=T0 + 30 * S, fire_key="f1")
    v2 = dataclasses.replace(job, spec=job.spec.replace(name="v2"), state=JobState.PAUSED)
    stored = await store.update_job(v2, expected_version=1, runs=[run], due=[run])
    assert stored == dataclasses.replace(v2, version=2)
    assert await store.get_job(ALICE, job.id) == stored
    assert await store.get_run(ALICE, run.id) == run
    due = await store.scan_due(run.shard, due_from=T0, due_until=T0 + 60 * S)
    assert [e.run_id for e in due] == [run.id]

    stale_run = make_run(job, due_at=T0 + 40 * S, fire_key="f2")
    v3 = dataclasses.replace(stored, spec=job.spec.replace(name="v3"))
    with pytest.raises(VersionConflict):
        await store.update_job(v3, expected_version=1, runs=[stale_run], due=[stale_run])
    assert await store.get_job(ALICE, job.id) == stored
    assert await store.get_runs([stale_run.id]) == {}
    due = await store.scan_due(run.shard, due_from=T0, due_until=T0 + 60 * S)
    assert [e.run_id for e in due] == [run.id]

    assert (await store.update_job(v3, expected_version=2)).version == 3


async def test_update_job_unknown_or_other_owner_is_not_found(store: JobStore) -> None:
    job = await create(store, make_job(ALICE))
    with pytest.raises(NotFound):
        await store.update_job(dataclasses.replace(job, owner=BOB), expected_version=1)
    with pytest.raises(NotFound):
        await store.update_job(make_job(), expected_version=1)
    assert (await store.get_job(ALICE, job.id)).version == 1


# --------------------------------------------------------------------------- commit


async def test_commit_upserts_runs_adds_due_rows_and_applies_progress(store: JobStore) -> None:
    job = await create(store, make_job())
    first = make_run(job, due_at=T0 + S)
    await store.commit(
        runs=[first],
        due=[first],
        progress=[
            JobProgress(job_id=job.id, next_fire_at=T0 + 61 * S, next_fire_key="f2"),
            JobProgress(job_id=new_job_id(), consecutive_failures=4),  # unknown job: no-op
        ],
    )
    assert await store.get_run(ALICE, first.id) == first
    assert [
        e.run_id for e in await store.scan_due(first.shard, due_from=T0, due_until=T0 + 60 * S)
    ] == [first.id]
    got = await store.get_job(ALICE, job.id)
    assert (got.next_fire_at, got.next_fire_key, got.version) == (T0 + 61 * S, "f2", 1)

    leased = dataclasses.replace(first, state=RunState.LEASED, worker_id="w", lease_token=5)
    await store.commit(runs=[leased], progress=[JobProgress(job_id=job.id, consecutive_failures=2)])
    assert await store.get_run(ALICE, first.id) == leased
    got = await store.get_job(ALICE, job.id)
    assert (got.consecutive_failures, got.next_fire_key, got.spec) == (2, "f2", job.spec)

    await store.commit(progress=[JobProgress(job_id=job.id, next_fire_key="")])
    got = await store.get_job(ALICE, job.id)
    assert (got.next_fire_at, got.next_fire_key, got.consecutive_failures) == (None, "", 2)


async def test_commit_never_moves_a_run_backwards(store: JobStore) -> None:
    job = await create(store, make_job())
    pending = make_run(job)
    await store.commit(runs=[pending])
    again = dataclasses.replace(pending, priority=3)  # PENDING over PENDING overwrites
    await store.commit(runs=[again])
    assert await store.get_run(ALICE, pending.id) == again
    running = dataclasses.replace(again, state=RunState.RUNNING, started_at=T0 + S)
    await store.commit(runs=[running])
    await store.commit(runs=[dataclasses.replace(again, state=RunState.LEASED)])
    assert await store.get_run(ALICE, pending.id) == running
    done = dataclasses.replace(running, state=RunState.SUCCEEDED, ended_at=T0 + 2 * S)
    await store.commit(runs=[done])
    await store.commit(runs=[pending], due=[pending])  # a replayed materialisation
    assert await store.get_run(ALICE, pending.id) == done
    await store.commit(runs=[running])
    assert await store.get_run(ALICE, pending.id) == done
    # final over final is allowed (e.g. a dead letter dropped)
    failed = dataclasses.replace(done, state=RunState.FAILED, dead_letter=True)
    await store.commit(runs=[failed])
    dropped = dataclasses.replace(failed, dead_letter=False)
    await store.commit(runs=[dropped])
    assert await store.get_run(ALICE, pending.id) == dropped


async def _active_paused_deleted(store: JobStore) -> tuple[Job, Job, Job]:
    """Three stored jobs: ACTIVE, PAUSED (reason "by user") and DELETED."""
    active = await create(store, make_job())
    paused = await create(
        store, dataclasses.replace(make_job(state=JobState.PAUSED), pause_reason="by user")
    )
    deleted = await create(store, make_job(state=JobState.DELETED))
    return active, paused, deleted


async def test_progress_state_moves_only_active_jobs(store: JobStore) -> None:
    active, paused, deleted = await _active_paused_deleted(store)
    completed = await create(store, make_job())
    await store.commit(
        progress=[
            JobProgress(job_id=active.id, state=JobState.PAUSED, pause_reason="5 failures"),
            JobProgress(job_id=completed.id, state=JobState.COMPLETED, next_fire_key=""),
            JobProgress(job_id=paused.id, state=JobState.PAUSED, pause_reason="5 failures"),
            JobProgress(job_id=deleted.id, state=JobState.PAUSED, pause_reason="x"),
        ]
    )
    got = await store.get_jobs([active.id, completed.id, paused.id, deleted.id])
    assert (got[active.id].state, got[active.id].pause_reason) == (JobState.PAUSED, "5 failures")
    assert got[completed.id].state == JobState.COMPLETED
    # A pause reason sent with a state goes only where the state goes.
    assert (got[paused.id].state, got[paused.id].pause_reason) == (JobState.PAUSED, "by user")
    assert (got[deleted.id].state, got[deleted.id].pause_reason) == (JobState.DELETED, "")
    await store.commit(progress=[JobProgress(job_id=paused.id, state=JobState.COMPLETED)])
    assert (await store.get_job(ALICE, paused.id)).state == JobState.PAUSED
    assert all(j.version == 1 for j in got.values())
    # ACTIVE and DELETED are not states progress may set.
    await store.commit(
        progress=[
            JobProgress(job_id=active.id, state=JobState.ACTIVE),
            JobProgress(job_id=completed.id, state=JobState.DELETED),
        ]
    )
    got = await store.get_jobs([active.id, completed.id])
    assert (got[active.id].state, got[completed.id].state) == (JobState.PAUSED, JobState.COMPLETED)


async def test_progress_with_columns_and_a_state_moves_the_state_only_where_active(
    store: JobStore,
) -> None:
    # The columns go to every job named; the state (and its reason) only to ACTIVE ones.
    active, paused, deleted = await _active_paused_deleted(store)
    await store.commit(
        progress=[
            JobProgress(
                job_id=j.id, state=state, next_fire_key="", consecutive_failures=3, pause_reason=why
            )
            for j, state, why in [
                (active, JobState.PAUSED, "3 failures"),
                (paused, JobState.PAUSED, "3 failures"),
                (deleted, JobState.COMPLETED, None),
            ]
        ]
    )
    got = await store.get_jobs([active.id, paused.id, deleted.id])
    assert (got[active.id].state, got[active.id].pause_reason) == (JobState.PAUSED, "3 failures")
    assert (got[paused.id].state, got[paused.id].pause_reason) == (JobState.PAUSED, "by user")
    assert got[deleted.id].state == JobState.DELETED
    for job in got.values():
        assert (job.consecutive_failures, job.next_fire_at, job.next_fire_key) == (3, None, "")


async def test_a_users_update_after_the_pollers_move_wins(store: JobStore) -> None:
    # The poller moves the state without reading the job (Cassandra: columns of its own,
    # the later write wins at read); a user's resume afterwards brings it back, and the
    # poller may move it again.
    job = await create(store, make_job())
    await store.commit(
        progress=[JobProgress(job_id=job.id, state=JobState.PAUSED, pause_reason="3 failures")]
    )
    paused = await store.get_job(ALICE, job.id)
    assert (paused.state, paused.pause_reason) == (JobState.PAUSED, "3 failures")
    resumed = await store.update_job(
        dataclasses.replace(paused, state=JobState.ACTIVE, pause_reason=""),
        expected_version=paused.version,
    )
    assert (resumed.state, resumed.pause_reason) == (JobState.ACTIVE, "")
    assert (await store.get_jobs([job.id]))[job.id].state == JobState.ACTIVE
    await store.commit(
        progress=[JobProgress(job_id=job.id, state=JobState.COMPLETED, next_fire_key="")]
    )
    assert (await store.get_job(ALICE, job.id)).state == JobState.COMPLETED
    # a user's pause after that wins again
    done = await store.get_job(ALICE, job.id)
    await store.update_job(
        dataclasses.replace(done, state=JobState.PAUSED, pause_reason="by user"),
        expected_version=done.version,
    )
    got = await store.get_job(ALICE, job.id)
    assert (got.state, got.pause_reason) == (JobState.PAUSED, "by user")


async def test_progress_of_a_job_never_stored_makes_no_job(store: JobStore) -> None:
    ghost = make_job()
    await store.commit(
        progress=[
            JobProgress(
                job_id=ghost.id, state=JobState.COMPLETED, next_fire_key="", consecutive_failures=2
            )
        ]
    )
    assert await store.get_jobs([ghost.id]) == {}
    with pytest.raises(NotFound):
        await store.get_job(ALICE, ghost.id)
    assert [j.id for j in (await store.list_jobs(ALICE)).items] == []


async def test_progress_never_touches_spec_or_version(store: JobStore) -> None:
    job = await create(store, make_job(name="a"))
    updated = await store.update_job(
        dataclasses.replace(job, spec=job.spec.replace(name="b"), schedule_version=2),
        expected_version=1,
    )
    await store.commit(progress=[JobProgress(job_id=job.id, consecutive_failures=1)])
    got = await store.get_job(ALICE, job.id)
    assert got == dataclasses.replace(updated, consecutive_failures=1)


# --------------------------------------------------------------------------- run listings


async def test_list_runs_newest_first_with_state_filter_and_pages(store: JobStore) -> None:
    job = await create(store, make_job())
    other = await create(store, make_job())
    states = [RunState.SUCCEEDED, RunState.FAILED, RunState.PENDING]
    runs = [
        make_run(job, due_at=T0 + i * S, fire_key=f"f{i}", state=states[i % 3]) for i in range(17)
    ]
    await store.commit(runs=[*runs, make_run(other)])
    newest_first = sorted(runs, key=lambda r: r.due_at, reverse=True)
    assert (await store.list_runs(ALICE, job.id)).items == newest_first
    for size in (1, 4, 17):
        got = await all_pages(lambda **kw: store.list_runs(ALICE, job.id, **kw), size)
        assert got == newest_first
    failed = await all_pages(
        lambda **kw: store.list_runs(ALICE, job.id, states=frozenset({RunState.FAILED}), **kw), 2
    )
    assert failed == [r for r in newest_first if r.state == RunState.FAILED]
    with pytest.raises(NotFound):
        await store.list_runs(ALICE, new_job_id())
    empty = await create(store, make_job())
    assert (await store.list_runs(ALICE, empty.id)).items == []


async def test_list_owner_runs_across_jobs_by_state_in_job_then_newest_order(
    store: JobStore,
) -> None:
    jobs = [await create(store, make_job()) for _ in range(4)]
    bobs = await create(store, make_job(BOB))
    states = [RunState.RUNNING, RunState.SUCCEEDED, RunState.PENDING, RunState.RUNNING]
    runs = [
        make_run(job, due_at=T0 + i * S, fire_key=f"f{i}", state=states[(i + j) % 4])
        for j, job in enumerate(jobs)
        for i in range(5)
    ]
    await store.commit(runs=[*runs, make_run(bobs, state=RunState.RUNNING)])
    in_order = sorted(runs, key=lambda r: (r.job_id, -r.due_at.timestamp()))
    running = frozenset({RunState.RUNNING})
    for size in (1, 3, 20, 1000):
        got = await all_pages(lambda **kw: store.list_owner_runs(ALICE, **kw), size)
        assert got == in_order
        got = await all_pages(lambda **kw: store.list_owner_runs(ALICE, states=running, **kw), size)
        assert got == [r for r in in_order if r.state == RunState.RUNNING]
    bob_running = await all_pages(lambda **kw: store.list_owner_runs(BOB, states=running, **kw), 10)
    assert [r.job_id for r in bob_running] == [bobs.id]
    assert (await store.list_owner_runs("nobody")).items == []
    job_token = (await store.list_runs(ALICE, jobs[0].id, page_size=1)).next_page_token
    with pytest.raises(InvalidArgument):
        await store.list_owner_runs(ALICE, page_token=job_token)


async def test_list_active_runs(store: JobStore) -> None:
    job = await create(store, make_job())
    runs = [
        make_run(job, due_at=T0 + i * S, fire_key=f"f{i}", state=state)
        for i, state in enumerate(RunState)
    ]
    await store.commit(runs=[*runs, make_run(await create(store, make_job()))])
    active = await store.list_active_runs(job.id)
    assert sorted(r.id for r in active) == sorted(r.id for r in runs if not r.is_final)
    assert {r.state for r in active} == {RunState.PENDING, RunState.LEASED, RunState.RUNNING}
    assert await store.list_active_runs(new_job_id()) == []


async def test_dead_letters_per_job_and_per_owner(store: JobStore) -> None:
    a, b = await create(store, make_job()), await create(store, make_job())
    bobs = await create(store, make_job(BOB))

    def dead(job: Job, i: int) -> Run:
        return make_run(
            job, due_at=T0 + i * S, fire_key=f"f{i}", state=RunState.FAILED, dead_letter=True
        )

    dead_runs = [dead(a, 1), dead(b, 2), dead(a, 3), dead(b, 4), dead(a, 5)]
    alive = make_run(a, due_at=T0 + 6 * S, fire_key="ok", state=RunState.FAILED)
    await store.commit(runs=[*dead_runs, alive, dead(bobs, 7)])
    newest = sorted(dead_runs, key=lambda r: r.due_at, reverse=True)
    assert (await store.list_dead_letters(ALICE)).items == newest
    assert (await store.list_dead_letters(ALICE, job_id=a.id)).items == [
        r for r in newest if r.job_id == a.id
    ]
    assert (await store.list_dead_letters(BOB, job_id=a.id)).items == []
    assert [r.job_id for r in (await store.list_dead_letters(BOB)).items] == [bobs.id]
    assert await all_pages(lambda **kw: store.list_dead_letters(ALICE, **kw), 2) == newest
    # Clearing the flag takes a run off the list.
    await store.commit(runs=[dataclasses.replace(newest[0], dead_letter=False)])
    assert (await store.list_dead_letters(ALICE)).items == newest[1:]


# --------------------------------------------------------------------------- due index


async def test_scan_due_bounds_order_after_and_limit(store: JobStore) -> None:
    job = await create(store, make_job(shard=2))
    dues = [T0 - S, T0, T0 + 59 * S, T0 + 60 * S, T0 + 61 * S, T0 + 150 * S, T0 + 3600 * S]
    runs = [make_run(job, due_at=d, fire_key=f"f{i}") for i, d in enumerate(dues)]
    twin = make_run(job, due_at=T0 + 60 * S, fire_key="twin")  # same due time: run id breaks ties
    await store.commit(runs=[*runs, twin], due=[*reversed(runs), twin])
    window = await store.scan_due(2, due_from=T0, due_until=T0 + 150 * S)
    expected = sorted([(r.due_at, r.id) for r in [*runs, twin] if T0 <= r.due_at < T0 + 150 * S])
    assert [(e.due_at, e.run_id) for e in window] == expected
    assert all(e.shard == 2 and e.job_id == job.id for e in window)
    assert len(expected) == 5  # spans three buckets

    head = await store.scan_due(2, due_from=T0, due_until=T0 + 150 * S, limit=2)
    assert [(e.due_at, e.run_id) for e in head] == expected[:2]
    rest = await store.scan_due(
        2, due_from=T0, due_until=T0 + 150 * S, after=(head[-1].due_at, head[-1].run_id)
    )
    assert [(e.due_at, e.run_id) for e in rest] == expected[2:]
    mid = expected[2]  # strictly after: a tie on due_at continues by run id
    tail = await store.scan_due(2, due_from=T0, due_until=T0 + 150 * S, after=mid)
    assert [(e.due_at, e.run_id) for e in tail] == expected[3:]
    assert await store.scan_due(2, due_from=T0 + 150 * S, due_until=T0 + 150 * S) == []
    everything = await store.scan_due(2, due_from=T0 - 3600 * S, due_until=T0 + 7200 * S)
    assert len(everything) == 8


async def test_scan_due_is_per_shard_and_keeps_priority(store: JobStore) -> None:
    jobs = {}
    for shard in (0, 1, 7):
        spec = JobSpec(name=f"s{shard}", task=HandlerTask(name="h"), priority=shard * 10)
        jobs[shard] = await create(store, make_job(shard=shard, spec=spec))
    runs = {shard: make_run(job, due_at=T0 + shard * S) for shard, job in jobs.items()}
    await store.commit(runs=list(runs.values()), due=list(runs.values()))
    for shard in range(SHARDS):
        got = await store.scan_due(shard, due_from=T0, due_until=T0 + 60 * S)
        if shard in runs:
            assert got == [
                DueEntry(
                    shard=shard,
                    due_at=runs[shard].due_at,
                    run_id=runs[shard].id,
                    job_id=jobs[shard].id,
                    priority=shard * 10,
                )  # fmt: skip
            ]
        else:
            assert got == []


async def test_due_rows_stay_after_the_run_is_final(store: JobStore) -> None:
    job = await create(store, make_job(shard=4))
    run = make_run(job, due_at=T0 + S)
    await store.commit(runs=[run], due=[run])
    await store.commit(runs=[dataclasses.replace(run, state=RunState.SUCCEEDED)])
    got = await store.scan_due(4, due_from=T0, due_until=T0 + 60 * S)
    assert [e.run_id for e in got] == [run.id]  # callers skip runs that are already final
    await store.commit(due=[run])  # adding the same row again does not duplicate it
    assert len(await store.scan_due(4, due_from=T0, due_until=T0 + 60 * S)) == 1


async def test_cursors_never_move_backwards(store: JobStore) -> None:
    assert await store.load_cursors([0, 1, 2]) == {}
    await store.save_cursors({0: T0, 1: T0 + 60 * S})
    await store.save_cursors({0: T0 - 60 * S, 1: T0 + 120 * S, 2: T0})
    assert await store.load_cursors([0, 1, 2, 3]) == {0: T0, 1: T0 + 120 * S, 2: T0}
    await store.save_cursors({1: T0 + 120 * S})
    assert await store.load_cursors([1]) == {1: T0 + 120 * S}
    assert await store.load_cursors([]) == {}


async def test_oldest_due(store: JobStore) -> None:
    assert await store.oldest_due(5) is None
    job = await create(store, make_job(shard=5))
    runs = [make_run(job, due_at=T0 + d * S, fire_key=f"f{d}") for d in (600, 61, 59)]
    await store.commit(runs=runs, due=runs)
    assert await store.oldest_due(5) == T0 + 59 * S
    assert await store.oldest_due(6) is None


# --------------------------------------------------------------------------- output


async def test_output_append_and_read(store: JobStore) -> None:
    rid = "run-out-1"
    assert await store.read_output(rid) == []
    await store.append_output(
        [
            OutputChunk(run_id=rid, offset=999, data=b"hello "),  # offset is ignored
            OutputChunk(run_id=rid, offset=0, data=b"oops\n", stream="stderr"),
            OutputChunk(run_id="run-out-2", offset=0, data=b"other"),
        ]
    )
    await store.append_output([OutputChunk(run_id=rid, offset=0, data=b"world")])
    chunks = await store.read_output(rid)
    assert joined(chunks) == (0, b"hello oops\nworld")
    assert [(c.offset, c.stream) for c in chunks] == [(0, "stdout"), (6, "stderr"), (11, "stdout")]
    assert joined(await store.read_output(rid, offset=8)) == (8, b"ps\nworld")
    assert joined(await store.read_output(rid, offset=-3)) == (13, b"rld")
    assert joined(await store.read_output(rid, offset=-1000)) == (0, b"hello oops\nworld")
    assert await store.read_output(rid, offset=16) == []
    assert await store.read_output(rid, offset=100) == []
    limited = await store.read_output(rid, offset=2, limit=5)
    offset, data = joined(limited)
    assert offset == 2 and len(data) >= 1 and b"hello oops\nworld"[2:].startswith(data)
    assert joined(await store.read_output("run-out-2")) == (0, b"other")


async def test_output_is_capped_keeping_the_tail(store: JobStore) -> None:
    rid = "run-capped"
    written = b""
    for i in range(40):
        data = bytes([65 + i % 26]) * 100
        written += data
        await store.append_output([OutputChunk(run_id=rid, offset=0, data=data)])
    offset, kept = joined(await store.read_output(rid, limit=1 << 20))
    assert len(kept) <= CAP and len(kept) >= 100  # at most the cap, and the newest chunk whole
    assert offset == len(written) - len(kept) and written.endswith(kept)
    # Reads below the oldest kept byte are clamped to it.
    assert joined(await store.read_output(rid, offset=0))[0] == offset
    assert joined(await store.read_output(rid, offset=-50)) == (len(written) - 50, written[-50:])
    # Offsets keep counting from everything ever written.
    await store.append_output([OutputChunk(run_id=rid, offset=0, data=b"end")])
    written += b"end"
    assert joined(await store.read_output(rid, offset=-3)) == (len(written) - 3, b"end")


async def test_output_single_chunk_larger_than_the_cap_keeps_its_tail(store: JobStore) -> None:
    rid = "run-big"
    await store.append_output([OutputChunk(run_id=rid, offset=0, data=b"x" * 10)])
    big = bytes(range(11, 256)) * 10  # 2450 bytes, no newline: one line longer than the cap
    await store.append_output([OutputChunk(run_id=rid, offset=0, data=big)])
    assert joined(await store.read_output(rid)) == (10 + len(big) - CAP, big[-CAP:])


def lines(count: int, width: int, tag: str = "") -> bytes:
    return b"".join(f"{tag}{i:0{width - 1 - len(tag)}d}\n".encode() for i in range(count))


async def test_output_is_cut_to_the_cap_keeping_whole_last_lines(store: JobStore) -> None:
    # A chunk of nearly the cap then a short one: dropping whole chunks kept 6 bytes.
    rid = "run-lines"
    first, second = lines(CAP // 10, 10), b"tail!\n"
    await store.append_output([OutputChunk(run_id=rid, offset=0, data=first)])
    await store.append_output([OutputChunk(run_id=rid, offset=0, data=second)])
    written = first + second
    offset, kept = joined(await store.read_output(rid, limit=1 << 20))
    assert written.endswith(kept) and offset == len(written) - len(kept)
    assert CAP - 10 < len(kept) <= CAP  # whole 10-byte lines, up to the cap
    assert written[offset - 1 : offset] == b"\n"  # it starts a line
    # One call with many chunks, far over the cap: the same rule.
    rid = "run-lines-2"
    pieces = [lines(50, 10, f"{k}-") for k in range(20)]  # 20 chunks of 500 bytes
    await store.append_output([OutputChunk(run_id=rid, offset=0, data=p) for p in pieces])
    written = b"".join(pieces)
    offset, kept = joined(await store.read_output(rid, limit=1 << 20))
    assert written.endswith(kept) and CAP - 10 < len(kept) <= CAP
    assert written[offset - 1 : offset] == b"\n"
    # A line longer than the cap keeps its last cap bytes, however it was chunked.
    rid = "run-long-line"
    await store.append_output([OutputChunk(run_id=rid, offset=0, data=b"x" * 700)])
    await store.append_output([OutputChunk(run_id=rid, offset=0, data=b"\n" + b"y" * 1500)])
    await store.append_output([OutputChunk(run_id=rid, offset=0, data=b"z" * 3)])
    written = b"x" * 700 + b"\n" + b"y" * 1500 + b"zzz"
    assert joined(await store.read_output(rid)) == (len(written) - CAP, written[-CAP:])


# --------------------------------------------------------------------------- group commit


async def test_concurrent_creates_all_land(store: JobStore) -> None:
    jobs = [make_job(name=f"c{i}") for i in range(200)]
    runs = [make_run(j, due_at=T0 + (i % 90) * S) for i, j in enumerate(jobs)]
    results = await asyncio.gather(
        *(store.create_jobs([NewJob(job=j, runs=[r])]) for j, r in zip(jobs, runs, strict=True))
    )
    assert [res for [res] in results] == [(j, True) for j in jobs]
    assert len(await store.get_jobs([j.id for j in jobs])) == 200
    assert len(await store.get_runs([r.id for r in runs])) == 200
    due = 0
    for shard in range(SHARDS):
        due += len(await store.scan_due(shard, due_from=T0, due_until=T0 + 120 * S, limit=1000))
    assert due == 200


async def test_one_version_conflict_does_not_fail_concurrent_writes(store: JobStore) -> None:
    jobs = [await create(store, make_job(name=f"u{i}")) for i in range(20)]
    victim = jobs[7]
    stale_run = make_run(victim, due_at=T0 + 5 * S, fire_key="stale")
    calls = [
        store.update_job(
            dataclasses.replace(j, spec=j.spec.replace(name="new")), expected_version=1
        )
        for j in jobs
        if j is not victim
    ]
    calls.insert(
        5,
        store.update_job(victim, expected_version=9, runs=[stale_run], due=[stale_run]),
    )
    extra, fresh = make_job(), make_job()
    calls.append(store.create_jobs([NewJob(job=extra)]))
    # A failing create among them: its first job must not be written either.
    batch = [NewJob(job=fresh, runs=[make_run(fresh)]), NewJob(job=unwritable_job())]
    calls.append(store.create_jobs(batch))
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert isinstance(results[5], VersionConflict)
    assert isinstance(results[-1], Exception)
    assert not any(isinstance(r, BaseException) for r in results[:5] + results[6:-1])
    got = await store.get_jobs([j.id for j in jobs] + [extra.id, fresh.id])
    assert got[victim.id] == victim
    assert all(got[j.id].version == 2 for j in jobs if j is not victim)
    assert extra.id in got and fresh.id not in got
    assert await store.get_runs([stale_run.id, make_run(fresh).id]) == {}


# --------------------------------------------------------------------------- quotas, retention


async def test_count_jobs_counts_the_owners_jobs_that_are_not_deleted(store: JobStore) -> None:
    jobs = [await create(store, make_job(ALICE, idempotency_key=f"k{i}")) for i in range(3)]
    await create(store, make_job(BOB))
    await create(store, make_job(ALICE, state=JobState.DELETED))
    again = await store.create_jobs([NewJob(job=make_job(ALICE, idempotency_key="k0"))])
    assert again[0][1] is False  # a retried create is not a second job
    assert (await store.count_jobs(ALICE), await store.count_jobs(BOB)) == (3, 1)
    paused = dataclasses.replace(jobs[0], state=JobState.PAUSED)
    await store.update_job(paused, expected_version=1)
    await store.update_job(dataclasses.replace(jobs[1], state=JobState.DELETED), expected_version=1)
    assert (await store.count_jobs(ALICE), await store.count_jobs("nobody")) == (2, 0)


RETENTION = timedelta(seconds=2)


@pytest.fixture(params=list(BACKENDS))
async def retention_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[JobStore]:
    """An opened, empty store keeping final runs ``RETENTION`` after they end."""
    config = {**CONTRACT_CONFIG, "retention": RETENTION}
    backends = {
        "sqlite": lambda p: lambda: SqliteStore(p / "r.db", **config),
        "sqlite-process": lambda p: lambda: SqliteStore(p / "r.db", **config, writer_process=True),
    }
    backends["cassandra"] = cassandra_backend(config)
    store = backends[request.param](tmp_path)()
    await store.open()
    yield store
    await store.close()


async def test_final_runs_and_their_output_expire_after_the_retention(
    retention_store: JobStore,
) -> None:
    store = retention_store
    now = utcnow()
    long_ago, later = now - timedelta(days=3), now + timedelta(days=1)
    job = await create(store, make_job())
    ended = make_run(job, due_at=now, state=RunState.SUCCEEDED, ended_at=now, fire_key="a")
    skipped = make_run(job, due_at=now, state=RunState.SKIPPED, fire_key="b")
    kept = {
        "pending": make_run(job, due_at=long_ago, fire_key="c"),
        "running": make_run(job, due_at=long_ago, state=RunState.RUNNING, fire_key="d"),
        "dead letter": make_run(
            job, due_at=long_ago, state=RunState.FAILED, ended_at=long_ago, dead_letter=True,
            fire_key="e",
        ),
        "ends later": make_run(
            job, due_at=now, state=RunState.SUCCEEDED, ended_at=later, fire_key="f"
        ),
    }  # fmt: skip
    await store.append_output([OutputChunk(run_id=ended.id, offset=0, data=b"bye")])
    await store.commit(runs=[ended, skipped, *kept.values()])

    said: list[tuple[str, str]] = []
    for _ in range(600):  # Cassandra's TTLs run on its clock: poll, up to a minute
        said += await store.expire_runs(utcnow())
        if await store.get_runs([ended.id, skipped.id]) == {}:
            break
        await asyncio.sleep(0.1)
    else:
        pytest.fail("the final runs did not expire")
    # a store that deletes says whom (their blobs follow); one whose rows expire by TTL, none
    assert sorted(said) in ([], sorted([(ALICE, ended.id), (ALICE, skipped.id)]))
    if isinstance(store, SqliteStore):
        assert said
    assert await store.read_output(ended.id) == []
    assert await store.get_runs([r.id for r in kept.values()]) == {r.id: r for r in kept.values()}
    assert (await store.get_job(ALICE, job.id)).id == job.id  # jobs never expire
    with pytest.raises(NotFound):
        await store.get_run(ALICE, ended.id)


# --------------------------------------------------------------------------- artifact references


async def test_artifact_references_are_kept_per_owner_and_digest(
    store: JobStore, store_factory
) -> None:
    a, b = "a" * 64, "b" * 64
    jobs = sorted(new_job_id() for _ in range(3))
    assert await store.artifact_refs(ALICE, a) == []
    await store.add_artifact_refs(
        [ArtifactRef(owner=ALICE, sha256=a, job_id=j) for j in reversed(jobs)]
        + [ArtifactRef(owner=ALICE, sha256=b, job_id=jobs[0])]
        + [ArtifactRef(owner="bob", sha256=a, job_id=jobs[1])]
    )
    await store.add_artifact_refs([ArtifactRef(owner=ALICE, sha256=a, job_id=jobs[0])])  # again
    assert await store.artifact_refs(ALICE, a) == jobs  # in id order, each once
    assert await store.artifact_refs(ALICE, b) == [jobs[0]]
    assert await store.artifact_refs("bob", a) == [jobs[1]]  # another owner's are apart
    assert await store.artifact_refs(ALICE, a, limit=2) == jobs[:2]
    await store.remove_artifact_refs(
        [
            ArtifactRef(owner=ALICE, sha256=a, job_id=jobs[1]),
            ArtifactRef(owner=ALICE, sha256=a, job_id="gone"),
        ]
    )
    await store.close()
    again = await store_factory()  # durable
    assert await again.artifact_refs(ALICE, a) == [jobs[0], jobs[2]]
    assert await again.artifact_refs("bob", a) == [jobs[1]]


# --- notification deliveries ---------------------------------------------------------


def _delivery(run: Run, rule: NotifyRule = NotifyRule.FAILURE, **fields: object) -> Delivery:
    return Delivery(
        id=f"{run.id}.{rule.lower()}", owner=run.owner, job_id=run.job_id, run_id=run.id,
        shard=run.shard, rule=rule, reason="it failed", webhook_url="https://hooks.example/x",
        body=b'{"run": 1}\x00', created_at=run.ended_at or T0, **fields,
    )  # fmt: skip


async def test_deliveries_written_with_the_commit_and_listed_by_owner_and_job(
    store_factory: Callable[[], Awaitable[JobStore]],
) -> None:
    store = await store_factory()
    job, other = await create(store, make_job()), await create(store, make_job())
    bobs = await create(store, make_job(BOB))
    runs = [
        make_run(j, due_at=T0 + i * S, state=RunState.FAILED, ended_at=T0 + i * S)
        for i, j in enumerate((job, other, bobs))
    ]
    made = [_delivery(r) for r in runs]
    await store.commit(runs=runs, deliveries=made)
    again = await store_factory()  # durable: read through another instance
    newest = sorted(made[:2], key=lambda d: d.id, reverse=True)
    assert (await again.list_deliveries(ALICE)).items == newest
    assert (await again.list_deliveries(ALICE, job_id=other.id)).items == [made[1]]
    assert (await again.list_deliveries(BOB, job_id=job.id)).items == []
    assert await all_pages(lambda **kw: again.list_deliveries(ALICE, **kw), 1) == newest
    pending = await again.pending_deliveries(runs[0].shard)
    assert made[0] in pending
    assert all(d.shard == runs[0].shard for d in pending)


async def test_a_delivery_sent_leaves_the_pending_ones_and_a_replay_never_resets_it(
    store: JobStore,
) -> None:
    job = await create(store, make_job())
    run = make_run(job, state=RunState.FAILED, ended_at=T0)
    first = _delivery(run)
    await store.commit(runs=[run], deliveries=[first])
    assert await store.pending_deliveries(run.shard) == [first]
    tried = dataclasses.replace(
        first, attempts=1, last_attempt_at=T0 + S, last_error="HTTP 500", next_attempt_at=T0 + 2 * S
    )
    await store.save_deliveries([tried])
    assert await store.pending_deliveries(run.shard) == [tried]
    sent = dataclasses.replace(
        tried, status=DeliveryStatus.DELIVERED, attempts=2, delivered_at=T0 + 3 * S,
        next_attempt_at=None, last_error="",
    )  # fmt: skip
    await store.save_deliveries([sent])
    assert await store.pending_deliveries(run.shard) == []
    await store.commit(runs=[run], deliveries=[first])  # the same end, written again
    assert await store.pending_deliveries(run.shard) == []
    assert (await store.list_deliveries(ALICE)).items == [sent]


async def test_delivery_page_tokens_of_another_listing_are_refused(store: JobStore) -> None:
    token = page_token(PageKind.RUNS, "r-1")
    with pytest.raises(InvalidArgument):
        await store.list_deliveries(ALICE, page_token=token)


async def test_owner_settings_are_written_whole_and_read_back(
    store_factory: Callable[[], Awaitable[JobStore]],
) -> None:
    store = await store_factory()
    assert await store.get_owner_settings(ALICE) is None
    assert await store.list_owner_settings() == []
    policy = NotifyPolicy(
        webhook_url="https://hooks.example/a", on_failure=True, on_late=timedelta(seconds=30)
    )
    alice = OwnerSettings(
        owner=ALICE, notify_defaults=policy, notify_secret="sealed:v1:k:abc", updated_at=T0
    )
    bob = OwnerSettings(owner=BOB, notify_secret="bobs", updated_at=T0)
    await store.put_owner_settings(alice)
    await store.put_owner_settings(bob)
    again = await store_factory()
    assert await again.get_owner_settings(ALICE) == alice
    assert sorted(await again.list_owner_settings(), key=lambda s: s.owner) == [alice, bob]
    cleared = dataclasses.replace(alice, notify_defaults=None, notify_secret="", updated_at=T0 + S)
    await again.put_owner_settings(cleared)
    assert await store.get_owner_settings(ALICE) == cleared
