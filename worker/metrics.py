"""Prometheus metrics of a worker process (``shardcron worker --metrics-listen``).

``WorkerCollector`` reads the workers' own counts (``Worker.stats``, slots, links)
when /metrics is scraped, so the worker's hot path does nothing for metrics. The
scrape runs on prometheus-client's server thread while the worker's event loop
changes those counts: each read is one copy made under the GIL (``dict(...)``,
``list(...)``), so a scrape sees numbers that were true together or a moment apart,
never a torn dictionary. Several workers in one process (``shardcron dev``) are
summed. The names are ``shardcron_worker_*`` and differ from the node's, which
count the same runs from the poller's side.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from shardcron.client import exposition
from shardcron.client.exposition import Buckets
from shardcron.client.types import RunState

from .worker import Worker

# The outcome label of a run whose result the worker never reported: its lease was
# lost (revoked or expired) or the worker stopped without draining.
NOT_REPORTED = "NOT_REPORTED"
RUN_OUTCOMES = (
    RunState.SUCCEEDED.value,
    RunState.FAILED.value,
    RunState.TIMED_OUT.value,
    RunState.CANCELLED.value,
)

# the worker's artifact cache counts (``worker.artifacts``), by the outcome they export
ARTIFACT_OUTCOMES = (
    ("cached", "hits"),
    ("fetched", "downloads"),
    ("tampered", "tampered"),
    ("evicted", "evicted"),
)


class WorkerCollector(Collector):
    """The metrics of the workers ``workers()`` returns (one, or those of a dev node)."""

    def __init__(self, workers: Callable[[], Sequence[Worker]]) -> None:
        self._workers = workers

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily]:
        workers = list(self._workers())
        stats = [dict(w.stats) for w in workers]

        def total(key: str) -> int:
            return sum(s.get(key, 0) for s in stats)

        runs = CounterMetricFamily(
            "shardcron_worker_runs",
            "Runs this worker executed, by outcome: the final state it reported, or "
            "NOT_REPORTED (lease lost, or the worker stopped without draining)",
            labels=["outcome"],
        )
        for outcome in RUN_OUTCOMES:
            runs.add_metric([outcome], total(outcome.lower()))
        runs.add_metric([NOT_REPORTED], total("dropped_results"))
        yield runs
        yield _counter(
            "shardcron_worker_leases_received", "Leases received from pollers", total("leased")
        )
        yield _counter(
            "shardcron_worker_leases_refused",
            "Leases refused: no free slot, stopping, or past their deadline on arrival",
            total("refused") + total("refused_expired"),
        )
        yield _counter(
            "shardcron_worker_lease_renewals",
            "Lease renewals granted by pollers (each moves a run's deadline)",
            total("renewed"),
        )
        yield _counter(
            "shardcron_worker_leases_lost",
            "Runs killed because their lease was revoked or expired unrenewed",
            total("lost"),
        )
        slots = GaugeMetricFamily(
            "shardcron_worker_run_slots", "This worker's run slots, by use", labels=["use"]
        )
        used = sum(w.slots_used for w in workers)
        slots.add_metric(["used"], used)
        slots.add_metric(["free"], max(0, sum(w.slots for w in workers) - used))
        yield slots
        yield GaugeMetricFamily(
            "shardcron_worker_runs_running",
            "Runs executing on this worker now",
            value=sum(len(w.running) for w in workers),
        )
        spools = [w.output_spool for w in workers]
        yield GaugeMetricFamily(
            "shardcron_worker_output_spool_bytes",
            "Bytes in this worker's output spool files now: runs' output kept while their node cannot write it to the blob store",
            value=sum(s.bytes for s in spools),
        )
        yield _counter(
            "shardcron_worker_output_spooled_bytes",
            "Bytes of runs' output kept in the output spool while their node could not write it to the blob store",
            sum(s.spooled_bytes for s in spools),
        )
        yield _counter(
            "shardcron_worker_output_dropped_bytes",
            "Bytes of runs' output dropped: the output spool was full, or had not drained within the wait at the run's end",
            sum(s.dropped_bytes for s in spools),
        )
        yield GaugeMetricFamily(
            "shardcron_worker_pollers_connected",
            "Pollers this worker has an open lease stream to",
            value=sum(1 for w in workers for link in w.links if link.connected),
        )
        caches = {id(w.artifacts): w.artifacts for w in workers}.values()  # dev's is shared
        uses = [dict(c.stats) for c in caches]
        artifacts = CounterMetricFamily(
            "shardcron_worker_artifacts",
            "Code archives taken for command runs, by outcome: from the cache, fetched from "
            "a node, fetched again because the cached copy did not match its digest, and "
            "removed from the cache to keep it in its bound",
            labels=["outcome"],
        )
        for outcome, key in ARTIFACT_OUTCOMES:
            artifacts.add_metric([outcome], sum(u.get(key, 0) for u in uses))
        yield artifacts
        yield _histogram(
            "shardcron_worker_run_peak_memory_bytes",
            "Peak memory of each command run, from its cgroup when it ended (estimated on a worker without cgroups)",
            [w.usage.peak_memory for w in workers],
        )
        yield _histogram(
            "shardcron_worker_run_cpu_seconds",
            "CPU seconds, user and system, of each command run, from its cgroup (estimated on a worker without cgroups)",
            [w.usage.cpu_seconds for w in workers],
        )


def _counter(name: str, documentation: str, value: int) -> CounterMetricFamily:
    return CounterMetricFamily(name, documentation, value=value)


def _histogram(name: str, documentation: str, series: list[Buckets]) -> HistogramMetricFamily:
    """One histogram of the buckets of every worker, summed."""
    buckets: list[tuple[str, float]] = []
    total = 0.0
    for one in series:
        counts, one_sum = one.cumulative()
        total += one_sum
        buckets = (
            counts
            if not buckets
            else [(le, a + b) for (le, a), (_, b) in zip(buckets, counts, strict=True)]
        )
    if not buckets:  # no worker: the family, with no series
        return HistogramMetricFamily(name, documentation)
    return HistogramMetricFamily(name, documentation, buckets=buckets, sum_value=total)


def worker_registry(workers: Callable[[], Sequence[Worker]]) -> CollectorRegistry:
    """A registry with the build info and these workers' metrics."""
    registry = exposition.new_registry()
    registry.register(WorkerCollector(workers))
    return registry
