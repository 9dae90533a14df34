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
the estimate of ``writes._size``, which is within a few % of what Cassandra counts,
and under ``BATCH_STATEMENTS`` statements. It is over Cassandra's default warning
thresholds (5 KiB, 10 partitions): a server with those defaults logs (rate-limited)
warnings; the nodes ``deploy`` starts raise them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable

from cassandra.query import BoundStatement

BATCH_BYTES = 20_000
BATCH_STATEMENTS = 250

# A partition's statements with their estimated sizes (``writes._size``).
Partition = list[tuple[BoundStatement, int]]


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
