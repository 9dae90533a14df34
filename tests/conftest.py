"""The fixtures every test directory shares: a real ZooKeeper and a real Cassandra.

- ``zookeeper``: one standalone ZooKeeper for the whole session, started on first
  use (tests/support/zookeeper.py); ``zk_hosts``: a connect string with a fresh
  chroot for one test.
- ``cassandra_store``: an open, empty Cassandra store in the store contract's
  configuration, on the session's Cassandra (tests/support/cassandra.py: the node
  named by ``SHARDCRON_TEST_CASSANDRA``, or one started on first use);
  ``cassandra_session_cleanup`` stops a node the session started, at its end.
- ``sqlite_store``: an open, empty SQLite store with the builders' shard count.
- ``s3_gateway``: one Versity S3 gateway (an S3-compatible service) for the whole
  session, started on first use on a free port with the bucket
  ``tests.support.blob_stores.BUCKET``, and stopped at the session's end.
- ``zk_admin``: a ZooKeeper client of the test's chroot; ``zk_cluster``: several
  coordinations of one cluster on it (tests/support/zk_cluster.py).
- ``poller``: a real poller on ``sqlite_store``, built as the ``poller_setup`` fixture
  says (tests/support/pollers.py: by default on the real clock, started, every shard
  assigned; a module overrides ``poller_setup``), its invariants checked after every
  turn; ``stub``: its lease stream served over gRPC. ``fake_clock_setup``: a poller on
  the ``clock`` fixture's fake clock, with the ``lease_ttl``, ``recheck_window`` and
  ``hint_grace`` fixtures (a test parametrizes them).

Fixtures one directory alone uses live in its own ``conftest.py`` (``tests/e2e``,
``tests/cluster``); helpers that are not fixtures live in ``tests/support/``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from deploy import VersityGateway, ZooKeeper
from shardcron.coordinator.cassandra.store import CassandraStore
from shardcron.coordinator.ids import utcnow
from shardcron.coordinator.poller import Poller, PollerConfig
from shardcron.coordinator.sqlite.store import SqliteStore
from shardcron.coordinator.worker_stream import WorkerStreamServicer
from shardcron.v1 import worker_pb2_grpc
from tests.support.blob_stores import BUCKET
from tests.support.cassandra import cassandra_backend, stop_cassandra
from tests.support.lease_streams import serving
from tests.support.pollers import FakeClock, PollerSetup, on_fake_clock, running_poller
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


@pytest.fixture(scope="session")
def s3_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VersityGateway]:
    """One S3-compatible service for the whole test session (tests/support/blob_stores.py)."""
    gateway = VersityGateway(tmp_path_factory.mktemp("versitygw"))
    gateway.start(buckets=[BUCKET])
    try:
        yield gateway
    finally:
        gateway.stop()


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


@pytest.fixture
def poller_setup() -> PollerSetup:
    """How ``poller`` is built: a test module overrides this fixture to change it."""
    return PollerSetup()


@pytest.fixture
async def poller(sqlite_store: SqliteStore, poller_setup: PollerSetup) -> AsyncIterator[Poller]:
    """A real poller on ``sqlite_store`` as ``poller_setup`` says; stopped after the test,
    which fails if a turn broke an invariant of the runs it holds."""
    async with running_poller(sqlite_store, poller_setup) as p:
        yield p


@pytest.fixture
async def stub(poller: Poller) -> AsyncIterator[worker_pb2_grpc.WorkerServiceStub]:
    """``poller``'s lease stream, served over gRPC."""
    async with serving(WorkerStreamServicer(poller.submit, poller.may_lease)) as served:
        yield served


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(utcnow())


@pytest.fixture
def lease_ttl() -> timedelta:
    return PollerConfig().lease_ttl


@pytest.fixture
def recheck_window() -> timedelta:
    return PollerConfig().recheck_window


@pytest.fixture
def hint_grace() -> timedelta:
    return PollerConfig().hint_grace


@pytest.fixture
def fake_clock_setup(
    clock: FakeClock, lease_ttl: timedelta, recheck_window: timedelta, hint_grace: timedelta
) -> PollerSetup:
    """A poller on ``clock``, moved by the test (``tests.support.pollers.on_fake_clock``)."""
    return on_fake_clock(
        clock, lease_ttl=lease_ttl, recheck_window=recheck_window, hint_grace=hint_grace
    )
