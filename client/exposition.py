"""Prometheus plumbing the node and the worker share: a registry, build info, /metrics.

Every registry comes from ``new_registry``, which also turns off the ``_created``
series prometheus-client adds beside each counter and histogram by default (a
timestamp per series that doubles what is scraped and that no dashboard reads; the
switch is process-wide in prometheus-client, so setting it again is harmless).
Each registry carries ``shardcron_build_info{version,python}``, always 1, so a
dashboard can tell which version every scraped process runs.
"""

from __future__ import annotations

import platform

from prometheus_client import CollectorRegistry, Gauge, disable_created_metrics, start_http_server

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
