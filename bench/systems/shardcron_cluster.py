"""shardcron as a cluster on this machine: ZooKeeper, one Cassandra node, three nodes
(api, coordinator and poller each) and two workers, as ``make cluster`` starts them
(``python -m deploy.cluster``, in a directory of the run's own). W1 only.

- Submits go through the three api nodes in turn (``CreateJobs``, ``BATCH`` jobs per
  call, ``IN_FLIGHT`` calls at once): a client spreading its load, as a user's would.
- Completion is the sum of ``shardcron_runs_final_total`` over the three nodes.
- CPU is metered for the shardcron nodes, the workers, Cassandra, ZooKeeper and the
  client; everything shares the machine's cores, Cassandra's JVM included.

The client connects with the cluster's own client certificate (mTLS, as every
connection of ``make cluster``). The ports are ``make cluster``'s (api 7401-7403, metrics 9465-9467, ZooKeeper 2191):
stop a cluster started by hand first.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from bench.common import CpuMeter, Result, per_1000, wait_ended, wait_until_metric
from bench.systems.shardcron_embedded import BATCH, submit
from deploy.cluster import CASSANDRA_HEAP, client_env
from shardcron.client.types import HandlerTask, JobSpec

REPO = Path(__file__).resolve().parents[2]
IN_FLIGHT = 6  # calls at once, spread over the three api nodes
SLOTS = 256  # per worker
TIMEOUT = 600.0
NODES = 3
WORKERS = 2


def _cluster(command: str, state: Path) -> None:
    args = [sys.executable, "-m", "deploy.cluster", command, "--dir", str(state)]
    if command == "up":
        args += ["--nodes", str(NODES), "--workers", str(WORKERS), "--slots", str(SLOTS)]
    log = (state.parent / f"cluster-{command}.log").open("ab")
    try:
        subprocess.run(args, check=True, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    finally:
        log.close()


@contextlib.contextmanager
def _environment(variables: dict[str, str]) -> Iterator[None]:
    """``variables`` set in this process's environment, for the block only."""
    saved = {k: os.environ.get(k) for k in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _pid(path: Path) -> list[int]:
    try:
        return [int(path.read_text().strip())]
    except (OSError, ValueError):
        return []


METRICS = [f"http://127.0.0.1:{9464 + i}/metrics" for i in range(1, NODES + 1)]


def _w1(out_dir: Path, n: int) -> Result:
    state = out_dir / "cluster"
    state.mkdir(parents=True, exist_ok=True)
    try:
        _cluster("up", state)
        # each worker streams to every poller (jobs would wait for them otherwise)
        wait_until_metric(METRICS, "shardcron_workers_connected", NODES * WORKERS, 60.0)
        meter = CpuMeter(
            {
                "nodes": [p for i in range(1, NODES + 1) for p in _pid(state / f"node{i}.pid")],
                "workers": [
                    p for i in range(1, WORKERS + 1) for p in _pid(state / f"worker{i}.pid")
                ],
                "cassandra": _pid(state / "cassandra" / "cass1" / "pid"),
                "zookeeper": _pid(state / "zookeeper" / "zk1" / "pid"),
                "client": [os.getpid()],
            }
        )
        spec = JobSpec(name="w1", task=HandlerTask(name="noop"))
        meter.start()
        targets = [f"127.0.0.1:{7400 + i}" for i in range(1, NODES + 1)]
        with _environment(client_env(state)):  # the SDK's clients read them
            first, last_ack = asyncio.run(submit(targets, [spec] * n, IN_FLIGHT))
        done, last_done = wait_ended(METRICS, n, TIMEOUT, 0.1)
        cpu = meter.stop()
    finally:
        _cluster("down", state)
    return Result(
        system="shardcron (ZooKeeper + Cassandra)",
        workload="W1",
        n=n,
        config_id="zookeeper-cassandra",
        config=f"`make cluster` layout: ZooKeeper, 1 Cassandra node (server sizing, heap "
        f"{CASSANDRA_HEAP}), {NODES} nodes, "
        f"{WORKERS} workers x {SLOTS} slots; CreateJobs x {BATCH} jobs, {IN_FLIGHT} calls in "
        "flight over the three api nodes",
        submit_rate=n / max(last_ack - first, 1e-9),
        e2e_rate=done / max(last_done - first, 1e-9),
        drain_s=max(0.0, last_done - last_ack),
        cpu_per_1000=per_1000(cpu, n),
        completed=done,
        notes="completion: shardcron_runs_final_total summed over the nodes"
        + ("" if done >= n else f"; timed out after {TIMEOUT:.0f}s"),
    )


CONFIGS = {"W1": ["zookeeper-cassandra"]}


def run(
    workloads: list[str], n: dict[str, int], out_dir: Path, *, plan: object = None
) -> list[Result]:
    return [_w1(out_dir, n["W1"])] if "W1" in workloads else []
