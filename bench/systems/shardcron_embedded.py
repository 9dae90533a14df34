"""shardcron on its embedded store: ``shardcron dev`` as a process, workers beside it.

Each workload gets a fresh node (its own data dir), so the store holds only that
workload's jobs. Jobs are no-op handler jobs (the built-in ``noop`` handler):
the scheduler is measured, not process start-up.

- Submits go through the Python SDK's ``AsyncClient.create_jobs`` (the batch call,
  ``BATCH`` jobs per call, ``IN_FLIGHT`` calls at once): what a user submitting many
  jobs would do.
- Completion is read from the node's Prometheus endpoint
  (``shardcron_runs_final_total``), one scrape every ``POLL`` seconds: no per-job
  call competes with the workload.
- Start lag (W2) is read from the store file once every run ended: ``started_at``
  is the time the worker reported starting the run, ``due_at`` the instant all
  were due.
- The node runs api, poller and store in one process; workers are separate
  processes (``shardcron worker``), so the two cores are both used.
- W6 is W1 with ``true`` as a command job, on a worker that runs commands; W3 and W4
  (open-loop arrivals, the cron fleet) are in ``shardcron_timed``.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from bench.common import (
    CpuMeter,
    Proc,
    Result,
    free_port,
    per_1000,
    percentiles,
    wait_ended,
    wait_port,
    wait_until_metric,
)
from bench.systems import shardcron_timed
from bench.workloads import QUICK, Plan
from shardcron.client import AsyncClient
from shardcron.client.types import CommandTask, HandlerTask, JobSpec, Schedule

BATCH = 1000  # jobs per CreateJobs call
IN_FLIGHT = 4  # CreateJobs calls at once
POLL = 0.05  # seconds between scrapes of the completion counter
WORKERS = 1  # worker processes
# Slots per worker: a no-op run holds one for microseconds, so slots only bound what
# is in flight; with 256, a storm of 2,000 runs (W4's fleet) was leased in eight
# rounds of a commit each and started 0.7 s late at the median, with 2,048 in one.
# W2's 5,000 (--quick) with 2,048 went in three rounds, each waiting for the results
# that freed the slots: p99 start lag 0.68-0.82 s; with 8,192, 0.31-0.34 s.
SLOTS = 8192
COMMAND_SLOTS = 64  # W6: slots per worker for `true` commands (each a child process)
TIMEOUT = 600.0  # seconds a workload may take
STORM_LEAD = 5.0  # W2: the storm instant is this long after the estimated end of submits


class _Node:
    def __init__(self, out_dir: Path, name: str, *, commands: bool = False) -> None:
        self.dir = out_dir / name
        self.port, self.metrics_port = free_port(), free_port()
        self.target = f"127.0.0.1:{self.port}"
        exe = str(Path(sys.executable).parent / "shardcron")
        self.node = Proc(
            [
                exe, "dev", "--listen", self.target, "--data-dir", str(self.dir / "data"),
                "--metrics-listen", f"127.0.0.1:{self.metrics_port}", "--http-listen", "", "--workers", "0",
                "--log-level", "warning",
            ],
            self.dir / "node.log",
        )  # fmt: skip
        self.workers = [
            Proc(
                [
                    exe,
                    "worker",
                    "--target",
                    self.target,
                    "--id",
                    f"bench-w{i}",
                    "--slots",
                    str(COMMAND_SLOTS if commands else SLOTS),
                    *([] if commands else ["--no-commands"]),
                    "--log-level",
                    "warning",
                ],
                self.dir / f"worker{i}.log",
            )  # fmt: skip
            for i in range(WORKERS)
        ]

    def start(self) -> None:
        self.node.start()
        wait_port(self.port)
        wait_port(self.metrics_port)
        for w in self.workers:
            w.start()

    def stop(self) -> None:
        for p in [*self.workers, self.node]:
            p.stop()

    def cpu(self) -> CpuMeter:
        return CpuMeter(
            {
                "scheduler": [self.node.pid],
                "workers": [w.pid for w in self.workers],
                "client": [os.getpid()],
            }
        )

    @property
    def metrics(self) -> list[str]:
        return [f"http://127.0.0.1:{self.metrics_port}/metrics"]

    def wait_workers(self, timeout: float = 30.0) -> None:
        """Until every worker is connected (a job submitted before would wait for one)."""
        wait_until_metric(self.metrics, "shardcron_workers_connected", len(self.workers), timeout)


async def submit(
    targets: Sequence[str], specs: list[JobSpec], in_flight: int
) -> tuple[float, float]:
    """Submits every spec in ``BATCH``-job CreateJobs calls, ``in_flight`` at once, the
    k-th call to ``targets[k % len(targets)]`` (as ``SHARDCRON_TOKEN``'s principal, if
    set); returns (first call sent, last acked)."""
    clients = [AsyncClient(t, owner="bench", timeout=120) for t in targets]
    queue: asyncio.Queue[tuple[int, list[JobSpec]]] = asyncio.Queue()
    for k, i in enumerate(range(0, len(specs), BATCH)):
        queue.put_nowait((k, specs[i : i + BATCH]))

    async def caller() -> None:
        while not queue.empty():
            k, batch = queue.get_nowait()
            await clients[k % len(clients)].create_job_ids(batch)

    try:
        first = time.time()
        await asyncio.gather(*(caller() for _ in range(in_flight)))
        return first, time.time()
    finally:
        for c in clients:
            await c.close()


SYSTEM = "shardcron (embedded)"
CONFIGS = {w: ["embedded"] for w in ("W1", "W2", "W3", "W4", "W6")}


def _config(slots: int = SLOTS) -> str:
    return (
        f"`shardcron dev` (api, poller, SQLite WAL) + {WORKERS} worker process x {slots} slots; "
        f"submits: CreateJobs x {BATCH} jobs, {IN_FLIGHT} calls in flight"
    )


def _measure(
    node: _Node, spec: JobSpec, n: int, timeout: float
) -> tuple[float, float, int, float, dict[str, float]]:
    """Submits ``n`` copies of ``spec`` and waits until they ended, CPU metered over
    exactly that span: (first submit, last ack, ended, last end, CPU-s by role)."""
    meter = node.cpu()
    meter.start()
    first, last_ack = asyncio.run(submit([node.target], [spec] * n, IN_FLIGHT))
    done, last_done = wait_ended(node.metrics, n, timeout, POLL)
    return first, last_ack, done, last_done, meter.stop()


def _burst(out_dir: Path, n: int, workload: str) -> Result:
    """W1 (no-op handler jobs) or W6 (`true` commands): ``n`` immediate jobs."""
    commands = workload == "W6"
    node = _Node(out_dir, workload.lower(), commands=commands)
    task = CommandTask(argv=("true",)) if commands else HandlerTask(name="noop")
    spec = JobSpec(name=workload.lower(), task=task)
    try:
        node.start()
        node.wait_workers()
        first, last_ack, done, last_done, cpu = _measure(node, spec, n, TIMEOUT)
    finally:
        node.stop()
    return Result(
        system=SYSTEM,
        workload=workload,
        n=n,
        config=_config(COMMAND_SLOTS if commands else SLOTS),
        config_id="embedded",
        submit_rate=n / max(last_ack - first, 1e-9),
        e2e_rate=done / max(last_done - first, 1e-9),
        drain_s=max(0.0, last_done - last_ack),
        cpu_per_1000=per_1000(cpu, n),
        completed=done,
        notes="completion from shardcron_runs_final_total"
        + ("" if done >= n else f"; timed out after {TIMEOUT:.0f}s"),
    )


def _w2(out_dir: Path, n: int) -> Result:
    node = _Node(out_dir, "w2")
    try:
        node.start()
        node.wait_workers()
        # the storm instant: after every submit, judged from a submit rate of 2,000/s
        at = datetime.fromtimestamp(time.time() + n / 2000 + STORM_LEAD, UTC)
        spec = JobSpec(name="w2", task=HandlerTask(name="noop"), schedule=Schedule.once_at(at))
        timeout = TIMEOUT + max(0.0, at.timestamp() - time.time())
        first, last_ack, done, last_done, cpu = _measure(node, spec, n, timeout)
        lags = _start_lags(node.dir / "data" / "shardcron.db")
    finally:
        node.stop()
    notes = "start lag = started_at (worker) - due instant, read from the store"
    if last_ack > at.timestamp():
        notes += "; submits ended after the storm instant"
    if done < n:
        notes += f"; timed out, {done} of {n} ended"
    return Result(
        system=SYSTEM,
        workload="W2",
        n=n,
        config=_config(),
        config_id="embedded",
        submit_rate=n / max(last_ack - first, 1e-9),
        drain_s=max(0.0, last_done - at.timestamp()),
        lag=percentiles(lags),
        cpu_per_1000=per_1000(cpu, n),
        completed=done,
        notes=notes,
    )


def _start_lags(db: Path) -> list[float]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT started_at - due_at FROM runs WHERE started_at IS NOT NULL"
        ).fetchall()
    finally:
        conn.close()
    return [r[0] / 1e6 for r in rows]


def run(
    workloads: list[str], n: dict[str, int], out_dir: Path, *, plan: Plan = QUICK
) -> list[Result]:
    results = []
    for workload in workloads:
        if workload in ("W1", "W6"):
            results.append(_burst(out_dir, n[workload], workload))
        elif workload == "W2":
            results.append(_w2(out_dir, n["W2"]))
        elif workload == "W3":
            results += shardcron_timed.w3(_Node(out_dir, "w3"), plan)
        elif workload == "W4":
            results.append(shardcron_timed.w4(_Node(out_dir, "w4"), plan.jobs("W4"), plan))
    return results


if __name__ == "__main__":
    for r in run(["W1", "W2"], {"W1": 20_000, "W2": 20_000}, Path("/tmp/bench-shardcron")):
        print(r)
