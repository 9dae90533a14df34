"""``Binder`` binds values to the store's prepared statements exactly as the driver's
``PreparedStatement.bind`` does (same serialized values, routing key and settings),
and refuses what the driver refuses."""

from __future__ import annotations

from typing import Any

import pytest
from cassandra.query import UNSET_VALUE

from shardcron.coordinator.cassandra.binding import Binder
from shardcron.coordinator.cassandra.statements import ROWS
from shardcron.coordinator.cassandra.store import CassandraStore
from tests.support.store_builders import make_job, make_run

SAMPLES: dict[str, list[Any]] = {
    "varchar": ["", "run-1", "ünïcode ✓"],
    "text": ["", "run-1", "ünïcode ✓"],
    "ascii": ["", "abc"],
    "bigint": [0, -(1 << 63), (1 << 63) - 1, 1_700_000_000_000_000],
    "int": [0, -1, 2**31 - 1],
    "boolean": [True, False],
    "blob": [b"", b"\x00\xff"],
    "list<varchar>": [["a", "b"], []],
    "list<text>": [["a", "b"], []],
}


def _same(a: Any, b: Any) -> None:
    assert a.values == b.values
    assert a.routing_key == b.routing_key
    assert a.keyspace == b.keyspace
    assert a.consistency_level == b.consistency_level
    assert a.is_idempotent == b.is_idempotent
    assert a.prepared_statement is b.prepared_statement


def test_every_statement_binds_as_the_drivers_bind(cassandra_store: CassandraStore) -> None:
    bound = 0
    for prepared in cassandra_store._cql.ps.values():
        types = [c.type.cql_parameterized_type() for c in prepared.column_metadata]
        if not all(t in SAMPLES for t in types):
            continue  # an IN list, a counter: bound by the driver's tests, not these
        for k in range(3):
            values = [SAMPLES[t][k % len(SAMPLES[t])] for t in types]
            _same(Binder(prepared)(values), prepared.bind(values))
            bound += 1
    assert bound >= 30


def test_a_run_and_a_job_row_bind_as_the_drivers_bind(cassandra_store: CassandraStore) -> None:
    ps = cassandra_store._cql.ps
    job = make_job()
    run = make_run(job)
    run_values = (*ROWS.run_row(run), 1_700_000_000_000_000, 0)
    _same(Binder(ps["insert_run"])(run_values), ps["insert_run"].bind(run_values))
    job_values = ROWS.job_row(job)
    _same(Binder(ps["insert_job"])(job_values), ps["insert_job"].bind(job_values))


def test_unset_none_and_missing_values_bind_as_the_drivers_bind(
    cassandra_store: CassandraStore,
) -> None:
    prepared = cassandra_store._cql.ps["progress"]
    values = (1, UNSET_VALUE, None, UNSET_VALUE, UNSET_VALUE, "job-1")
    _same(Binder(prepared)(values), prepared.bind(values))
    with pytest.raises(ValueError, match="routing key"):
        prepared.bind((1, 2))  # the routing key left unset
    with pytest.raises(ValueError, match="routing key"):
        Binder(prepared)((1, 2))
    by_id = cassandra_store._cql.ps["insert_run_id"]
    short = ("run-1",)  # the rest unset, as protocol v4+ allows
    _same(Binder(by_id)(short), by_id.bind(short))


def test_what_the_driver_refuses_is_refused(cassandra_store: CassandraStore) -> None:
    prepared = cassandra_store._cql.ps["insert_run_id"]
    with pytest.raises(ValueError, match="Too many arguments"):
        Binder(prepared)(("r", "j", "o", 0, "extra"))
    with pytest.raises(TypeError, match='column "ttl"|column "\\[ttl\\]"'):
        Binder(prepared)(("r", "j", "o", "not a number"))
    with pytest.raises(ValueError, match="routing key"):
        Binder(prepared)((UNSET_VALUE, "j", "o", 0))
