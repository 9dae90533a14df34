"""shardcron on its embedded store: ``shardcron dev`` as a process, workers beside it,
as the ``Node`` the workloads of ``shardcron_workloads`` run on.

Each workload gets a fresh node (its own data dir), so the store holds only that
workload's jobs. Jobs are no-op handler jobs (the built-in ``noop`` handler):
the scheduler is measured, not process start-up; W6 runs ``true`` as a command job,
on a worker that runs commands.

- The node runs api and poller in one process and commits to SQLite from its writer
  process; workers are separate processes (``shardcron worker``), so the two cores
  are both used.
- Run times are read from the store file (SQLite, read-only) once the runs ended.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import sys
from pathlib import Path

from bench.common import CpuMeter, Proc, Result, free_port, wait_port, wait_until_metric
from bench.systems.shardcron_s1 import s1
from bench.systems.shardcron_workloads import BATCH, run_on
from bench.workloads import QUICK, Plan, RunTime

IN_FLIGHT = 4  # CreateJobs calls at once
WORKERS = 1  # worker processes
# Slots per worker: a no-op run holds one for microseconds, so slots only bound what
# is in flight; with 256, a storm of 2,000 runs (W4's fleet) was leased in eight
# rounds of a commit each and started 0.7 s late at the median, with 2,048 in one.
# W2's 5,000 (--quick) with 2,048 went in three rounds, each waiting for the results
# that freed the slots: p99 start lag 0.68-0.82 s; with 8,192, 0.31-0.34 s. Sized for
# the largest fleet and storm (W4 10,000 crons, W2 50,000 runs): a lease given ahead of
# its instant holds its slot until then, and a held or no-op run costs almost nothing;
# with 8,192 the runs past them were leased only once results freed slots, after T.
SLOTS = 65_536
COMMAND_SLOTS = 64  # W6: slots per worker for `true` commands (each a child process)

SYSTEM = "shardcron (embedded)"
CONFIGS = {w: ["embedded"] for w in ("W1", "W2", "W3", "W4", "W6", "S1")}
S1_NOTE = (
    "; S1: RSS of the dev process and its children (the SQLite writer); store size: every"
    " file of its data dir (WAL included); HTTP: plain, no credential; kill: SIGKILL to the"
    " dev process group, restart: the same command on the same data dir"
)


class EmbeddedNode:
    """One ``shardcron dev`` node (api, poller, SQLite) and ``WORKERS`` worker processes."""

    system = SYSTEM
    config_id = "embedded"
    in_flight = IN_FLIGHT
    storm_submits_per_s = 2000  # W1 acknowledged 5,000-6,000 jobs/s here
    http_headers: dict[str, str] = {}  # a dev node trusts every caller: no credential
    http_ssl = None  # plain HTTP on loopback

    def __init__(
        self, out_dir: Path, name: str, *, commands: bool = False, http: bool = False
    ) -> None:
        self.dir = out_dir / name
        self.port, self.metrics_port = free_port(), free_port()
        self.http_port = free_port() if http else 0
        self.http_url = f"http://127.0.0.1:{self.http_port}"
        self.target = f"127.0.0.1:{self.port}"
        self.targets = [self.target]
        self.slots = COMMAND_SLOTS if commands else SLOTS
        exe = str(Path(sys.executable).parent / "shardcron")
        self.node = Proc(
            [
                exe, "dev", "--listen", self.target, "--data-dir", str(self.dir / "data"),
                "--metrics-listen", f"127.0.0.1:{self.metrics_port}", "--http-listen", f"127.0.0.1:{self.http_port}" if http else "", "--workers", "0",
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
                    str(self.slots),
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

    def kill(self) -> None:
        """SIGKILL to the node's process group (its writer too): a crash, no shutdown."""
        os.killpg(self.node.pid, signal.SIGKILL)
        assert self.node.popen is not None
        self.node.popen.wait(10)

    def restart(self) -> None:
        """A new node process on the same data dir and ports; not waited for."""
        self.node = Proc(self.node.args, self.node.log).start()

    def rss_bytes(self) -> int:
        """Resident memory of the node process and its descendants (the SQLite writer)."""
        import psutil  # the bench extra, as in bench.common

        root = psutil.Process(self.node.pid)
        return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])

    def store_server_rss_bytes(self) -> None:
        """None: the store (SQLite) lives in the node's own processes, in ``rss_bytes``."""
        return None

    def store_bytes(self) -> int:
        """Bytes of every file under the node's data dir (database, WAL, blobs)."""
        return sum(f.stat().st_size for f in (self.dir / "data").rglob("*") if f.is_file())

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

    def describe(self, workload: str) -> str:
        return (
            f"`shardcron dev` (api, poller; SQLite WAL from its writer process) + {WORKERS} worker process x "
            f"{self.slots} slots; submits: CreateJobs x {BATCH} jobs, {IN_FLIGHT} calls in flight"
            + (S1_NOTE if workload == "S1" else "")
        )

    def run_times(self, name: str) -> list[RunTime]:
        db = self.dir / "data" / "shardcron.db"
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            rows = conn.execute(
                "SELECT r.job_id, r.attempt, r.fire_at, r.due_at, r.started_at FROM runs r "
                "JOIN jobs j ON j.id = r.job_id WHERE j.name = ?",
                (name,),
            ).fetchall()
        finally:
            conn.close()
        return [RunTime.from_row(row) for row in rows]


def run(
    workloads: list[str], n: dict[str, int], out_dir: Path, *, plan: Plan = QUICK
) -> list[Result]:
    def node(workload: str) -> EmbeddedNode:
        return EmbeddedNode(out_dir, workload.lower(), commands=workload == "W6")

    results = run_on(node, [w for w in workloads if w != "S1"], n, plan)
    if "S1" in workloads:
        results.append(s1(EmbeddedNode(out_dir, "s1", http=True), n["S1"]))
    return results


if __name__ == "__main__":
    for r in run(["W1", "W2"], {"W1": 20_000, "W2": 20_000}, Path("/tmp/bench-shardcron")):
        print(r)
