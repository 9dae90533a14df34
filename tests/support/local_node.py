"""A node built in-process as ``shardcron dev`` builds one: every role, a SQLite store
and local coordination under one data directory, gRPC on a free port (port 0).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from shardcron.coordinator.coordination import LocalCoordination
from shardcron.coordinator.node import Node, NodeConfig
from shardcron.coordinator.sqlite.store import SqliteStore

SHARDS = 8


def sqlite_node(data: Path, node_id: str, *, http: bool = False, **config: Any) -> Node:
    """A node on ``data``, not started yet (``await node.start()``; ``node.port`` then);
    with ``http`` it serves the HTTP/JSON API too (``node.http_port``); ``config``: more
    ``NodeConfig`` fields (``quotas``, ``call_limits``, ...)."""
    store = SqliteStore(data / "shardcron.db", shard_count=SHARDS)
    coordination = LocalCoordination(data, shard_count=SHARDS, node_id=node_id)
    http_listen = "127.0.0.1:0" if http else ""
    return Node(
        store,
        coordination,
        NodeConfig(listen="127.0.0.1:0", node_id=node_id, http_listen=http_listen, **config),
    )


@contextlib.asynccontextmanager
async def started_node(data: Path, node_id: str, **config: Any) -> AsyncIterator[Node]:
    """``sqlite_node`` started, and stopped on the way out."""
    node = sqlite_node(data, node_id, **config)
    await node.start()
    try:
        yield node
    finally:
        await node.stop()
