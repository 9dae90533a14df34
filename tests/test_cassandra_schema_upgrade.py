"""A keyspace made before a table was added: a node refuses it, naming the table and
``shardcron store init``, and ``store init`` adds the table to it."""

from __future__ import annotations

import pytest

from shardcron.coordinator.cassandra.store import init_schema
from shardcron.coordinator.store_rules import SchemaMismatch
from tests.support.cassandra import cassandra_node

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
