"""What a statement weighs in a batch (``batches.bound_size``) and which statements share
a batch (``Cql.replicas``), on a real Cassandra: the weight is read from the bound,
serialized values, stays close to what the values themselves hold, and is what
Cassandra itself counts against its batch thresholds, or a little more; the replica key
of a keyspace whose every token has the same replicas is that one set, equal to what
the driver's token map says for each key, and follows a new map."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from cassandra.query import UNSET_VALUE, BatchStatement, BatchType, BoundStatement

from shardcron.coordinator.cassandra.batches import BATCH_BYTES, bound_size, phase_batches
from shardcron.coordinator.cassandra.statements import ROWS
from shardcron.coordinator.cassandra.store import CassandraStore
from shardcron.coordinator.cassandra.writes import _LEASE_AT
from shardcron.coordinator.rows import _RUN_COLS
from tests.support.store_builders import make_job, make_run


def _raw_bytes(values: Any) -> int:
    """The bytes of the data in ``values`` as written: text as UTF-8, a number 8."""
    total = 0
    for v in values:
        if isinstance(v, str):
            total += len(v.encode())
        elif isinstance(v, bytes):
            total += len(v)
        elif v is not None:
            total += 8
    return total


def _with_error(row: tuple[Any, ...], error: str) -> tuple[Any, ...]:
    at = [c.strip() for c in _RUN_COLS.split(",")].index("error")
    return (*row[:at], error, *row[at + 1 :])


def test_a_statements_weight_is_its_values_bytes_and_a_little_per_cell(
    cassandra_store: CassandraStore,
) -> None:
    cql = cassandra_store._cql
    row = _with_error(ROWS.run_row(make_run(make_job())), "ünïcode ✓ " * 30)
    stmt = cql.bind("insert_run", (*row, 1, 100))
    size = bound_size(stmt)
    data = _raw_bytes((*row, 1, 100))
    cells = len(stmt.values)
    assert data + 10 * cells <= size <= data + 25 * cells + 64
    # a longer value weighs its bytes (UTF-8), not its characters
    longer = _with_error(row, "✓" * 1_000)
    heavier = bound_size(cql.bind("insert_run", (*longer, 1, 100)))
    assert heavier - size == 3_000 - len(("ünïcode ✓ " * 30).encode())


def test_an_unset_value_weighs_nothing(cassandra_store: CassandraStore) -> None:
    cql = cassandra_store._cql
    stmt = cql.bind("save_cursor", (3, 1_000, 1_000))
    unset = cql.bind("save_cursor", (3, 1_000, UNSET_VALUE))
    assert UNSET_VALUE in unset.values
    assert bound_size(stmt) - bound_size(unset) == len(stmt.values[2])


WARN_BYTES = 48 * 1024  # batch_size_warn_threshold of the nodes deploy starts


def _whole_run(cql: Any, i: int) -> BoundStatement:
    row = _with_error(ROWS.run_row(make_run(make_job())), f"{i}-" + "e" * 200)
    return cql.bind("insert_run", (*row, 1, 100))


def _lease(cql: Any, i: int) -> BoundStatement:
    """A lease's 7 columns, most of them null (no lateness): the weight of a null."""
    run = make_run(make_job())
    row = ROWS.run_row(run)
    return cql.bind("lease_run", (1, *[row[k] for k in _LEASE_AT], run.job_id, run.id))


@pytest.mark.parametrize("statement", [_whole_run, _lease], ids=["whole-runs", "leases"])
async def test_the_weight_is_what_cassandra_counts_or_a_little_more(
    cassandra_store: CassandraStore, statement: Callable[[Any, int], BoundStatement]
) -> None:
    """A batch of many partitions grown a statement at a time and sent each time, from
    40 KiB of weight, until Cassandra warns that it is over its warning threshold: the
    size it counts then is never above the weight by more than 1%, so a batch the store
    bounds never meets the fail threshold unforeseen, and not far below it (a whole
    record within 3%; a lease, whose cells are mostly null, a fifth less)."""
    cql = cassandra_store._cql
    session = cql._session
    assert session is not None
    statements = [statement(cql, i) for i in range(400)]
    weights = [bound_size(s) for s in statements]
    batch = BatchStatement(batch_type=BatchType.UNLOGGED)
    weight = 0
    for stmt, w in zip(statements, weights, strict=True):
        batch.add(stmt)
        weight += w
        if weight < 40 * 1024:
            continue
        warnings = session.execute(batch).response_future.warnings or []
        sizes = [int(m.group(1)) for x in warnings if (m := re.search(r"is of size (\d+)", x))]
        if sizes:
            break
    else:
        raise AssertionError(f"no warning up to a weight of {weight}")
    counted = sizes[0]
    assert counted > WARN_BYTES
    assert counted <= weight * 1.01
    assert counted >= weight * (0.97 if statement is _whole_run else 0.75)


def test_a_phase_of_big_rows_is_cut_into_batches_under_the_bound(
    cassandra_store: CassandraStore,
) -> None:
    cql = cassandra_store._cql
    partitions = []
    for i in range(40):
        row = ROWS.run_row(make_run(make_job(name=f"{i}-" + "x" * 2_000)))
        stmt = cql.bind("insert_run", (*row, 1, 100))
        partitions.append([(stmt, bound_size(stmt))])
    batches = phase_batches(partitions, cql.replicas)
    assert len(batches) > 1
    assert sum(len(b) for b in batches) == 40
    for batch in batches:
        assert sum(bound_size(s) for s in batch) <= BATCH_BYTES


def test_one_replica_set_for_every_key_is_what_the_token_map_says(
    cassandra_store: CassandraStore,
) -> None:
    cql = cassandra_store._cql
    session = cql._session
    assert session is not None
    metadata = session.cluster.metadata
    statements = [
        cql.bind("insert_run_id", (f"run-{i}", f"job-{i}", "alice", 100)) for i in range(50)
    ]
    keys = {cql.replicas(s) for s in statements}
    assert len(keys) == 1  # one node: one replica set
    for s in statements:
        assert cql.replicas(s) == frozenset(metadata.get_replicas(session.keyspace, s.routing_key))
    assert cql._only_replicas(session) == next(iter(keys))


def test_the_replica_key_follows_a_new_token_map(cassandra_store: CassandraStore) -> None:
    cql = cassandra_store._cql
    session = cql._session
    assert session is not None
    token_map = session.cluster.metadata.token_map
    stmt = cql.bind("insert_run_id", ("run-1", "job-1", "alice", 100))
    before = cql.replicas(stmt)
    mapped = token_map.tokens_to_hosts_by_ks[session.keyspace]
    # a map in which two token ranges have different replicas (as with more nodes than
    # replicas): no one set, so each key is looked up
    split = dict(mapped)
    first = next(iter(split))
    split[first] = []
    token_map.tokens_to_hosts_by_ks[session.keyspace] = split
    try:
        assert cql._only_replicas(session) is None
        assert (
            cql.replicas(stmt)
            == frozenset(session.cluster.metadata.get_replicas(session.keyspace, stmt.routing_key))
            or cql.replicas(stmt) == stmt.routing_key
        )
    finally:
        token_map.tokens_to_hosts_by_ks[session.keyspace] = mapped
    assert cql.replicas(stmt) == before
