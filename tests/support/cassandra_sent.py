"""What a Cassandra store sends: each flush's batches, each statement as its table and
its partition key (the routing key the driver routes it by)."""

from __future__ import annotations

import pytest

from shardcron.coordinator.cassandra.store import CassandraStore
from shardcron.coordinator.cassandra.writes import Writes

Batches = list[list[tuple[str, bytes]]]


def _table(query: str) -> str:
    words = query.split()
    return words[words.index("INTO") + 1] if "INTO" in words else words[1]


def sent_batches(store: CassandraStore, monkeypatch: pytest.MonkeyPatch) -> list[Batches]:
    """What the store sends, flush by flush: each phase's batches, each statement as
    (its table, its partition key)."""
    flushes: list[Batches] = []
    cql = store._cql
    real_flush, real_send = store._flush, cql.send

    async def flushing(writes: Writes) -> None:
        flushes.append([])
        await real_flush(writes)

    async def sending(statements: list) -> None:  # type: ignore[type-arg]
        flushes[-1].append(
            [(_table(s.prepared_statement.query_string), s.routing_key) for s in statements]
        )
        await real_send(statements)

    monkeypatch.setattr(store, "_flush", flushing)
    monkeypatch.setattr(cql, "send", sending)
    return flushes
