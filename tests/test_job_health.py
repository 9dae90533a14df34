"""A page of jobs with their health (``coordinator/job_health.py``), read from a real
SQLite store: the runs that came due, newest first, at most 20, and a job whose runs
cannot be read listed without its health rather than failing the page."""

from __future__ import annotations

from datetime import timedelta

from shardcron.client.types import JOB_HEALTH_RUNS, RunState
from shardcron.coordinator.job_health import with_health
from shardcron.coordinator.sqlite.store import SqliteStore
from shardcron.coordinator.store import NewJob
from tests.support.store_builders import ALICE, T0, make_job, make_run

S = timedelta(seconds=1)


async def test_the_strip_holds_the_last_runs_that_came_due_newest_first(
    sqlite_store: SqliteStore,
) -> None:
    job = make_job(ALICE, name="every-second")
    states = [RunState.SUCCEEDED, RunState.FAILED, RunState.TIMED_OUT, RunState.CANCELLED]
    runs = [
        make_run(job, due_at=T0 + i * S, state=states[i % 4], fire_key=f"f{i}")
        for i in range(JOB_HEALTH_RUNS + 5)
    ]
    ahead = make_run(job, due_at=T0 + 3600 * S, fire_key="next")  # PENDING, not due yet
    await sqlite_store.create_jobs([NewJob(job=job, runs=[*runs, ahead])])
    now = T0 + 60 * S
    [listed] = await with_health(sqlite_store, ALICE, [job], now)
    health = listed.health
    assert health is not None
    assert [r.run_id for r in health.runs] == [r.id for r in reversed(runs)][:JOB_HEALTH_RUNS]
    assert ahead.id not in {r.run_id for r in health.runs}
    # 20 newest of 25 (i = 5..24): 5 of each state; SUCCEEDED rated against FAILED, TIMED_OUT
    assert (health.succeeded, health.rated) == (5, 15)
    assert health.success_rate == 5 / 15
    assert listed.id == job.id and listed.spec == job.spec


async def test_a_job_whose_runs_cannot_be_read_is_listed_without_health(
    sqlite_store: SqliteStore,
) -> None:
    stored = make_job(ALICE, name="stored")
    await sqlite_store.create_jobs(
        [NewJob(job=stored, runs=[make_run(stored, state=RunState.SUCCEEDED)])]
    )
    gone = make_job(ALICE, name="never-stored")  # list_runs: NotFound
    first, second = await with_health(sqlite_store, ALICE, [gone, stored], T0 + S)
    assert (first.id, first.health) == (gone.id, None)
    assert second.health is not None and second.health.success_rate == 1.0
