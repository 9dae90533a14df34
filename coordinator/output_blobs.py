"""A run's full output in the blob store: written by the node holding its lease, read whole.

**Writing.** The lease stream's edge (``worker_stream.LeaseStream``) hands ``take`` each
Output piece of a lease its stream holds (the poller says which, and whose run it is:
``Poller.output_owner``), before the message goes to the poller's inbox: the bytes
never wait for a turn, and the blob credentials stay on the nodes. Each attempt (run
id and fencing token) buffers its output in memory and writes it as parts under
``output/<owner>/<run>/<token>/<stream>/<part>`` (``blobs.layout``): a part holds one
stream's bytes, and part numbers count across both streams, so an attempt's output is
its parts in part-number order. A part is written once the attempt has ``part_bytes``
buffered, once all attempts together hold ``buffer_bytes``, ``flush_interval`` after
its first byte, and when the run's result arrives (``finish``, which the edge awaits
before the result goes on: a run read final has its parts written). A stale attempt
writes under its own token, and readers read the token of the run's lease: it never
overwrites a newer attempt's parts. An attempt first seen on this node (a restart, a
shard move) lists its parts and goes on after the last.

**Bounds and failures.** An attempt keeps at most ``limit_bytes``; a write that fails
or takes longer than ``write_timeout`` ends the attempt's parts, and no write is tried
for ``retry_after`` (those attempts' parts end at once). Either way the run
goes on, the job store keeps the tail as ever, and the cut is said in that tail when it
happens and again at the run's end (``take`` and ``finish`` return the notice for the
edge to add): "output truncated: ...". A buffer waits for its write, so a slow store
holds back the worker's stream (and the command's pipe) by ``write_timeout`` at most,
once per ``retry_after``. The limit is the job's (``resources.output_limit_bytes``,
which the poller gives with the owner), else the node's ``limit_bytes``.

**Reading** (``read``): bytes below the end of the parts come from the parts (ranges of
the blobs); bytes past it from the job store's tail, which numbers the same bytes
alike, as long as the tail reaches back to them. While the run runs, a gap between the
parts and the tail (parts not written yet) reads as nothing for now: a follower waits
for the parts. Once the run is final, what a gap lacks was cut, and the notice says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field

from shardcron.blobs.errors import BlobStoreUnavailable
from shardcron.blobs.layout import OutputStream, output_part_key, output_prefix
from shardcron.blobs.store import BlobStore, ByteRange
from shardcron.client.limits import MAX_OUTPUT_LIMIT
from shardcron.client.stream import OutputPiece
from shardcron.client.types import OutputChunk, Run
from shardcron.coordinator.store import JobStore

log = logging.getLogger("shardcron.output")

TAIL_BYTES = 64 << 10  # the job store's tail of a run's output, beside a blob store
DEFAULT_LIMIT_BYTES = 1 << 30  # what one attempt keeps in the blob store
MAX_LIMIT_BYTES = MAX_OUTPUT_LIMIT
READ_BYTES = 4 << 20  # the most one ``read`` returns
READ_CHUNK = 1 << 20  # the most one chunk it returns holds


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputBlobConfig:
    part_bytes: int = 4 << 20  # an attempt's buffer is written as parts once this full
    buffer_bytes: int = 64 << 20  # all attempts' buffers on one node, at most about
    flush_interval: float = 1.0  # seconds a byte waits in a buffer, at most about
    # seconds one part's write may take before output is cut: well within a lease's
    # renewal, as the stream's reads wait for it
    write_timeout: float = 5.0
    # seconds after a failed write during which writes are not tried (their output cut
    # at once), so a store that is down holds a stream back once, not once per run
    retry_after: float = 30.0
    limit_bytes: int = DEFAULT_LIMIT_BYTES  # per attempt
    idle_forget: float = 300.0  # seconds after which a quiet attempt's state is dropped

    def __post_init__(self) -> None:
        if not 1 <= self.part_bytes <= self.buffer_bytes:
            raise ValueError("part_bytes: must be in [1, buffer_bytes]")
        if not 0 <= self.limit_bytes <= MAX_LIMIT_BYTES:
            raise ValueError(f"output limit: must be in [0, {MAX_LIMIT_BYTES}] bytes")
        if self.flush_interval <= 0 or self.write_timeout <= 0:
            raise ValueError("flush_interval and write_timeout: must be > 0 seconds")


@dataclass(slots=True, kw_only=True)
class _Attempt:
    owner: str
    run_id: str
    token: int
    next_part: int | None = None  # None: not listed yet
    kept: int = 0  # bytes written as parts, and buffered to be
    segments: list[tuple[str, bytearray]] = field(default_factory=list)
    buffered: int = 0
    since: float = 0.0  # monotonic time of the oldest buffered byte
    seen: float = 0.0  # monotonic time of the last output
    cut: str = ""  # why its parts ended early; "" while they go on
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def notice(reason: str) -> bytes:
    """The line the job store's tail gets when a run's output is cut."""
    return f"\n[shardcron: output truncated: {reason}]\n".encode()


class OutputBlobs:
    """The node's writer and reader of runs' output parts."""

    def __init__(self, store: BlobStore, config: OutputBlobConfig | None = None) -> None:
        self.store = store
        self.config = config or OutputBlobConfig()
        self._attempts: dict[tuple[str, int], _Attempt] = {}
        self._buffered = 0  # over every attempt
        self._ticker: asyncio.Task[None] | None = None
        self._down_until = 0.0  # monotonic: writes fail at once until then

    async def start(self) -> None:
        await self.store.open()
        self._ticker = asyncio.create_task(self._tick())

    async def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        for attempt in list(self._attempts.values()):
            await self._flush(attempt)
        await self.store.close()

    @property
    def buffered(self) -> int:
        return self._buffered

    # --- writing --------------------------------------------------------------------

    async def take(self, owner: str, piece: OutputPiece, *, limit: int = 0) -> bytes:
        """Adds ``piece`` to its attempt's output, of which ``limit`` bytes are kept (its
        job's; 0: the node's ``limit_bytes``); returns the notice to add to the run's
        tail when this cut its output (else ``b""``)."""
        key = (piece.run_id, piece.fencing_token)
        attempt = self._attempts.get(key)
        now = time.monotonic()
        if attempt is None:
            attempt = self._attempts[key] = _Attempt(
                owner=owner, run_id=piece.run_id, token=piece.fencing_token
            )
        attempt.seen = now
        if attempt.cut or not piece.data:
            return b""
        limit = limit or self.config.limit_bytes
        data = piece.data
        if attempt.kept + len(data) > limit:
            data = data[: limit - attempt.kept]
            attempt.cut = f"the limit of {limit} bytes kept per run was reached"
        if data:
            if not attempt.segments:
                attempt.since = now
            if attempt.segments and attempt.segments[-1][0] == piece.stream:
                attempt.segments[-1][1].extend(data)
            else:
                attempt.segments.append((piece.stream, bytearray(data)))
            attempt.buffered += len(data)
            attempt.kept += len(data)
            self._buffered += len(data)
        cut_by_limit = attempt.cut
        if (
            cut_by_limit
            or attempt.buffered >= self.config.part_bytes
            or self._buffered >= self.config.buffer_bytes
        ):
            failed = await self._flush(attempt)
            if failed or cut_by_limit:
                return notice(attempt.cut)
        return b""

    async def finish(self, run_id: str, token: int) -> bytes:
        """The attempt's result arrived: its buffer is written and its state dropped.
        Returns the notice to add to the run's tail when its output was cut (again: the
        one said when it was cut may have left the tail since), else ``b""``."""
        attempt = self._attempts.pop((run_id, token), None)
        if attempt is None:
            return b""
        await self._flush(attempt)
        return notice(attempt.cut) if attempt.cut else b""

    async def _flush(self, attempt: _Attempt) -> bool:
        """Writes the attempt's buffer as parts; True when a write failed just now (the
        attempt's output is cut from there on)."""
        async with attempt.lock:
            segments, attempt.segments = attempt.segments, []
            size, attempt.buffered = attempt.buffered, 0
            self._buffered -= size
            if not segments:
                return False
            try:
                if time.monotonic() < self._down_until:
                    raise BlobStoreUnavailable("a write failed lately; not tried")
                async with asyncio.timeout(self.config.write_timeout):
                    if attempt.next_part is None:
                        attempt.next_part = await self._next_part(attempt)
                    for stream, data in segments:
                        key = output_part_key(
                            attempt.owner, attempt.run_id, attempt.token, stream, attempt.next_part
                        )
                        await self.store.put(key, bytes(data))
                        attempt.next_part += 1
            except (BlobStoreUnavailable, TimeoutError) as e:
                log.warning(
                    "output of run %s (token %d) cut: blob store %s unavailable: %s",
                    attempt.run_id,
                    attempt.token,
                    self.store.url,
                    e,
                )
                attempt.cut = "blob store unavailable"
                self._down_until = max(self._down_until, time.monotonic() + self.config.retry_after)
                return True
            return False

    async def _next_part(self, attempt: _Attempt) -> int:
        """The part after the attempt's last one written (by this node or another)."""
        parts = await list_parts(self.store, attempt.owner, attempt.run_id, attempt.token)
        if parts:
            attempt.kept += parts[-1].end
            return parts[-1].number + 1
        return 0

    async def _tick(self) -> None:
        """Writes buffers older than ``flush_interval``; forgets attempts long quiet."""
        config = self.config
        while True:
            await asyncio.sleep(config.flush_interval / 4)
            now = time.monotonic()
            for key, attempt in list(self._attempts.items()):
                if attempt.segments and now - attempt.since >= config.flush_interval:
                    try:
                        await self._flush(attempt)
                    except Exception:  # a fault of one attempt; the others go on
                        log.exception("output of run %s: flush failed", attempt.run_id)
                elif not attempt.segments and now - attempt.seen >= config.idle_forget:
                    self._attempts.pop(key, None)

    # --- reading --------------------------------------------------------------------

    async def read(
        self, store: JobStore, run: Run, offset: int, limit: int | None
    ) -> list[OutputChunk]:
        """The run's output from ``offset`` (negative: from its end), at most ``limit``
        bytes (and ``READ_BYTES``), as chunks with their offsets."""
        parts = await list_parts(self.store, run.owner, run.id, run.lease_token)
        blob_end = parts[-1].end if parts else 0
        want = READ_BYTES if limit is None else min(limit, READ_BYTES)
        if offset < 0:
            last = await store.read_output(run.id, offset=-1, limit=1)
            end = max(blob_end, last[-1].offset + len(last[-1].data) if last else 0)
            offset = max(0, end + offset)
        if want <= 0:
            return []
        if offset < blob_end:
            return await self._read_parts(parts, offset, min(offset + want, blob_end), run.id)
        chunks = await store.read_output(run.id, offset=offset, limit=min(want, 1 << 16))
        if chunks and chunks[0].offset > offset and not run.is_final:
            return []  # the parts of the bytes between are not written yet
        out: list[OutputChunk] = []
        for chunk in chunks:
            room = want - sum(len(c.data) for c in out)
            if room <= 0:
                break
            out.append(chunk if len(chunk.data) <= room else _cut(chunk, chunk.data[:room]))
        return out

    async def _read_parts(
        self, parts: list[Part], start: int, end: int, run_id: str
    ) -> list[OutputChunk]:
        out: list[OutputChunk] = []
        for part in parts:
            if part.end <= start or part.start >= end:
                continue
            lo, hi = max(start, part.start), min(end, part.end)
            data = await self.store.get(part.key, ByteRange(lo - part.start, hi - part.start))
            for i in range(0, len(data), READ_CHUNK):
                out.append(
                    OutputChunk(
                        run_id=run_id,
                        offset=lo + i,
                        data=data[i : i + READ_CHUNK],
                        stream=part.stream,
                    )
                )
        return out


def _cut(chunk: OutputChunk, data: bytes) -> OutputChunk:
    return OutputChunk(run_id=chunk.run_id, offset=chunk.offset, data=data, stream=chunk.stream)


@dataclass(frozen=True, slots=True, kw_only=True)
class Part:
    """One part of an attempt's output: its key, stream, number and place in the whole."""

    key: str
    stream: str
    number: int
    start: int
    end: int


async def list_parts(store: BlobStore, owner: str, run_id: str, token: int) -> list[Part]:
    """The attempt's parts in part order, each with its offsets in the attempt's output."""
    prefix = output_prefix(owner, run_id, token)
    found: list[tuple[int, str, str, int]] = []
    page_token = ""
    while True:
        page = await store.list(prefix, page_token=page_token)
        for entry in page.items:
            stream, _, number = entry.key[len(prefix) :].partition("/")
            if stream in (OutputStream.STDOUT, OutputStream.STDERR) and number.isdigit():
                found.append((int(number), stream, entry.key, entry.size))
        page_token = page.next_page_token
        if not page_token:
            break
    found.sort()
    parts: list[Part] = []
    at = 0
    for number, stream, key, size in found:
        parts.append(Part(key=key, stream=stream, number=number, start=at, end=at + size))
        at += size
    return parts
