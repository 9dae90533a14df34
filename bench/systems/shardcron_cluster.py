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

The client connects with the cluster's own client certificate and admin token (mTLS
and tokens, as every connection of ``make cluster``). The ports are ``make
cluster``'s (api 7401-7403, metrics 9465-9467, ZooKeeper 2191): stop a cluster started
by hand first.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bench.common import CpuMeter, Result, wait_until_metric
from bench.systems.shardcron_workloads import BATCH, run_on
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
            "in flight over the three api nodes"
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
