"""Values bound to a prepared statement, as the driver binds them, without its per-value work.

The store binds about ten statements per job. The driver's ``PreparedStatement.bind``
builds a column descriptor for every value to ask the column-encryption policy about
it, and looks the column's type up again each time, which at thousands of jobs a
second was a large part of a cluster node's time. ``Binder`` looks each column's serializer
up once per prepared statement and serializes with it directly, giving the same
``BoundStatement`` (same values, routing key and settings, checked by the tests
against the driver's own ``bind``). A statement with a column-encryption policy is
bound by the driver.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

from cassandra.query import UNSET_VALUE, BoundStatement, PreparedStatement


class Binder:
    """Binds positional values to one prepared statement (module docstring)."""

    __slots__ = ("_prepared", "_columns", "_protocol", "_routing", "_direct")

    def __init__(self, prepared: PreparedStatement) -> None:
        self._prepared = prepared
        columns = prepared.column_metadata or []
        self._columns: list[tuple[str, Callable[[Any, int], bytes]]] = [
            (c.name, c.type.serialize) for c in columns
        ]
        self._protocol = prepared.protocol_version
        self._routing = frozenset(prepared.routing_key_indexes or ())
        self._direct = prepared.column_encryption_policy is None and self._protocol >= 4

    def __call__(self, values: Sequence[Any]) -> BoundStatement:
        prepared = self._prepared
        if not self._direct:
            return prepared.bind(values)
        columns = self._columns
        if len(values) > len(columns):
            raise ValueError(
                f"Too many arguments provided to bind() (got {len(values)}, "
                f"expected {len(columns)})"
            )
        protocol = self._protocol
        out: list[Any] = []
        for i, value in enumerate(values):
            if value is None:
                out.append(None)
            elif value is UNSET_VALUE:
                out.append(self._unset(i))
            else:
                name, serialize = columns[i]
                try:
                    out.append(serialize(value, protocol))
                except (TypeError, struct.error) as e:
                    raise TypeError(
                        f'Received an argument of invalid type for column "{name}". '
                        f"Got: {type(value)}; ({e})"
                    ) from e
        for i in range(len(out), len(columns)):
            out.append(self._unset(i))
        stmt = BoundStatement(prepared)
        stmt.raw_values = values
        stmt.values = out
        return stmt

    def _unset(self, index: int) -> Any:
        if index in self._routing:
            name = self._columns[index][0]
            raise ValueError(f"Cannot bind UNSET_VALUE as a part of the routing key '{name}'")
        return UNSET_VALUE
