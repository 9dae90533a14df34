"""A real Cassandra for tests, a keyspace per test session, an empty store per test.

The node is shared by the whole test session and started lazily, on first use:

- if ``SHARDCRON_TEST_CASSANDRA`` names contact points (``127.0.0.1`` or
  ``127.0.0.1,127.0.0.2``), that running cluster is reused and left running;
- otherwise one node is started through the ``deploy`` package in a temporary
  directory and stopped at the end of the session. The CQL port is fixed (9042):
  when another test session on this machine holds it, this one waits for it up to
  ``SHARDCRON_TEST_CASSANDRA_WAIT`` seconds (default 180), then fails saying so.
  If the node cannot start, the tests that need it fail: nothing is skipped.

``tests/conftest.py`` gives tests ``cassandra_store`` (an open, empty store in the
contract suite's configuration) and stops the node at the end of the session;
``cassandra_backend(config)`` is the Cassandra entry of
``tests/test_store_contract.py``'s ``BACKENDS``.

Each configuration (shard count, bucket size) gets one keyspace per test session,
``shardcron_test_<random>``, created through the store's own schema init; between
tests the tables that hold rows are truncated (cheaper than a keyspace per test:
a table costs ~0.2-0.3 s to create, a TRUNCATE ~50 ms). Keyspaces are dropped
at the end of the session.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import os
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cassandra.cluster import Cluster, Session

from deploy import Cassandra
from shardcron.coordinator.cassandra.schema import TABLES
from shardcron.coordinator.cassandra.store import CassandraStore, init_schema_sync

ENV_CONTACT_POINTS = "SHARDCRON_TEST_CASSANDRA"
ENV_WAIT = "SHARDCRON_TEST_CASSANDRA_WAIT"
CQL_PORT = 9042


@dataclass
class CassandraForTests:
    """The session's Cassandra: its contact points, and the server when this session owns it."""

    contact_points: list[str]
    server: Cassandra | None = None
    _admin: Cluster | None = None
    _session: Session | None = None
    keyspaces: dict[tuple[Any, ...], str] = field(default_factory=dict)

    def session(self) -> Session:
        """A synchronous driver session for test set-up (no keyspace)."""
        if self._session is None:
            self._admin = Cluster(_points(self.contact_points), port=CQL_PORT, protocol_version=5)
            self._session = self._admin.connect()
        return self._session

    def keyspace(self, **config: Any) -> str:
        """The session keyspace for a store configuration, created on first use."""
        key = tuple(sorted(config.items()))
        if key not in self.keyspaces:
            name = f"shardcron_test_{uuid.uuid4().hex[:12]}"
            kwargs = {k: v for k, v in config.items() if k in ("shard_count", "bucket_seconds")}
            # The store's own init path; in a thread, because callers may run in an event loop.
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                pool.submit(init_schema_sync, self.contact_points, keyspace=name, **kwargs).result()
            self.keyspaces[key] = name
        return self.keyspaces[key]

    def empty(self, keyspace: str) -> None:
        """Truncates every table of ``keyspace`` that holds a row (the schema version stays)."""
        session = self.session()
        tables = [t for t in TABLES if t != "schema_version"]
        probes = [session.execute_async(f"SELECT * FROM {keyspace}.{t} LIMIT 1") for t in tables]
        dirty = [t for t, probe in zip(tables, probes, strict=True) if probe.result().one()]
        truncates = [session.execute_async(f"TRUNCATE {keyspace}.{t}", timeout=60) for t in dirty]
        for truncate in truncates:
            truncate.result()

    def store(self, keyspace: str, **config: Any) -> CassandraStore:
        return CassandraStore(self.contact_points, keyspace=keyspace, **config)

    def stop(self) -> None:
        if self._session is not None and self.server is None:
            for name in self.keyspaces.values():  # a reused cluster keeps nothing of ours
                try:
                    self._session.execute(f"DROP KEYSPACE IF EXISTS {name}", timeout=60)
                except Exception as e:  # noqa: BLE001 - best effort at teardown
                    print(f"tests.support.cassandra: could not drop {name}: {e}", file=sys.stderr)
        if self._admin is not None:
            self._admin.shutdown()
            self._admin = self._session = None
        self.keyspaces.clear()
        if self.server is not None:
            self.server.stop(grace=10)
            self.server = None


def _points(contact_points: list[str]) -> list[Any]:
    out: list[Any] = []
    for point in contact_points:
        host, _, port = point.partition(":")
        out.append((host, int(port)) if port else host)
    return out


def _port_free(port: int) -> bool:
    try:
        with socket.create_server(("127.0.0.1", port)):
            return True
    except OSError:
        return False


_lock = threading.Lock()
_node: CassandraForTests | None = None


def cassandra_node() -> CassandraForTests:
    """The session's Cassandra, started (or found) on first call."""
    global _node
    with _lock:
        if _node is not None:
            return _node
        named = os.environ.get(ENV_CONTACT_POINTS, "").strip()
        if named:
            _node = CassandraForTests([p.strip() for p in named.split(",") if p.strip()])
            return _node
        wait = float(os.environ.get(ENV_WAIT, "180"))
        deadline = time.monotonic() + wait
        while not _port_free(CQL_PORT):
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"127.0.0.1:{CQL_PORT} stayed busy for {wait:.0f}s (another test session's"
                    f" Cassandra?): set {ENV_CONTACT_POINTS} to reuse a running cluster"
                )
            time.sleep(2)
        directory = tempfile.mkdtemp(prefix="shardcron-cassandra-")
        server = Cassandra(directory, nodes=1, heap="512M")
        try:
            server.start()
        except BaseException:
            server.stop(grace=0)
            raise
        _node = CassandraForTests(list(server.contact_points), server=server)
        atexit.register(stop_cassandra)  # if no fixture got to stop it
        return _node


def stop_cassandra() -> None:
    global _node
    with _lock:
        node, _node = _node, None
    if node is not None:
        node.stop()


def cassandra_backend(config: dict[str, Any]) -> Callable[[Path], Callable[[], CassandraStore]]:
    """A store contract ``BACKENDS`` entry: given the test's tmp_path, empties the session
    keyspace for ``config`` and returns a factory of stores on it (one location:
    reopening sees the data)."""

    def make(tmp_path: Path) -> Callable[[], CassandraStore]:
        node = cassandra_node()
        keyspace = node.keyspace(**config)
        node.empty(keyspace)
        return lambda: node.store(keyspace, **config)

    return make
