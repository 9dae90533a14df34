"""Cassandra store: every connection the store opens sends a request as soon as it is
written. The driver leaves Nagle's algorithm on unless told; with many requests in
flight on one connection, a request written behind an unacknowledged one waited for
the server's delayed ACK (tens of ms a batch, ``store.SOCKOPTS``)."""

from __future__ import annotations

import socket

from shardcron.coordinator.cassandra.store import CassandraStore
from tests.support.store_builders import create, make_job


def _nodelay(sock: socket.socket) -> bool:
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


async def test_the_store_connections_to_cassandra_send_without_delay(
    cassandra_store: CassandraStore,
) -> None:
    await create(cassandra_store, make_job())  # the request pools are in use
    session = cassandra_store._session
    assert session is not None
    pools = list(session.get_pools())
    assert pools, "the store holds no connection pool"
    sockets = [pool._connection._socket for pool in pools]
    sockets.append(session.cluster.control_connection._connection._socket)
    assert all(_nodelay(s) for s in sockets), [_nodelay(s) for s in sockets]
