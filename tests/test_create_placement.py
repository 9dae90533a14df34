"""A job of one fire due soon is created on a shard this node's poller serves, so its
run is handed over in memory; other jobs keep the shard their id drew."""

from __future__ import annotations

from datetime import timedelta

from shardcron.client.types import HandlerTask, JobSpec, Schedule
from shardcron.coordinator.api import JobsApi
from shardcron.coordinator.ids import utcnow
from shardcron.coordinator.metrics import Metrics
from shardcron.coordinator.sqlite.store import SqliteStore
from tests.support.links import HintLog
from tests.support.store_builders import ALICE, SHARDS

SERVED = frozenset(range(SHARDS * 3 // 4))  # a draw misses with chance 1/4; 17 draws 1/4**17


def _api(store: SqliteStore, hints: HintLog, served: frozenset[int]) -> JobsApi:
    return JobsApi(
        store,
        hints,
        Metrics(),
        served_here=served.__contains__,
        place_within=timedelta(minutes=1),
    )


def _spec(schedule: Schedule) -> JobSpec:
    return JobSpec(name="placed", task=HandlerTask(name="noop"), schedule=schedule)


async def _shards(api: JobsApi, schedule: Schedule, n: int) -> set[int]:
    created = await api.create_jobs(ALICE, [(_spec(schedule), "")] * n)
    stored = await api.store.get_jobs([job.id for job, _ in created])
    assert len(stored) == n
    runs = [r for job_id in stored for r in (await api.store.list_runs(ALICE, job_id)).items]
    return {r.shard for r in runs}


async def test_a_job_due_now_or_soon_is_created_on_a_shard_served_here(
    sqlite_store: SqliteStore,
) -> None:
    hints = HintLog()
    api = _api(sqlite_store, hints, SERVED)
    assert await _shards(api, Schedule.immediate(), 40) <= SERVED
    soon = Schedule.once_at(utcnow() + timedelta(seconds=30))
    assert await _shards(api, soon, 40) <= SERVED
    # the hints name those runs, on those shards: the poller here is handed them
    assert len(hints.runs) == 80
    assert {r.shard for r in hints.runs} <= SERVED


async def test_jobs_of_many_fires_or_due_later_keep_the_shard_they_drew(
    sqlite_store: SqliteStore,
) -> None:
    api = _api(sqlite_store, HintLog(), SERVED)
    # 60 jobs each: all on served shards by chance has odds (3/4)**60, under 1e-7
    later = Schedule.once_at(utcnow() + timedelta(minutes=5))
    assert not await _shards(api, later, 60) <= SERVED
    cron = Schedule.cron_expr("* * * * *")
    assert not await _shards(api, cron, 60) <= SERVED
    interval = Schedule.every(timedelta(seconds=10))
    assert not await _shards(api, interval, 60) <= SERVED


async def test_a_node_serving_no_shard_places_nothing(sqlite_store: SqliteStore) -> None:
    api = _api(sqlite_store, HintLog(), frozenset())
    assert len(await _shards(api, Schedule.immediate(), 60)) > 2
