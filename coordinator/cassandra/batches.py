"""How the writes of one phase become requests: unlogged batches by replica set, bounded.

The statements of one partition stay together, in one batch (atomic and isolated
in Cassandra), unless they alone are bigger than a batch. Partitions whose
replicas are the same nodes share batches: an unlogged batch has no batch log;
its coordinator (the driver routes it by its first statement, to one of those
replicas) applies each partition's mutation on that partition's replicas and
answers once every mutation reached the batch's consistency. So a batch needs a
quorum of one replica set, as a single-partition request does, and an
acknowledged batch is an acknowledged write of every statement in it. With one
Cassandra node, or as many replicas as nodes, a phase is a few batches whatever
the number of partitions; with more nodes, about one per replica set.

A batch stays under Cassandra's default ``batch_size_fail_threshold`` (50 KiB) by
the estimate of ``bound_size`` (the bytes of the bound values, as serialized for
the request, plus a little per cell: what Cassandra counts, or a little more; a
fifth more for a lease, whose cells are mostly null), and under ``BATCH_STATEMENTS``
statements. It is over Cassandra's default warning
thresholds (5 KiB, 10 partitions): a server with those defaults logs (rate-limited)
warnings; the nodes ``deploy`` starts raise them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable

from cassandra.query import BoundStatement

BATCH_BYTES = 20_000
BATCH_STATEMENTS = 250

# A partition's statements with their estimated sizes (``bound_size``).
Partition = list[tuple[BoundStatement, int]]
_CELL = 17  # about what Cassandra adds to a cell's value
_STATEMENT = 40  # and to a statement


def bound_size(stmt: BoundStatement) -> int:
    """About how many bytes ``stmt`` adds to a batch, as Cassandra counts them for
    ``batch_size_fail_threshold``: its serialized values (``Binder`` made them bytes,
    or None for a null), plus a little per cell. Summed by ``len`` over the values
    themselves, not value by value in Python: it is asked of every statement a store
    writes, and a loop over each value's type was a twelfth of a cluster node's time
    in a burst of creates."""
    values = stmt.values
    try:
        data = sum(map(len, filter(None, values)))
    except TypeError:  # an UNSET_VALUE among them: it writes nothing
        data = sum(len(v) for v in values if v.__class__ is bytes)
    return _STATEMENT + _CELL * len(values) + data


def fits_one_batch(statements: Partition, weight: int, count: int) -> bool:
    """Whether ``statements`` and ``count`` statements more, of ``weight`` in all, stay
    within one batch's bounds: ``phase_batches`` then never cuts them apart."""
    return (
        len(statements) + count <= BATCH_STATEMENTS
        and sum(s for _, s in statements) + weight <= BATCH_BYTES
    )


def phase_batches(
    partitions: Iterable[Partition], replicas: Callable[[BoundStatement], Hashable]
) -> list[list[BoundStatement]]:
    """The batches of one phase: ``partitions`` grouped by ``replicas`` (a key equal for
    partitions held by the same nodes), each group cut into bounded batches."""
    open_batches: dict[Hashable, tuple[list[BoundStatement], list[int]]] = {}
    batches: list[list[BoundStatement]] = []
    for statements in partitions:
        key = replicas(statements[0][0])
        batch, size = open_batches.get(key) or ([], [0])
        total = sum(s for _, s in statements)
        if batch and (
            size[0] + total > BATCH_BYTES or len(batch) + len(statements) > BATCH_STATEMENTS
        ):  # the partition goes whole into a new batch
            batches.append(batch)
            batch, size = [], [0]
        for stmt, s in statements:
            if batch and (size[0] + s > BATCH_BYTES or len(batch) >= BATCH_STATEMENTS):
                batches.append(batch)  # a partition bigger than a batch: split
                batch, size = [], [0]
            batch.append(stmt)
            size[0] += s
        open_batches[key] = (batch, size)
    batches.extend(batch for batch, _ in open_batches.values() if batch)
    return batches
