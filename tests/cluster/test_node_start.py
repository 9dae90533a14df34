"""Smoke test: `shardcron node` on ZooKeeper and Cassandra starts and serves.

The failure tests all start nodes the same way; this one tells a node that never
becomes SERVING (or never takes its shards) apart from a failover bug.
"""

from __future__ import annotations

import time

import pytest

from tests.cluster.cluster_harness import SHARDS, ShardcronCluster, measure


@pytest.mark.timeout(120)
def test_a_single_node_serves_and_owns_every_shard(  # type: ignore[no-untyped-def]
    tmp_path, zk_hosts, cassandra3, cluster_keyspace
) -> None:
    c = ShardcronCluster(
        tmp_path / "single",
        zk_hosts=zk_hosts,
        contact_points=cassandra3.contact_points,
        name="single",
        keyspace=cluster_keyspace,
    )
    try:
        begun = time.monotonic()
        node = c.add_node()
        c.wait_serving(node, timeout=30)
        measure("node start to SERVING", time.monotonic() - begun, test="node-start")
        st = c.wait_stable(timeout=20)
        assert st.leader == node.id and len(st.shards) == SHARDS
        assert {s.owner for s in st.shards} == {node.id}
    finally:
        c.close()
