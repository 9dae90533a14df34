"""A keyspace made before a table or a column was added: a node refuses it, naming
what it lacks and ``shardcron store init``, and ``store init`` adds it."""

from __future__ import annotations

import pytest

from shardcron.client.types import LateReason, RunLateness, RunState, RunUsage
from shardcron.coordinator.cassandra.schema import schema_cql
from shardcron.coordinator.cassandra.store import init_schema
from shardcron.coordinator.store import NewJob
from shardcron.coordinator.store_rules import SchemaMismatch
from tests.support.cassandra import cassandra_node
from tests.support.store_builders import make_job, make_run

LAYOUT = {"shard_count": 8, "bucket_seconds": 60}


async def test_store_init_adds_the_job_counts_table_to_an_older_keyspace() -> None:
    node = cassandra_node()
    keyspace = node.keyspace(**LAYOUT, purpose="schema-upgrade")  # a keyspace of its own
    node.session().execute(f"DROP TABLE IF EXISTS {keyspace}.job_counts", timeout=60)

    older = node.store(keyspace, **LAYOUT, create_schema=False)
    with pytest.raises(SchemaMismatch, match=r"job_counts: run `shardcron store init`"):
        await older.open()

    await init_schema(node.contact_points, keyspace=keyspace, **LAYOUT)
    upgraded = node.store(keyspace, **LAYOUT, create_schema=False)
    await upgraded.open()
    try:
        assert await upgraded.count_jobs("anyone") == 0
    finally:
        await upgraded.close()


async def test_store_init_adds_the_usage_columns_to_an_older_runs_table() -> None:
    """A keyspace made before runs recorded what their command used: a node refuses it,
    naming the columns and ``store init``; after it, runs keep their usage, or none."""
    node = cassandra_node()
    keyspace = node.keyspace(**LAYOUT, purpose="usage-columns")
    [runs_ddl] = [ddl for ddl in schema_cql(keyspace) if f"{keyspace}.runs (" in ddl]
    added = "peak_memory_bytes bigint, cpu_micros bigint, limits_enforced boolean,"
    assert added in runs_ddl
    node.session().execute(f"DROP TABLE {keyspace}.runs", timeout=60)
    node.session().execute(runs_ddl.replace(added, ""), timeout=60)  # as it was made then

    older = node.store(keyspace, **LAYOUT, create_schema=False)
    with pytest.raises(SchemaMismatch, match=r"runs\.peak_memory_bytes, .*store init"):
        await older.open()

    await init_schema(node.contact_points, keyspace=keyspace, **LAYOUT)
    upgraded = node.store(keyspace, **LAYOUT, create_schema=False)
    await upgraded.open()
    try:
        job = make_job()
        used = make_run(job, state=RunState.FAILED, usage=RunUsage(cpu_seconds=2.5))
        unmeasured = make_run(job, attempt=2, state=RunState.SUCCEEDED)
        await upgraded.create_jobs([NewJob(job=job, runs=[used, unmeasured])])
        assert (await upgraded.get_run(job.owner, used.id)).usage == used.usage
        assert (await upgraded.get_run(job.owner, unmeasured.id)).usage is None
    finally:
        await upgraded.close()


async def test_store_init_adds_the_lateness_columns_to_an_older_runs_table() -> None:
    """A keyspace made before runs recorded why they were late: a node refuses it,
    naming the columns and ``store init``; after it, older runs read with no lateness
    and new ones keep theirs."""
    node = cassandra_node()
    keyspace = node.keyspace(**LAYOUT, purpose="lateness-columns")
    [runs_ddl] = [ddl for ddl in schema_cql(keyspace) if f"{keyspace}.runs (" in ddl]
    added = "late_reason text, late_text text, late_waited_micros bigint,"
    assert added in runs_ddl
    node.session().execute(f"DROP TABLE {keyspace}.runs", timeout=60)
    node.session().execute(runs_ddl.replace(added, ""), timeout=60)  # as it was made then

    older = node.store(keyspace, **LAYOUT, create_schema=False)
    with pytest.raises(SchemaMismatch, match=r"runs\.late_reason, .*store init"):
        await older.open()

    await init_schema(node.contact_points, keyspace=keyspace, **LAYOUT)
    upgraded = node.store(keyspace, **LAYOUT, create_schema=False)
    await upgraded.open()
    try:
        job = make_job()
        paused = RunLateness(reason=LateReason.PAUSED, text="paused")
        skipped = make_run(job, state=RunState.SKIPPED, lateness=paused)
        on_time = make_run(job, attempt=2, state=RunState.SUCCEEDED)
        await upgraded.create_jobs([NewJob(job=job, runs=[skipped, on_time])])
        assert (await upgraded.get_run(job.owner, skipped.id)).lateness == paused
        assert (await upgraded.get_run(job.owner, on_time.id)).lateness is None
    finally:
        await upgraded.close()
