"""Principals for the auth tests: one of each role, their tokens, and the auth file.

Owners ``a`` and ``b``: each principal but the admin and the node acts for ``a``
only, and ``writer-ab`` for both. ``TOKENS`` maps a principal's name to its bearer
token; ``auth_file_text`` writes them as an auth file (token digests only).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from shardcron.coordinator.auth import AuthSource
from shardcron.coordinator.coordination import LocalCoordination
from shardcron.coordinator.node import Node, NodeConfig
from shardcron.coordinator.sqlite.store import SqliteStore

OWN, OTHER = "a", "b"

# name -> (role, owners or None)
PRINCIPALS: dict[str, tuple[str, list[str] | None]] = {
    "admin": ("admin", None),
    "writer": ("writer", [OWN]),
    "reader": ("reader", [OWN]),
    "worker": ("worker", [OWN]),
    "node": ("node", None),
    "writer-ab": ("writer", [OWN, OTHER]),
    "worker-b": ("worker", [OTHER]),
    "worker-any": ("worker", ["*"]),
}
TOKENS = {
    name: f"token-of-{name}-{hashlib.sha256(name.encode()).hexdigest()[:8]}" for name in PRINCIPALS
}


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def principal_toml(name: str, role: str, owners: list[str] | None, token: str) -> str:
    lines = [
        "[[principal]]",
        f'name = "{name}"',
        f'token_sha256 = "{digest(token)}"',
        f'role = "{role}"',
    ]
    if owners is not None:
        lines.append("owners = [" + ", ".join(f'"{o}"' for o in owners) + "]")
    return "\n".join(lines) + "\n"


def auth_file_text(names: list[str] | None = None, tokens: dict[str, str] | None = None) -> str:
    """An auth file of the principals named (all by default)."""
    tokens = tokens or TOKENS
    return "\n".join(
        principal_toml(name, *PRINCIPALS[name], tokens[name]) for name in names or PRINCIPALS
    )


def bearer(name: str) -> tuple[tuple[str, str], ...]:
    """The metadata of a call made as principal ``name``."""
    return (("authorization", f"Bearer {TOKENS[name]}"),)


@contextlib.asynccontextmanager
async def auth_node(
    data: Path,
    names: list[str] | None = None,
    *,
    http: bool = False,
    more_toml: str = "",
    **config: Any,
) -> AsyncIterator[Node]:
    """A started in-process node (every role, SQLite, port 0) whose auth file holds the
    principals named (all by default), then ``more_toml`` (quota tables); with ``http``
    it serves the HTTP/JSON API too (port 0); ``config``: more ``NodeConfig`` fields
    (``call_limits``, ...). Stopped on exit."""
    auth_file = data / "auth.toml"
    auth_file.write_text(auth_file_text(names) + more_toml)
    store = SqliteStore(data / "shardcron.db", shard_count=4)
    coordination = LocalCoordination(data, shard_count=4, node_id="n")
    node_config = NodeConfig(
        listen="127.0.0.1:0", node_id="n", http_listen="127.0.0.1:0" if http else "", **config
    )
    node = Node(store, coordination, node_config, auth=AuthSource(auth_file))
    await node.start()
    try:
        yield node
    finally:
        await node.stop(0)
