"""A call's due rows name each (shard, bucket) of ``shard_buckets`` once: a create of
many jobs in one shard plans one bucket row, not one per run (``WritePlanner``), and a
later call of this process, once that row is written, plans none."""

from __future__ import annotations

from shardcron.coordinator.cassandra.store import CassandraStore
from shardcron.coordinator.cassandra.writes import P_DUE, Writes, encode_runs
from tests.support.store_builders import make_job, make_run


def _statements(writes: Writes, table: str) -> int:
    return sum(
        len(p) for (phase, key), p in writes.parts.items() if (phase, key[0]) == (P_DUE, table)
    )


async def test_a_call_plans_each_bucket_row_once(cassandra_store: CassandraStore) -> None:
    planner = cassandra_store._planner
    runs = [make_run(make_job(shard=3)) for _ in range(50)]
    writes = Writes()
    await planner.put_runs(writes, runs, encode_runs(runs), runs, known_new=True)
    assert _statements(writes, "due_runs") == 50
    assert _statements(writes, "shard_buckets") == 1
    for done in writes.after:  # as once the call's writes landed
        done()
    again = [make_run(make_job(shard=3)) for _ in range(5)]
    later = Writes()
    await planner.put_runs(later, again, encode_runs(again), again, known_new=True)
    assert _statements(later, "due_runs") == 5
    assert _statements(later, "shard_buckets") == 0
