"""Run output on Cassandra: a run's chunks in one partition, keyed by absolute offset.

Rows (run_id, byte_offset) hold a run's chunks; the offset counts every byte
appended before it, so offsets stay absolute when the head is trimmed. Static
columns hold the oldest kept byte and the end. The poller that owns a run's shard
is the only writer of its output, so read-then-write of the ends is safe.
"""

from __future__ import annotations

from collections.abc import Sequence

from shardcron.client.types import OutputChunk
from shardcron.coordinator.cassandra.session import Cql
from shardcron.coordinator.cassandra.writes import BATCH_BYTES


async def append_output(cql: Cql, chunks: Sequence[OutputChunk], *, cap: int) -> None:
    """Appends the chunks, keeping at most ``cap`` bytes per run (the newest)."""
    by_run: dict[str, list[OutputChunk]] = {}
    for chunk in chunks:
        if chunk.data:
            by_run.setdefault(chunk.run_id, []).append(chunk)
    await cql.gather(_append(cql, run_id, cs, cap) for run_id, cs in by_run.items())


async def _append(cql: Cql, run_id: str, chunks: list[OutputChunk], cap: int) -> None:
    ends = (await cql.exec(cql.ps["output_ends"], (run_id,))).rows
    head, end = ends[0] if ends and ends[0][1] is not None else (0, 0)
    head = head or 0
    new: list[tuple[int, str, bytes]] = []
    at = end
    for chunk in chunks:
        new.append((at, chunk.stream, bytes(chunk.data)))
        at += len(chunk.data)
    new_end, new_head = at, head
    if new_end - head > cap:
        # The first chunk kept is the first starting at or after new_end - cap (then
        # at most cap bytes are kept); if none does, the last chunk alone, cut to cap.
        threshold = new_end - cap
        if threshold <= end:
            found = (await cql.exec(cql.ps["output_first_from"], (run_id, threshold))).rows
            new_head = found[0][0] if found and found[0][0] < end else new[0][0]
        else:
            new_head = next((o for o, _, _ in new if o >= threshold), new[-1][0])
        if new_head < threshold:  # only the last chunk is left, bigger than the cap
            _, stream, data = new[-1]
            new[-1] = (threshold, stream, data[len(data) - cap :])
            new_head = threshold
        new = [c for c in new if c[0] >= new_head]
    statements = [cql.bind("output_insert", (run_id, o, s, d)) for o, s, d in new]
    size = sum(len(d) + 64 for _, _, d in new)
    if new_head > head:
        statements.append(cql.bind("output_trim", (run_id, new_head)))
    statements.append(cql.bind("output_set_ends", (new_head, new_end, run_id)))
    if size + 200 <= BATCH_BYTES:
        await cql.send(statements)  # one partition: atomic, isolated
    else:  # too big for a batch: chunks first, then the ends that make them visible
        await cql.all_written(cql.send([s]) for s in statements[: len(new)])
        for stmt in statements[len(new) :]:
            await cql.send([stmt])


async def read_output(cql: Cql, run_id: str, *, offset: int, limit: int) -> list[OutputChunk]:
    ends = (await cql.exec(cql.ps["output_ends"], (run_id,))).rows
    if not ends or ends[0][1] is None:
        return []
    head, end = ends[0]
    start = max(head, end + offset if offset < 0 else offset)
    if start >= end:
        return []
    out: list[OutputChunk] = []
    room = limit
    covered = head  # chunks are contiguous; anything overlapping or past the end is stray
    first = (await cql.exec(cql.ps["output_at"], (run_id, start))).rows

    def take(at: int, stream: str, data: bytes) -> None:
        nonlocal room, covered
        if at < covered or at >= end or room <= 0:
            return
        data = data[: end - at]
        covered = at + len(data)
        skip = max(0, start - at)
        piece = bytes(data[skip : skip + room])
        if piece:
            out.append(OutputChunk(run_id=run_id, offset=at + skip, data=piece, stream=stream))
            room -= len(piece)

    if first:
        take(*first[0])
    async for rows in cql.pages(cql.ps["output_from"], (run_id, start)):
        for row in rows:
            take(*row)
        if room <= 0:
            break
    return out
