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

**The record.** Each attempt's parts are hashed in order as they are written: at the
result, ``finish`` gives the sha256 of the attempt's whole output, which the run's
record keeps (``Run.output_sha256``), and why it was cut (``Run.output_truncated``).
The digest is empty when this node did not see the attempt from its first part (it
found parts written before: a node restart or a shard move mid-run).

**The store down.** A write that fails or takes longer than ``write_timeout`` makes no
write be tried for a while (``retry_after``, doubled at each failure up to
``retry_most``, back to ``retry_after`` at the first success). An attempt whose worker
keeps output on its disk (``Hello.output_spool``: the edge passes ``room``) has its
parts written by tasks beside the stream's reads, which never wait on the store; it
is not cut: its buffer is kept, its worker told to stop sending its output
(``room(False)``: an ``OutputRoom`` pause; heartbeats, results and the other runs go
on), its buffer written again once the store is back (by the ticker), and its worker
told to send again (``room(True)``). It is paused too when a part comes due while
its last write is still going (a slow store), and at once while the store is known
down. Output in flight meanwhile is
kept while all buffers stay within ``held_bytes``; past it, or for a worker without a
spool, the attempt's parts end: "output truncated: blob store unavailable for N s"
(N: how long it had been unavailable to that attempt). A result that arrives while
the store is down (its worker waited its bound) writes what it can once, and the rest
is cut and said.

**Bounds.** An attempt keeps at most ``limit_bytes``; the run goes on past a cut, the
job store keeps the tail as ever, and the cut is said in that tail when it happens
and again at the run's end (``take`` and ``finish`` give the notice for the edge to
add): "output truncated: ...". For a worker that does not keep output, a buffer
waits for its write, so a slow store holds back its stream by ``write_timeout`` at
most, once per ``retry_after``. The
limit is the job's (``resources.output_limit_bytes``, which the poller gives with the
owner), else the node's ``limit_bytes``.

**Reading** (``read``): bytes below the end of the parts come from the parts (ranges of
the blobs); bytes past it from the job store's tail, which numbers the same bytes
alike, as long as the tail reaches back to them. While the run runs, a gap between the
parts and the tail (parts not written yet) reads as nothing for now: a follower waits
for the parts. Once the run is final, what a gap lacks was cut, and the notice says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Callable
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
    # seconds after a failed write during which writes are not tried (doubled at each
    # failure up to ``retry_most``), so a store that is down holds a stream back once,
    # not once per run
    retry_after: float = 1.0
    retry_most: float = 15.0
    # all attempts' buffers while the store is down, at most: output in flight to a
    # paused attempt past it is cut
    held_bytes: int = 256 << 20
    limit_bytes: int = DEFAULT_LIMIT_BYTES  # per attempt
    idle_forget: float = 300.0  # seconds after which a quiet attempt's state is dropped

    def __post_init__(self) -> None:
        if not 1 <= self.part_bytes <= self.buffer_bytes:
            raise ValueError("part_bytes: must be in [1, buffer_bytes]")
        if not 0 <= self.limit_bytes <= MAX_LIMIT_BYTES:
            raise ValueError(f"output limit: must be in [0, {MAX_LIMIT_BYTES}] bytes")
        if self.flush_interval <= 0 or self.write_timeout <= 0:
            raise ValueError("flush_interval and write_timeout: must be > 0 seconds")
        if not 0 < self.retry_after <= self.retry_most:
            raise ValueError("retry_after: must be in (0, retry_most] seconds")
        if self.held_bytes < self.buffer_bytes:
            raise ValueError("held_bytes: must be at least buffer_bytes")


# Tells an attempt's worker it may send the attempt's output (True) or must keep it
# (False): an ``OutputRoom`` on the stream that holds its lease.
Room = Callable[[bool], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class Finished:
    """What an attempt's output came to, at its result: the notice for its tail when it
    was cut (else ``b""``), the sha256 (hex) of its parts when this node wrote them all
    ("" otherwise), and why it was cut ("" when whole)."""

    notice: bytes = b""
    sha256: str = ""
    truncated: str = ""


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
    digest: hashlib._Hash = field(default_factory=hashlib.sha256)  # of the parts written
    whole: bool = False  # this node wrote its parts from the first
    room: Room | None = None  # its worker keeps output while paused; None: cut instead
    paused_at: float | None = None  # monotonic: when its worker was told to keep output


def _unavailable(seconds: float) -> str:
    return f"blob store unavailable for {max(1, round(seconds))} s"


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
        self._writes: set[asyncio.Task[bool]] = set()  # flushes beside the stream's reads
        self._down_until = 0.0  # monotonic: writes fail at once until then
        self._retry = self.config.retry_after  # the next wait after a failed write
        self._down_since: float | None = None  # monotonic: the first failure of a streak

    async def start(self) -> None:
        await self.store.open()
        self._ticker = asyncio.create_task(self._tick())

    async def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        if self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)
        for attempt in list(self._attempts.values()):
            await self._flush(attempt)
        await self.store.close()

    @property
    def buffered(self) -> int:
        return self._buffered

    # --- writing --------------------------------------------------------------------

    @property
    def writing(self) -> int:
        """Writes going on beside the streams' reads."""
        return len(self._writes)

    @property
    def paused(self) -> int:
        """Attempts whose worker keeps their output now."""
        return sum(1 for a in self._attempts.values() if a.paused_at is not None)

    async def take(
        self, owner: str, piece: OutputPiece, *, limit: int = 0, room: Room | None = None
    ) -> bytes:
        """Adds ``piece`` to its attempt's output, of which ``limit`` bytes are kept (its
        job's; 0: the node's ``limit_bytes``); returns the notice to add to the run's
        tail when this cut its output (else ``b""``). ``room``: how to pause and resume
        the attempt's worker, when it keeps output on its disk meanwhile."""
        key = (piece.run_id, piece.fencing_token)
        attempt = self._attempts.get(key)
        now = time.monotonic()
        if attempt is None:
            attempt = self._attempts[key] = _Attempt(
                owner=owner, run_id=piece.run_id, token=piece.fencing_token
            )
        attempt.seen = now
        if room is not None:
            attempt.room = room
        if attempt.cut or not piece.data:
            return b""
        limit = limit or self.config.limit_bytes
        data = piece.data
        if attempt.kept + len(data) > limit:
            data = data[: limit - attempt.kept]
            attempt.cut = f"the limit of {limit} bytes kept per run was reached"
        if attempt.paused_at is not None and self._buffered + len(data) > self.config.held_bytes:
            attempt.cut = _unavailable(now - attempt.paused_at)
            log.warning("output of run %s cut: %s", attempt.run_id, attempt.cut)
            return notice(attempt.cut)
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
        if attempt.paused_at is not None:
            return notice(attempt.cut) if cut_by_limit else b""  # the ticker writes it
        if (
            cut_by_limit
            or attempt.buffered >= self.config.part_bytes
            or self._unpaused_buffered() >= self.config.buffer_bytes
        ):
            if attempt.room is not None and not cut_by_limit:
                self._write_beside(attempt, now)
                return b""
            failed = await self._flush(attempt)
            if failed or cut_by_limit:
                return notice(attempt.cut)
        return b""

    def _write_beside(self, attempt: _Attempt, now: float) -> None:
        """The attempt of a worker that keeps output: its buffer is written by a task of
        its own, so the stream's reads never wait on the store. While the store is down
        (only the ticker tries it), or while a write of the attempt is still going and
        another part waits behind it, the worker is paused instead."""
        if self._down_since is not None:
            self._pause(attempt, now, "unavailable: a write failed lately")
        elif attempt.lock.locked():
            if attempt.buffered >= 2 * self.config.part_bytes:
                self._pause(attempt, now, "writes slower than the output")
        else:
            task = asyncio.create_task(self._flush(attempt))
            self._writes.add(task)
            task.add_done_callback(self._written)

    def _written(self, task: asyncio.Task[bool]) -> None:
        self._writes.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("output write failed", exc_info=task.exception())

    def _unpaused_buffered(self) -> int:
        """The bytes buffered for attempts not paused (what paused ones hold is written
        when the store is back, not to make room)."""
        if self._buffered < self.config.buffer_bytes:
            return self._buffered
        held = sum(a.buffered for a in self._attempts.values() if a.paused_at is not None)
        return self._buffered - held

    async def finish(self, run_id: str, token: int) -> Finished:
        """The attempt's result arrived: its buffer is written (tried once, its worker
        having waited for room) and its state dropped. Gives its digest, and the notice
        to add to the run's tail when its output was cut (again: the one said when it
        was cut may have left the tail since)."""
        attempt = self._attempts.pop((run_id, token), None)
        if attempt is None:
            return Finished()
        attempt.room = None  # no more pauses: what cannot be written now is cut
        await self._flush(attempt)
        sha = attempt.digest.hexdigest() if attempt.whole else ""
        if not attempt.cut:
            return Finished(sha256=sha)
        return Finished(notice=notice(attempt.cut), sha256=sha, truncated=attempt.cut)

    async def _flush(self, attempt: _Attempt) -> bool:
        """Writes the attempt's buffer as parts; True when a write failed just now and
        the attempt's output is cut from there on. An attempt whose worker keeps output
        (``room``) keeps what was not written, and its worker is paused instead."""
        async with attempt.lock:
            segments, attempt.segments = attempt.segments, []
            size, attempt.buffered = attempt.buffered, 0
            self._buffered -= size
            if not segments:
                return False
            written = 0
            try:
                if time.monotonic() < self._down_until:
                    raise BlobStoreUnavailable("a write failed lately; not tried")
                async with asyncio.timeout(self.config.write_timeout):
                    if attempt.next_part is None:
                        attempt.next_part = await self._next_part(attempt)
                        attempt.whole = attempt.next_part == 0
                    for stream, data in segments:
                        key = output_part_key(
                            attempt.owner, attempt.run_id, attempt.token, stream, attempt.next_part
                        )
                        await self.store.put(key, bytes(data))
                        attempt.digest.update(data)
                        attempt.next_part += 1
                        written += 1
            except (BlobStoreUnavailable, TimeoutError) as e:
                return self._failed(attempt, segments[written:], e)
            self._retry, self._down_since = self.config.retry_after, None
            if attempt.paused_at is not None and attempt.room is not None:
                log.info("output of run %s: blob store back, worker resumed", attempt.run_id)
                attempt.paused_at = None
                attempt.room(True)
            return False

    def _failed(
        self, attempt: _Attempt, unwritten: list[tuple[str, bytearray]], failure: Exception
    ) -> bool:
        """A write of the attempt failed: no write is tried for a while; the attempt is
        paused and keeps ``unwritten`` when its worker keeps output, else it is cut."""
        now = time.monotonic()
        error = str(failure) or f"no answer within {self.config.write_timeout:g}s"
        if now >= self._down_until:  # a write was tried: wait longer before the next
            self._down_until = now + self._retry
            self._retry = min(self._retry * 2, self.config.retry_most)
        if self._down_since is None:
            self._down_since = now
        if attempt.room is not None and not attempt.cut:
            size = sum(len(data) for _, data in unwritten)
            attempt.segments[:0] = unwritten
            attempt.buffered += size
            self._buffered += size
            self._pause(attempt, now, f"unavailable: {error}")
            return False
        since = attempt.paused_at if attempt.paused_at is not None else self._down_since
        attempt.cut = attempt.cut or _unavailable(now - since)
        log.warning(
            "output of run %s (token %d) cut: blob store %s unavailable: %s",
            attempt.run_id,
            attempt.token,
            self.store.url,
            error,
        )
        return True

    def _pause(self, attempt: _Attempt, now: float, error: str) -> None:
        """Tells the attempt's worker to keep its output until the store is back."""
        if attempt.paused_at is not None or attempt.room is None:
            return
        log.warning(
            "output of run %s (token %d) paused: blob store %s: %s",
            attempt.run_id,
            attempt.token,
            self.store.url,
            error,
        )
        attempt.paused_at = now
        attempt.since = now
        attempt.room(False)

    async def _next_part(self, attempt: _Attempt) -> int:
        """The part after the attempt's last one written (by this node or another)."""
        parts = await list_parts(self.store, attempt.owner, attempt.run_id, attempt.token)
        if parts:
            attempt.kept += parts[-1].end
            return parts[-1].number + 1
        return 0

    async def _tick(self) -> None:
        """Writes buffers older than ``flush_interval``, and paused attempts' buffers once
        writes may be tried again; forgets attempts long quiet."""
        config = self.config
        while True:
            await asyncio.sleep(config.flush_interval / 4)
            now = time.monotonic()
            for key, attempt in list(self._attempts.items()):
                if attempt.paused_at is not None:
                    if time.monotonic() < self._down_until:
                        continue
                    if not attempt.segments and attempt.room is not None:
                        attempt.paused_at = None  # nothing to write: its next output will
                        attempt.room(True)
                        continue
                if attempt.segments and (
                    attempt.paused_at is not None or now - attempt.since >= config.flush_interval
                ):
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
