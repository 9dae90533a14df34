"""The send queue of one lease stream: everything a worker sends goes through it.

It holds the typed messages of ``shardcron.client.stream``; the link encodes them.
Items of one kind queued while the previous message was being written (or within
one coalescing window) leave as ONE message: Started refs, Results and Output
chunks are merged; a Heartbeat is built at send time with the leases held then.

Output, and the pieces of a run's result files, are flushed when 64 KiB is buffered, when ``output_interval`` has passed since
the oldest buffered byte, or before a Results message (so a run's output precedes
its result). A command's output is read no faster than the stream takes it: its
reader waits (``output_room``, up to ``OUTPUT_ROOM_WAIT``) while more than half of
``output_buffer`` waits to be sent, so a command writing faster than the stream is
held back by its pipe instead of losing output; only a stream that takes nothing for
that long (a reconnect) drops the oldest buffered output, as counted. Output
survives a reconnect (bounded); Started, Results and heartbeats do not
(``Hello.held`` and ``Hello.pending_results`` carry them instead).

How long starts, results and credit limits wait for company depends on whether the
poller may be waiting for the slots they free (``patient``, from the link: the room
the poller sees is half its credit limit or more, and the worker has more slots free
than its pollers asked for):

- Room to spare: they gather for ``gather`` (10 ms) from the first one queued, and
  a run's Started is left out when its result goes in the same flush (the result
  carries its start). Runs that start one by one, each at its own due instant,
  would send a Started and a Results message each, and a Credits message for most,
  each one written, read, decoded and handled on both sides; gathered, a steady
  stream of runs takes less than one message per run.
- Room scarce: what frees a slot goes at once (yielding to the loop while more of
  the same burst keeps arriving, ``linger`` at most), so a poller waiting for slots
  is not kept waiting; unless results have been coming more than two to a
  ``scarce_gather`` (10 ms; a moving average of the gaps between them): then they
  gather for that long, which keeps a freed slot idle that long at most and spares
  both sides a message per run. A worker of 64 slots running short commands back to back
  (W6) sent each result alone: the node spent three times its CPU per run.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from shardcron.client.stream import (
    Credits,
    Heartbeat,
    LeaseRef,
    Output,
    OutputPiece,
    Refused,
    ResultFilePiece,
    ResultFiles,
    Results,
    RunOutcome,
    Started,
    WorkerEvent,
)

# Every message stays far under what a node takes (4 MiB, ``MAX_MESSAGE_BYTES`` in
# coordinator/service.py): a bigger one would end the stream, again at each reconnect.
MAX_OUTPUT_MESSAGE = 64 * 1024
MAX_RESULTS_MESSAGE = 500
MAX_RESULTS_MESSAGE_BYTES = 1 << 20
RESULT_FIELDS_BYTES = 160  # a result's encoded size beyond its error text, at most
# Leases named per Heartbeat, Started or Hello.held (a lease ref is about 90 bytes
# encoded): a worker holding 50,000 leases given ahead of a storm's instant sent
# messages of 4.4 MB, refused by the node, and every lease held lapsed.
MAX_HEARTBEAT_LEASES = 10_000
# Starts this far apart at most share a Started message, and its ``at`` (the first's):
# as close as the coalescing window (``linger``) ever kept them; to the millisecond,
# runs started one by one (commands) would take a message each.
START_TOLERANCE = timedelta(milliseconds=5)
RESULT_GAP_WEIGHT = 0.2  # of the newest gap between two results, in their moving average


OUTPUT_ROOM_WAIT = 5.0  # seconds a command's reader waits for the stream to take output
# seconds a run's result files wait for the stream to take their last piece: a piece
# dropped drops its file, and the node may hold the stream back while its blob store
# takes a part (up to 30 s)
RESULT_ROOM_WAIT = 60.0


class _Chunk:
    __slots__ = ("run_id", "token", "stream", "data")

    def __init__(self, run_id: str, token: int, stream: str, data: bytes) -> None:
        self.run_id = run_id
        self.token = token
        self.stream = stream
        self.data = bytearray(data)


class Outbox:
    def __init__(
        self,
        *,
        linger: float = 0.005,
        gather: float = 0.010,
        scarce_gather: float = 0.010,
        patient: Callable[[], bool] = lambda: False,
        output_interval: float = 0.1,
        output_buffer: int = 8 * 1024 * 1024,
    ) -> None:
        self.linger = linger
        self.gather = gather
        self.scarce_gather = scarce_gather
        self._patient = patient  # True: no poller waits for the slots reports free
        self.output_interval = output_interval
        self.output_buffer = output_buffer
        self.dropped_output_bytes = 0
        self._started: list[tuple[LeaseRef, datetime]] = []  # each with when it started
        self._results: list[RunOutcome] = []
        self._chunks: list[_Chunk | ResultFilePiece] = []  # output and result files
        self._chunk_bytes = 0
        self._chunks_since: float | None = None
        self._credits: int | None = None
        self._refused: list[LeaseRef] = []
        self._heartbeat = False
        self._wake = asyncio.Event()
        self._drained = asyncio.Event()  # set whenever buffered output is taken to be sent
        self._reports_since: float | None = None  # the oldest start, result or limit queued
        self._last_result: float | None = None  # when the last result was queued
        self._result_gap: float | None = None  # between results, a moving average

    # -- producers ---------------------------------------------------------------
    def started(self, ref: LeaseRef, at: datetime) -> None:
        self._started.append((ref, at))
        self._queued()

    def result(self, outcome: RunOutcome) -> None:
        now = time.monotonic()
        if self._last_result is not None:
            gap = now - self._last_result
            was = self._result_gap
            self._result_gap = gap if was is None else was + RESULT_GAP_WEIGHT * (gap - was)
        self._last_result = now
        self._results.append(outcome)
        self._queued()

    def credits(self, limit: int) -> None:
        self._credits = limit
        self._queued()

    def _queued(self) -> None:
        """A start, result or limit was queued: ``take`` looks again, unless it is
        gathering them already and they still fit in one message."""
        if self._reports_since is None or self._full():
            self._wake.set()

    def _full(self) -> bool:
        """As many results or starts as one message takes: no reason to wait."""
        return (
            len(self._results) >= MAX_RESULTS_MESSAGE or len(self._started) >= MAX_HEARTBEAT_LEASES
        )

    def refused(self, ref: LeaseRef) -> None:
        self._refused.append(ref)
        self._wake.set()

    def heartbeat(self) -> None:
        self._heartbeat = True
        self._wake.set()

    def output(self, run_id: str, token: int, stream: str, data: bytes) -> None:
        """Bytes the run wrote under the lease ``token`` (the poller keeps output only
        with the token of the lease it holds)."""
        for i in range(0, len(data), MAX_OUTPUT_MESSAGE):
            self._add_output(run_id, token, stream, data[i : i + MAX_OUTPUT_MESSAGE])

    def _add_output(self, run_id: str, token: int, stream: str, data: bytes) -> None:
        if not data:
            return
        last = self._chunks[-1] if self._chunks else None
        if (
            isinstance(last, _Chunk)
            and last.run_id == run_id
            and last.token == token
            and last.stream == stream
            and len(last.data) + len(data) <= MAX_OUTPUT_MESSAGE
        ):
            last.data += data
        else:
            self._chunks.append(_Chunk(run_id, token, stream, data))
        was_empty = self._chunks_since is None
        if was_empty:
            self._chunks_since = time.monotonic()
        self._chunk_bytes += len(data)
        while self._chunk_bytes > self.output_buffer and len(self._chunks) > 1:
            # a result file's piece dropped drops its file: the node says so on the run
            dropped = self._chunks.pop(0)
            self._chunk_bytes -= len(dropped.data)
            self.dropped_output_bytes += len(dropped.data)
        if was_empty or self._chunk_bytes >= MAX_OUTPUT_MESSAGE:
            self._wake.set()

    def result_piece(self, piece: ResultFilePiece) -> None:
        """Bytes of one of a run's result files: sent with output, before its result, and
        held back by ``output_room`` alike."""
        self._chunks.append(piece)
        if self._chunks_since is None:
            self._chunks_since = time.monotonic()
        self._chunk_bytes += len(piece.data)
        self._wake.set()

    async def output_room(self, wait: float = OUTPUT_ROOM_WAIT) -> None:
        """Returns once at most half of ``output_buffer`` waits to be sent, or after
        ``wait`` seconds (then more output drops the oldest, as ever)."""
        if self._chunk_bytes <= self.output_buffer // 2:
            return
        self._drained.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._drained.wait(), wait)

    def interrupt(self) -> None:
        """Wake a waiting ``take`` (the stream ended)."""
        self._wake.set()

    def reset(self) -> None:
        """A new stream begins: drop what Hello carries instead; keep buffered output."""
        self._reports_since = None
        self._started.clear()
        self._results.clear()
        self._credits = None
        self._refused.clear()
        self._heartbeat = False

    @property
    def results_queued(self) -> int:
        return len(self._results)

    @property
    def pending(self) -> int:
        return len(self._started) + len(self._results) + len(self._chunks)

    # -- consumer ----------------------------------------------------------------
    def _until_due(self) -> float | None:
        """0 when something must go now, else seconds until something is due, or None."""
        if self._refused or self._heartbeat:
            return 0.0
        wait = None
        if self._credits is not None or self._started or self._results:
            if self._full():
                return 0.0
            if self._patient():
                window = self.gather
            elif self._results_streaming():
                window = self.scarce_gather
            else:
                return 0.0
            now = time.monotonic()
            if self._reports_since is None:
                self._reports_since = now
            wait = max(0.0, self._reports_since + window - now)
            if wait == 0.0:
                return 0.0
        if self._chunks_since is not None:
            if self._chunk_bytes >= MAX_OUTPUT_MESSAGE:
                return 0.0
            due = max(0.0, self._chunks_since + self.output_interval - time.monotonic())
            return due if wait is None else min(wait, due)
        return wait

    def _results_streaming(self) -> bool:
        """Results come more than two to a ``scarce_gather``: one waiting that long has
        company."""
        gap = self._result_gap
        return gap is not None and gap * 2 < self.scarce_gather

    async def take(
        self, done: asyncio.Event, build_heartbeat: Callable[[], Heartbeat]
    ) -> list[WorkerEvent]:
        """The next messages to send, merged by kind; [] once ``done`` is set."""
        while True:
            if done.is_set():
                return []
            wait = self._until_due()
            if wait == 0.0:
                break
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait)
        if (self._started or self._results) and self._reports_since is None:
            await self._coalesce()  # scarce slots: sent at once, with the rest of the burst
        self._reports_since = None
        return self._drain(build_heartbeat)

    async def _coalesce(self) -> None:
        """Let items of the same burst join: yield ticks while more keep arriving."""
        end = time.monotonic() + self.linger
        count = len(self._started) + len(self._results)
        while time.monotonic() < end:
            await asyncio.sleep(0)
            now = len(self._started) + len(self._results)
            if now == count:
                await asyncio.sleep(0)
                if len(self._started) + len(self._results) == now:
                    return
            count = len(self._started) + len(self._results)

    def _drain(self, build_heartbeat: Callable[[], Heartbeat]) -> list[WorkerEvent]:
        out: list[WorkerEvent] = []
        if self._refused:
            out.append(Refused(leases=tuple(self._refused)))
            self._refused = []
        if self._credits is not None:
            out.append(Credits(limit=self._credits))
            self._credits = None
        if self._started and self._results:  # a result says its run started, and when
            ended = {(o.run_id, o.fencing_token) for o in self._results}
            self._started = [
                s for s in self._started if (s[0].run_id, s[0].fencing_token) not in ended
            ]
        if self._started:
            out.extend(self._started_messages())
        if self._chunks and (
            self._results
            or self._chunk_bytes >= MAX_OUTPUT_MESSAGE
            or time.monotonic() - (self._chunks_since or 0.0) >= self.output_interval
        ):
            out.extend(self._output_messages())
        if self._results:
            out.extend(self._results_messages())
        if self._heartbeat:
            self._heartbeat = False
            out.extend(heartbeat_messages(build_heartbeat()))
        return out

    def _started_messages(self) -> list[WorkerEvent]:
        """Started refs by when they started (``START_TOLERANCE`` apart at most within a
        message, whose ``at`` is the first's), ``MAX_HEARTBEAT_LEASES`` a message."""
        out: list[WorkerEvent] = []
        refs: list[LeaseRef] = []
        first = self._started[0][1]
        for ref, at in self._started:
            if len(refs) == MAX_HEARTBEAT_LEASES or abs(at - first) > START_TOLERANCE:
                out.append(Started(leases=tuple(refs), at=first))
                refs, first = [], at
            refs.append(ref)
        out.append(Started(leases=tuple(refs), at=first))
        self._started = []
        return out

    def _results_messages(self) -> list[WorkerEvent]:
        """The results in messages of at most ``MAX_RESULTS_MESSAGE`` outcomes and about
        ``MAX_RESULTS_MESSAGE_BYTES``."""
        out: list[WorkerEvent] = []
        batch: list[RunOutcome] = []
        size = 0
        for outcome in self._results:
            cost = len(outcome.error.encode()) + RESULT_FIELDS_BYTES
            if batch and (
                len(batch) == MAX_RESULTS_MESSAGE or size + cost > MAX_RESULTS_MESSAGE_BYTES
            ):
                out.append(Results(outcomes=tuple(batch)))
                batch, size = [], 0
            batch.append(outcome)
            size += cost
        out.append(Results(outcomes=tuple(batch)))
        self._results = []
        return out

    def _output_messages(self) -> list[WorkerEvent]:
        out: list[WorkerEvent] = []
        batch: list[OutputPiece] = []
        files: list[ResultFilePiece] = []
        size = files_size = 0
        for c in self._chunks:
            if isinstance(c, ResultFilePiece):
                if files and files_size + len(c.data) > MAX_OUTPUT_MESSAGE:
                    out.append(ResultFiles(pieces=tuple(files)))
                    files, files_size = [], 0
                files.append(c)
                files_size += len(c.data)
                continue
            if batch and size + len(c.data) > MAX_OUTPUT_MESSAGE:
                out.append(Output(pieces=tuple(batch)))
                batch, size = [], 0
            piece = OutputPiece(
                run_id=c.run_id, fencing_token=c.token, stream=c.stream, data=bytes(c.data)
            )
            batch.append(piece)
            size += len(c.data)
        if batch:
            out.append(Output(pieces=tuple(batch)))
        if files:
            out.append(ResultFiles(pieces=tuple(files)))
        self._chunks = []
        self._chunk_bytes = 0
        self._chunks_since = None
        self._drained.set()
        return out


def heartbeat_messages(beat: Heartbeat) -> list[Heartbeat]:
    """``beat`` in messages of at most ``MAX_HEARTBEAT_LEASES`` leases (each lease is
    renewed on its own, so how they are split changes nothing)."""
    refs = beat.leases
    if len(refs) <= MAX_HEARTBEAT_LEASES:
        return [beat]
    step = MAX_HEARTBEAT_LEASES
    return [Heartbeat(leases=refs[i : i + step]) for i in range(0, len(refs), step)]
