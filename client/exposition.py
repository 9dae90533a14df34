"""Prometheus plumbing the node and the worker share: a registry, build info, /metrics,
and ``Buckets``, a histogram kept in plain numbers and read when scraped.

Every registry comes from ``new_registry``, which also turns off the ``_created``
series prometheus-client adds beside each counter and histogram by default (a
timestamp per series that doubles what is scraped and that no dashboard reads; the
switch is process-wide in prometheus-client, so setting it again is harmless).
Each registry carries ``shardcron_build_info{version,python}``, always 1, so a
dashboard can tell which version every scraped process runs.
"""

from __future__ import annotations

import math
import platform
from bisect import bisect_left
from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Gauge, disable_created_metrics, start_http_server
from prometheus_client.utils import floatToGoString

import shardcron


def new_registry() -> CollectorRegistry:
    """A registry of its own (tests run several nodes in one interpreter), holding
    ``shardcron_build_info``."""
    disable_created_metrics()
    registry = CollectorRegistry()
    Gauge(
        "shardcron_build_info",
        "Always 1; the labels say which shardcron and Python this process runs",
        ["version", "python"],
        registry=registry,
    ).labels(version=shardcron.__version__, python=platform.python_version()).set(1)
    return registry


def serve_metrics(registry: CollectorRegistry, listen: str) -> int:
    """Serves ``registry`` on /metrics at ``host:port`` (port 0 picks one); returns the port.
    The server is a daemon thread that lives as long as the process."""
    host, _, port = listen.rpartition(":")
    server, _thread = start_http_server(int(port), addr=host or "127.0.0.1", registry=registry)
    return int(server.server_port)


class Buckets:
    """One histogram series: a count per bucket (the last one +Inf) and the sum. A value
    goes in the first bucket whose upper bound it does not exceed, as prometheus-client
    places it."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def cumulative(self) -> tuple[list[tuple[str, float]], float]:
        """(le, cumulative count) per bucket, +Inf last, and the sum, as copied now."""
        counts, total = list(self.counts), self.total
        out: list[tuple[str, float]] = []
        running = 0
        for bound, n in zip((*self.bounds, math.inf), counts, strict=True):
            running += n
            out.append((floatToGoString(bound), running))
        return out, total
