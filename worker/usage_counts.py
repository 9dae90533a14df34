"""What a worker's command runs used, counted for its /metrics: the peak memory and the
CPU seconds of each run, as histograms kept in plain numbers (``exposition.Buckets``)
by the worker's event loop and read when scraped (``metrics``)."""

from __future__ import annotations

from shardcron.client.exposition import Buckets
from shardcron.client.types import RunUsage

MIB = 1 << 20
PEAK_MEMORY_BUCKETS = tuple(n * MIB for n in (1, 4, 16, 64, 256, 1024, 4096, 16384))
CPU_SECONDS_BUCKETS = (0.01, 0.1, 1.0, 10.0, 60.0, 600.0, 3600.0)


class UsageCounts:
    """The two histograms of one worker."""

    def __init__(self) -> None:
        self.peak_memory = Buckets(PEAK_MEMORY_BUCKETS)
        self.cpu_seconds = Buckets(CPU_SECONDS_BUCKETS)

    def observe(self, usage: RunUsage) -> None:
        self.peak_memory.observe(usage.peak_memory_bytes)
        self.cpu_seconds.observe(usage.cpu_seconds)
