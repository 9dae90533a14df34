"""Cassandra's own count of the operations each table of a keyspace served.

Cassandra 5 keeps, per keyspace and table, the latency histograms of the writes and
reads each replica applied, and shows their counts in the virtual tables
``system_views.local_write_latency``, ``local_read_latency`` and ``local_scan_latency``
(a replica's view: a write is one partition's mutation applied to that table, so a
batch of rows of one partition counts once and a row written to three replicas counts
three times; a read is one partition read; a scan is one range read). Virtual tables
are local to the node that answers, so a count asks every node of the cluster and adds
them up. Counts only grow: what a piece of work cost is the difference of two counts
(``TableCounts.since``), with nothing else of the keyspace's running in between.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cassandra.cluster import Session

KINDS = (
    ("writes", "local_write_latency"),
    ("reads", "local_read_latency"),
    ("scans", "local_scan_latency"),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class TableOps:
    """One table's operations, as its replicas counted them."""

    writes: int = 0  # partition mutations applied
    reads: int = 0  # single-partition reads
    scans: int = 0  # range reads

    def __sub__(self, other: TableOps) -> TableOps:
        return TableOps(
            writes=self.writes - other.writes,
            reads=self.reads - other.reads,
            scans=self.scans - other.scans,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class TableCounts:
    """Every table of one keyspace with its operations so far."""

    keyspace: str
    tables: Mapping[str, TableOps]

    def since(self, earlier: TableCounts) -> dict[str, TableOps]:
        """The operations each table served between ``earlier`` and this count."""
        return {
            name: ops - earlier.tables.get(name, TableOps()) for name, ops in self.tables.items()
        }


def table_counts(session: Session, keyspace: str) -> TableCounts:
    """Each table of ``keyspace`` with the operations every node of the cluster has
    counted for it since that node started (or the table was made)."""
    sums: dict[str, dict[str, int]] = {}
    hosts = [h for h in session.cluster.metadata.all_hosts() if h.is_up is not False]
    for kind, view in KINDS:
        query = f"SELECT table_name, count FROM system_views.{view} WHERE keyspace_name = %s"
        for host in hosts:
            for row in session.execute(query, (keyspace,), host=host):
                table = sums.setdefault(row.table_name, {k: 0 for k, _ in KINDS})
                table[kind] += row.count
    return TableCounts(
        keyspace=keyspace, tables={name: TableOps(**ops) for name, ops in sums.items()}
    )
