"""A real ZooKeeper for tests, a chroot per test, and ways to break a session.

``tests/conftest.py`` turns these into the fixtures ``zookeeper`` (one server per
test session, started through the ``deploy`` package: standalone, on client port
2181, or on a free port when another session on this machine holds 2181;
``SHARDCRON_TEST_ZK_PORT`` forces one) and ``zk_hosts`` (a connect string with a
fresh chroot per test). If the server cannot start, the tests that need it fail:
nothing is skipped.

``ZkProxy`` sits between one client and the server and can cut the network
without closing anything (``freeze``): the client stops hearing from the
server, goes SUSPENDED after about two thirds of its session timeout, and the
server expires the session after the full timeout, exactly as when the node
is partitioned away or its process hangs. ``expire_session`` ends a session on
the server at once, the way ZooKeeper's own tests do it: a second client
attaches to the same session id and password and closes it.
"""

from __future__ import annotations

import os
import select
import socket
import threading
import uuid

from kazoo.client import KazooClient


def client_port() -> int:
    """``SHARDCRON_TEST_ZK_PORT`` if set; else 2181, or any free port when another
    test session on this machine already runs a ZooKeeper there (a standalone
    server needs only its client port)."""
    if "SHARDCRON_TEST_ZK_PORT" in os.environ:
        return int(os.environ["SHARDCRON_TEST_ZK_PORT"])
    for port in (2181, 0):
        try:
            with socket.create_server(("127.0.0.1", port)) as probe:
                return probe.getsockname()[1]
        except OSError:
            continue
    raise RuntimeError("no free port for ZooKeeper")


def with_new_chroot(connect_string: str) -> str:
    """``connect_string`` with a fresh, existing chroot (``/t-<uuid>``) appended."""
    chroot = f"/t-{uuid.uuid4().hex}"
    admin = KazooClient(connect_string)
    admin.start(timeout=10)
    try:
        admin.ensure_path(chroot)
    finally:
        admin.stop()
        admin.close()
    return connect_string + chroot


def chroot_of(hosts: str) -> str:
    return hosts[hosts.index("/") :] if "/" in hosts else ""


def expire_session(hosts: str, client: KazooClient) -> None:
    """Ends ``client``'s session on the server now; ``client`` learns it (LOST)
    when it next talks to the server."""
    client_id = client.client_id
    assert client_id is not None, "the client has no session"
    twin = KazooClient(hosts, client_id=client_id)
    twin.start(timeout=10)
    twin.stop()  # closes the session: its ephemerals go at once
    twin.close()


class ZkProxy:
    """A TCP proxy to one server that can freeze (a network partition)."""

    def __init__(self, target: str) -> None:
        host, _, port = target.partition("/")[0].split(",")[0].rpartition(":")
        self._target = (host, int(port))
        self._chroot = chroot_of(target)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name=f"zk-proxy-{self.port}", daemon=True).start()

    @property
    def hosts(self) -> str:
        """The connect string (with the target's chroot) that goes through the proxy."""
        return f"127.0.0.1:{self.port}{self._chroot}"

    def freeze(self) -> None:
        """Nothing passes in either direction; connections stay open."""
        self._flowing.clear()

    def thaw(self) -> None:
        self._flowing.set()

    def close(self) -> None:
        self._closed.set()
        self._flowing.set()
        self._listener.close()
        with self._lock:
            for s in self._sockets:
                try:
                    s.close()
                except OSError:
                    pass

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                downstream, _ = self._listener.accept()
                upstream = socket.create_connection(self._target)
            except OSError:
                return
            with self._lock:
                self._sockets += [downstream, upstream]
            threading.Thread(target=self._pump, args=(downstream, upstream), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        peer = {a: b, b: a}
        try:
            while not self._closed.is_set():
                if not self._flowing.wait(0.05):
                    continue
                readable, _, _ = select.select([a, b], [], [], 0.05)
                for s in readable:
                    if not self._flowing.is_set():
                        break
                    data = s.recv(65536)
                    if not data:
                        return
                    peer[s].sendall(data)
        except OSError:
            return
        finally:
            for s in (a, b):
                try:
                    s.close()
                except OSError:
                    pass
