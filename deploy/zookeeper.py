"""ZooKeeper for tests and local clusters: a standalone server or a 3-node ensemble.

Readiness comes from the ``srvr`` four-letter word (``Mode: standalone``, or
``leader``/``follower`` in an ensemble), and a server whose main thread died while
the JVM lives on is spotted in its log instead of waited out.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket

from deploy.nodes import Cluster
from deploy.process import tail
from deploy.tools import DEPLOY_DIR, java_bin, lib_dir


def zk_four_letter(host: str, port: int, word: str = "srvr", timeout: float = 2.0) -> str:
    """Send a ZooKeeper four-letter word and return the reply ('' if none)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(word.encode())
            chunks = []
            while chunk := sock.recv(4096):
                chunks.append(chunk)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


def zk_mode(host: str, port: int) -> str | None:
    """'standalone', 'leader' or 'follower' once the node serves, else None."""
    match = re.search(r"^Mode: (\w+)", zk_four_letter(host, port, "srvr"), re.M)
    return match.group(1) if match else None


class ZooKeeper(Cluster):
    """A standalone ZooKeeper or a 3-node ensemble on 127.0.0.1.

    Node i listens for clients on port+i-1 (2181, 2182, 2183), for followers on
    port+700+i-1 (2881..) and for leader election on port+1700+i-1 (3881..).
    """

    kind = "zookeeper"
    prefix = "zk"
    host = "127.0.0.1"
    heap = "256M"

    def __init__(self, dir: str | os.PathLike, nodes: int = 1, port: int = 2181):
        super().__init__(dir, nodes)
        self.port = port

    def identity(self) -> dict:
        return {**super().identity(), "port": self.port}

    def client_port(self, i: int) -> int:
        return self.port + i - 1

    @property
    def connect_string(self) -> str:
        return ",".join(f"{self.host}:{self.client_port(i)}" for i in self.node_ids())

    def mode(self, i: int) -> str | None:
        return zk_mode(self.host, self.client_port(i))

    def leader(self) -> int | None:
        """Number of the node that is leader now (None when standalone or no quorum)."""
        for i in self.node_ids():
            if self.running(i) and self.mode(i) == "leader":
                return i
        return None

    def _ports(self, i: int) -> list[tuple[str, int]]:
        ports = [self.client_port(i)]
        if self.nodes > 1:
            ports += [self.port + 700 + i - 1, self.port + 1700 + i - 1]
        return [(self.host, p) for p in ports]

    def _write_config(self, i: int) -> None:
        """zoo.cfg tuned for tests.

        tickTime=1000 lets clients ask for sessions from 2 s (minSessionTimeout)
        to 20 s, so tests can use 4-6 s sessions for fast failover. forceSync=no
        skips an fsync per write: tests kill processes, not machines, and the
        page cache survives a SIGKILL.
        """
        node = self.node_dir(i)
        data = node / "data"
        data.mkdir(exist_ok=True)
        lines = [
            "tickTime=1000",
            "initLimit=10",
            "syncLimit=5",
            "minSessionTimeout=2000",
            "maxSessionTimeout=20000",
            f"dataDir={data}",
            f"clientPort={self.client_port(i)}",
            f"clientPortAddress={self.host}",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr,stat,mntr",
            "forceSync=no",
            "maxClientCnxns=0",
            "autopurge.snapRetainCount=3",
            "autopurge.purgeInterval=1",
        ]
        if self.nodes > 1:
            for n in self.node_ids():
                quorum, election = self.port + 700 + n - 1, self.port + 1700 + n - 1
                lines.append(f"server.{n}={self.host}:{quorum}:{election}")
            (data / "myid").write_text(f"{i}\n")
        (node / "zoo.cfg").write_text("\n".join(lines) + "\n")

    def _command(self, i: int) -> list[str]:
        node = self.node_dir(i)
        (node / "tmp").mkdir(exist_ok=True)
        return [
            java_bin(),
            f"-Xmx{self.heap}",
            "-XX:+PerfDisableSharedMem",
            "-Djava.net.preferIPv4Stack=true",
            f"-Djava.io.tmpdir={node / 'tmp'}",
            f"-Dzookeeper.log.dir={node}",
            f"-Dlogback.configurationFile={DEPLOY_DIR / 'zookeeper' / 'logback.xml'}",
            "-cp", f"{lib_dir(self.kind)}/*",
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            str(node / "zoo.cfg"),
        ]  # fmt: skip

    def _node_ready(self, i: int) -> bool:
        mode = self.mode(i)
        return mode == "standalone" if self.nodes == 1 else mode in ("leader", "follower")

    def _startup_failed(self, i: int) -> bool:
        """ZooKeeper's main thread can die (e.g. a missing jar) while other
        non-daemon threads keep the JVM up, answering srvr with 'not currently
        serving requests' forever: spot that instead of waiting for a timeout."""
        zk_log = self.node_dir(i) / "zookeeper.log"
        with contextlib.suppress(OSError):
            text = zk_log.read_text(errors="replace")
            return bool(re.search(r"Thread\[main,\d+,main\] died|exiting abnormally", text))
        return False

    def _health(self, i: int) -> dict:
        return {"mode": self.mode(i), "client_port": self.client_port(i)}

    def _log_tail(self, i: int) -> str:
        return (
            f"{tail(self.node_dir(i) / 'zookeeper.log')}\n{tail(self.node_dir(i) / 'stdout.log')}"
        )
