"""The writer of an SQLite file in a process of its own, so that the group commits
(binding rows, SQLite's own work) run beside the node's event loop rather than take
turns with it for one interpreter lock.

The node side (``WriterProcess``) starts ``python -m
shardcron.coordinator.sqlite.writer_process`` with two pipes. Each message is its
length (8 bytes, big-endian), then a byte saying how the rest is encoded: ``marshal``
where the message holds plain values only (rows: strings, numbers, bytes, None, in
tuples and lists), cheaper than a pickle on the node's side for the rows of a
commit, else ``pickle``. A write that is a ``writes`` function given positional
arguments goes as its function's name, its arguments and its row count
(``_plain_ops``): marshalled when those are plain values.

- node → writer: first ``(path, prepare)``; then lists of ``(op id, fn, rows)``, each
  ``fn`` a picklable function of the connection (``writes``: module-level functions
  of plain rows); an empty message asks the writer to finish what it has and exit.
- writer → node: ``(READY, None)`` or ``(READY, error)`` once ``prepare`` ran; then
  one ``(DONE, transactions, [(op id, ok, value), ...])`` per group commit, sent once
  it is durable.

A sender thread and a receiver thread on the node side keep the event loop off the
pipes. The writer ignores SIGINT and SIGTERM (the node decides when it stops) and
exits when its input ends, so a node killed outright takes its writer with it; a
group commit that was under way finishes first, and no caller was told of it. If the
writer dies, every write waiting on it fails ``Unavailable`` (committed or not, as
when a node dies mid-call: the SDK repeats only creates with idempotency keys) and
the next write starts a new writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import marshal
import os
import pickle
import queue
import signal
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import IO, Any, NamedTuple

from shardcron.client.errors import Unavailable
from shardcron.coordinator.sqlite import writes
from shardcron.coordinator.sqlite.committer import Committer, Conn, take_batch
from shardcron.coordinator.store_rules import resolve_future

log = logging.getLogger(__name__)

_HEADER = struct.Struct(">Q")
_MARSHAL, _PICKLE = b"m", b"p"
# the writes that may be sent by name (``_plain_ops``)
_BY_NAME: dict[str, Callable[..., Any]] = {
    f.__name__: f
    for f in (writes.create_jobs, writes.update_job, writes.commit, writes.save_cursors)
}
_BY_FUNCTION = {f: name for name, f in _BY_NAME.items()}
READY, DONE = "ready", "done"
_START_TIMEOUT_S = 60.0  # a writer that has not opened the file by then is given up on


def send(out: IO[bytes], message: Any) -> None:
    send_bytes(out, encode(message))


def encode(message: Any) -> bytes:
    """``message`` marshalled if it is plain values only, else pickled (raises what
    ``pickle.dumps`` raises)."""
    try:
        return _MARSHAL + marshal.dumps(message)
    except ValueError:  # something marshal does not carry: an object, an exception
        return _PICKLE + pickle.dumps(message, pickle.HIGHEST_PROTOCOL)


def send_bytes(out: IO[bytes], data: bytes) -> None:
    out.write(_HEADER.pack(len(data)) + data)
    out.flush()


def receive(inp: IO[bytes]) -> Any:
    """The next message; raises EOFError when the pipe ended."""
    header = inp.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise EOFError
    size = _HEADER.unpack(header)[0]
    data = inp.read(size)
    if len(data) < size:
        raise EOFError
    return decode(data)


def decode(data: bytes) -> Any:
    kind, body = data[:1], memoryview(data)[1:]
    if kind == _MARSHAL:
        return marshal.loads(body)
    if kind == _PICKLE:
        return pickle.loads(body)
    raise ValueError(f"a message of unknown kind {kind!r}")


def _plain_ops(ops: list[tuple[int, Any, int]]) -> list[tuple[int, Any, Any, int]] | None:
    """``ops`` as ``(op id, name in writes, arguments, rows)`` if each is a partial of a
    ``writes`` function by keyword-free arguments (which may still not marshal), else
    None."""
    plain = []
    for op_id, fn, rows in ops:
        if type(fn) is not functools.partial or fn.keywords or fn.func not in _BY_FUNCTION:
            return None
        plain.append((op_id, _BY_FUNCTION[fn.func], fn.args, rows))
    return plain


def _op_of(op: tuple[Any, ...]) -> tuple[int, Any, int]:
    """A write as the writer runs it, from a pickled op or a plain one (``_plain_ops``)."""
    if len(op) == 3:
        return op  # type: ignore[return-value]
    op_id, name, args, rows = op
    return op_id, functools.partial(_BY_NAME[name], *args), rows


# --- the node's side ----------------------------------------------------------


class _Waiting(NamedTuple):
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop


class _Child:
    """One writer process and the writes sent to it that wait for their commit."""

    def __init__(self, proc: subprocess.Popen[bytes], base: int) -> None:
        self.proc = proc
        self.base = base  # group commits of the writers before this one
        self.transactions = base
        self.outbox: queue.SimpleQueue[tuple[int, Any, int] | None] = queue.SimpleQueue()
        self.waiting: dict[int, _Waiting] = {}
        self.ended = False  # its reply pipe ended: nothing more will commit
        self.closing = False
        self._ids = itertools.count()
        assert proc.stdin is not None
        threading.Thread(target=self._send_loop, args=(proc.stdin,), daemon=True).start()
        self.receiver = threading.Thread(target=self._receive_loop, daemon=True)
        self.receiver.start()

    def submit(self, fn: Callable[[Conn], Any], rows: int) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        op_id = next(self._ids)
        self.waiting[op_id] = _Waiting(future, loop)
        self.outbox.put((op_id, fn, rows))
        if self.ended:  # ended before it could be sent: the receiver may not have seen it
            self._resolve([(op_id, False, self._gone())])
        return future

    def close(self) -> None:
        self.closing = True
        self.outbox.put(None)  # behind every write already queued: those commit first

    def _gone(self) -> Unavailable:
        return Unavailable(
            f"the store's writer process ended (exit code {self.proc.poll()}) before it"
            " confirmed this write: it may or may not have been committed"
        )

    def _send_loop(self, out: IO[bytes]) -> None:
        """Sends everything queued as one message; the end marker closes the pipe."""
        try:
            with out:
                while True:
                    batch = [self.outbox.get()]
                    while not self.outbox.empty():
                        batch.append(self.outbox.get())
                    ops = [op for op in batch if op is not None]
                    if ops:
                        self._send_ops(out, ops)
                    if len(ops) < len(batch):
                        return
        except OSError:  # the writer is gone: the receiver fails what waits
            pass
        except Exception:  # nothing sent is known to be whole: start again
            log.exception("sending to the store's writer process failed; stopping it")
            self.proc.kill()

    def _send_ops(self, out: IO[bytes], ops: list[tuple[int, Any, int]]) -> None:
        plain = _plain_ops(ops)
        try:
            data = encode(ops if plain is None else plain)
        except Exception:
            sendable = []
            for op in ops:  # find the writes that cannot be sent and fail them alone
                try:
                    pickle.dumps(op, pickle.HIGHEST_PROTOCOL)
                except Exception as e:
                    self._resolve([(op[0], False, e)])
                else:
                    sendable.append(op)
            if not sendable:
                return
            data = encode(sendable)
        send_bytes(out, data)

    def _receive_loop(self) -> None:
        inp = self.proc.stdout
        assert inp is not None
        error: Exception | None = None
        try:
            while True:
                kind, transactions, results = receive(inp)
                if kind == DONE:
                    self.transactions = self.base + transactions
                    self._resolve(results)
        except EOFError:
            pass
        except Exception as e:  # a reply that cannot be read: which write it ends is lost
            error = e
            self.proc.kill()
        self.ended = True
        code = self.proc.wait()
        if error is not None or not (self.closing and code == 0):
            log.error("the store's writer process ended (exit code %s): %r", code, error)
        self._resolve([(op_id, False, self._gone()) for op_id in list(self.waiting)])

    def _resolve(self, results: list[tuple[int, bool, Any]]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], bool, Any]]]
        by_loop = {}
        for op_id, ok, value in results:
            waiting = self.waiting.pop(op_id, None)
            if waiting is not None:
                by_loop.setdefault(waiting.loop, []).append((waiting.future, ok, value))
        for loop, resolved in by_loop.items():
            with contextlib.suppress(RuntimeError):  # the caller's loop is closed
                loop.call_soon_threadsafe(_resolve_all, resolved)


class WriterProcess:
    """The node's handle on its writer process (module docstring)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._prepare: Callable[[Conn], None] | None = None
        self._child: _Child | None = None
        self._transactions = 0
        self._starting: asyncio.Lock | None = None
        self._closed = False
        self.count_restarts: Callable[[], object] = lambda: None

    @property
    def transactions(self) -> int:
        """Group commits by every writer process so far."""
        return self._transactions if self._child is None else self._child.transactions

    async def open(self, prepare: Callable[[Conn], None]) -> None:
        self._prepare = prepare
        self._starting = asyncio.Lock()
        self._closed = False
        self._child = await self._start()

    async def _start(self) -> _Child:
        proc = subprocess.Popen(
            [sys.executable, "-m", "shardcron.coordinator.sqlite.writer_process"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert proc.stdin is not None and proc.stdout is not None
        try:
            send(proc.stdin, (self.path, self._prepare))
            reply = asyncio.to_thread(receive, proc.stdout)
            kind, error = await asyncio.wait_for(reply, _START_TIMEOUT_S)
        except (OSError, EOFError, TimeoutError) as e:
            proc.kill()
            await asyncio.to_thread(proc.wait)
            raise Unavailable(f"the store's writer process did not start: {e!r}") from e
        if error is not None:
            proc.stdin.close()
            await asyncio.to_thread(proc.wait)
            raise error
        return _Child(proc, self.transactions)

    async def write(self, fn: Callable[[Conn], Any], rows: int) -> Any:
        child = self._child
        if child is None or child.ended:
            child = await self._restart()
        return await child.submit(fn, rows)

    async def _restart(self) -> _Child:
        assert self._starting is not None
        async with self._starting:
            if self._closed:
                raise RuntimeError("SqliteStore is not open")
            child = self._child
            if child is not None and not child.ended:
                return child  # another write started it
            if child is not None:
                self._transactions = child.transactions
            log.warning("starting a new writer process for %s", self.path)
            self._child = await self._start()
            self.count_restarts()
            return self._child

    async def close(self) -> None:
        self._closed = True
        child, self._child = self._child, None
        if child is not None:
            self._transactions = child.transactions
            child.close()
            await asyncio.to_thread(child.receiver.join)  # every reply read, the writer gone
            self._transactions = child.transactions


def _resolve_all(resolved: list[tuple[asyncio.Future[Any], bool, Any]]) -> None:
    for future, ok, value in resolved:
        resolve_future(future, ok, value)


# --- the writer's side ----------------------------------------------------------


class _ChildOp(NamedTuple):
    op_id: int
    fn: Callable[[Conn], Any]
    rows: int


def _read_ops(inp: IO[bytes], inbox: queue.SimpleQueue[_ChildOp | None]) -> None:
    try:
        while True:
            ops = receive(inp)
            if not ops:
                break
            for op in ops:
                inbox.put(_ChildOp(*_op_of(op)))
    except EOFError:
        pass
    finally:
        inbox.put(None)


def _reply(out: IO[bytes], batch: list[_ChildOp], results: list[tuple[bool, Any]], n: int) -> None:
    """Sends the outcome of each write of a group commit. An error goes as it is if it
    comes back whole from a pickle (not every exception does), else in words."""
    message = []
    for op, (ok, value) in zip(batch, results, strict=True):
        if not ok and not _round_trips(value):
            value = RuntimeError(f"{type(value).__name__}: {value}")
        message.append((op.op_id, ok, value))
    try:
        data = encode((DONE, n, message))
    except Exception:
        for i, (op_id, _ok, value) in enumerate(message):
            if not _round_trips(value):  # a result that does not pickle: said in words
                message[i] = (op_id, False, RuntimeError(f"the write's result {value!r}"))
        data = encode((DONE, n, message))
    send_bytes(out, data)


def _round_trips(value: Any) -> bool:
    try:
        pickle.loads(pickle.dumps(value, pickle.HIGHEST_PROTOCOL))
    except Exception:
        return False
    return True


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing else may write to the reply pipe
    path, prepare = receive(inp)
    committer = Committer(path)
    try:
        committer.open(prepare)
    except Exception as e:
        send(out, (READY, e))
        return 1
    send(out, (READY, None))
    inbox: queue.SimpleQueue[_ChildOp | None] = queue.SimpleQueue()
    threading.Thread(target=_read_ops, args=(inp, inbox), daemon=True).start()
    while True:
        batch, end = take_batch(inbox.get, inbox.empty)
        if batch:
            results = committer.run_batch(batch)
            _reply(out, batch, results, committer.transactions)
        committer.between_batches()
        if end:
            committer.close()
            return 0


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError, KeyboardInterrupt):
        sys.exit(main())
    os._exit(1)
