"""Prometheus metrics of a node, on their own registry, and the store wrapper that times it.

One ``Metrics`` per node (tests start several nodes in one interpreter, so nothing
here touches the global registry). Served on ``/metrics`` by ``serve_metrics``. The
README's metrics table is checked against what this registry exports
(tests/test_metrics.py), so the help texts here are the documentation.

A run's end is counted in one place, ``run_ended``: by state and reason (a run that
succeeded has reason ``NONE``, not an empty label), SKIPPED and MISSED apart, and how
long it ran. Those counts, and each start's lag (``schedule_lag``), are kept in plain
numbers and read when scraped (``run_metrics``).
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from shardcron.client import exposition
from shardcron.client.types import Run, RunReason, RunState
from shardcron.coordinator.run_metrics import RunCounts

LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
STORE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5)
RUN_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, 24 * 3600)
# gRPC calls answered with one message: most take milliseconds, a long poll up to minutes.
GRPC_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5, 30, 300)
NO_REASON = "NONE"  # the reason label of a run that ended without one (SUCCEEDED)


def reason_label(reason: RunReason) -> str:
    """The ``reason`` label of a run's end: its reason, or ``NONE`` when it has none."""
    return reason.value or NO_REASON


class Metrics:
    def __init__(self) -> None:
        self.registry = exposition.new_registry()
        r = self.registry
        # runs ended (by state and reason), how long they ran, and start lags
        self._runs = RunCounts(lag_buckets=LAG_BUCKETS, run_buckets=RUN_BUCKETS)
        r.register(self._runs)
        self.schedule_lag = self._runs.schedule_lag  # observe(seconds) per start
        # the labels a run's end counts under, by (state, reason)
        self._final_keys: dict[tuple[RunState, RunReason], tuple[str, str]] = {}
        self.dead_letters = Counter(
            "shardcron_dead_letters_total",
            "Runs that failed with no attempt left (dead letters), by reason",
            ["reason"],
            registry=r,
        )
        self.notify_deliveries = Counter(
            "shardcron_notify_deliveries_total",
            "Webhook notification attempts by outcome: sent (2xx), failed (to be tried"
            " again, or dropped), dropped (given up, or its address refused)",
            ["outcome"],
            registry=r,
        )
        self.fires_skipped = Counter(
            "shardcron_fires_skipped_total",
            "Fires recorded SKIPPED (not run), by reason: OVERLAP, PAUSED, DST_GAP, MISFIRE",
            ["reason"],
            registry=r,
        )
        self.fires_missed = Counter(
            "shardcron_fires_missed_total",
            "Runs recorded MISSED (not started before their starting deadline), by reason",
            ["reason"],
            registry=r,
        )
        self.runs_late = Counter(
            "shardcron_runs_late_total",
            "Runs leased more than max(1 s, the lease lead) after their due time, by what "
            "they waited for the longest: POLLER_BEHIND, NO_WORKER_*, NO_CAPACITY, "
            "NO_FREE_SLOT, CONCURRENCY_LIMIT, OVERLAP, PAUSED",
            ["reason"],
            registry=r,
        )
        self.long_calls = Gauge(
            "shardcron_long_calls_open",
            "Long calls open on this node, by kind: max_follows (output follows), max_waits "
            "(WaitRun), max_worker_streams (worker streams)",
            ["kind"],
            registry=r,
        )
        self.http_connections = Gauge(
            "shardcron_http_connections",
            "Connections open on the HTTP/JSON listener",
            registry=r,
        )
        self.http_connections_refused = Counter(
            "shardcron_http_connections_refused_total",
            "HTTP connections closed at once: over the node's cap, in all or from one host",
            registry=r,
        )
        self.runs_leased = Counter(
            "shardcron_runs_leased_total", "Leases granted to workers", registry=r
        )
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
        # retention's deletes of expired runs' output blobs (``retention.RetentionSweeper``)
        self.retention_blob_failures = Counter(
            "shardcron_retention_blob_failures_total",
            "Expired runs' output deletes from the blob store that failed (tried again at"
            " the next sweep) or were dropped (given up, parts left), by outcome",
            ["outcome"],
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
        self.shard_lag = Gauge(
            "shardcron_shard_lag_seconds",
            "Age of the oldest due run not on a worker yet for want of the poller or a free "
            "slot (not one its job's concurrency limit holds back) across this poller's "
            "shards, as cluster status shows it; 0 when none waits",
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
            "Slots of the workers streaming to this poller, by use (used, free)",
            ["use"],
            registry=r,
        )
        self.workers = Gauge(
            "shardcron_workers_connected",
            "Workers with an open lease stream to this poller",
            registry=r,
        )
        # Incremented by the poller each time it drops what it holds in memory and reloads
        # its shards from the store: a turn that failed, a lost or replaced session.
        self.poller_resets = Counter(
            "shardcron_poller_resets_total",
            "Times the poller reloaded its shards from the store, forgetting what it held",
            registry=r,
        )
        # The poller's turns, by whether the turn wrote to the store: turns per run at a
        # given rate say how well its work is batched.
        self.poller_turns = Counter(
            "shardcron_poller_turns_total",
            "Turns of the poller's loop, by whether the turn wrote (commit) or not (idle)",
            ["kind"],
            registry=r,
        )
        # Job and run rows the store could not decode and skipped, each counted once.
        self.store_bad_rows = Counter(
            "shardcron_store_bad_rows_total",
            "Stored rows that could not be decoded and were skipped, by table",
            ["table"],
            registry=r,
        )
        self.store_writer_restarts = Counter(
            "shardcron_store_writer_restarts_total",
            "Times the embedded store's writer process ended unasked and a new one was started",
            registry=r,
        )
        # Every refused credential, however many: the audit logs them within a bound.
        self.auth_refusals = Counter(
            "shardcron_auth_refusals_total",
            "Calls refused for their credential (UNAUTHENTICATED, PERMISSION_DENIED), gRPC "
            "and HTTP, by gRPC method and code",
            ["method", "code"],
            registry=r,
        )
        self.jobs_created = Counter("shardcron_jobs_created_total", "Jobs created", registry=r)
        self.store_latency = Histogram(
            "shardcron_store_seconds",
            "Store call duration by operation (the JobStore method)",
            ["op"],
            buckets=STORE_BUCKETS,
            registry=r,
        )
        self.grpc_requests = Counter(
            "shardcron_grpc_requests_total",
            "gRPC calls received, by service and method",
            ["service", "method"],
            registry=r,
        )
        self.grpc_errors = Counter(
            "shardcron_grpc_errors_total",
            "gRPC calls that ended with a status other than OK, by service, method and code",
            ["service", "method", "code"],
            registry=r,
        )
        self.grpc_duration = Histogram(
            "shardcron_grpc_seconds",
            "Duration of gRPC calls answered with one message (not streams), by service and method",
            ["service", "method"],
            buckets=GRPC_BUCKETS,
            registry=r,
        )

    def run_ended(self, run: Run) -> None:
        """Counts a run that reached its final state (``run``, its final record)."""
        state = run.state
        key = self._final_keys.get((state, run.reason))
        if key is None:
            key = self._final_keys[(state, run.reason)] = (state.value, reason_label(run.reason))
        ran = None
        if state == RunState.SKIPPED:
            self.fires_skipped.labels(reason=key[1]).inc()
        elif state == RunState.MISSED:
            self.fires_missed.labels(reason=key[1]).inc()
        elif run.started_at is not None and run.ended_at is not None:
            ran = max(0.0, (run.ended_at - run.started_at).total_seconds())
        self._runs.ended(key, ran)

    def auth_refused(self, method: str, code: str) -> None:
        """Counts a call refused for its credential (``auth.RefusalAudit.count_into``)."""
        self.auth_refusals.labels(method=method, code=code).inc()

    def dead_lettered(self, run: Run) -> None:
        """Counts ``run`` (a final record, after the retry rules) if it is a dead letter."""
        if run.dead_letter:
            self.dead_letters.labels(reason=reason_label(run.reason)).inc()


class TimedStore:
    """Wraps a JobStore so every call lands in ``shardcron_store_seconds{op=...}``,
    every row it skips as unreadable in ``shardcron_store_bad_rows_total``, and each
    new writer process of the embedded store in ``shardcron_store_writer_restarts_total``."""

    def __init__(self, store: Any, metrics: Metrics) -> None:
        self._store = store
        self._metrics = metrics
        store.bad_rows.count_into(lambda table: metrics.store_bad_rows.labels(table=table).inc())
        restarts = getattr(store, "count_writer_restarts_into", None)
        if restarts is not None:
            restarts(metrics.store_writer_restarts.inc)

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

        # kept: the next call finds it without this lookup and the histogram's labels
        setattr(self, name, timed)
        return timed


def serve_metrics(metrics: Metrics, listen: str) -> int:
    """Serves /metrics on ``host:port`` (port 0 picks one); returns the port."""
    return exposition.serve_metrics(metrics.registry, listen)
