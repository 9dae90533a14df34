"""A node's per-run metrics, counted in plain numbers and read when /metrics is scraped.

Every run a poller ends is counted in ``shardcron_runs_final_total{state,reason}``
and, if it ran, timed in ``shardcron_run_seconds{state}``; every start is timed
against its due instant in ``shardcron_schedule_lag_seconds``. prometheus-client's
``Counter`` and ``Histogram`` take a lock for each number they change, three to five
per run, on the node's main thread, where every job's work is done. Here the poller's
loop adds to
dicts and lists of its own (one thread changes them), and ``collect``, on the
scrape's thread, copies each one under the GIL (``list(...)``): a scrape sees every
series as it was a moment ago, and a histogram's count is the sum of its buckets as
copied, so the two always agree (its sum may be one observation behind). The
worker's metrics are read the same way (``worker/metrics.py``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from shardcron.client.exposition import Buckets

FINAL = "shardcron_runs_final"
FINAL_HELP = "Runs that reached a final state, by state and reason (NONE when it has none)"
RAN = "shardcron_run_seconds"
RAN_HELP = "How long runs ran, start to end, by final state"
LAG = "shardcron_schedule_lag_seconds"
LAG_HELP = "Start of a run minus its due time (start lag)"


class RunCounts(Collector):
    """The three families of the module docstring, for one node's registry."""

    # label names by family, for a family with no series yet (tests/test_metrics.py)
    label_names = {FINAL: ("state", "reason"), RAN: ("state",)}

    def __init__(self, *, lag_buckets: Sequence[float], run_buckets: Sequence[float]) -> None:
        self.final: dict[tuple[str, str], int] = {}  # (state, reason) -> runs
        self.durations: dict[str, Buckets] = {}  # by state
        self.schedule_lag = Buckets(lag_buckets)
        self._run_buckets = tuple(run_buckets)

    def ended(self, key: tuple[str, str], ran: float | None) -> None:
        """A run ended with (state, reason) labels ``key``; ``ran``: for how long, if it ran."""
        final = self.final
        final[key] = final.get(key, 0) + 1
        if ran is not None:
            timed = self.durations.get(key[0])
            if timed is None:
                timed = self.durations[key[0]] = Buckets(self._run_buckets)
            timed.observe(ran)

    def describe(self) -> Iterator[CounterMetricFamily | HistogramMetricFamily]:
        yield CounterMetricFamily(FINAL, FINAL_HELP, labels=self.label_names[FINAL])
        yield HistogramMetricFamily(RAN, RAN_HELP, labels=self.label_names[RAN])
        yield HistogramMetricFamily(LAG, LAG_HELP)

    def collect(self) -> Iterator[CounterMetricFamily | HistogramMetricFamily]:
        final = CounterMetricFamily(FINAL, FINAL_HELP, labels=self.label_names[FINAL])
        for labels, n in list(self.final.items()):
            final.add_metric(list(labels), n)
        yield final
        ran = HistogramMetricFamily(RAN, RAN_HELP, labels=self.label_names[RAN])
        for state, timed in list(self.durations.items()):
            buckets, total = timed.cumulative()
            ran.add_metric([state], buckets, total)
        yield ran
        lag = HistogramMetricFamily(LAG, LAG_HELP)
        buckets, total = self.schedule_lag.cumulative()
        lag.add_metric([], buckets, total)
        yield lag
