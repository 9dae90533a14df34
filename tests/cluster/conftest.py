"""Fixtures for the cluster failure tests (tests/cluster).

- ``zookeeper`` / ``zk_hosts`` (tests/conftest.py): the session's ZooKeeper, a chroot per test.
- ``cassandra3``: ONE 3-node Cassandra for the whole session (RF=3 keyspaces, QUORUM),
  on 127.0.0.21-23 (JMX 7221-7223), so it does not clash with a 1-node Cassandra on
  127.0.0.1:9042 that the store contract tests may run in the same session.
  ``SHARDCRON_TEST_CLUSTER_CASSANDRA_BASE`` moves it (e.g. ``31`` -> 127.0.0.31-33,
  JMX 7231-7233) when two sessions share a machine. For quick iterations,
  ``SHARDCRON_TEST_CLUSTER_CASSANDRA_DIR=DIR`` keeps the ring running in DIR after the
  session and reuses it in the next one (stop it with ``python3 -m deploy stop --dir DIR``).
- ``cluster``: a factory of ``ShardcronCluster`` (own keyspace, cluster name, chroot,
  logs under tmp_path), mTLS on every connection (``cluster_pki``: certificates made
  for the session); every process it started is stopped at teardown, even when
  the test failed or was interrupted by its timeout.

At the end of the session the figures the tests measured (failover times, re-lease
delay, store node loss impact) are printed, and written as JSON to
``$SHARDCRON_CLUSTER_REPORT`` when set.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.cluster import cluster_harness
from tests.cluster.cluster_harness import ClusterCassandra, ShardcronCluster, store_init
from tests.support.certs import Pki, make_pki

_BEGUN: list[float] = []
_ENDED: list[float] = []


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "cluster: real multi-node cluster failure test (ZooKeeper + 3-node Cassandra)"
    )


# Run order: the smoke test first (a node that cannot start explains every other
# failure), the Cassandra node loss last (its node may still be catching up after).
_ORDER = [
    "test_node_start.py",
    "test_leader_failover.py",
    "test_poller_failover.py",
    "test_poller_freeze.py",
    "test_worker_loss.py",
    "test_worker_capacity.py",
    "test_shard_moves.py",
    "test_store_node_loss.py",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    ours = [i for i in items if here in Path(str(i.fspath)).resolve().parents]
    for item in ours:
        item.add_marker(pytest.mark.cluster)
    if not ours:
        return
    # In a session with the rest of the suite they run last: the 3-node ring starts
    # after everything else is done with its own servers.
    rank = {name: n for n, name in enumerate(_ORDER)}
    ours.sort(key=lambda i: rank.get(Path(str(i.fspath)).name, len(rank)))
    mine = set(map(id, ours))
    items[:] = [i for i in items if id(i) not in mine] + ours


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("cluster") and not _BEGUN:
        _BEGUN.append(time.monotonic())


def pytest_runtest_teardown(item: pytest.Item) -> None:
    if item.get_closest_marker("cluster"):
        _ENDED[:] = [time.monotonic()]


@pytest.fixture(scope="session")
def cassandra3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterCassandra]:
    base = int(os.environ.get("SHARDCRON_TEST_CLUSTER_CASSANDRA_BASE", "21"))
    keep = os.environ.get("SHARDCRON_TEST_CLUSTER_CASSANDRA_DIR")
    directory = Path(keep) if keep else tmp_path_factory.mktemp("cassandra3")
    cass = ClusterCassandra(directory, base=base, jmx_base=7200 + base)
    begun = time.monotonic()
    try:
        cass.start()  # with a kept DIR whose nodes run, it only checks they serve
        cluster_harness.measure("cassandra 3-node start", time.monotonic() - begun)
        yield cass
    finally:
        if not keep:
            cass.stop(grace=0)


@pytest.fixture(scope="session")
def cluster_keyspace(cassandra3: ClusterCassandra, tmp_path_factory: pytest.TempPathFactory) -> str:
    """One RF=3 keyspace, made by `shardcron store init`, shared by the session's clusters.

    A keyspace costs ~15 s to create on the 3-node ring (schema agreement per table),
    so the tests share one; they keep apart by cluster name (ZooKeeper) and owner
    (store), and each waits for its own jobs to end.
    """
    name = f"shardcron_cluster_{uuid.uuid4().hex[:8]}"
    log = tmp_path_factory.mktemp("store-init") / "store-init.log"
    took = store_init(cassandra3.contact_points, name, log, rf=3)
    cluster_harness.measure("store init (RF=3 keyspace)", took)
    return name


@pytest.fixture(scope="session")
def cluster_pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """The session's CA, node certificate and client certificates."""
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def cluster(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    zk_hosts: str,
    cassandra3: ClusterCassandra,
    cluster_keyspace: str,
    cluster_pki: Pki,
) -> Iterator[Callable[..., ShardcronCluster]]:
    """``cluster(nodes=3, workers=2)`` -> a started ShardcronCluster, stopped at teardown."""
    made: list[ShardcronCluster] = []

    def make(nodes: int = 3, workers: int = 2, slots: int = 4, **kw: object) -> ShardcronCluster:
        c = ShardcronCluster(
            tmp_path / f"cluster{len(made) + 1}",
            zk_hosts=zk_hosts,
            contact_points=cassandra3.contact_points,
            name=request.node.name,
            keyspace=cluster_keyspace,
            pki=cluster_pki,
            **kw,  # type: ignore[arg-type]
        )
        made.append(c)
        started = c.start(nodes=nodes, workers=workers, slots=slots)
        print(f"cluster {c.name}: started in {started:.1f}s; logs {c.root}")
        return c

    try:
        yield make
    finally:
        for c in made:
            c.close()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not cluster_harness.MEASUREMENTS and not _BEGUN:
        return
    tr = terminalreporter
    tr.section("cluster failure tests: measured")
    for name, values in cluster_harness.MEASUREMENTS.items():
        shown = ", ".join(
            f"{v:g} {unit}" + (f" ({test})" if test else "") for v, unit, test in values
        )
        tr.write_line(f"{name}: {shown}")
    total = (_ENDED[0] - _BEGUN[0]) if _BEGUN and _ENDED else None
    if total is not None:
        tr.write_line(f"cluster tests, wall time incl. server start: {total:.1f} s")
    out = os.environ.get("SHARDCRON_CLUSTER_REPORT")
    if out:
        Path(out).write_text(
            json.dumps(
                {
                    "measurements": {k: v for k, v in cluster_harness.MEASUREMENTS.items()},
                    "total_seconds": total,
                },
                indent=2,
            )
        )
