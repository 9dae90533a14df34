"""``python -m bench.scale_model``: how many nodes, Cassandra nodes and worker cores a
cluster needs for a rate of jobs, and which limit of the design it meets first.

A model, not a measurement: it multiplies the per-job costs the benchmark measured on
one small machine by a rate, and divides by what one process or host can give. What it
rests on, and where each figure comes from:

- **Measured** (``LATEST``): CPU-s per 1,000 jobs of each process kind of the cluster on
  W1 (no-op handler jobs), from ``bench/results/20261128-012051.md`` (the latest run of
  the ZooKeeper + Cassandra system: nodes 0.69, Cassandra 0.60, workers 0.11,
  ZooKeeper 0.00); a worker's CPU for a ``true`` command, sandboxed, from
  ``bench/results/20261128-085847.md`` (W6, workers 2.14, median of 3 rounds); the
  Cassandra operations and bytes per job of each table, from ARCHITECTURE.md ("What a
  job costs the cluster store", W1, checked by ``tests/test_cassandra_budget.py``).
  ``FASTER`` is the same from ``bench/results/20261127-113837.md``, a machine two to
  three times faster per job.
- **The design's defaults** (``Deployment``): 64 shards and 60 s buckets
  (docs/data-layout.md), 30 days' retention (README "Retention"), due rows kept 7 days
  (``coordinator/cassandra/schema.py``), QUORUM (``shardcron node --consistency``), the
  ``assignment`` node's JSON (``coordinator/zk/layout.py``) and the least-movement
  balance (``coordinator/zk/balance.py``).
- **Assumed** (``Deployment``, each a flag): replication 3, 60% of a core used at most,
  a node's process turns at most one core (its api and poller share one event loop
  under the GIL), half of a node's CPU per job on its poller's side (not measured
  apart), 8 cores per Cassandra host, Cassandra's CPU proportional to replica
  operations (the measured 0.60 ms per job on one replica divided by its 7.34
  operations), 100 MB as the partition size to stay under, ZooKeeper's 1 MiB node
  limit (``jute.maxbuffer``), one owner making every job (the worst case for an
  owner's partition).

Standard library only, so its arithmetic is unit-tested without the peers
(``tests/test_scale_model.py``).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

DAY_S = 86_400


@dataclass(frozen=True, slots=True, kw_only=True)
class Costs:
    """What one job costs each component, as measured, and where it was measured."""

    source: str
    node_ms: float  # CPU ms per job of the api and poller nodes, all of them
    cassandra_ms: float  # CPU ms per job of Cassandra, one node, one replica
    handler_worker_ms: float  # CPU ms per job of a worker running a no-op handler
    command_worker_ms: float  # CPU ms per job of a worker running a `true` command
    zookeeper_ms: float  # CPU ms per job of ZooKeeper
    writes: float  # Cassandra partition writes per job, one replica
    reads: float  # Cassandra partition reads per job
    run_bytes: int  # a run's row in `runs`
    run_id_bytes: int  # its `runs_by_id` row
    job_bytes: int  # a job's row in `jobs`
    owner_index_bytes: int  # its row in `jobs_by_owner`
    due_bytes: int  # a run's row in `due_runs`

    @property
    def cassandra_op_ms(self) -> float:
        """CPU ms of one replica operation: the measured per-job CPU over its operations."""
        return self.cassandra_ms / (self.writes + self.reads)


# ARCHITECTURE.md, W1: runs 3, runs_by_id 1, jobs 2, due_runs 0.16, shard_buckets 0.16,
# jobs_by_owner 0.01, job_counts 0.01 writes; jobs 1 read.
_W1_WRITES = 3 + 1 + 2 + 0.16 + 0.16 + 0.01 + 0.01
_W1_READS = 1.0

LATEST = Costs(
    source="bench/results/20261128-012051.md (W1); bench/results/20261128-085847.md (W6)",
    node_ms=0.69,
    cassandra_ms=0.60,
    handler_worker_ms=0.11,
    command_worker_ms=2.14,
    zookeeper_ms=0.00,
    writes=_W1_WRITES,
    reads=_W1_READS,
    run_bytes=266,
    run_id_bytes=78,
    job_bytes=862,
    owner_index_bytes=42,
    due_bytes=104,
)

FASTER = replace(
    LATEST,
    source="bench/results/20261127-113837.md (W1, W6)",
    node_ms=0.24,
    cassandra_ms=0.41,
    handler_worker_ms=0.04,
    command_worker_ms=0.98,
    zookeeper_ms=0.01,
)

FIGURES = {"latest": LATEST, "faster": FASTER}


@dataclass(frozen=True, slots=True, kw_only=True)
class Deployment:
    """The cluster's layout (the design's defaults) and what is assumed of its hosts."""

    shard_count: int = 64
    bucket_seconds: int = 60
    retention_days: float = 30.0
    due_ttl_days: float = 7.0
    replication: int = 3
    read_replicas: int = 2  # QUORUM of 3
    utilisation: float = 0.6
    loop_cores: float = 1.0
    poller_share: float = 0.5
    cassandra_host_cores: int = 8
    owners: int = 1
    cron_interval_s: float = 1.0  # the most frequent schedule a job may have
    poller_id_bytes: int = 24  # hostname-xxxxxx
    partition_limit_bytes: int = 100_000_000
    zk_node_limit_bytes: int = 0xFFFFF


@dataclass(frozen=True, slots=True, kw_only=True)
class Limit:
    """One limit of the design at one rate: how much room is left (``headroom`` < 1:
    reached) and what it is."""

    name: str
    headroom: float
    detail: str
    by_rate: bool  # the headroom shrinks as the rate grows (else: a job's or the layout's)

    @property
    def reached(self) -> bool:
        return self.headroom < 1.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Sizing:
    """What a rate needs, and the limits it comes to."""

    rate: float  # jobs/s at peak
    daily: float  # jobs a day
    nodes: int | None  # None: no number of nodes holds the rate (the shard count does not)
    node_cores: float
    cassandra_nodes: int
    cassandra_cores: float
    handler_worker_cores: float
    command_worker_cores: float
    zk_writes_to_add_a_node: int | None
    due_partition_rows: float
    limits: tuple[Limit, ...]

    @property
    def first_limit(self) -> Limit:
        """The nearest limit: the one with the least headroom."""
        return min(self.limits, key=lambda limit: limit.headroom)

    @property
    def first_rate_limit(self) -> Limit:
        """The nearest of the limits a higher rate comes to: where adding hosts stops."""
        return min((lim for lim in self.limits if lim.by_rate), key=lambda lim: lim.headroom)


def loop_capacity(costs: Costs, dep: Deployment) -> float:
    """Jobs/s one node's event loop turns, at the utilisation allowed."""
    return dep.loop_cores * dep.utilisation / (costs.node_ms / 1000)


def busiest_loop_load(rate: float, nodes: int, costs: Costs, dep: Deployment) -> float:
    """Cores the busiest node's loop uses: an even share of the api work, and the
    poller work of the most shards one poller holds (``balance_shards``: counts differ
    by at most one; a node beyond the shard count holds none)."""
    node_s = costs.node_ms / 1000
    api = rate * node_s * (1 - dep.poller_share) / nodes
    poller = rate * node_s * dep.poller_share * math.ceil(dep.shard_count / nodes) / dep.shard_count
    return api + poller


def nodes_needed(rate: float, costs: Costs, dep: Deployment) -> int | None:
    """The fewest nodes whose busiest loop stays within the utilisation allowed, or
    None when none does: a single shard's poller work alone is more than a loop."""
    cap = dep.loop_cores * dep.utilisation
    node_s = costs.node_ms / 1000
    one_shard = rate * node_s * dep.poller_share / dep.shard_count
    if one_shard >= cap:
        return None
    for n in range(1, dep.shard_count + 1):
        if busiest_loop_load(rate, n, costs, dep) <= cap:
            return n
    # Past the shard count only the api share still divides.
    return max(
        dep.shard_count + 1, math.ceil(rate * node_s * (1 - dep.poller_share) / (cap - one_shard))
    )


def shard_ceiling(costs: Costs, dep: Deployment) -> float:
    """Jobs/s at which one shard's poller work fills a loop: no node count goes past it."""
    return (
        dep.loop_cores
        * dep.utilisation
        * dep.shard_count
        / (costs.node_ms / 1000 * dep.poller_share)
    )


def replica_ops(costs: Costs, dep: Deployment) -> float:
    """Replica operations per job: every write on every replica, reads on a quorum."""
    return costs.writes * dep.replication + costs.reads * dep.read_replicas


def cassandra_node_rate(costs: Costs, dep: Deployment) -> float:
    """Jobs/s one more Cassandra host adds."""
    return (
        dep.cassandra_host_cores
        * dep.utilisation
        / (replica_ops(costs, dep) * costs.cassandra_op_ms / 1000)
    )


def zk_writes_to_add_node(nodes: int, dep: Deployment) -> int:
    """ZooKeeper writes when a node joins ``nodes`` others: its fencing epoch and member
    node, the leader's assignment, then for each shard it takes the old owner's
    ``owners/<shard>`` deleted and its own created (``zk/ownership``)."""
    moved = dep.shard_count // (nodes + 1)
    return 2 + 1 + 2 * moved


def assignment_bytes(dep: Deployment) -> int:
    """The ``assignment`` node's JSON: ``"<shard>": "<poller>"`` per shard, and the rest."""
    per_shard = len(str(dep.shard_count - 1)) + dep.poller_id_bytes + 6
    return 64 + dep.poller_id_bytes + dep.shard_count * per_shard


def _span(minutes: float) -> str:
    return f"{minutes:,.0f} minutes" if minutes < 1440 else f"{minutes / 1440:,.0f} days"


def size(rate: float, costs: Costs, dep: Deployment, *, daily: float | None = None) -> Sizing:
    """What ``rate`` jobs/s at peak (``daily`` jobs a day, by default the rate all day)
    needs, and how near each limit it comes."""
    daily = rate * DAY_S if daily is None else daily
    nodes = nodes_needed(rate, costs, dep)
    cassandra_cores = (
        rate * replica_ops(costs, dep) * costs.cassandra_op_ms / 1000 / dep.utilisation
    )
    due_rows = rate * dep.bucket_seconds / dep.shard_count
    owner_rows = daily / dep.owners * dep.retention_days  # jobs are never deleted: a floor
    owner_minutes = (
        dep.partition_limit_bytes / (daily / dep.owners * costs.owner_index_bytes) * DAY_S / 60
    )
    cron_rows = dep.retention_days * DAY_S / dep.cron_interval_s
    ceiling = shard_ceiling(costs, dep)
    limits = (
        Limit(
            name="shards per poller",
            by_rate=True,
            headroom=ceiling / rate,
            detail=(
                f"one shard's poller work fills a loop at {ceiling:,.0f} jobs/s "
                f"({dep.shard_count} shards); nodes past {dep.shard_count} hold no shard"
            ),
        ),
        Limit(
            name="due_runs partition",
            by_rate=True,
            headroom=dep.partition_limit_bytes / (due_rows * costs.due_bytes),
            detail=(
                f"{due_rows:,.0f} rows, {due_rows * costs.due_bytes / 1e6:,.1f} MB per "
                f"(shard, {dep.bucket_seconds} s bucket)"
            ),
        ),
        Limit(
            name="jobs_by_owner partition",
            by_rate=False,
            headroom=dep.partition_limit_bytes / (owner_rows * costs.owner_index_bytes),
            detail=(
                f"one-off jobs are never deleted: {daily / dep.owners:,.0f} rows a day per "
                f"owner, {dep.partition_limit_bytes / 1e6:g} MB after {_span(owner_minutes)}, "
                f"{owner_rows * costs.owner_index_bytes / 1e6:,.0f} MB after "
                f"{dep.retention_days:g} days"
            ),
        ),
        Limit(
            name="runs partition of a frequent job",
            by_rate=False,
            headroom=dep.partition_limit_bytes / (cron_rows * costs.run_bytes),
            detail=(
                f"a job every {dep.cron_interval_s:g} s keeps {cron_rows:,.0f} runs, "
                f"{cron_rows * costs.run_bytes / 1e6:,.0f} MB, over {dep.retention_days:g} days"
            ),
        ),
        Limit(
            name="ZooKeeper assignment node",
            by_rate=False,
            headroom=dep.zk_node_limit_bytes / assignment_bytes(dep),
            detail=f"{assignment_bytes(dep):,} bytes for {dep.shard_count} shards",
        ),
    )
    return Sizing(
        rate=rate,
        daily=daily,
        nodes=nodes,
        node_cores=rate * costs.node_ms / 1000 / dep.utilisation,
        cassandra_nodes=max(dep.replication, math.ceil(cassandra_cores / dep.cassandra_host_cores)),
        cassandra_cores=cassandra_cores,
        handler_worker_cores=rate * costs.handler_worker_ms / 1000 / dep.utilisation,
        command_worker_cores=rate * costs.command_worker_ms / 1000 / dep.utilisation,
        zk_writes_to_add_a_node=None if nodes is None else zk_writes_to_add_node(nodes, dep),
        due_partition_rows=due_rows,
        limits=limits,
    )


def stored_bytes(daily: float, costs: Costs, dep: Deployment) -> tuple[float, float]:
    """Bytes Cassandra holds (all replicas, values only) once the retention is reached:
    (the runs, their ids and due rows, which stay level; the jobs, which a day adds to)."""
    runs = daily * (
        costs.run_bytes * dep.retention_days
        + costs.run_id_bytes * (dep.retention_days + 1)
        + costs.due_bytes * dep.due_ttl_days
    )
    jobs_a_day = daily * (costs.job_bytes + costs.owner_index_bytes)
    return runs * dep.replication, jobs_a_day * dep.replication


def _cell(value: float | int | None, digits: int = 0) -> str:
    if value is None:
        return "none holds it"
    return f"{value:,.{digits}f}"


def _times(headroom: float) -> str:
    if headroom >= 100:
        return f"{headroom:,.0f}x"
    if headroom >= 1:
        return f"{headroom:.1f}x"
    return f"{headroom:.2g}x"


def _label(s: Sizing) -> str:
    return f"{s.rate:,.0f} jobs/s, {s.daily / 1e6:,.1f} M a day"


def report(scenarios: Sequence[Sizing], costs: Costs, dep: Deployment) -> str:
    """The tables ``main`` prints, in Markdown."""
    head = "| | " + " | ".join(_label(s) for s in scenarios) + " |"
    rule = "|---" * (len(scenarios) + 1) + "|"

    def row(name: str, cells: Sequence[str]) -> str:
        return f"| {name} | " + " | ".join(cells) + " |"

    lines = [
        "A model, not a measurement: measured per-job costs times a rate, over what a host gives.",
        f"Costs from {costs.source}; store operations from ARCHITECTURE.md.",
        "",
        head,
        rule,
        row("nodes (api + poller)", [_cell(s.nodes) for s in scenarios]),
        row("  their CPU, cores", [_cell(s.node_cores, 1) for s in scenarios]),
        row(
            "Cassandra hosts",
            [f"{s.cassandra_nodes} ({s.cassandra_cores:,.1f} cores)" for s in scenarios],
        ),
        row("worker cores, no-op handler", [_cell(s.handler_worker_cores, 1) for s in scenarios]),
        row("worker cores, `true` command", [_cell(s.command_worker_cores, 1) for s in scenarios]),
        row(
            "ZooKeeper writes to add a node", [_cell(s.zk_writes_to_add_a_node) for s in scenarios]
        ),
        row("due rows per partition", [_cell(s.due_partition_rows) for s in scenarios]),
    ]
    for i, limit in enumerate(scenarios[0].limits):
        lines.append(
            row(f"headroom: {limit.name}", [_times(s.limits[i].headroom) for s in scenarios])
        )
    lines.append(row("first limit", [s.first_limit.name for s in scenarios]))
    lines.append(row("first limit of rate", [s.first_rate_limit.name for s in scenarios]))
    fastest = max(scenarios, key=lambda s: s.rate)
    lines += ["", f"Limits at {_label(fastest)} (headroom below 1x: reached):", ""]
    for limit in fastest.limits:
        mark = "REACHED" if limit.reached else "ok"
        lines.append(f"- {limit.name} ({mark}, {_times(limit.headroom)}): {limit.detail}")
    lines += [
        "",
        "One more of each adds:",
        "",
        f"- a node: {loop_capacity(costs, dep):,.0f} jobs/s (its loop; up to {dep.shard_count} nodes, "
        "then only the api's share)",
        f"- a Cassandra host ({dep.cassandra_host_cores} cores, replication {dep.replication}): "
        f"{cassandra_node_rate(costs, dep):,.0f} jobs/s "
        f"({replica_ops(costs, dep):.1f} replica operations per job, "
        f"{costs.cassandra_op_ms * 1000:.0f} us each)",
        f"- a worker core: {dep.utilisation / (costs.handler_worker_ms / 1000):,.0f} jobs/s of no-op "
        f"handlers, {dep.utilisation / (costs.command_worker_ms / 1000):,.0f} of `true` commands",
    ]
    biggest = max(scenarios, key=lambda s: s.daily)
    runs, jobs = stored_bytes(biggest.daily, costs, dep)
    lines += [
        "",
        f"Stored at {biggest.daily / 1e6:,.0f} M jobs a day (replication {dep.replication}, values "
        f"only): runs {runs / 1e12:,.2f} TB level after {dep.retention_days:g} days; jobs "
        f"{jobs / 1e9:,.0f} GB more every day (never deleted).",
        "",
        f"Assumed: {dep.utilisation:.0%} of a core used, {dep.loop_cores:g} core per node's loop, "
        f"{dep.poller_share:.0%} of a node's CPU on its poller's side, {dep.shard_count} shards, "
        f"{dep.bucket_seconds} s buckets, {dep.owners} owner(s), "
        f"{dep.partition_limit_bytes / 1e6:g} MB per partition.",
    ]
    return "\n".join(lines)


DEFAULT_SCENARIOS = ((1_000.0, None), (10_000.0, 100e6), (100e6 / DAY_S, 100e6))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.scale_model", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--figures", choices=sorted(FIGURES), default="latest")
    parser.add_argument("--rate", type=float, action="append", help="jobs/s (repeat; all day)")
    d = Deployment()
    parser.add_argument("--shards", type=int, default=d.shard_count)
    parser.add_argument("--bucket-seconds", type=int, default=d.bucket_seconds)
    parser.add_argument("--replication", type=int, default=d.replication)
    parser.add_argument("--utilisation", type=float, default=d.utilisation)
    parser.add_argument("--poller-share", type=float, default=d.poller_share)
    parser.add_argument("--cassandra-cores", type=int, default=d.cassandra_host_cores)
    parser.add_argument("--owners", type=int, default=d.owners)
    args = parser.parse_args(argv)
    dep = replace(
        d,
        shard_count=args.shards,
        bucket_seconds=args.bucket_seconds,
        replication=args.replication,
        read_replicas=args.replication // 2 + 1,
        utilisation=args.utilisation,
        poller_share=args.poller_share,
        cassandra_host_cores=args.cassandra_cores,
        owners=args.owners,
    )
    costs = FIGURES[args.figures]
    wanted = [(r, None) for r in args.rate] if args.rate else DEFAULT_SCENARIOS
    print(report([size(r, costs, dep, daily=daily) for r, daily in wanted], costs, dep))


if __name__ == "__main__":
    main()
