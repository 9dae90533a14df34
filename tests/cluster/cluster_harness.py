"""A real shardcron cluster for failure tests: ZooKeeper, 3 Cassandra nodes, nodes, workers.

Everything is a real process, started the way an operator would start it
(``shardcron store init``, ``shardcron node``, ``shardcron worker``), with its own
log under the test's ``tmp_path``, and killed for real (SIGKILL, SIGSTOP). Given a
``Pki`` (``tests/support/certs.py``; the suite always gives one), every connection is
mTLS: the nodes serve and call each other with the node certificate, workers present
``CN=cluster-worker`` and the harness's clients ``CN=cluster-client``.

Pieces:

- ``ClusterCassandra``: ``deploy``'s 3-node Cassandra, on other loopback
  addresses (127.0.0.21-23 by default, JMX 7221-7223) so it can run next to the
  single contract-test node on 127.0.0.1:9042 in one pytest session.
- ``ShardcronCluster``: one test's cluster (its own ZooKeeper chroot, cluster name and
  keyspace): ``start(nodes, workers)``, ``kill_node``, ``signal_node``, ``status``,
  ``client``; ``close`` stops every process, whatever state it is in.
- The run records: every job the tests create runs ``record_task()``, a shell command
  that appends ``start RUN TOKEN TIME JOB ATTEMPT PID`` and ``end ...`` lines to the
  test's records file. ``read_executions`` pairs them into executions, and
  ``overlapping`` finds two executions of one run (or one fire) at the same time.
- ``JobFeeder``: a thread that creates immediate jobs through one node, retrying with
  the same idempotency key, and remembers what was acknowledged.
- ``Checks``: collects every violated guarantee of a test before failing, so one run
  reports all of them.
- ``MEASUREMENTS``: figures the tests measured; ``conftest.py`` prints them at the end.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import queue
import re
import secrets
import shlex
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from deploy import Cassandra
from shardcron.client.errors import ShardcronError
from shardcron.client.sdk import Client
from shardcron.client.tls import ClientTls
from shardcron.client.types import (
    ClusterStatus,
    CommandTask,
    JobSpec,
    JobState,
    Run,
    RunReason,
    RunState,
)
from shardcron.v1 import worker_pb2, worker_pb2_grpc
from tests.e2e.harness import Proc, channel_to, free_port, heartbeat_empty, wait_healthy
from tests.support.auth import principal_toml
from tests.support.certs import Pki
from tests.support.waiting import wait_until
from tests.support.zookeeper import ZkProxy

REPO = Path(__file__).resolve().parents[2]
SHARDS = 64
SESSION_TIMEOUT = 4.0  # seconds: --session-timeout of every node
LEASE_TTL = 3.0  # seconds: --lease-ttl
HEARTBEAT = LEASE_TTL / 3  # what `shardcron node` derives from the TTL
MISFIRE_GRACE = 1.0
EPOCH_SHIFT = 32  # fencing token = fencing_epoch << 32 | sequence

# why a node of this session could not start (then later clusters fail at once)
START_FAILURE: list[str] = []

# figures measured by the tests: name -> list of (value, unit, test)
MEASUREMENTS: dict[str, list[tuple[float, str, str]]] = defaultdict(list)


def measure(name: str, value: float, unit: str = "s", test: str = "") -> None:
    MEASUREMENTS[name].append((round(value, 3), unit, test))
    print(f"MEASURED {name}: {value:.3f} {unit} {test}", flush=True)


def fencing_epoch(token: int) -> int:
    return token >> EPOCH_SHIFT


# --------------------------------------------------------------------------- Cassandra


class ClusterCassandra(Cassandra):
    """A 3-node Cassandra on 127.0.0.<base>..<base+2>, JMX on jmx_base..jmx_base+2.

    The storage (7000) and CQL (9042) ports are the same on every address, so this
    ring coexists with the 1-node cluster the contract tests start on 127.0.0.1.
    """

    def __init__(
        self,
        dir: str | os.PathLike[str],
        *,
        base: int = 21,
        jmx_base: int = 7221,
        heap: str = "512M",
    ) -> None:
        super().__init__(dir, nodes=3, heap=heap)
        self.base = base
        self.jmx_base_port = jmx_base

    def address(self, i: int) -> str:
        return f"127.0.0.{self.base + i - 1}"


# --------------------------------------------------------------------------- processes

_LIVE: set[Proc] = set()


def _kill_leftovers() -> None:
    """Last resort (pytest itself interrupted): no process of ours outlives the run."""
    for proc in list(_LIVE):
        if proc.proc is not None and proc.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.proc.pid, signal.SIGKILL)


atexit.register(_kill_leftovers)


class ClusterProc(Proc):
    """``Proc`` with a bounded stop that also works on a stopped (SIGSTOP) process."""

    def start(self) -> ClusterProc:
        super().start()
        _LIVE.add(self)
        return self

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace: float = 5.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGCONT)
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        _LIVE.discard(self)


@dataclass
class NodeHandle:
    id: str
    port: int
    proc: ClusterProc

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"


@dataclass
class WorkerHandle:
    id: str
    proc: ClusterProc


def _keyspace_name(text: str) -> str:
    name = re.sub(r"[^a-z0-9_]", "_", text.lower())[:30]
    return f"c_{name}_{uuid.uuid4().hex[:8]}"


def store_init(contact_points: Sequence[str], keyspace: str, log: Path, rf: int = 3) -> float:
    """``shardcron store init`` (RF ``rf``) for ``keyspace``; returns the seconds it took."""
    begun = time.monotonic()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "shardcron",
            "store",
            "init",
            "--cassandra",
            ",".join(contact_points),
            "--keyspace",
            keyspace,
            "--replication-factor",
            str(rf),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=180,
    )
    log.write_text(result.stdout + result.stderr)
    if result.returncode != 0:
        raise RuntimeError(
            f"shardcron store init failed ({result.returncode}):\n{result.stderr[-3000:]}"
        )
    return time.monotonic() - begun


class ShardcronCluster:
    """One test's shardcron cluster on the shared ZooKeeper and Cassandra."""

    def __init__(
        self,
        root: Path,
        *,
        zk_hosts: str,
        contact_points: Sequence[str],
        name: str,
        keyspace: str | None = None,
        session_timeout: float = SESSION_TIMEOUT,
        lease_ttl: float = LEASE_TTL,
        misfire_grace: float = MISFIRE_GRACE,
        zk_proxies: bool = False,
        pki: Pki | None = None,
        node_extra: Sequence[str] = (),
    ) -> None:
        self.root = root
        self.node_extra = list(node_extra)  # more flags for every `shardcron node`
        self.pki = pki
        self.client_tls = pki.client_tls("cluster-client") if pki is not None else ClientTls()
        self.root.mkdir(parents=True, exist_ok=True)
        self.zk_hosts = zk_hosts
        self.contact = ",".join(contact_points)
        self.name = re.sub(r"[^A-Za-z0-9_-]", "-", name)[:40] + "-" + uuid.uuid4().hex[:6]
        # a keyspace already initialised (shared by a session), else one of its own
        self.keyspace = keyspace or _keyspace_name(name)
        self.owns_keyspace = keyspace is None
        self.session_timeout = session_timeout
        self.lease_ttl = lease_ttl
        self.misfire_grace = misfire_grace
        self.nodes: dict[str, NodeHandle] = {}
        self.workers: dict[str, WorkerHandle] = {}
        self.killed: set[str] = set()
        self.records = root / "records.log"
        self.records.touch()
        self._zk: KazooClient | None = None
        self._initialised = False
        self._clients: list[Client] = []
        # zk_proxies: each node reaches ZooKeeper through its own ZkProxy, which a test
        # can freeze to cut that node off (a partition) without closing anything
        self.zk_proxies = zk_proxies
        self.proxies: dict[str, ZkProxy] = {}
        # tokens on: every call is authenticated, the nodes' calls to each other too
        self.tokens = {role: secrets.token_urlsafe(24) for role in ("admin", "node", "worker")}
        self.auth_file = root / "auth.toml"
        self.auth_file.write_text(
            "\n".join(
                principal_toml(f"cluster-{role}", role, None if role != "worker" else ["*"], token)
                for role, token in self.tokens.items()
            )
        )

    # --- lifecycle -------------------------------------------------------------

    def node_args(self, node_id: str, port: int, zk_hosts: str | None = None) -> list[str]:
        return [
            "node",
            "--roles",
            "api,coordinator,poller",
            "--zk",
            zk_hosts or self.zk_hosts,
            "--cluster",
            self.name,
            "--cassandra",
            self.contact,
            "--keyspace",
            self.keyspace,
            "--consistency",
            "QUORUM",
            "--listen",
            f"127.0.0.1:{port}",
            "--node-id",
            node_id,
            "--metrics-listen",
            "",
            "--session-timeout",
            str(self.session_timeout),
            "--lease-ttl",
            f"{self.lease_ttl:g}s",
            "--misfire-grace",
            f"{self.misfire_grace:g}s",
            "--auth-file",
            str(self.auth_file),
            *(self.pki.node_args(mtls=True) if self.pki is not None else []),
            *self.node_extra,
        ]

    def add_node(self, node_id: str | None = None) -> NodeHandle:
        node_id = node_id or f"node{len(self.nodes) + 1}"
        port = free_port()
        hosts = self.zk_hosts
        if self.zk_proxies:
            self.proxies[node_id] = ZkProxy(self.zk_hosts)
            hosts = self.proxies[node_id].hosts
        proc = ClusterProc(
            self.node_args(node_id, port, hosts),
            self.root / f"{node_id}.log",
            env={"SHARDCRON_NODE_TOKEN": self.tokens["node"]},
        ).start()
        handle = NodeHandle(node_id, port, proc)
        self.nodes[node_id] = handle
        return handle

    def add_worker(self, worker_id: str | None = None, slots: int = 4) -> WorkerHandle:
        worker_id = worker_id or f"w{len(self.workers) + 1}"
        args = ["worker", "--zk", self.zk_hosts, "--cluster", self.name]
        args += ["--id", worker_id, "--slots", str(slots)]
        if self.pki is not None:
            args += self.pki.client_args("cluster-worker")
        proc = ClusterProc(
            args,
            self.root / f"worker-{worker_id}.log",
            env={"SHARDCRON_TOKEN": self.tokens["worker"]},
        ).start()
        handle = WorkerHandle(worker_id, proc)
        self.workers[worker_id] = handle
        return handle

    def wait_serving(self, handle: NodeHandle, timeout: float = 30) -> None:
        """Until the node's gRPC health says SERVING. A node that does not get there
        fails this test, and every later cluster of the session fails at once
        (``START_FAILURE``) instead of waiting again for the same reason."""
        try:
            wait_healthy(handle.target, timeout=timeout, proc=handle.proc.proc, tls=self.client_tls)
        except Exception as e:
            message = f"`shardcron node` {handle.id} did not become SERVING: {e}"
            START_FAILURE.append(message)
            raise RuntimeError(f"{message}\nits log ends:\n{self.tail(handle.id)}") from e

    def start(self, nodes: int = 3, workers: int = 2, slots: int = 4, timeout: float = 60) -> float:
        """Starts the nodes and workers and waits until the cluster serves every shard
        and every poller has every worker; returns the seconds it took."""
        if START_FAILURE:
            raise RuntimeError(f"not started: earlier in this session {START_FAILURE[0]}")
        begun = time.monotonic()
        if self.owns_keyspace and not self._initialised:
            store_init(self.contact.split(","), self.keyspace, self.root / "store-init.log")
            self._initialised = True
        handles = [self.add_node() for _ in range(nodes)]
        for _ in range(workers):
            self.add_worker(slots=slots)
        for handle in handles:
            self.wait_serving(handle)
        self.wait_stable(workers=workers, timeout=timeout)
        return time.monotonic() - begun

    def close(self) -> None:
        """Stops every process (workers first), even stopped or already dead ones."""
        for c in self._clients:
            with contextlib.suppress(Exception):
                c.close()
        for w in self.workers.values():
            with contextlib.suppress(Exception):
                w.proc.stop(grace=3)
        for n in self.nodes.values():
            with contextlib.suppress(Exception):
                n.proc.stop(grace=5)
        if self._zk is not None:
            with contextlib.suppress(Exception):
                self._zk.stop()
                self._zk.close()
        for proxy in self.proxies.values():
            with contextlib.suppress(Exception):
                proxy.close()

    # --- faults ------------------------------------------------------------------

    def kill_node(self, node_id: str) -> float:
        """SIGKILL, as a crash; returns the wall-clock time of the kill."""
        at = time.time()
        self.nodes[node_id].proc.kill()
        self.killed.add(node_id)
        return at

    def kill_worker(self, worker_id: str) -> float:
        at = time.time()
        self.workers[worker_id].proc.kill()
        return at

    def signal_node(self, node_id: str, sig: int) -> float:
        at = time.time()
        self.nodes[node_id].proc.signal(sig)
        return at

    def live_nodes(self) -> list[NodeHandle]:
        return [n for n in self.nodes.values() if n.id not in self.killed and n.proc.alive]

    # --- views -------------------------------------------------------------------

    def connect(self, node_id: str, *, owner: str = "default", timeout: float = 10.0) -> Client:
        """A new client of one node, with the harness's certificate and the admin token; the
        caller closes it."""
        tls = self.client_tls
        return Client(
            self.nodes[node_id].target,
            owner=owner,
            timeout=timeout,
            token=self.tokens["admin"],
            tls_ca=tls.ca,
            tls_cert=tls.cert,
            tls_key=tls.key,
        )

    def client(self, node_id: str, owner: str, timeout: float = 10.0) -> Client:
        """A client of one node, closed with the cluster."""
        c = self.connect(node_id, owner=owner, timeout=timeout)
        self._clients.append(c)
        return c

    def status(self, via: str | None = None, timeout: float = 3.0) -> ClusterStatus | None:
        """``cluster status`` through one node (default: any live one); None if it fails."""
        vias = [via] if via else [n.id for n in self.live_nodes()]
        for node_id in vias:
            try:
                with self.connect(node_id, timeout=timeout) as c:
                    return c.cluster_status()
            except (ShardcronError, grpc.RpcError):
                continue
        return None

    def served_by_live(self, status: ClusterStatus | None, live: Iterable[str]) -> bool:
        """Every shard has an owner, and every owner is one of ``live``."""
        if status is None:
            return False
        live = set(live)
        owners = {s.shard: s.owner for s in status.shards}
        return len(owners) == SHARDS and all(o in live for o in owners.values())

    def handed_over(self, live: Iterable[str]) -> bool:
        """The leader's published assignment spreads the shards over every live node (each
        runs a poller), and each shard is held (``owners/<shard>``) by the poller it is
        assigned to."""
        zk = self.zk()
        try:
            data, _ = zk.get(f"/shardcron/{self.name}/assignment")
        except NoNodeError:
            return False
        assigned = {int(s): str(p) for s, p in json.loads(data or b"{}").get("owners", {}).items()}
        held = self.zk_owners()
        return (
            len(assigned) == SHARDS
            and set(assigned.values()) == set(live)
            and all(held.get(s, ("", 0))[0] == p for s, p in assigned.items())
        )

    def wait_stable(self, workers: int = 0, timeout: float = 60) -> ClusterStatus:
        """Until a leader serves every shard through live pollers, each of which has
        ``workers`` workers connected, and every shard is held in ZooKeeper by the
        poller it is assigned to: a published assignment is not stable while shards it
        moves are still being handed over (a poller takes a shard only once the
        previous owner released it)."""
        live = [n.id for n in self.live_nodes()]

        def stable() -> ClusterStatus | None:
            status = self.status()
            if (
                status is not None
                and status.leader in live
                and self.served_by_live(status, live)
                and sum(len(w.pollers) for w in status.workers) >= workers * len(live)
                and self.handed_over(live)
            ):
                return status
            return None

        return wait_until(stable, timeout, "the cluster stable", interval=0.2)

    def zk(self) -> KazooClient:
        if self._zk is None:
            self._zk = KazooClient(self.zk_hosts, timeout=10)
            self._zk.start(timeout=15)
        return self._zk

    def zk_owners(self) -> dict[int, tuple[str, int]]:
        """shard -> (poller, fencing epoch) as held in ZooKeeper (``owners/<shard>``)."""
        zk = self.zk()
        base = f"/shardcron/{self.name}/owners"
        out = {}
        for child in zk.get_children(base):
            try:
                data, _ = zk.get(f"{base}/{child}")
            except NoNodeError:
                continue
            value = json.loads(data or b"{}")
            out[int(child)] = (str(value.get("poller", "")), int(value.get("fencing_epoch", 0)))
        return out

    def zk_pollers(self) -> list[str]:
        return sorted(self.zk().get_children(f"/shardcron/{self.name}/members/pollers"))

    def zk_epoch(self) -> int:
        data, _ = self.zk().get(f"/shardcron/{self.name}/epoch")
        return int(json.loads(data or b"{}").get("epoch", 0))

    def tail(self, name: str, lines: int = 40) -> str:
        path = self.root / (f"{name}.log" if name in self.nodes else f"worker-{name}.log")
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def grep_logs(self, pattern: str) -> list[str]:
        """Lines matching ``pattern`` in every process log of this cluster (for reports)."""
        out = []
        rx = re.compile(pattern)
        for path in sorted(self.root.glob("*.log")):
            for line in path.read_text(errors="replace").splitlines():
                if rx.search(line):
                    out.append(f"{path.name}: {line}")
        return out

    # --- jobs ----------------------------------------------------------------------

    def record_task(self, sleep: float = 0.3) -> CommandTask:
        """The command every test job runs: start/end records around a short sleep."""
        log = shlex.quote(str(self.records))
        fields = "$SHARDCRON_RUN_ID $SHARDCRON_FENCING_TOKEN $(date +%s.%N) $SHARDCRON_JOB_ID $SHARDCRON_ATTEMPT $$"
        script = f'echo "start {fields}" >> {log}; sleep {sleep:g}; echo "end {fields}" >> {log}'
        return CommandTask(argv=("sh", "-c", script))


# --------------------------------------------------------------------------- run records


@dataclass
class Execution:
    """One execution of a run: a start record and, unless it was killed, an end record."""

    run_id: str
    token: int
    pid: int
    job_id: str
    attempt: int
    start: float
    end: float | None = None

    @property
    def epoch(self) -> int:
        return fencing_epoch(self.token)


def read_executions(path: Path) -> list[Execution]:
    by_key: dict[tuple[str, int, int], Execution] = {}
    for line in path.read_text(errors="replace").splitlines():
        parts = line.split()
        if len(parts) < 7 or parts[0] not in ("start", "end"):
            continue
        kind, run_id, token, at, job_id, attempt, pid = parts[:7]
        key = (run_id, int(token), int(pid))
        if kind == "start":
            by_key[key] = Execution(
                run_id, int(token), int(pid), job_id, int(attempt), float(at), None
            )
        elif key in by_key:
            by_key[key].end = float(at)
    return sorted(by_key.values(), key=lambda e: e.start)


def overlapping(
    executions: Iterable[Execution],
    group: Callable[[Execution], Any],
    unfinished_end: Callable[[Execution], float],
) -> list[tuple[Execution, Execution]]:
    """Pairs of executions of one group (one run, one fire) whose [start, end] intersect.
    An execution without an end record counts as running until ``unfinished_end(e)``."""
    groups: dict[Any, list[Execution]] = defaultdict(list)
    for e in executions:
        groups[group(e)].append(e)
    bad = []
    for members in groups.values():
        members.sort(key=lambda e: e.start)
        for a, b in zip(members, members[1:], strict=False):
            a_end = a.end if a.end is not None else unfinished_end(a)
            if b.start < a_end:
                bad.append((a, b))
    return bad


# --------------------------------------------------------------------------- checks


class Checks:
    """Collects violated expectations; ``verify`` fails with all of them."""

    def __init__(self) -> None:
        self.failures: list[str] = []

    def expect(self, ok: bool, message: str) -> bool:
        if not ok:
            self.failures.append(message)
        return ok

    def verify(self) -> None:
        if self.failures:
            raise AssertionError(
                f"{len(self.failures)} guarantee(s) violated:\n- " + "\n- ".join(self.failures)
            )


def all_runs(client: Client, job_id: str) -> list[Run]:
    return list(client.iter_runs(job_id, page_size=500))


def wait_jobs_final(
    client: Client, job_ids: Sequence[str], timeout: float = 60
) -> dict[str, list[Run]]:
    """Waits until none of ``job_ids`` is ACTIVE (a one-off job completes after its last
    attempt) and returns every job's runs; what is still active after ``timeout`` is
    returned as it stands."""
    deadline = time.monotonic() + timeout
    pending = set(job_ids)
    while pending and time.monotonic() < deadline:
        for job_id in list(pending):
            try:
                if client.get_job(job_id).state != JobState.ACTIVE:
                    pending.discard(job_id)
            except ShardcronError:
                pass
        if pending:
            time.sleep(0.5)
    out = {}
    for job_id in job_ids:
        for attempt in range(5):
            try:
                out[job_id] = all_runs(client, job_id)
                break
            except ShardcronError:
                if attempt == 4:
                    raise
                time.sleep(0.5)
    return out


def check_acknowledged_jobs(
    checks: Checks,
    runs_by_job: dict[str, list[Run]],
    executions: Sequence[Execution],
) -> None:
    """Every acknowledged job ended SUCCEEDED, and its successful run has a start and
    an end record carrying the run's own fencing token."""
    by_run: dict[str, list[Execution]] = defaultdict(list)
    for e in executions:
        by_run[e.run_id].append(e)
    for job_id, runs in runs_by_job.items():
        ok = [r for r in runs if r.state == RunState.SUCCEEDED]
        if not checks.expect(
            len(ok) == 1,
            f"job {job_id}: {len(ok)} SUCCEEDED runs; runs: "
            + ", ".join(f"{r.id[-8:]}#{r.attempt}:{r.state.value}/{r.reason.value}" for r in runs),
        ):
            continue
        run = ok[0]
        recs = [e for e in by_run.get(run.id, []) if e.token == run.lease_token]
        checks.expect(
            any(e.end is not None for e in recs),
            f"job {job_id}: run {run.id} SUCCEEDED (token {run.lease_token}) but the records "
            f"show no complete execution with that token: {by_run.get(run.id)}",
        )


def check_no_overlap(
    checks: Checks,
    executions: Sequence[Execution],
    fire_of: dict[str, Any],
    unfinished_end: Callable[[Execution], float],
) -> None:
    """No two executions of one run, nor of two attempts of one fire, at the same time;
    and no run executed under two leases of one owner (one fencing epoch): a poller
    leases a run again only after its lease was lost, and then as a new attempt, a
    new run; a new owner of the shard (a new epoch) may run it again, one after the
    other, when its first execution's result never reached the store."""
    tokens: dict[tuple[str, int], set[int]] = defaultdict(set)
    for e in executions:
        tokens[(e.run_id, e.epoch)].add(e.token)
    for (run_id, epoch), leased in sorted(tokens.items()):
        checks.expect(
            len(leased) == 1,
            f"run {run_id} executed under {len(leased)} leases of fencing epoch {epoch}: "
            f"tokens {sorted(leased)}",
        )
    same_run = overlapping(executions, lambda e: e.run_id, unfinished_end)
    for a, b in same_run:
        checks.expect(False, f"run {a.run_id} executed twice at once: {a} and {b}")
    same_fire = overlapping(
        [e for e in executions if e.run_id in fire_of],
        lambda e: fire_of[e.run_id],
        unfinished_end,
    )
    for a, b in same_fire:
        if a.run_id != b.run_id:
            checks.expect(False, f"two attempts of fire {fire_of[a.run_id]} at once: {a} and {b}")


def check_fire_attempts(checks: Checks, runs: Iterable[Run], *, one_success: bool = True) -> int:
    """One record per attempt of a fire, and (``one_success``) at most one SUCCEEDED
    per fire: a lost attempt is followed by exactly one next attempt, never by two.
    Returns how many fires succeeded more than once (at least once allows it, one
    after the other; never at the same time, which check_no_overlap asserts)."""
    repeated = 0
    by_fire: dict[tuple[str, str], list[Run]] = defaultdict(list)
    for r in runs:
        by_fire[(r.job_id, r.fire_key)].append(r)
    for (job_id, fire_key), fire_runs in by_fire.items():
        attempts = sorted(r.attempt for r in fire_runs)
        ok = [r for r in fire_runs if r.state == RunState.SUCCEEDED]
        described = ", ".join(
            f"{r.id}#{r.attempt}:{r.state.value}/{r.reason.value} token {r.lease_token}"
            f" created {(r.created_at or r.due_at):%H:%M:%S.%f}"
            for r in sorted(fire_runs, key=lambda r: (r.attempt, r.created_at or r.due_at))
        )
        repeated += len(ok) > 1
        checks.expect(
            len(set(attempts)) == len(attempts) and (len(ok) <= 1 or not one_success),
            f"fire {fire_key} of job {job_id}: attempts {attempts}, {len(ok)} SUCCEEDED: "
            f"{described}",
        )
    return repeated


def check_runs_once(
    checks: Checks, runs: Iterable[Run], executions: Sequence[Execution]
) -> tuple[int, int]:
    """No finished run executes again, and none is recorded failed after it succeeded:
    no execution of a fire (any attempt) starts after one of its executions ended
    (its command exited 0: the end record), and a run with a complete execution is
    recorded SUCCEEDED. Returns (fires executed again after one finished, fires run)."""
    stored = {r.id: r for r in runs}
    fire_of = {r.id: (r.job_id, r.fire_key) for r in stored.values()}
    by_fire: dict[Any, list[Execution]] = defaultdict(list)
    for e in executions:
        if e.run_id in fire_of:
            by_fire[fire_of[e.run_id]].append(e)
    again = 0
    for fire, execs in by_fire.items():
        execs.sort(key=lambda e: e.start)
        ended = [e for e in execs if e.end is not None]
        later = [e for e in execs if ended and e.start >= min(x.end or 0 for x in ended)]
        again += bool(later)
        checks.expect(not later, f"fire {fire} executed again after it finished: {execs}")
        for e in ended:
            run = stored[e.run_id]
            checks.expect(
                run.state == RunState.SUCCEEDED,
                f"run {run.id} (fire {fire}) exited 0 but is recorded "
                f"{run.state.value}/{run.reason.value}: {e}",
            )
    return again, len(by_fire)


def check_cron_coverage(
    checks: Checks, job_id: str, runs: Sequence[Run], window: tuple[float, float]
) -> dict[str, int]:
    """Every nominal second in ``window`` has a record, and the last attempt of each is
    final (SUCCEEDED, or SKIPPED/MISSED with a reason, or FAILED/WORKER_LOST: a lost
    attempt its job, allowing one attempt, does not repeat); returns the outcome counts."""
    by_second: dict[int, list[Run]] = defaultdict(list)
    for r in runs:
        by_second[int(r.fire_at.timestamp())].append(r)
    outcomes: dict[str, int] = defaultdict(int)
    missing = []
    for second in range(int(window[0]) + 1, int(window[1])):
        fire_runs = by_second.get(second)
        if not fire_runs:
            missing.append(second)
            continue
        last = max(fire_runs, key=lambda r: r.attempt)
        outcomes[last.state.value] += 1
        lost = (last.state, last.reason) == (RunState.FAILED, RunReason.WORKER_LOST)
        checks.expect(
            last.state in (RunState.SUCCEEDED, RunState.SKIPPED, RunState.MISSED) or lost,
            f"cron job {job_id}: fire {datetime.fromtimestamp(second, UTC):%H:%M:%S} ended "
            f"{last.state.value}/{last.reason.value} (attempt {last.attempt})",
        )
    checks.expect(
        not missing,
        f"cron job {job_id}: no record at all for {len(missing)} nominal second(s): "
        + ", ".join(f"{datetime.fromtimestamp(s, UTC):%H:%M:%S}" for s in missing[:20]),
    )
    return dict(outcomes)


def wait_cron_final(
    client: Client, job_id: str, window: tuple[float, float], timeout: float = 30
) -> list[Run]:
    """Until every fire of the window has a final last attempt (or timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        runs = all_runs(client, job_id)
        by_second: dict[int, Run] = {}
        for r in runs:
            s = int(r.fire_at.timestamp())
            if s not in by_second or r.attempt > by_second[s].attempt:
                by_second[s] = r
        seconds = range(int(window[0]) + 1, int(window[1]))
        if all(s in by_second and by_second[s].is_final for s in seconds):
            return runs
        if time.monotonic() > deadline:
            return runs
        time.sleep(0.5)


# --------------------------------------------------------------------------- job feeder


class JobFeeder(threading.Thread):
    """Creates immediate jobs through one node every ``interval`` seconds until stopped.

    A create that fails is retried with the same idempotency key (a retried create
    returns the same job); only jobs whose create returned are acknowledged.
    """

    def __init__(
        self,
        cluster: ShardcronCluster,
        via: str,
        owner: str,
        *,
        interval: float = 0.2,
        sleep: float = 0.3,
        attempts: int = 4,
    ) -> None:
        super().__init__(name=f"feeder-{owner}", daemon=True)
        self.cluster = cluster
        self.via = via
        self.owner = owner
        self.interval = interval
        self.task = cluster.record_task(sleep)
        self.attempts = attempts
        self.acked: list[tuple[str, float]] = []  # (job id, time acknowledged)
        self.latencies: list[tuple[float, float]] = []  # (time sent, seconds to ack)
        self.failed: list[tuple[float, str]] = []  # (time, error) of attempts that failed
        self.lost_creates = 0  # creates given up after every attempt failed
        self._halt = threading.Event()

    def run(self) -> None:
        client = self.cluster.connect(self.via, owner=self.owner, timeout=5)
        n = 0
        try:
            while not self._halt.is_set():
                n += 1
                key = f"{self.owner}-{n}-{uuid.uuid4().hex[:6]}"
                spec = JobSpec(name=f"j{n}", task=self.task)
                sent = time.time()
                for attempt in range(self.attempts):
                    try:
                        job = client.create_job(spec, idempotency_key=key)
                    except ShardcronError as e:
                        self.failed.append((time.time(), f"{type(e).__name__}: {e}"))
                        if attempt == self.attempts - 1:
                            self.lost_creates += 1
                        else:
                            time.sleep(0.2)
                        continue
                    now = time.time()
                    self.acked.append((job.id, now))
                    self.latencies.append((sent, now - sent))
                    break
                self._halt.wait(self.interval)
        finally:
            client.close()

    def stop(self) -> None:
        self._halt.set()
        self.join(30)

    @property
    def job_ids(self) -> list[str]:
        return [j for j, _ in self.acked]


# --------------------------------------------------------------------------- raw worker


class RawWorker:
    """A worker speaking the lease protocol by hand to one poller, to do what a real
    worker would not (never renew a lease, send a result after its lease was lost). It
    sends empty heartbeats: a worker silent while it holds a lease is taken for frozen."""

    def __init__(
        self, target: str, worker_id: str, handler: str, tls: ClientTls | None = None, *, token: str
    ) -> None:
        self.channel = channel_to(target, tls)
        self._out: queue.Queue[worker_pb2.WorkerMessage | None] = queue.Queue()
        self._out.put(
            worker_pb2.WorkerMessage(
                hello=worker_pb2.Hello(worker_id=worker_id, slots=4, handlers=[handler])
            )
        )
        stub = worker_pb2_grpc.WorkerServiceStub(self.channel)
        self._responses = stub.Connect(
            iter(self._out.get, None), metadata=(("authorization", f"Bearer {token}"),)
        )
        self._beating = heartbeat_empty(self._out)
        self.inbox: queue.Queue[worker_pb2.PollerMessage] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        with contextlib.suppress(grpc.RpcError, ValueError):
            for msg in self._responses:
                self.inbox.put(msg)

    def next(self, kind: str, timeout: float) -> worker_pb2.PollerMessage | None:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                msg = self.inbox.get(timeout=left)
            except queue.Empty:
                return None
            if msg.WhichOneof("body") == kind:
                return msg
        return None

    def result(self, run_id: str, token: int, state: int) -> None:
        result = worker_pb2.RunResult(run_id=run_id, fencing_token=token, state=state)
        self._out.put(worker_pb2.WorkerMessage(results=worker_pb2.Results(results=[result])))

    def close(self) -> None:
        self._beating.set()
        self._out.put(None)
        with contextlib.suppress(Exception):
            self._responses.cancel()
        self.channel.close()


def utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def seconds_between(a: datetime, b: datetime) -> float:
    return (b - a) / timedelta(seconds=1)


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


@dataclass
class Percentiles:
    values: list[float] = field(default_factory=list)

    def pct(self, p: float) -> float:
        if not self.values:
            return float("nan")
        s = sorted(self.values)
        return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]
