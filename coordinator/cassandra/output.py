"""Run output on Cassandra: a run's chunks in one partition, keyed by absolute offset.

Rows (run_id, byte_offset) hold a run's chunks; the offset counts every byte
appended before it, so offsets stay absolute when the head is trimmed. Static
columns hold the oldest kept byte and the end. The poller that owns a run's shard
is the only writer of its output, so read-then-write of the ends is safe.
"""

from __future__ import annotations

from collections.abc import Sequence

from shardcron.client.types import OutputChunk
from shardcron.coordinator.cassandra.batches import BATCH_BYTES
from shardcron.coordinator.cassandra.session import Cql
from shardcron.coordinator.store_rules import (
    bytes_in,
    cut_pieces,
    output_head,
    output_window,
    place_output,
)


async def append_output(cql: Cql, chunks: Sequence[OutputChunk], *, cap: int, ttl: int = 0) -> None:
    """Appends the chunks, keeping at most ``cap`` bytes per run, the newest, from where
    ``store_rules.output_head`` says; what falls before that is never written. Chunks
    and ends written live ``ttl`` seconds (0 = for ever: see ``schema``, retention)."""
    by_run: dict[str, list[OutputChunk]] = {}
    for chunk in chunks:
        if chunk.data:
            by_run.setdefault(chunk.run_id, []).append(chunk)
    await cql.gather(_append(cql, run_id, cs, cap, ttl) for run_id, cs in by_run.items())


async def _append(cql: Cql, run_id: str, chunks: list[OutputChunk], cap: int, ttl: int) -> None:
    ends = (await cql.exec(cql.ps["output_ends"], (run_id,))).rows
    head, end = ends[0] if ends and ends[0][1] is not None else (0, 0)
    head = head or 0
    new = place_output(end, [(c.stream, bytes(c.data)) for c in chunks])
    new_end, new_head = new[-1][0] + len(new[-1][2]), head
    window = output_window(head, new_end, cap)
    if window is not None:  # cut before writing: nothing past the cap is stored
        stored = await _stored_in(cql, run_id, window, end) if window[0] < end else []
        near_cut = bytes_in([(at, d) for at, _, d in [*stored, *new]], window)
        new_head = output_head(new_end, cap, near_cut, window[0])
        # The stored chunk holding the new head is written again, cut to start there.
        new = cut_pieces([*stored, *new], new_head)
    inserts = [cql.bind("output_insert", (run_id, o, s, d, ttl)) for o, s, d in new]
    ends_after = [cql.bind("output_trim", (run_id, new_head))] if new_head > head else []
    ends_after.append(cql.bind("output_set_ends", (ttl, new_head, new_end, run_id)))
    if sum(len(d) + 64 for _, _, d in new) + 200 <= BATCH_BYTES:
        await cql.send([*inserts, *ends_after])  # one partition: atomic, isolated
    else:  # too big for a batch: chunks first, then the ends that make them visible
        await cql.all_written(cql.send([s]) for s in inserts)
        for stmt in ends_after:
            await cql.send([stmt])


async def _stored_in(
    cql: Cql, run_id: str, window: tuple[int, int], end: int
) -> list[tuple[int, str, bytes]]:
    """The stored chunks overlapping ``window`` (none past ``end``: a stray row left by
    an interrupted write is not output), in order."""
    lo, hi = window[0], min(window[1], end)
    found = [tuple(r) for r in (await cql.exec(cql.ps["output_at"], (run_id, lo))).rows]
    async for rows in cql.pages(cql.ps["output_from"], (run_id, lo)):
        found += [tuple(r) for r in rows if r[0] < hi]
        if not rows or rows[-1][0] >= hi:
            break
    return [(at, s, bytes(d)[: end - at]) for at, s, d in found if at < hi and at + len(d) > lo]


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
