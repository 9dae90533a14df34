"""Replaying a dead letter twice writes one run, not two.

The replay writes its new run before it clears the dead letter (two writes on
Cassandra). If the process dies in between, the dead letter is still listed and a
user replays it again: that second replay must be the same run.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from shardcron.client.types import RunState
from shardcron.coordinator.api import JobsApi
from shardcron.coordinator.metrics import Metrics
from shardcron.coordinator.sqlite.store import SqliteStore
from tests.support.links import HintLog
from tests.support.store_builders import ALICE, create, make_job, make_run


async def test_a_dead_letter_replayed_twice_is_one_run(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "db", shard_count=8, bucket_seconds=60)
    await store.open()
    try:
        job = await create(store, make_job())
        dead = make_run(job, state=RunState.FAILED, dead_letter=True)
        await store.commit(runs=[dead])
        api = JobsApi(store, HintLog(), Metrics())
        [first] = await api.replay_dead_letters(ALICE, [dead.id], "")
        # as if the process died before the dead letter was cleared
        await store.commit(runs=[dataclasses.replace(dead, dead_letter=True)])
        [second] = await api.replay_dead_letters(ALICE, [dead.id], "")
        assert second.id == first.id
        runs = (await store.list_runs(ALICE, job.id)).items
        assert sorted(r.id for r in runs) == sorted({dead.id, first.id})
    finally:
        await store.close()
