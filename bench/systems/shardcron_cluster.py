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
- Run times are read from Cassandra (the ``runs`` table, by the jobs of one name) once
  the runs ended, outside the metered span.
- Each fresh cluster is warmed before it is measured (``ClusterNode.warm``): Cassandra
  runs the JVM's full tiered JIT (server sizing, deploy/README.md), whose C2 compiles
  its hot paths over about a minute of load, as a server that has run a while has
  done. Measured on a fresh node, a workload paid for those compiles (1-1.2 cores
  of a 2-core machine for that minute) instead of what a job costs.

The client connects with the cluster's own client certificate and admin token (mTLS
and tokens, as every connection of ``make cluster``). The ports are ``make
cluster``'s (api 7401-7403, metrics 9465-9467, ZooKeeper 2191): stop a cluster started
by hand first.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.common import CpuMeter, Result, wait_ended, wait_until_metric
from bench.systems.shardcron_workloads import BATCH, open_loop, run_on
from bench.workloads import QUICK, Plan, RunTime
from deploy.cluster import CASSANDRA_HEAP, KEYSPACE, client_env

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
CONFIGS = {w: ["zookeeper-cassandra"] for w in ("W1", "W2", "W3", "W4", "W6")}
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
WARM_NOTE = (
    f"warmed first, not metered: {WARM_ROUNDS} x ({WARM_RATE} jobs/s of W3 arrivals for"
    f" {WARM_SECONDS:.0f} s, then until Cassandra's C2 compiler is idle)"
)
METRICS = [f"http://127.0.0.1:{9464 + i}/metrics" for i in range(1, NODES + 1)]


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


def _compiler_seconds(pid: int) -> dict[int, float]:
    """CPU seconds used so far by each of the JVM's C2 compiler threads."""
    import psutil  # the bench extra, as CpuMeter's

    seconds: dict[int, float] = {}
    for thread in psutil.Process(pid).threads():
        try:
            name = Path(f"/proc/{pid}/task/{thread.id}/comm").read_text()
        except OSError:
            continue  # the thread ended
        if name.startswith("C2 CompilerThre"):
            seconds[thread.id] = thread.user_time + thread.system_time
    return seconds


def _jit_quiet(pid: int) -> None:
    """Until the JVM's C2 compiler threads used less than ``JIT_QUIET`` of a core in each
    of ``JIT_QUIET_SAMPLES`` spans in a row (``JIT_WAIT`` at most)."""
    deadline, quiet = time.monotonic() + JIT_WAIT, 0
    while quiet < JIT_QUIET_SAMPLES and time.monotonic() < deadline:
        before = _compiler_seconds(pid)
        time.sleep(JIT_SAMPLE)
        # the JVM starts and ends compiler threads as its queue grows and drains
        used = sum(t - before.get(k, 0.0) for k, t in _compiler_seconds(pid).items())
        quiet = quiet + 1 if used < JIT_QUIET * JIT_SAMPLE else 0


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

    def __init__(self, out_dir: Path, name: str) -> None:
        self.state = out_dir / name / "cluster"
        self.slots = COMMAND_SLOTS if name == "w6" else SLOTS
        self._saved: dict[str, str | None] = {}

    def start(self) -> None:
        self.state.mkdir(parents=True, exist_ok=True)
        _cluster("up", self.state, self.slots)
        variables = client_env(self.state)
        self._saved = {k: os.environ.get(k) for k in variables}
        os.environ.update(variables)
        self.wait_workers()
        self.warm()

    def warm(self) -> None:
        """Runs the warm-up load (``WARM_RATE``) ``WARM_ROUNDS`` times, each to its end and
        until Cassandra's JIT is quiet (module docstring)."""
        cassandra = _pid(self.state / "cassandra" / "cass1" / "pid")
        for round_ in range(1, WARM_ROUNDS + 1):
            asyncio.run(open_loop(self.targets, "warm-up-jit", WARM_RATE, WARM_SECONDS))
            wait_ended(self.metrics, round_ * int(WARM_RATE * WARM_SECONDS), 120.0)
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

    def cpu(self) -> CpuMeter:
        s = self.state
        return CpuMeter(
            {
                "nodes": [p for i in range(1, NODES + 1) for p in _pid(s / f"node{i}.pid")],
                "workers": [p for i in range(1, WORKERS + 1) for p in _pid(s / f"worker{i}.pid")],
                "cassandra": _pid(s / "cassandra" / "cass1" / "pid"),
                "zookeeper": _pid(s / "zookeeper" / "zk1" / "pid"),
                "client": [os.getpid()],
            }
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
        )

    def run_times(self, name: str) -> list[RunTime]:
        """The runs of the jobs named ``name``, read straight from Cassandra: a full scan
        of a keyspace that holds one workload, cheaper than the api's per-job pages."""
        from cassandra.cluster import Cluster
        from cassandra.query import SimpleStatement

        contact = json.loads((self.state / "endpoints.json").read_text())["cassandra"]
        cluster = Cluster(contact.split(","), protocol_version=5)
        try:
            session = cluster.connect(KEYSPACE)
            jobs = session.execute(
                SimpleStatement("SELECT id, name FROM jobs", fetch_size=READ_PAGE)
            )
            ids = {job_id for job_id, job_name in jobs if job_name == name}
            runs = session.execute(
                SimpleStatement(
                    "SELECT job_id, attempt, fire_at, due_at, started_at FROM runs",
                    fetch_size=READ_PAGE,
                ),
                timeout=120,
            )
            return [RunTime.from_row(row) for row in runs if row[0] in ids]
        finally:
            cluster.shutdown()


def run(
    workloads: list[str], n: dict[str, int], out_dir: Path, *, plan: Plan = QUICK
) -> list[Result]:
    return run_on(lambda workload: ClusterNode(out_dir, workload.lower()), workloads, n, plan)
