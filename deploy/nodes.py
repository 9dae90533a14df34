"""A cluster of server nodes in one directory: layout, pid files, start, stop, status.

``Cluster`` is what ZooKeeper and Cassandra share. Each node lives in
``DIR/<prefix>N/`` with its config, data, logs and ``pid`` file; ``DIR/<kind>.json``
records the cluster's shape, so a DIR reused for another shape is wiped instead of
half-reused, and a later command (stop, status, kill-node) can rebuild the cluster
from the DIR alone. Subclasses say how to configure and command a node and when it
is ready.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
from pathlib import Path

from deploy.errors import ServerError, log
from deploy.process import pid_alive, port_open, rss_mib, spawn_detached, tail
from deploy.tools import fetch, java_bin, server_version


class Cluster:
    """What ZooKeeper and Cassandra clusters share: a DIR with one subdir per node.

    Subclasses say how to configure and command a node (``_write_config``,
    ``_command``) and when it is ready (``_node_ready``); this class handles
    pid files, detached starts, stop/kill and reuse of DIR.
    """

    kind = ""  # "zookeeper" or "cassandra"
    prefix = ""  # node subdir prefix: "zk" -> DIR/zk1
    start_timeout = 120.0
    stop_grace = 20.0

    def __init__(self, dir: str | os.PathLike, nodes: int = 1):
        if nodes not in (1, 3):
            raise ValueError("nodes must be 1 or 3")
        self.dir = Path(dir).resolve()
        self.nodes = nodes
        self.version = server_version(self.kind)
        self.last_ready_seconds: dict[int, float] = {}

    # --- layout -----------------------------------------------------------

    @property
    def state_file(self) -> Path:
        return self.dir / f"{self.kind}.json"

    def node_dir(self, i: int) -> Path:
        return self.dir / f"{self.prefix}{i}"

    def pid_file(self, i: int) -> Path:
        return self.node_dir(i) / "pid"

    def node_ids(self) -> range:
        return range(1, self.nodes + 1)

    def identity(self) -> dict:
        """What must match for an existing DIR to be reused rather than wiped."""
        return {"kind": self.kind, "version": self.version, "nodes": self.nodes}

    def settings(self) -> dict:
        """Identity plus settings a later start-node must repeat (e.g. heap)."""
        return self.identity()

    # --- pids -------------------------------------------------------------

    def pid(self, i: int) -> int | None:
        """The node's pid if it is running, else None."""
        try:
            pid = int(self.pid_file(i).read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if pid_alive(pid, str(self.node_dir(i))) else None

    def running(self, i: int) -> bool:
        return self.pid(i) is not None

    # --- lifecycle --------------------------------------------------------

    def start(self) -> Cluster:
        """Start every node that is not running and wait until the cluster serves."""
        java_bin()
        fetch(self.kind)
        self._prepare_jvm()
        self._prepare_dir()
        self._start_nodes()
        self._wait_cluster_formed()
        return self

    def _start_nodes(self) -> None:
        """Default: start all nodes at once, then wait (a quorum needs peers)."""
        begun = time.monotonic()
        for i in self.node_ids():
            self._launch(i)
        for i in self.node_ids():
            self._wait_ready(i, begun)

    def start_node(self, i: int) -> None:
        """(Re)start one node with its existing data and wait until it serves."""
        self._check_node(i)
        begun = time.monotonic()
        self._launch(i)
        self._wait_ready(i, begun)
        self._wait_cluster_formed()

    def kill_node(self, i: int) -> None:
        """SIGKILL one node, as a crash would, and wait until it is gone."""
        self._check_node(i)
        pid = self.pid(i)
        if pid is None:
            log(f"{self.prefix}{i} is not running")
            return
        os.kill(pid, signal.SIGKILL)
        self._wait_gone(pid, i, timeout=10)
        log(f"{self.prefix}{i} (pid {pid}) killed")

    def stop(self, grace: float | None = None) -> bool:
        """SIGTERM every node, wait up to grace seconds (default stop_grace),
        then SIGKILL what is left. grace=0 kills at once: the fast teardown
        for a test whose data is thrown away anyway.

        Returns True when every node exited on SIGTERM alone.
        """
        grace = self.stop_grace if grace is None else grace
        pids = {i: self.pid(i) for i in self._existing_node_ids()}
        pids = {i: pid for i, pid in pids.items() if pid}
        for pid in pids.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM if grace > 0 else signal.SIGKILL)
        deadline = time.monotonic() + grace
        clean = grace > 0
        for i, pid in pids.items():
            if not self._wait_gone(pid, i, timeout=max(0.0, deadline - time.monotonic())):
                clean = False
                if grace > 0:
                    log(f"{self.prefix}{i} (pid {pid}) ignored SIGTERM for {grace}s: SIGKILL")
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                self._wait_gone(pid, i, timeout=10)
        if pids:
            log(f"{self.kind}: stopped {', '.join(f'{self.prefix}{i}' for i in pids)}")
        return clean

    def status(self) -> list[dict]:
        """One dict per node: running, pid, RSS and a kind-specific health field."""
        out = []
        for i in self._existing_node_ids():
            pid = self.pid(i)
            entry = {
                "node": i,
                "dir": str(self.node_dir(i)),
                "running": pid is not None,
                "pid": pid,
            }
            if pid:
                entry["rss_mib"] = round(rss_mib(pid))
                entry.update(self._health(i))
            out.append(entry)
        return out

    # --- helpers ----------------------------------------------------------

    def _check_node(self, i: int) -> None:
        if i not in self.node_ids():
            raise ValueError(f"node must be in 1..{self.nodes}")
        if not self.node_dir(i).is_dir():
            raise ServerError(f"{self.node_dir(i)} does not exist: start the cluster first")

    def _existing_node_ids(self) -> list[int]:
        """Node numbers that have a dir in DIR, whatever self.nodes says."""
        if not self.dir.is_dir():
            return []
        found = [p.name[len(self.prefix) :] for p in self.dir.glob(f"{self.prefix}[0-9]*")]
        return sorted(int(n) for n in found if n.isdigit())

    def _prepare_dir(self) -> None:
        """Reuse DIR for the same cluster shape; otherwise stop and wipe our part of it.

        Only our own files (DIR/<kind>.json and DIR/<prefix>N/) are removed, so a
        DIR may hold a ZooKeeper and a Cassandra side by side.
        """
        self.dir.mkdir(parents=True, exist_ok=True)
        try:
            previous = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            previous = None
        same = previous is not None and all(
            previous.get(k) == v for k, v in self.identity().items()
        )
        if not same and (previous is not None or self._existing_node_ids()):
            log(
                f"{self.dir} holds another {self.kind} cluster ({previous}): stopping and wiping it"
            )
            self.stop()
            for i in self._existing_node_ids():
                shutil.rmtree(self.node_dir(i))
        self.state_file.write_text(json.dumps(self.settings(), indent=2) + "\n")
        for i in self.node_ids():
            self.node_dir(i).mkdir(exist_ok=True)

    def _launch(self, i: int) -> bool:
        """Write node i's config and start its JVM unless it already runs."""
        if self.running(i):
            log(f"{self.prefix}{i} already running (pid {self.pid(i)})")
            return False
        self._check_ports_free(i)
        self._write_config(i)
        pid = spawn_detached(self._command(i), self.node_dir(i), self.node_dir(i) / "stdout.log")
        self.pid_file(i).write_text(f"{pid}\n")
        log(f"{self.prefix}{i} started (pid {pid})")
        return True

    def _check_ports_free(self, i: int) -> None:
        """Fail fast, with a useful message, when another server holds our port."""
        for host, port in self._ports(i):
            if port_open(host, port):
                raise ServerError(
                    f"{host}:{port} is already in use: another cluster running? "
                    f"(`python3 -m deploy status --dir ...`, or stop it)"
                )

    def _wait_ready(self, i: int, begun: float) -> None:
        """Poll until node i serves; fail early, with its log, if its JVM dies."""
        deadline = begun + self.start_timeout
        while time.monotonic() < deadline:
            if not self.running(i):
                raise ServerError(f"{self.prefix}{i} exited during startup:\n{self._log_tail(i)}")
            if self._startup_failed(i):
                raise ServerError(f"{self.prefix}{i} failed to start:\n{self._log_tail(i)}")
            if self._node_ready(i):
                self.last_ready_seconds[i] = time.monotonic() - begun
                log(f"{self.prefix}{i} ready after {self.last_ready_seconds[i]:.1f}s")
                return
            time.sleep(0.25)
        raise ServerError(
            f"{self.prefix}{i} not ready after {self.start_timeout:.0f}s:\n{self._log_tail(i)}"
        )

    def _wait_gone(self, pid: int, i: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while pid_alive(pid, str(self.node_dir(i))):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)
        return True

    # --- per kind ---------------------------------------------------------

    def _prepare_jvm(self) -> None:
        """One-time, per-machine JVM preparation (Cassandra: the CDS archive)."""

    def _ports(self, i: int) -> list[tuple[str, int]]:
        raise NotImplementedError

    def _write_config(self, i: int) -> None:
        raise NotImplementedError

    def _command(self, i: int) -> list[str]:
        raise NotImplementedError

    def _node_ready(self, i: int) -> bool:
        raise NotImplementedError

    def _startup_failed(self, i: int) -> bool:
        """True when the log shows a fatal error although the JVM still runs."""
        return False

    def _wait_cluster_formed(self) -> None:
        """After nodes are ready one by one: wait until they agree with each other."""

    def _health(self, i: int) -> dict:
        return {}

    def _log_tail(self, i: int) -> str:
        return tail(self.node_dir(i) / "stdout.log")
