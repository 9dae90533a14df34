"""shardcron as a cluster on this machine: ZooKeeper, one Cassandra node, three nodes
(api, coordinator and poller each) and two workers, as ``make cluster`` starts them
(``python -m deploy.cluster``, in a directory of the run's own), as the ``Node`` the
workloads of ``shardcron_workloads`` run on: W1, W2, W3, W4 and W6, each on a fresh
cluster.

- Submits go through the three api nodes in turn (``CreateJobs``, ``IN_FLIGHT`` calls
  at once): a client spreading its load, as a user's would.
- Completion is the sum of ``shardcron_runs_final_total`` over the three nodes.
- CPU is metered for the shardcron nodes, the workers, Cassandra, ZooKeeper and the
  client; everything shares the machine's cores, Cassandra's JVM included.
- Run times are read from Cassandra once the runs ended, outside the metered span: the
  owner's job ids newest first (``jobs_by_owner``), each one's name, until the jobs of
  the name asked for are passed (``named_ids``: a workload's jobs of one name are made in
  one span, on a fresh cluster), then those jobs' ``runs`` partitions. A full scan of
  ``jobs`` and ``runs`` read S1's million stored jobs to find its 2,000 crons.
- Each fresh cluster is warmed before it is measured (``ClusterNode.warm``): Cassandra
  runs the JVM's full tiered JIT (server sizing, deploy/README.md), whose C2 compiles
  its hot paths over about a minute of load, as a server that has run a while has
  done; then a burst of immediate jobs, whose calls of 1,000 take other paths.
  Measured on a fresh node, a workload paid for those compiles (1-1.2 cores of a
  2-core machine for that minute) instead of what a job costs. The compiles go on
  under each measured load all the same, less: what Cassandra's compiler threads used
  is shown within its figure as ``jit of cassandra`` (``CpuMeter``'s parts), counted
  once in the total.

S1 (``shardcron_s1``) runs on it too, its figures defined for a cluster:

- ``http_url``: node 1's HTTP/JSON edge (``deploy.cluster.node_http_url``), over TLS,
  called with the client certificate and the admin token as a bearer;
- ``rss_bytes``: the three shardcron nodes' resident memory (each process and its
  children), summed; Cassandra's apart (``store_server_rss_bytes``: its JVM heap is sized
  up front, so it says little about the jobs); ZooKeeper's and the workers' in neither;
- ``store_bytes``: the files of the keyspace's tables in Cassandra's data directory
  after a ``nodetool flush`` (so the memtables count; the commit log does not); the
  keyspace also holds the warm-up's ended jobs and their runs (``WARM_JOBS``), so at a
  small N the size per job is overstated;
- ``kill``: SIGKILL to every shardcron node (each process group), ZooKeeper, Cassandra,
  the S3 gateway and the workers left up: the store is durable, a node crash is what is
  timed; ``restart``: the three nodes started again with the arguments ``up`` gave them
  (``deploy.cluster.start_node``); S1 times until node 1 serves a ``job list`` page (its
  ZooKeeper registration of before the crash expires meanwhile).

The client connects with the cluster's own client certificate and admin token (mTLS
and tokens, as every connection of ``make cluster``). The ports are ``make
cluster``'s (api 7401-7403, HTTP 7431-7433, metrics 9465-9467, ZooKeeper 2191): stop a
cluster started by hand first.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice
from pathlib import Path

from bench.common import CpuMeter, Result, thread_seconds, wait_ended, wait_until_metric
from bench.systems.shardcron_s1 import OWNER, s1
from bench.systems.shardcron_workloads import BATCH, open_loop, run_on, submit
from bench.workloads import QUICK, Plan, RunTime
from deploy.cluster import (
    CASSANDRA_HEAP,
    KEYSPACE,
    LocalCassandra,
    client_env,
    node_http_url,
    start_node,
)
from deploy.process import pid_alive
from shardcron.client.types import HandlerTask, JobSpec

REPO = Path(__file__).resolve().parents[2]
IN_FLIGHT = 6  # calls at once, spread over the three api nodes
# Slots per worker, 65,536 between the two as the embedded system's one worker has
# (bench/systems/shardcron_embedded.py says why): with 256 a worker held at most 512
# runs between the two, so W2's storm and W4's fleet were leased in rounds, each
# waiting for the results that freed the slots; with 4,096 each (8,192 held at most,
# fewer than the 10,000-job fleet), W4 at full size had a fire error p99 of 1.13 s,
# 0.90 s with these.
SLOTS = 32_768
COMMAND_SLOTS = 32  # W6: slots per worker for `true` commands (each a child process)
NODES = 3
WORKERS = 2
READ_PAGE = 5000  # rows per page when run times are read back
NAME_PAGE = 500  # job ids whose names are read at once, newest first (``named_ids``)
READ_CONCURRENCY = 64  # point reads in flight when run times are read back
KILL_WAIT = 10.0  # seconds a SIGKILLed node may take to be gone
CONFIGS = {w: ["zookeeper-cassandra"] for w in ("W1", "W2", "W3", "W4", "W6", "S1")}
JIT_PART = "jit of cassandra"  # CPU of Cassandra's compiler threads, within its figure
C2_THREADS = ("C2 CompilerThre",)  # the names the JVM gives its C2 compiler threads
JIT_THREADS = ("C1 CompilerThre", *C2_THREADS)
# The warm-up, WARM_ROUNDS times: W3's arrivals (one-off jobs due 0-5 s after submit,
# in CreateJobs calls every 20 ms) at WARM_RATE for WARM_SECONDS, then until
# Cassandra's C2 compiler threads used less than JIT_QUIET of a core in each of
# JIT_QUIET_SAMPLES spans of JIT_SAMPLE seconds in a row (JIT_WAIT at most): after such
# a load they compiled on for 20-40 s, with pauses.
WARM_RATE = 500
WARM_SECONDS = 40.0
# A load that began after a quiet spell set the compilers going again (0.3-0.5 of a
# core for 15 s): the second round pays for that too.
WARM_ROUNDS = 2
JIT_QUIET = 0.05
JIT_SAMPLE = 5.0
JIT_QUIET_SAMPLES = 2
JIT_WAIT = 180.0
# Then one burst of WARM_BURST immediate jobs, as W1 submits them, and again until the
# compiler is quiet: W3's arrivals (20 jobs a call) never ran the paths of W1's calls of
# 1,000, and the first W1 measured after them paid 1.1-1.3 CPU-s of C2 compiles, a
# quarter of Cassandra's CPU in it (each later W1 on the same node 0.2-0.8 s).
WARM_BURST = 10_000
WARM_ARRIVALS = WARM_ROUNDS * int(WARM_RATE * WARM_SECONDS)
WARM_JOBS = WARM_ARRIVALS + WARM_BURST  # jobs the warm-up leaves stored
WARM_NOTE = (
    f"warmed first, not metered: {WARM_ROUNDS} x ({WARM_RATE} jobs/s of W3 arrivals for"
    f" {WARM_SECONDS:.0f} s), then a burst of {WARM_BURST:,} immediate jobs, each until"
    " Cassandra's C2 compiler is idle"
)
METRICS = [f"http://127.0.0.1:{9464 + i}/metrics" for i in range(1, NODES + 1)]
S1_NOTE = (
    f"; S1: RSS of the {NODES} shardcron nodes summed (Cassandra's apart; ZooKeeper's and"
    f" the workers' in neither); store size: the keyspace's files in Cassandra's data"
    f" directory after `nodetool flush`, the warm-up's {WARM_JOBS:,} ended jobs and their"
    f" runs included, divided by the jobs stored; HTTP: node 1 over mTLS with the admin token;"
    f" kill: SIGKILL to the {NODES} shardcron nodes (ZooKeeper, Cassandra, workers left"
    f" up), restart: the same {NODES} node commands, timed until node 1 serves"
)


def _cluster(command: str, state: Path, slots: int = SLOTS) -> None:
    args = [sys.executable, "-m", "deploy.cluster", command, "--dir", str(state)]
    if command == "up":
        args += ["--nodes", str(NODES), "--workers", str(WORKERS), "--slots", str(slots)]
    log = (state.parent / f"cluster-{command}.log").open("ab")
    try:
        subprocess.run(args, check=True, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    finally:
        log.close()


def _pid(path: Path) -> list[int]:
    try:
        return [int(path.read_text().strip())]
    except (OSError, ValueError):
        return []


def _jit_quiet(pid: int) -> None:
    """Until the JVM's C2 compiler threads used less than ``JIT_QUIET`` of a core in each
    of ``JIT_QUIET_SAMPLES`` spans in a row (``JIT_WAIT`` at most)."""
    deadline, quiet = time.monotonic() + JIT_WAIT, 0
    while quiet < JIT_QUIET_SAMPLES and time.monotonic() < deadline:
        before = thread_seconds(pid, C2_THREADS)
        time.sleep(JIT_SAMPLE)
        # the JVM starts and ends compiler threads as its queue grows and drains
        used = sum(t - before.get(k, 0.0) for k, t in thread_seconds(pid, C2_THREADS).items())
        quiet = quiet + 1 if used < JIT_QUIET * JIT_SAMPLE else 0


def named_ids(pages: Iterable[Sequence[tuple[str, str | None]]], name: str) -> list[str]:
    """The ids named ``name`` among ``pages`` of (job id, its name or None when gone),
    newest first: read until a page holds none of them after one that did, since the
    jobs of one name were made in one span. The pages past that are never read."""
    found: list[str] = []
    for page in pages:
        here = [job_id for job_id, job_name in page if job_name == name]
        if found and not here:
            break
        found += here
    return found


def name_pages(
    ids: Iterable[str], names: Callable[[list[str]], dict[str, str]], size: int = NAME_PAGE
) -> Iterator[list[tuple[str, str | None]]]:
    """``ids`` in pages of ``size``, each id with its name as ``names`` reads a page's
    (None for an id it has not), a page read only when the one before was taken."""
    ahead = (i for i in ids)  # iter(ids) once: a driver's ResultSet starts over at each
    while page := list(islice(ahead, size)):
        found = names(page)
        yield [(i, found.get(i)) for i in page]


def _rss(pid: int) -> int:
    """Resident memory of ``pid`` and its descendants (0 when it is gone)."""
    import psutil  # the bench extra, as CpuMeter's

    try:
        root = psutil.Process(pid)
        return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])
    except psutil.NoSuchProcess:
        return 0


class ClusterNode:
    """``make cluster``'s layout, up from ``start`` to ``stop``; while it is up this
    process's environment holds the cluster's client credentials (the SDK's clients
    read them)."""

    system = "shardcron (ZooKeeper + Cassandra)"
    config_id = "zookeeper-cassandra"
    in_flight = IN_FLIGHT
    storm_submits_per_s = 800  # W1 and W6 acknowledged 1,200-2,000 jobs/s here
    targets = [f"127.0.0.1:{7400 + i}" for i in range(1, NODES + 1)]
    metrics = METRICS

    http_url = node_http_url(1)

    def __init__(self, out_dir: Path, name: str) -> None:
        self.state = out_dir / name / "cluster"
        self.slots = COMMAND_SLOTS if name == "w6" else SLOTS
        self._saved: dict[str, str | None] = {}
        self.http_headers: dict[str, str] = {}
        self.http_ssl: ssl.SSLContext | None = None

    def start(self) -> None:
        self.state.mkdir(parents=True, exist_ok=True)
        _cluster("up", self.state, self.slots)
        variables = client_env(self.state)
        self._saved = {k: os.environ.get(k) for k in variables}
        os.environ.update(variables)
        self.http_headers = {"Authorization": f"Bearer {variables['SHARDCRON_TOKEN']}"}
        self.http_ssl = ssl.create_default_context(cafile=variables["SHARDCRON_TLS_CA"])
        self.http_ssl.load_cert_chain(
            variables["SHARDCRON_TLS_CERT"], variables["SHARDCRON_TLS_KEY"]
        )
        self.wait_workers()
        self.warm()

    def warm(self) -> None:
        """Runs the warm-up load (``WARM_RATE``) ``WARM_ROUNDS`` times, each to its end and
        until Cassandra's JIT is quiet (module docstring)."""
        cassandra = _pid(self.state / "cassandra" / "cass1" / "pid")
        for round_ in range(1, WARM_ROUNDS + 1):
            asyncio.run(open_loop(self.targets, "warm-up-jit", WARM_RATE, WARM_SECONDS))
            wait_ended(self.metrics, round_ * WARM_ARRIVALS // WARM_ROUNDS, 120.0)
            if cassandra:
                _jit_quiet(cassandra[0])
        burst = JobSpec(name="warm-up-burst", task=HandlerTask(name="noop"))
        asyncio.run(submit(self.targets, [burst] * WARM_BURST, IN_FLIGHT))
        wait_ended(self.metrics, WARM_JOBS, 120.0)
        if cassandra:
            _jit_quiet(cassandra[0])

    def stop(self) -> None:
        for k, v in self._saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        self._saved = {}
        _cluster("down", self.state)

    def _node_pids(self) -> list[int]:
        return [p for i in range(1, NODES + 1) for p in _pid(self.state / f"node{i}.pid")]

    def _cassandra(self) -> LocalCassandra:
        return LocalCassandra(self.state / "cassandra")

    def rss_bytes(self) -> int:
        """The shardcron nodes' resident memory (each process and its children), summed."""
        return sum(_rss(pid) for pid in self._node_pids())

    def store_server_rss_bytes(self) -> int:
        """Cassandra's resident memory (its JVM; the heap is sized up front)."""
        return sum(_rss(pid) for pid in _pid(self.state / "cassandra" / "cass1" / "pid"))

    def store_bytes(self) -> int:
        """Bytes of the keyspace's files in Cassandra's data directory, once flushed."""
        cassandra = self._cassandra()
        cassandra.nodetool(1, "flush", KEYSPACE)
        return cassandra.keyspace_bytes(1, KEYSPACE)

    def kill(self) -> None:
        """SIGKILL to every shardcron node's process group, as a crash; until each is gone.
        ZooKeeper, Cassandra, the S3 gateway and the workers stay up."""
        pids = self._node_pids()
        for pid in pids:
            try:
                os.killpg(pid, signal.SIGKILL)  # each node leads its own session
            except ProcessLookupError:
                continue
        deadline = time.monotonic() + KILL_WAIT
        for pid in pids:
            while pid_alive(pid, "shardcron"):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"node pid {pid} still alive {KILL_WAIT:.0f}s after SIGKILL")
                time.sleep(0.05)

    def restart(self) -> None:
        """The three nodes started again with ``up``'s arguments; not waited for."""
        for i in range(1, NODES + 1):
            start_node(self.state, i)

    def cpu(self) -> CpuMeter:
        s = self.state
        return CpuMeter(
            {
                "nodes": [p for i in range(1, NODES + 1) for p in _pid(s / f"node{i}.pid")],
                "workers": [p for i in range(1, WORKERS + 1) for p in _pid(s / f"worker{i}.pid")],
                "cassandra": _pid(s / "cassandra" / "cass1" / "pid"),
                "zookeeper": _pid(s / "zookeeper" / "zk1" / "pid"),
                "client": [os.getpid()],
            },
            # what of Cassandra's CPU went to the JIT's compiles (its compiler threads,
            # fixed in number: deploy/cassandra.py), and not to the jobs
            parts={JIT_PART: (_pid(s / "cassandra" / "cass1" / "pid"), JIT_THREADS)},
        )

    def wait_workers(self, timeout: float = 60.0) -> None:
        """Until each worker streams to every poller (jobs would wait for them otherwise)."""
        wait_until_metric(self.metrics, "shardcron_workers_connected", NODES * WORKERS, timeout)

    def describe(self, workload: str) -> str:
        return (
            f"`make cluster` layout: ZooKeeper, 1 Cassandra node (server sizing, heap "
            f"{CASSANDRA_HEAP}), {NODES} nodes, "
            f"{WORKERS} workers x {self.slots} slots; CreateJobs x {BATCH} jobs, {IN_FLIGHT} calls "
            f"in flight over the three api nodes; {WARM_NOTE}"
            + (S1_NOTE if workload == "S1" else "")
        )

    def run_times(self, name: str) -> list[RunTime]:
        """The runs of the jobs named ``name``, read straight from Cassandra (module
        docstring): the owner's ids newest first, their names until ``named_ids`` has
        passed that name's jobs, then each of those jobs' ``runs`` partition."""
        from cassandra.cluster import Cluster
        from cassandra.concurrent import execute_concurrent_with_args
        from cassandra.query import SimpleStatement

        contact = json.loads((self.state / "endpoints.json").read_text())["cassandra"]
        cluster = Cluster(contact.split(","), protocol_version=5)
        try:
            session = cluster.connect(KEYSPACE)
            ids = session.execute(
                SimpleStatement(
                    "SELECT id FROM jobs_by_owner WHERE owner = %s ORDER BY id DESC",
                    fetch_size=READ_PAGE,
                ),
                (OWNER,),
                timeout=120,
            )
            name_of = session.prepare("SELECT id, name FROM jobs WHERE id = ?")

            def names(page: list[str]) -> dict[str, str]:
                reads = execute_concurrent_with_args(
                    session, name_of, [(i,) for i in page], concurrency=READ_CONCURRENCY
                )
                return {row[0]: row[1] for ok, rows in reads if ok for row in rows}

            jobs = named_ids(name_pages((row[0] for row in ids), names), name)
            runs_of = session.prepare(
                "SELECT job_id, attempt, fire_at, due_at, started_at FROM runs WHERE job_id = ?"
            )
            reads = execute_concurrent_with_args(
                session,
                runs_of,
                [(i,) for i in jobs],
                concurrency=READ_CONCURRENCY,
                raise_on_first_error=True,
            )
            return [RunTime.from_row(row) for _, rows in reads for row in rows]
        finally:
            cluster.shutdown()


def run(
    workloads: list[str], n: dict[str, int], out_dir: Path, *, plan: Plan = QUICK
) -> list[Result]:
    results = run_on(
        lambda workload: ClusterNode(out_dir, workload.lower()),
        [w for w in workloads if w != "S1"],
        n,
        plan,
    )
    if "S1" in workloads:
        results.append(s1(ClusterNode(out_dir, "s1"), n["S1"]))
    return results
