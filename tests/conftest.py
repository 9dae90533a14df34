"""The fixtures every test directory shares: a real ZooKeeper and a real Cassandra.

- ``zookeeper``: one standalone ZooKeeper for the whole session, started on first
  use (tests/support/zookeeper.py); ``zk_hosts``: a connect string with a fresh
  chroot for one test.
- ``cassandra_store``: an open, empty Cassandra store in the store contract's
  configuration, on the session's Cassandra (tests/support/cassandra.py: the node
  named by ``SHARDCRON_TEST_CASSANDRA``, or one started on first use);
  ``cassandra_session_cleanup`` stops a node the session started, at its end.
- ``sqlite_store``: an open, empty SQLite store with the builders' shard count.
- ``zk_admin``: a ZooKeeper client of the test's chroot; ``zk_cluster``: several
  coordinations of one cluster on it (tests/support/zk_cluster.py).

Fixtures one directory alone uses live in its own ``conftest.py`` (``tests/e2e``,
``tests/cluster``); helpers that are not fixtures live in ``tests/support/``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from deploy import ZooKeeper
from shardcron.coordinator.cassandra.store import CassandraStore
from shardcron.coordinator.sqlite.store import SqliteStore
from tests.support.cassandra import cassandra_backend, stop_cassandra
from tests.support.store_builders import CONTRACT_CONFIG, SHARDS
from tests.support.zk_cluster import ZkCluster
from tests.support.zookeeper import client_port, with_new_chroot


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeper]:
    """One standalone ZooKeeper for the whole test session."""
    zk = ZooKeeper(tmp_path_factory.mktemp("zookeeper"), nodes=1, port=client_port())
    zk.start()
    try:
        yield zk
    finally:
        zk.stop(grace=5)


@pytest.fixture
def zk_hosts(zookeeper: ZooKeeper) -> str:
    """A connect string with a fresh chroot (``/t-<uuid>``) for this test."""
    return with_new_chroot(zookeeper.connect_string)


@pytest.fixture(scope="session", autouse=True)
def cassandra_session_cleanup() -> Iterator[None]:
    """Stops the session's Cassandra at the end, if a test started one (it never
    starts a node itself)."""
    yield
    stop_cassandra()


@pytest.fixture
async def cassandra_store(tmp_path: Path) -> AsyncIterator[CassandraStore]:
    """An open, empty store in the contract suite's configuration, for Cassandra-only tests."""
    s = cassandra_backend(CONTRACT_CONFIG)(tmp_path)()
    await s.open()
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    """An open, empty SQLite store with ``SHARDS`` shards and buckets of a minute."""
    s = SqliteStore(tmp_path / "db", shard_count=SHARDS, bucket_seconds=60)
    await s.open()
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
def zk_admin(zk_hosts: str) -> Iterator[KazooClient]:
    admin = KazooClient(zk_hosts)
    admin.start(timeout=10)
    yield admin
    admin.stop()
    admin.close()


@pytest.fixture
async def zk_cluster(zk_hosts: str, zk_admin: KazooClient) -> AsyncIterator[ZkCluster]:
    c = ZkCluster(zk_hosts, zk_admin)
    yield c
    await c.close()
