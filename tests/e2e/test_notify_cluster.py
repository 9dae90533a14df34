"""Webhook notifications on a cluster node (``shardcron node``: ZooKeeper, and the
Cassandra store): a node SIGKILLed after it committed a failed run's delivery (its
first attempt reached the receiver, which never answered) has the delivery sent by the
node that serves the shard next, the same node restarted here.

One node and one worker on the session's ZooKeeper and the shared single-node Cassandra
(``SHARDCRON_TEST_CASSANDRA``), in a keyspace of replication factor 1 made for the test.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from shardcron.client.types import (
    CommandTask,
    DeliveryStatus,
    JobSpec,
    NotifyPolicy,
    RetryPolicy,
)
from tests.cluster.cluster_harness import ShardcronCluster, store_init
from tests.support.cassandra import cassandra_node
from tests.support.waiting import wait_until
from tests.support.webhooks import Receiver

pytestmark = pytest.mark.e2e

OWNER = "notify-cluster"


@pytest.fixture
def one_node(tmp_path: Path, zk_hosts: str) -> Iterator[ShardcronCluster]:
    points = cassandra_node().contact_points
    keyspace = f"shardcron_notify_{uuid.uuid4().hex[:8]}"
    store_init(points, keyspace, tmp_path / "store-init.log", rf=1)
    c = ShardcronCluster(
        tmp_path / "cluster",
        zk_hosts=zk_hosts,
        contact_points=points,
        name="notify-kill",
        keyspace=keyspace,
        node_extra=["--notify-allow-private"],
    )
    try:
        c.start(nodes=1, workers=1)
        yield c
    finally:
        c.close()
        cassandra_node().session().execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=120)


@pytest.mark.timeout(240)
def test_a_cluster_node_killed_after_the_commit_delivers_after_its_restart(
    one_node: ShardcronCluster,
) -> None:
    c = one_node
    receiver = Receiver().start()
    receiver.hold.set()  # the first attempt gets no answer: the node dies in it
    try:
        client = c.client("node1", owner=OWNER)
        job = client.create_job(
            JobSpec(
                name="killed",
                task=CommandTask(argv=("false",)),
                retry=RetryPolicy(max_attempts=1),
                notify=NotifyPolicy(webhook_url=f"{receiver.url}/k", on_failure=True),
            )
        )
        wait_until(lambda: receiver.received, timeout=60, what="the first attempt")
        c.kill_node("node1")
        receiver.hold.clear()
        restarted = c.add_node("node1")
        c.wait_serving(restarted)
        wait_until(
            lambda: any(r.status == 200 for r in receiver.received),
            timeout=90,
            what="the delivery after the restart",
        )
        client = c.client("node1", owner=OWNER)
        [d] = client.list_deliveries(job_id=job.id).items
        assert {r.headers["x-shardcron-delivery"] for r in receiver.received} == {d.id}
        wait_until(
            lambda: (
                client.list_deliveries(job_id=job.id).items[0].status == DeliveryStatus.DELIVERED
            ),
            timeout=15,
            what="the delivery recorded DELIVERED",
        )
    finally:
        receiver.stop()
