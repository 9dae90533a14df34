"""The cluster store's per-job budget, counted by Cassandra itself.

A node built in-process with the poller ``shardcron node`` configures, on a
``CassandraStore`` of a keyspace of its own with the default retention (30 days, as
``shardcron node`` has it) and local coordination (every shard its own: the api node
that takes a one-off create is the poller its job is placed on, as ``placed_job_id``
makes it on a cluster), and an in-process worker serving a no-op handler, runs:

- W1's shape: ``JOBS`` immediate one-off jobs, created in ``CreateJobs`` batches;
- a cron: ``CRON_JOBS`` jobs firing every second, ``FIRES`` times each (a start and
  an end on the schedule), so every job ends COMPLETED and every fire is counted.

Before and after each, Cassandra's own per-table counts are read
(``tests/support/cassandra_counts.py``); each table's writes and reads per job of W1,
and per run of the cron, must stay within ``W1_BUDGET`` and ``CRON_BUDGET``: the
budget ARCHITECTURE.md writes down beside the guarantee each operation serves. One
more write of a table per job breaks it.

Some counts depend on time, not on the jobs, and get a tolerance that says so:
- the poller's scans of the due index (``due_runs`` and ``shard_buckets`` reads, per
  shard every second, and a re-read of the recent past every two), its cursor saves
  (``shard_cursors``) and its re-reads of the owners' settings: a price per second
  (``PER_SECOND``);
- the index rows written per partition, not per row (``due_runs``,
  ``shard_buckets``): how many partitions a call or a commit's runs fall in depends on
  where a minute's bucket boundary falls and on how many runs share a commit;
- the cron's job reads: a fire reads its job only when the copy held is older than
  1 s.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cassandra.cluster import Session

from shardcron.client import AsyncClient
from shardcron.client.types import HandlerTask, JobSpec, Schedule
from shardcron.coordinator.coordination import LocalCoordination
from shardcron.coordinator.node import Node, NodeConfig
from shardcron.coordinator.poller import PollerConfig
from shardcron.coordinator.retention import DEFAULT_RETENTION
from shardcron.worker import HandlerRegistry, Worker
from tests.support.cassandra import cassandra_node
from tests.support.cassandra_counts import TableCounts, TableOps, table_counts
from tests.support.waiting import until

CONFIG = {"shard_count": 8, "bucket_seconds": 60}
JOBS = 1000  # W1: one-off jobs
BATCH = 100  # jobs per CreateJobs call
CRON_JOBS = 50
FIRES = 6  # per cron job, a second apart
OWNER = "budget"

SHARDS = CONFIG["shard_count"]
EPSILON = 1e-9
JOB_TABLES = ("jobs", "runs", "runs_by_id")  # written by jobs' work alone
SETTLE = 0.5  # seconds

# Operations per job of W1, per table: (writes, reads) at most; a table not named has
# none. A write is one partition's mutation (cassandra_counts): rows of one partition
# written in one batch count once, so the index rows a create call writes per owner,
# shard and bucket are a price per call (1 / BATCH per job), not per job.
W1_BUDGET: dict[str, tuple[float, float]] = {
    "jobs": (2.0, 0.0),  # created; COMPLETED (the poller's columns: nothing read first)
    # PENDING with the job; LEASED; SUCCEEDED, carrying its start: a start its worker
    # reports ahead of the result is written only once the run outlasts
    # start_write_delay (1 s)
    "runs": (3.0, 0.0),
    # with the PENDING run: its job, for reads by run id, with a TTL that outlives the
    # run (the retention, 30 days as `shardcron node` has it, and a day): written once
    "runs_by_id": (1.0, 0.0),
    "jobs_by_owner": (1.0 / BATCH, 0.0),
    "job_counts": (1.0 / BATCH, 1.0 / BATCH),  # the owner's live jobs: +n per call
    # one per shard and bucket a call's runs fall in: a call may straddle a minute
    "due_runs": (2.0 * SHARDS / BATCH, 0.0),
    "shard_buckets": (2.0 * SHARDS / BATCH, 0.0),
}
# Operations per run of the every-second cron (its jobs' creates included), per table.
CRON_BUDGET: dict[str, tuple[float, float]] = {
    # Per job: created; each fire's next fire (the last fire's: none); COMPLETED at its
    # last run's end. Read: the job by each fire whose copy held is older than
    # job_cache_ttl (1 s): at most FIRES, fewer when a copy is a little younger (timing;
    # the first fire's copy is the one its create hinted). A commit that writes a job's
    # progress reads nothing of it.
    "jobs": ((FIRES + 2.0) / FIRES, 1.0),
    # Per job: each run PENDING, LEASED, SUCCEEDED. Read: the stored state of each next
    # run a fire writes (the runs of fires 2 to FIRES): the poller knows nothing of it
    "runs": (3.0, (FIRES - 1.0) / FIRES),
    "runs_by_id": (1.0, 0.0),
    "jobs_by_owner": (1.0 / (CRON_JOBS * FIRES), 0.0),
    "job_counts": (1.0 / (CRON_JOBS * FIRES), 1.0 / (CRON_JOBS * FIRES)),
    # each fire's next run, written by the poller's commit: runs of one shard and
    # bucket in one commit count once, how many share one is timing: one per run at most
    "due_runs": (1.0, 0.0),
    "shard_buckets": (1.0, 0.0),
}
# Time-dependent counts (module docstring), per second of the span measured: the due
# index's scans (every second, a re-read of the recent past every two, per shard),
# cursor saves (every 5 s per shard), the owners' notification settings (re-read).
PER_SECOND: dict[str, tuple[float, float]] = {
    "due_runs": (0.0, 3.0 * SHARDS),
    "shard_buckets": (0.0, 3.0 * SHARDS),
    "shard_cursors": (SHARDS, 0.0),
    "owner_settings": (0.0, 1.0),
}


def cluster_poller() -> PollerConfig:
    """The poller as ``shardcron node`` configures it (shardcron/main.py)."""
    return PollerConfig(
        lease_lead=timedelta(seconds=1),
        job_cache_ttl=timedelta(seconds=1),
        recheck_interval=timedelta(seconds=2),
        hint_grace=timedelta(seconds=2),
        crowd_lead_per_run=timedelta(milliseconds=1),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Budgeted:
    """A started node and worker on the keyspace whose counts are read."""

    node: Node
    keyspace: str


@contextlib.asynccontextmanager
async def budget_node(tmp_path: Path) -> AsyncIterator[Budgeted]:
    """The node and worker of the module docstring on an emptied keyspace, once the
    worker is connected and every shard loaded; stopped on the way out."""
    cassandra = cassandra_node()
    keyspace = cassandra.keyspace(**CONFIG, purpose="budget")
    cassandra.empty(keyspace)
    store = cassandra.store(keyspace, **CONFIG, retention=DEFAULT_RETENTION)
    coordination = LocalCoordination(tmp_path, shard_count=SHARDS, node_id="budget")
    node = Node(
        store,
        coordination,
        NodeConfig(listen="127.0.0.1:0", node_id="budget", poller=cluster_poller()),
    )
    await node.start()
    registry = HandlerRegistry()
    registry.register("noop", lambda ctx: None)
    worker = Worker(
        node.address,
        worker_id="budget-worker",
        slots=2000,
        registry=registry,
        runs_commands=False,
    )
    task = asyncio.create_task(worker.run())
    try:
        await until(lambda: _sample(node, "shardcron_workers_connected") >= 1, what="worker")
        await until(lambda: _loaded(node), what="every shard loaded")
        yield Budgeted(node=node, keyspace=keyspace)
    finally:
        await asyncio.wait_for(worker.stop(), 10)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 10)
        await node.stop()


def _sample(node: Node, name: str, **labels: str) -> float:
    """The sum of the node's metric samples named ``name`` with ``labels``, over every
    other label."""
    return sum(
        s.value
        for family in node.metrics.registry.collect()
        for s in family.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


def _loaded(node: Node) -> bool:
    """Whether the poller has loaded every shard (its cursor, its pending deliveries, a
    first scan): those reads are not a job's."""
    return all(
        _sample(node, "shardcron_store_seconds_count", op=op) >= SHARDS
        for op in ("load_cursors", "pending_deliveries", "scan_due")
    )


def _ended(node: Node) -> int:
    return int(_sample(node, "shardcron_runs_final_total"))


async def measured(
    budgeted: Budgeted, specs: list[JobSpec], runs: int, timeout: float
) -> tuple[dict[str, TableOps], float]:
    """Creates ``specs`` in ``BATCH``-job calls, waits until ``runs`` more runs ended,
    and returns each table's operations in between, and the seconds that took."""
    session = cassandra_node().session()
    node = budgeted.node
    ended = _ended(node)
    before = await asyncio.to_thread(table_counts, session, budgeted.keyspace)
    started = asyncio.get_running_loop().time()
    client = AsyncClient(node.address, owner=OWNER, timeout=60)
    try:
        for i in range(0, len(specs), BATCH):
            await client.create_job_ids(specs[i : i + BATCH])
    finally:
        await client.close()
    await until(lambda: _ended(node) >= ended + runs, timeout=timeout, what=f"{runs} runs ended")
    after = await settled(session, budgeted.keyspace)
    seconds = asyncio.get_running_loop().time() - started
    return after.since(before), seconds


async def settled(session: Session, keyspace: str) -> TableCounts:
    """The counts once the writes of the tables a job's work writes stopped changing
    for ``SETTLE`` seconds: a run's end is counted in the turn that ends it, before
    that turn's commit."""
    last: dict[str, int] | None = None
    for _ in range(100):
        counts = await asyncio.to_thread(table_counts, session, keyspace)
        writes = {t: counts.tables[t].writes for t in JOB_TABLES if t in counts.tables}
        if writes == last:
            return counts
        last = writes
        await asyncio.sleep(SETTLE)
    raise AssertionError(f"the writes of {JOB_TABLES} never stopped: {last}")


def over_budget(
    ops: Mapping[str, TableOps],
    per: int,
    seconds: float,
    budget: Mapping[str, tuple[float, float]],
) -> list[str]:
    """Each table whose writes or reads per ``per`` exceed its budget, said."""
    out = []
    for table, got in sorted(ops.items()):
        writes, reads = budget.get(table, (0.0, 0.0))
        extra_writes, extra_reads = PER_SECOND.get(table, (0.0, 0.0))
        writes += extra_writes * seconds / per
        reads += extra_reads * seconds / per
        got_reads = got.reads + got.scans
        if got.writes > writes * per + EPSILON or got_reads > reads * per + EPSILON:
            out.append(
                f"{table}: {got.writes / per:.3f} writes and {got_reads / per:.3f} reads each,"
                f" budget {writes:.3f} and {reads:.3f}"
            )
    return out


def report(title: str, ops: Mapping[str, TableOps], per: int, seconds: float) -> str:
    lines = [f"{title} ({per} each, {seconds:.1f} s):"]
    for table, got in sorted(ops.items()):
        if got.writes or got.reads or got.scans:
            lines.append(
                f"  {table}: {got.writes / per:.3f} writes, {got.reads / per:.3f} reads,"
                f" {got.scans / per:.3f} scans"
            )
    return "\n".join(lines)


def _check(
    title: str,
    ops: Mapping[str, TableOps],
    per: int,
    seconds: float,
    budget: Mapping[str, tuple[float, float]],
) -> None:
    print(report(title, ops, per, seconds))
    assert not over_budget(ops, per, seconds, budget), (
        report(title, ops, per, seconds)
        + "\nover budget:\n"
        + "\n".join(over_budget(ops, per, seconds, budget))
    )


async def test_one_off_jobs_stay_within_the_budget(tmp_path: Path) -> None:
    async with budget_node(tmp_path) as budgeted:
        spec = JobSpec(name="w1", task=HandlerTask(name="noop"))
        ops, seconds = await measured(budgeted, [spec] * JOBS, JOBS, timeout=120)
    _check("W1", ops, JOBS, seconds, W1_BUDGET)


async def test_an_every_second_cron_stays_within_the_budget(tmp_path: Path) -> None:
    runs = CRON_JOBS * FIRES
    async with budget_node(tmp_path) as budgeted:
        start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=3)
        schedule = Schedule.cron_expr(
            "* * * * * *", start_at=start, end_at=start + timedelta(seconds=FIRES - 1)
        )
        spec = JobSpec(name="cron", task=HandlerTask(name="noop"), schedule=schedule)
        ops, seconds = await measured(budgeted, [spec] * CRON_JOBS, runs, timeout=60)
    _check("every-second cron, per run", ops, runs, seconds, CRON_BUDGET)
