"""A run's output kept on the worker's disk while its node cannot take it.

A node that cannot write a run's output to its blob store pauses that run's output
(an ``OutputRoom`` on the lease stream; the worker said ``Hello.output_spool``). From
then on the run's output goes to a spool file of its own under the worker's spool
directory instead of the stream, so the command's pipe is never held up and the
stream's other traffic (heartbeats, results, other runs' output) goes on. When the
node resumes it, the spool is sent in order, at the pace the stream takes it
(``Outbox.output_room``), and once it is empty the run's output goes to the stream
again. A run's output is never sent out of order: while its spool holds bytes, new
output joins the spool.

Bounds: the spool files of one worker hold at most ``limit_bytes`` together; output
past that is dropped from there on (the run's output is cut, never holed), and the
run's result says so: "blob store unavailable for N s", N the time its output was
paused. At the run's end its result waits until its spool has drained, at most
``drain_wait``; past it the rest is dropped and said the same way. A run's slot stays
taken and its lease renewed while it waits.

A new stream to the run's poller (a reconnect, the node restarted) resumes every run
of that stream: the node that answers pauses again those it cannot take.

Where: a folder of this process's own (``<pid>-<random>``) in the spool directory
(``--output-spool-dir``, by default ``shardcron-spool-<uid>`` in the temporary
directory), beside a lock file (``<folder>.lock``) it holds with ``flock`` for as long
as it lives. At its start a worker removes every folder whose lock no process holds:
those of a worker that was killed (SIGKILL, a crash) or that stopped without removing
them, never one of a worker still running in the same directory. Both are made and
swept under a lock of the directory (``.sweep``), so a sweep never takes a folder
being made.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import shutil
import stat
import struct
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Protocol

log = logging.getLogger("shardcron.worker.spool")

DEFAULT_LIMIT_BYTES = 1 << 30
DEFAULT_DRAIN_WAIT = 120.0
READ_BYTES = 256 << 10  # spooled output sent per step of a drain, at most about
_HEADER = struct.Struct("<BI")  # a record: its stream (0 stdout, 1 stderr), its length
_STREAMS = ("stdout", "stderr")


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputSpoolConfig:
    """Where and how much output a worker keeps while its node cannot take it."""

    directory: Path | None = None  # None: shardcron-spool-<uid> in the temporary one
    limit_bytes: int = DEFAULT_LIMIT_BYTES  # every run's spool together; 0: no spool
    drain_wait: float = DEFAULT_DRAIN_WAIT  # seconds a result waits for its spool

    def __post_init__(self) -> None:
        if self.limit_bytes < 0:
            raise ValueError("output spool bytes: must be >= 0")
        if self.drain_wait < 0:
            raise ValueError("output drain wait: must be >= 0 seconds")


class OutputSink(Protocol):
    """Where a run's output goes on its stream (the ``Outbox`` of its poller's link)."""

    def output(self, run_id: str, token: int, stream: str, data: bytes) -> None: ...

    async def output_room(self) -> None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class SpoolEnd:
    """What became of a run's paused output at its end: why some was dropped ("" when
    none was), and how many bytes."""

    truncated: str = ""
    dropped_bytes: int = 0


@dataclass(slots=True, kw_only=True)
class _RunSpool:
    run_id: str
    token: int
    path: Path
    paused_since: float | None = None  # monotonic: paused now, since then
    unavailable: float = 0.0  # seconds paused before, in all
    file: BinaryIO | None = None
    write_at: int = 0
    read_at: int = 0
    held: int = 0  # bytes of output in the file not sent yet (its records' headers aside)
    dropped: int = 0  # bytes dropped: the spool was full, or did not drain in time
    drain: asyncio.Task[None] | None = None
    drained: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def pending(self) -> int:
        return self.write_at - self.read_at

    @property
    def paused(self) -> bool:
        return self.paused_since is not None

    def paused_for(self, now: float) -> float:
        return self.unavailable + (now - self.paused_since if self.paused_since else 0.0)


class OutputSpools:
    """The spools of one worker's runs (module docstring). ``sink_of`` gives the stream a
    run's output goes to now (None: the run is not held any more)."""

    def __init__(
        self, config: OutputSpoolConfig, sink_of: Callable[[str, int], OutputSink | None]
    ) -> None:
        self.config = config
        self._sink_of = sink_of
        self._spools: dict[tuple[str, int], _RunSpool] = {}
        self._bytes = 0  # in every spool file, together
        self._dir: Path | None = None
        self._lock: int | None = None  # the fd of this process's folder's lock, held
        self.spooled_bytes = 0  # ever written to a spool (a counter)
        self.dropped_bytes = 0  # ever dropped: a spool full, or not drained in time
        if self.enabled:  # at the start: what a killed worker left is removed now
            try:
                self.directory()
            except OSError as e:  # said again, and raised, when a run first spools
                log.warning("output spool directory: %s", e)

    @property
    def enabled(self) -> bool:
        return self.config.limit_bytes > 0

    @property
    def bytes(self) -> int:
        return self._bytes

    def directory(self) -> Path:
        """This process's folder (made, and the folders of dead processes swept, at
        the first call)."""
        if self._dir is None:
            base = self.config.directory or _default_base()
            base.mkdir(parents=True, exist_ok=True, mode=0o700)
            with _locked(base / ".sweep"):
                fd, lock = tempfile.mkstemp(prefix=f"{os.getpid()}-", suffix=".lock", dir=base)
                fcntl.flock(fd, fcntl.LOCK_EX)  # held while this process lives
                own = Path(lock[: -len(".lock")])
                own.mkdir(mode=0o700)
                _sweep(base, keep=own)
            self._lock, self._dir = fd, own
        return self._dir

    def close(self) -> None:
        """Drops every spool (the worker stops), and its folder."""
        for spool in list(self._spools.values()):
            self._forget(spool)
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            Path(f"{self._dir}.lock").unlink(missing_ok=True)
            self._dir = None
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    # -- the node's word -------------------------------------------------------------------
    def pause(self, run_id: str, token: int) -> None:
        if not self.enabled:
            return
        spool = self._spool(run_id, token)
        if spool.paused_since is None:
            log.info("output of run %s paused by its node: kept on disk", run_id)
            spool.paused_since = time.monotonic()
            spool.drained.clear()

    def resume(self, run_id: str, token: int) -> None:
        spool = self._spools.get((run_id, token))
        if spool is None or spool.paused_since is None:
            return
        log.info("output of run %s resumed by its node (%d bytes kept)", run_id, spool.held)
        spool.unavailable += time.monotonic() - spool.paused_since
        spool.paused_since = None
        if spool.drain is None or spool.drain.done():
            spool.drain = asyncio.get_running_loop().create_task(self._drain(spool))

    # -- the run's output ------------------------------------------------------------------
    def takes(self, run_id: str, token: int, stream: str, data: bytes) -> bool:
        """Keeps ``data`` when the run's output is paused or its spool not drained yet
        (or drops it, past the bound); False: it goes to the stream as ever."""
        spool = self._spools.get((run_id, token))
        if spool is None or (not spool.paused and spool.pending == 0 and not spool.dropped):
            return False
        if spool.dropped or self._bytes + _HEADER.size + len(data) > self.config.limit_bytes:
            if not spool.dropped:
                log.warning(
                    "output of run %s cut: the worker's output spool holds %d bytes",
                    run_id,
                    self._bytes,
                )
            spool.dropped += len(data)
            return True
        self._append(spool, stream, data)
        return True

    async def settle(self, run_id: str, token: int, gone: Callable[[], bool]) -> SpoolEnd:
        """The run ended: waits until its spool has drained (at most ``drain_wait``, or
        until ``gone`` says the run will not be reported), then drops it."""
        spool = self._spools.get((run_id, token))
        if spool is None:
            return SpoolEnd()
        deadline = time.monotonic() + self.config.drain_wait
        while (spool.paused or spool.pending) and not gone():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                await asyncio.wait_for(spool.drained.wait(), min(left, 1.0))
            except TimeoutError:
                pass
        return self.end(run_id, token)

    def end(self, run_id: str, token: int) -> SpoolEnd:
        """Drops the run's spool at once: what it still holds is dropped and said."""
        spool = self._spools.get((run_id, token))
        if spool is None:
            return SpoolEnd()
        dropped = spool.dropped + spool.held
        seconds = spool.paused_for(time.monotonic())
        self._forget(spool)
        if not dropped:
            return SpoolEnd()
        log.warning("output of run %s cut: %d bytes its node could not take", run_id, dropped)
        self.dropped_bytes += dropped
        return SpoolEnd(
            truncated=f"blob store unavailable for {max(1, round(seconds))} s",
            dropped_bytes=dropped,
        )

    # -- within ------------------------------------------------------------------------------
    def _spool(self, run_id: str, token: int) -> _RunSpool:
        key = (run_id, token)
        spool = self._spools.get(key)
        if spool is None:
            path = self.directory() / f"{len(self._spools)}-{os.getpid()}-{time.monotonic_ns()}"
            spool = self._spools[key] = _RunSpool(run_id=run_id, token=token, path=path)
            spool.drained.set()
        return spool

    def _append(self, spool: _RunSpool, stream: str, data: bytes) -> None:
        if spool.file is None:
            fd = os.open(spool.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            spool.file = os.fdopen(fd, "r+b", buffering=0)
        spool.drained.clear()
        header = _HEADER.pack(_STREAMS.index(stream) if stream in _STREAMS else 0, len(data))
        os.pwrite(spool.file.fileno(), header + data, spool.write_at)
        size = _HEADER.size + len(data)
        spool.write_at += size
        spool.held += len(data)
        self._bytes += size
        self.spooled_bytes += len(data)

    def _read(self, spool: _RunSpool) -> list[tuple[str, bytes]]:
        """Records from the spool's read point, about ``READ_BYTES`` of them."""
        out: list[tuple[str, bytes]] = []
        taken = 0
        assert spool.file is not None
        fd = spool.file.fileno()
        while spool.pending and taken < READ_BYTES:
            stream, size = _HEADER.unpack(os.pread(fd, _HEADER.size, spool.read_at))
            data = os.pread(fd, size, spool.read_at + _HEADER.size)
            spool.read_at += _HEADER.size + size
            spool.held -= size
            out.append((_STREAMS[stream], data))
            taken += size
        if not spool.pending:  # caught up: the file starts again, its bytes freed
            self._bytes -= spool.write_at
            spool.read_at = spool.write_at = 0
            spool.file.truncate(0)
        return out

    async def _drain(self, spool: _RunSpool) -> None:
        """Sends the spool in order while the run is not paused; at its end, the run's
        output goes to the stream again."""
        try:
            while spool.pending and not spool.paused:
                sink = self._sink_of(spool.run_id, spool.token)
                if sink is None:
                    return
                for stream, data in self._read(spool):
                    sink.output(spool.run_id, spool.token, stream, data)
                await sink.output_room()
        except Exception:  # a fault of this run's spool: its output is cut, others go on
            log.exception("output spool of run %s failed", spool.run_id)
            spool.dropped += spool.held
            self._bytes -= spool.write_at
            spool.read_at = spool.write_at = spool.held = 0
        finally:
            if not spool.paused and not spool.pending:
                spool.drained.set()

    def _forget(self, spool: _RunSpool) -> None:
        self._spools.pop((spool.run_id, spool.token), None)
        if spool.drain is not None and not spool.drain.done():
            spool.drain.cancel()
        self._bytes -= spool.write_at
        spool.read_at = spool.write_at = spool.held = 0
        spool.drained.set()
        if spool.file is not None:
            spool.file.close()
            spool.file = None
            spool.path.unlink(missing_ok=True)


def _default_base() -> Path:
    """``shardcron-spool-<uid>`` in the temporary directory: refused unless a directory
    of this user that no one else may write (another user could have made it first)."""
    base = Path(tempfile.gettempdir()) / f"shardcron-spool-{os.getuid()}"
    base.mkdir(exist_ok=True, mode=0o700)
    st = os.lstat(base)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise OSError(f"{base}: not a directory of this user only: give --output-spool-dir")
    return base


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _sweep(base: Path, keep: Path) -> None:
    """Removes the folders in ``base`` whose lock no process holds (their worker is
    gone), and the spool files of an earlier version, kept at its top level."""
    for entry in base.iterdir():
        name = entry.name
        if name.startswith(".") or entry == keep or entry.is_symlink():
            continue
        try:
            if name.endswith(".lock"):
                if _unheld(entry):
                    shutil.rmtree(base / name[: -len(".lock")], ignore_errors=True)
                    entry.unlink(missing_ok=True)
            elif entry.is_dir():
                if not Path(f"{entry}.lock").exists():  # its lock was removed, it was not
                    shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
        except OSError as e:  # one left behind does not stop the others' sweep
            log.warning("output spool: could not remove %s: %s", entry, e)


def _unheld(lock: Path) -> bool:
    fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True
