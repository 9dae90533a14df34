"""Prometheus metrics of a node, on their own registry, and the store wrapper that times it.

One ``Metrics`` per process (tests start several nodes in one interpreter, so
nothing here touches the global registry). Served on ``/metrics`` by
``serve_metrics``.
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
STORE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.schedule_lag = Histogram(
            "shardcron_schedule_lag_seconds",
            "Start of a run minus its due time",
            buckets=LAG_BUCKETS,
            registry=r,
        )
        self.runs_final = Counter(
            "shardcron_runs_final_total",
            "Runs that reached a final state",
            ["state", "reason"],
            registry=r,
        )
        self.fires_skipped = Counter(
            "shardcron_fires_skipped_total",
            "Fires recorded SKIPPED or MISSED, by reason",
            ["reason"],
            registry=r,
        )
        self.runs_leased = Counter("shardcron_runs_leased_total", "Leases granted", registry=r)
        self.results_rejected = Counter(
            "shardcron_results_rejected_total",
            "Results refused for a stale fencing token",
            registry=r,
        )
        self.leases_refused = Counter(
            "shardcron_leases_refused_total",
            "Leases a worker refused because its slots were taken by another poller's runs",
            registry=r,
        )
        # One event, run, job or worker stream the poller failed to handle: that one
        # alone failed (run FAILED/INTERNAL_ERROR, job paused, stream closed), by where.
        self.poller_faults = Counter(
            "shardcron_poller_faults_total",
            "Failures handling one event, run, job or worker stream, each isolated to it",
            ["where"],
            registry=r,
        )
        self.leases_expired = Counter(
            "shardcron_leases_expired_total", "Leases that ran out without renewal", registry=r
        )
        self.active_leases = Gauge(
            "shardcron_active_leases", "Leases held by workers now", registry=r
        )
        self.ready_runs = Gauge(
            "shardcron_ready_runs", "Due runs waiting for a worker slot", registry=r
        )
        self.waiting_runs = Gauge(
            "shardcron_waiting_runs",
            "Due runs not on a worker yet, by why they wait (no_worker_for_handler, "
            "no_worker_for_commands, no_worker_with_labels, no_capacity, no_free_slot, "
            "concurrency_limit)",
            ["reason"],
            registry=r,
        )
        self.owned_shards = Gauge("shardcron_owned_shards", "Shards this poller serves", registry=r)
        self.epoch = Gauge(
            "shardcron_epoch", "Epoch (leader term) this poller serves under", registry=r
        )
        self.is_leader = Gauge(
            "shardcron_is_leader", "1 when this node is the coordinator", registry=r
        )
        self.worker_slots = Gauge(
            "shardcron_worker_slots",
            "Worker slots by use, across connected workers",
            ["use"],
            registry=r,
        )
        self.workers = Gauge(
            "shardcron_workers_connected", "Workers with an open lease stream", registry=r
        )
        # Incremented by the poller each time it drops what it holds in memory and reloads
        # its shards from the store: a turn that failed, a lost or replaced session.
        self.poller_resets = Counter(
            "shardcron_poller_resets_total",
            "Times the poller reloaded its shards from the store, forgetting what it held",
            registry=r,
        )
        # Job and run rows the store could not decode and skipped, each counted once.
        self.store_bad_rows = Counter(
            "shardcron_store_bad_rows_total",
            "Stored rows that could not be decoded and were skipped, by table",
            ["table"],
            registry=r,
        )
        self.jobs_created = Counter("shardcron_jobs_created_total", "Jobs created", registry=r)
        self.store_latency = Histogram(
            "shardcron_store_seconds",
            "Store call latency by operation",
            ["op"],
            buckets=STORE_BUCKETS,
            registry=r,
        )


class TimedStore:
    """Wraps a JobStore so every call lands in ``shardcron_store_seconds{op=...}``,
    and every row it skips as unreadable in ``shardcron_store_bad_rows_total``."""

    def __init__(self, store: Any, metrics: Metrics) -> None:
        self._store = store
        self._metrics = metrics
        store.bad_rows.count_into(lambda table: metrics.store_bad_rows.labels(table=table).inc())

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if not callable(attr) or name.startswith("_"):
            return attr
        histogram = self._metrics.store_latency.labels(op=name)

        async def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return await attr(*args, **kwargs)
            finally:
                histogram.observe(time.perf_counter() - start)

        return timed


def serve_metrics(metrics: Metrics, listen: str) -> int:
    """Serves /metrics on ``host:port`` (port 0 picks one); returns the port."""
    host, _, port = listen.rpartition(":")
    server, _thread = start_http_server(
        int(port), addr=host or "127.0.0.1", registry=metrics.registry
    )
    return int(server.server_port)
