"""A run's result files in the blob store: written by the node holding its lease.

**Writing.** A command leaves files in ``$SHARDCRON_RESULT_DIR``; its worker sends their
bytes as ``ResultFilePiece``s before the run's result, over the lease stream. The
stream's edge (``worker_stream.LeaseStream``) hands ``take`` each piece of a lease its
stream holds (``Poller.output_owner``, the poller's own check), so a worker writes only
the result files of runs it holds the lease of, and holds no blob credentials. Each
file streams into ``results/<owner>/<run>/<name>`` (``blobs.layout``) through the
store's ``put_stream``, with the digest the worker announced: bytes that do not match
it, a piece out of order, or a file that ends short store nothing. A file's pieces
wait for the store (``write_timeout`` each), so a slow store holds the worker's stream
back, never the node's memory: a few pieces per file are buffered at most.

**The run's record.** When the run's result arrives, ``finish`` ends its files (one not
finished is dropped) and returns those stored (name, size, sha256) and a note of what
was not kept, which the edge puts on the result: the poller records both on the run.
The node keeps at most ``MAX_RESULT_FILES`` files of ``MAX_RESULT_FILE_BYTES`` each and
``MAX_RESULT_BYTES`` in all per run, whatever the worker sends; what passes them is
said in the note. A node without a blob store keeps none, and says so.

**Reading** (``read_result``): a file the run lists, by byte range, from the blob store.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from shardcron.blobs.errors import BlobNotFound, BlobStoreUnavailable
from shardcron.blobs.layout import result_key, results_prefix
from shardcron.blobs.store import BlobStore, ByteRange
from shardcron.client.errors import InvalidArgument, NotFound, ShardcronError
from shardcron.client.limits import (
    MAX_RESULT_BYTES,
    MAX_RESULT_FILE_BYTES,
    MAX_RESULT_FILES,
    MAX_RESULTS_NOTE,
    clip,
)
from shardcron.client.stream import ResultFilePiece
from shardcron.client.types import Run, RunResultFile

log = logging.getLogger("shardcron.results")

QUEUED_PIECES = 4  # of one file, waiting for the store
NO_BLOB_STORE = "result files not kept: this node has no blob store"


@dataclass(frozen=True, slots=True, kw_only=True)
class ResultBlobConfig:
    max_files: int = MAX_RESULT_FILES  # per run
    max_file_bytes: int = MAX_RESULT_FILE_BYTES
    max_bytes: int = MAX_RESULT_BYTES  # per run, all files together
    write_timeout: float = 30.0  # seconds one piece may wait for the store
    idle_forget: float = 600.0  # seconds after which a quiet attempt is dropped


class _Abort(Exception):
    """Ends a file's write with nothing stored."""


@dataclass(slots=True, kw_only=True)
class _File:
    name: str
    size: int
    sha256: str
    queue: asyncio.Queue[bytes | None | _Abort]
    task: asyncio.Task[object] | None = None
    next_offset: int = 0


@dataclass(slots=True, kw_only=True)
class _Attempt:
    owner: str
    run_id: str
    writer: tuple[str, str]  # the worker id and instance id of the stream that sent it
    open: dict[str, _File] = field(default_factory=dict)
    kept: list[RunResultFile] = field(default_factory=list)
    refused: set[str] = field(default_factory=set)  # names dropped: their pieces too
    notes: list[str] = field(default_factory=list)
    claimed: int = 0  # bytes of the files kept and open
    seen: float = 0.0


class ResultBlobs:
    """The node's writer of runs' result files (module docstring); ``store`` None: a
    node without a blob store, which keeps none and says so."""

    def __init__(self, store: BlobStore | None, config: ResultBlobConfig | None = None) -> None:
        self.store = store
        self.config = config or ResultBlobConfig()
        self._attempts: dict[tuple[str, int], _Attempt] = {}
        self._swept = 0.0  # monotonic time of the last look for idle attempts

    async def take(self, owner: str, piece: ResultFilePiece, writer: tuple[str, str]) -> None:
        """Adds ``piece`` to its file (the run is ``owner``'s, and the stream that sent it,
        of the worker process ``writer``, holds its lease): a first piece opens the file,
        a last one stores it."""
        now = time.monotonic()
        self._forget_idle(now)
        key = (piece.run_id, piece.fencing_token)
        attempt = self._attempts.get(key)
        if attempt is None:
            attempt = self._attempts[key] = _Attempt(
                owner=owner, run_id=piece.run_id, writer=writer
            )
        attempt.seen = now
        name = piece.name
        if name in attempt.refused or any(f.name == name for f in attempt.kept):
            return
        file = attempt.open.get(name)
        if file is None:
            file = self._open(attempt, piece)
            if file is None:
                return
        if piece.offset != file.next_offset or (piece.size, piece.sha256) != (
            file.size,
            file.sha256,
        ):
            await self._drop(attempt, file, "its pieces came out of order")
            return
        if piece.data and not await self._feed(attempt, file, piece.data):
            return
        file.next_offset += len(piece.data)
        if piece.last:
            await self._close(attempt, file)

    def _open(self, attempt: _Attempt, piece: ResultFilePiece) -> _File | None:
        """The file ``piece`` begins, its write started; None (and a note) when it is
        not kept."""
        config, name = self.config, piece.name
        why = ""
        if self.store is None:
            why = "no blob store"
        elif piece.offset != 0:
            why = "its first pieces did not come to this node"
        elif len(attempt.kept) + len(attempt.open) >= config.max_files:
            why = f"past the {config.max_files} files a run keeps"
        elif piece.size > config.max_file_bytes:
            why = f"{piece.size} bytes, past the {config.max_file_bytes} a file may hold"
        elif attempt.claimed + piece.size > config.max_bytes:
            why = f"past the {config.max_bytes} bytes a run's files may hold together"
        if why:
            attempt.refused.add(name)
            if self.store is not None:
                attempt.notes.append(f"{name}: not kept: {why}")
            return None
        file = _File(
            name=name,
            size=piece.size,
            sha256=piece.sha256,
            queue=asyncio.Queue(QUEUED_PIECES),
        )
        assert self.store is not None
        key = result_key(attempt.owner, attempt.run_id, name)
        file.task = asyncio.create_task(
            self.store.put_stream(key, _chunks(file.queue), sha256=piece.sha256)
        )
        attempt.open[name] = file
        attempt.claimed += piece.size
        return file

    async def _feed(self, attempt: _Attempt, file: _File, item: bytes | None | _Abort) -> bool:
        """Queues ``item`` for the file's write; False (the file dropped, with a note)
        when the write ended first or the store did not take it in time."""
        assert file.task is not None
        put = asyncio.ensure_future(file.queue.put(item))
        done, _ = await asyncio.wait(
            {put, file.task}, timeout=self.config.write_timeout, return_when="FIRST_COMPLETED"
        )
        if put in done:
            return True
        put.cancel()
        failed = file.task.done() and not file.task.cancelled() and file.task.exception()
        why = _why(failed) if failed else "the blob store did not take it in time"
        await self._drop(attempt, file, why)
        return False

    async def _close(self, attempt: _Attempt, file: _File) -> None:
        """The file's last piece came: its write ends, and it is kept if stored whole."""
        if file.next_offset != file.size:
            await self._drop(attempt, file, "it ended short of its size")
            return
        if not await self._feed(attempt, file, None):
            return
        assert file.task is not None
        attempt.open.pop(file.name, None)
        try:
            async with asyncio.timeout(self.config.write_timeout):
                await file.task
        except Exception as e:  # a fault of this file: the others, and the stream, go on
            attempt.claimed -= file.size
            attempt.refused.add(file.name)
            attempt.notes.append(f"{file.name}: not kept: {_why(e)}")
            if not isinstance(e, ShardcronError) or isinstance(e, BlobStoreUnavailable):
                log.warning("result %s of run %s not stored: %r", file.name, attempt.run_id, e)
            return
        attempt.kept.append(RunResultFile(name=file.name, size=file.size, sha256=file.sha256))

    async def _drop(self, attempt: _Attempt, file: _File, why: str) -> None:
        """Ends the file's write with nothing stored; says why in the run's note."""
        attempt.open.pop(file.name, None)
        attempt.claimed -= file.size
        attempt.refused.add(file.name)
        attempt.notes.append(f"{file.name}: not kept: {why}")
        await _cancel(file)

    @property
    def receiving(self) -> bool:
        """Whether any attempt's files have begun to arrive (else ``finish`` changes no
        result: the lease stream's edge passes results on untouched)."""
        return bool(self._attempts)

    async def finish(
        self, run_id: str, token: int, worker_note: str, writer: tuple[str, str] | None = None
    ) -> tuple[tuple[RunResultFile, ...], str]:
        """The attempt's result arrived: its files kept (by name), and the note of what
        was not, ``worker_note`` (what the worker left out) first. ``writer``: the
        worker process the result came from, when no stream's lease vouches for it (a
        result re-sent in a Hello): only the process that sent the files ends them."""
        notes = [worker_note] if worker_note else []
        attempt = self._attempts.get((run_id, token))
        if attempt is None or (writer is not None and writer != attempt.writer):
            return (), _note(notes)
        del self._attempts[(run_id, token)]
        for file in list(attempt.open.values()):
            await self._drop(attempt, file, "its last piece did not come")
        if self.store is None and attempt.refused:
            notes.append(NO_BLOB_STORE)
        kept = tuple(sorted(attempt.kept, key=lambda f: f.name))
        return kept, _note(notes + attempt.notes)

    async def stop(self) -> None:
        """Ends every write still open, storing nothing of them."""
        for attempt in self._attempts.values():
            for file in attempt.open.values():
                await _cancel(file)
        self._attempts.clear()

    def _forget_idle(self, now: float) -> None:
        """Drops attempts long quiet (a result that never came, a stream that moved);
        looks once a second at most."""
        if now - self._swept < 1.0:
            return
        self._swept = now
        for key, attempt in list(self._attempts.items()):
            if now - attempt.seen >= self.config.idle_forget:
                del self._attempts[key]
                for file in attempt.open.values():
                    if file.task is not None:
                        file.task.cancel()


async def _chunks(queue: asyncio.Queue[bytes | None | _Abort]) -> AsyncIterator[bytes]:
    while (item := await queue.get()) is not None:
        if isinstance(item, _Abort):
            raise item
        yield item


async def _cancel(file: _File) -> None:
    """Ends the file's write with nothing stored: its chunks raise, else (its queue
    full: the store is stuck) its task is cancelled."""
    task = file.task
    if task is None or task.done():
        return
    try:
        file.queue.put_nowait(_Abort())
    except asyncio.QueueFull:
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        async with asyncio.timeout(5.0):
            await task


def _why(e: BaseException) -> str:
    if isinstance(e, TimeoutError):
        return "the blob store did not take it in time"
    if isinstance(e, BlobStoreUnavailable):
        return "blob store unavailable"
    if isinstance(e, ShardcronError):
        return str(e)  # a digest that does not match, say
    return f"{type(e).__name__}"


def _note(notes: list[str]) -> str:
    text = "; ".join(notes)
    return text if len(text) <= MAX_RESULTS_NOTE else text[: MAX_RESULTS_NOTE - 3] + "..."


async def read_result(
    store: BlobStore, run: Run, name: str, offset: int, limit: int | None
) -> AsyncIterator[tuple[int, bytes]]:
    """The bytes of the run's result file ``name`` from ``offset``, at most ``limit``
    (None: to its end), as (offset, data) pieces of at most 1 MiB; ``NotFound`` when the
    run does not list it. The run is the caller's: its owner names the key."""
    listed = next((f for f in run.results if f.name == name), None)
    if listed is None:
        raise NotFound(f"run {run.id} has no result file {clip(name)!r}")
    if not 0 <= offset <= listed.size:
        raise InvalidArgument("offset", f"must be in [0, {listed.size}], the file's size")
    end = listed.size if limit is None else min(listed.size, offset + limit)
    if end <= offset:
        return
    try:
        reader = await store.get_stream(result_key(run.owner, run.id, name), ByteRange(offset, end))
    except BlobNotFound:
        raise NotFound(f"result file {name!r} of run {run.id} is no longer kept") from None
    async with reader:
        at = reader.start
        async for data in reader:
            yield at, data
            at += len(data)


async def delete_results(store: BlobStore, owner: str, run_id: str) -> int:
    """Deletes every result file of the run; how many there were."""
    return await store.delete_prefix(results_prefix(owner, run_id))
