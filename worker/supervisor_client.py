"""The worker's side of its runs' supervisors (``containment.supervisor``): the fork
server that forks them and the supervisors it forked (``Supervisors``), each one's
socket (``_Link``), and each run as the worker sees it (``Supervised``).

``Supervisors`` starts the fork server when the first command is about to run, in the
worker's process group, and starts it again when it is needed next if it went away.
A supervisor runs one run at a time; once it says a run is cleaned up, it waits for
the next. For each run, ``launch`` makes the command's output pipes and gives them,
and the run's configuration, to a waiting supervisor, or to a new one the fork server
forks (handed the supervisor's end of a new socket): as many supervisors as runs at
once, and a run costs no process but its command's. One with no run for
``IDLE_TIMEOUT`` is told to exit. The worker keeps the read ends of the pipes: the
``Supervised`` run reads the supervisor's reports (started, could not start, ended,
cleaned up), and two stream readers the command's output. Renewals, stops and kills
go back over the same socket. Nothing of a run passes through the fork server: no
argv of any process carries a run's secrets.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

CHUNK_SIZE = 64 * 1024  # of a command's output, per read
CLOSE_TIMEOUT = 5.0
# seconds a run waits for a supervisor cleaning up the run before to take it, rather
# than a new one
CLEANUP_WAIT = 0.05
IDLE_TIMEOUT = 60.0  # seconds a supervisor with no run waits for one before it exits
MAX_IDLE = 1024  # supervisors kept waiting at most
# The fork server, by the folder that holds the containment package: standard library
# only, no site packages, nothing of the worker's environment.
SERVER_CODE = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from containment.forkserver import main; sys.exit(main())"
)


def server_argv() -> list[str]:
    return [sys.executable, "-I", "-S", "-c", SERVER_CODE, str(Path(__file__).parent)]


class SpawnFailed(Exception):
    """The run's command did not start; ``stage`` says where it failed (contain, user,
    dir, cwd, exec), ``errno`` why."""

    def __init__(self, stage: str, errno: int, error: str) -> None:
        super().__init__(f"{stage}: {error}")
        self.stage = stage
        self.errno = errno
        self.error = error


class Supervised:
    """One run, as the worker sees it through its supervisor's socket.

    ``started`` gives the command's pid, or raises ``SpawnFailed``; ``ended`` gives the
    supervisor's report of the run's end (a dict: ``containment.supervisor``'s ``R``),
    or None when the supervisor went away without one; ``gone`` is done once nothing
    of the run is left (its cage and directory removed, or its supervisor exited)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, link: _Link) -> None:
        self.started: asyncio.Future[int] = loop.create_future()
        self.ended: asyncio.Future[dict[str, Any] | None] = loop.create_future()
        self.gone: asyncio.Future[None] = loop.create_future()
        self.stdout = asyncio.StreamReader(limit=CHUNK_SIZE, loop=loop)
        self.stderr = asyncio.StreamReader(limit=CHUNK_SIZE, loop=loop)
        self._link = link
        self._over = False  # its supervisor said the command ended, or never started

    @property
    def cage(self) -> str:
        """The name of the cage the run is in."""
        return self._link.cage

    def _report(self, kind: bytes, fields: dict[str, Any]) -> None:
        if kind == b"S" and not self.started.done():
            self.started.set_result(int(fields["pid"]))
        elif kind == b"E" and not self.started.done():
            self._over = True
            self.started.set_exception(
                SpawnFailed(fields["stage"], int(fields["errno"]), fields["error"])
            )
        elif kind == b"R" and not self.ended.done():
            self._over = True
            self.ended.set_result(fields)

    def _end(self, why: str) -> None:
        """Nothing of the run is left (``why``: how the worker knows)."""
        self._over = True
        if not self.started.done():
            self.started.set_exception(SpawnFailed("supervise", 0, why))
        if not self.ended.done():
            self.ended.set_result(None)
        if not self.gone.done():
            self.gone.set_result(None)

    def _send(self, line: bytes) -> None:
        if not self._over:  # nothing goes to a supervisor that may have the next run
            self._link.write(line)

    def extend(self, deadline: float) -> None:
        """The lease now ends at ``deadline`` (``time.monotonic()``)."""
        self._send(b"@%.6f\n" % deadline)

    def stop(self) -> None:
        """SIGTERM every process of the command."""
        self._send(b"T\n")

    def kill(self) -> None:
        """SIGKILL every process of the command."""
        self._send(b"K\n")

    def close(self) -> None:
        """The worker is done with the run: if it still runs, its supervisor kills it
        (its socket is closed) and exits."""
        if not self._over:
            self._link.close()


class _Link(asyncio.Protocol):
    """One supervisor process, from the worker's end of its socket: it gives the
    supervisor runs, one at a time, and the supervisor's reports to the run it has."""

    def __init__(self, owner: Supervisors, sock: socket.socket, cage: str) -> None:
        self.owner = owner
        self.sock = sock
        self.cage = cage  # the name of its runs' cage (a plain name: no JSON escapes)
        self.run: Supervised | None = None
        self.gone: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.idle_timer: asyncio.TimerHandle | None = None
        self._transport: asyncio.Transport | None = None
        self._buf = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    @property
    def cleaning(self) -> bool:
        """Its run ended; it is removing the run's cage and directory."""
        return self.run is not None and self.run._over

    def give(self, run: Supervised, config: bytes, out_w: int, err_w: int) -> bool:
        """Starts ``run`` on this supervisor: its output pipes, then its configuration
        (``config``: a JSON object, given this supervisor's ``cage``); False when the
        supervisor cannot take it (gone, or still behind)."""
        transport = self._transport
        if transport is None or transport.is_closing() or transport.get_write_buffer_size():
            return False
        try:
            socket.send_fds(self.sock, [b"F"], [out_w, err_w])
        except OSError:
            self.close()
            return False
        self.run = run
        transport.write(b'C {"cage":"%s",%s\n' % (self.cage.encode(), config[1:]))
        return True

    def data_received(self, data: bytes) -> None:
        *lines, self._buf = (self._buf + data).split(b"\n")
        for line in lines:
            kind, _, body = line.partition(b" ")
            try:
                fields = json.loads(body)
            except ValueError:
                log.error("a run's supervisor said %r", line[:200])
                continue
            run = self.run
            if run is None:
                log.error("a supervisor with no run said %r", line[:200])
            elif kind == b"D":
                self.run = None
                run._end("its supervisor ended it")
                self.owner._rest(self)
            else:
                run._report(kind, fields)

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        run, self.run = self.run, None
        if run is not None:
            run._end("its supervisor ended")
        self.owner._lost(self)
        if not self.gone.done():
            self.gone.set_result(None)

    def write(self, line: bytes) -> None:
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.write(line)

    def retire(self) -> None:
        """EOF to the supervisor: it exits once its run, if any, is cleaned up."""
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.write_eof()

    def close(self) -> None:
        """Closes the socket: the supervisor kills its run, if any, and exits."""
        if self._transport is not None:
            self._transport.close()


class _ServerProtocol(asyncio.SubprocessProtocol):
    def __init__(self, owner: Supervisors) -> None:
        self.owner = owner
        self.exited = asyncio.get_running_loop().create_future()

    def process_exited(self) -> None:
        self.owner._server_gone(self)
        if not self.exited.done():
            self.exited.set_result(None)


class Supervisors:
    """One worker's fork server, and the supervisors it forked (module docstring)."""

    def __init__(
        self,
        *,
        argv: list[str] | None = None,
        abandon: Callable[[str], None] | None = None,
    ) -> None:
        self._argv = argv  # None: server_argv(); tests point it elsewhere
        self._abandon = abandon  # kills and removes a cage by its name
        self._sock: socket.socket | None = None  # our end of the server's socket
        self._proc: _ServerProtocol | None = None
        self._transport: asyncio.SubprocessTransport | None = None
        self._lock: asyncio.Lock | None = None
        self._links: set[_Link] = set()  # every supervisor not known to have exited
        self._idle: list[_Link] = []  # those with no run, the last to end a run last
        self._live: set[Supervised] = set()  # runs not yet cleaned up
        self._closing = False
        self._rested: asyncio.Future[None] | None = None  # done when one is idle again
        self._waiting = 0  # runs waiting for a supervisor to be idle again
        self.starts = 0  # of the fork server
        self.forks = 0  # supervisors forked

    @property
    def server_pid(self) -> int | None:
        return None if self._transport is None else self._transport.get_pid()

    @property
    def idle(self) -> int:
        """Supervisors waiting for a run."""
        return len(self._idle)

    async def launch(self, config: dict[str, Any]) -> Supervised:
        """Gives one run, with ``config``, to an idle supervisor or a new one; raises
        OSError when there is none (no fork server)."""
        loop = asyncio.get_running_loop()
        line = json.dumps(config, separators=(",", ":")).encode()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            supervised = await self._give(line, out_w, err_w)
        except BaseException:
            os.close(out_r)
            os.close(err_r)
            raise
        finally:
            os.close(out_w)  # the supervisor has its own copies now
            os.close(err_w)
        self._live.add(supervised)
        supervised.gone.add_done_callback(lambda _: self._live.discard(supervised))
        for fd, reader in ((out_r, supervised.stdout), (err_r, supervised.stderr)):
            pipe = os.fdopen(fd, "rb", buffering=0)
            await loop.connect_read_pipe(
                lambda r=reader: asyncio.StreamReaderProtocol(r, loop=loop), pipe
            )
        return supervised

    async def _give(self, line: bytes, out_w: int, err_w: int) -> Supervised:
        """The run, given to a waiting supervisor; to one about to wait, if one is cleaning
        up a run that ended and no other run waits for it (for ``CLEANUP_WAIT`` at
        most); else to a new one."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CLEANUP_WAIT
        while True:
            while self._idle:
                link = self._idle.pop()
                if link.idle_timer is not None:
                    link.idle_timer.cancel()
                supervised = Supervised(loop, link)
                if link.give(supervised, line, out_w, err_w):
                    return supervised
                link.close()
            left = deadline - loop.time()
            cleaning = sum(1 for link in self._links if link.cleaning)
            if left <= 0 or cleaning <= self._waiting:
                break
            if self._rested is None or self._rested.done():
                self._rested = loop.create_future()
            self._waiting += 1
            try:
                await asyncio.wait_for(asyncio.shield(self._rested), left)
            except TimeoutError:
                break
            finally:
                self._waiting -= 1
        link = await self._fork()
        supervised = Supervised(loop, link)
        if not link.give(supervised, line, out_w, err_w):
            raise OSError("a new supervisor refused its first run")
        return supervised

    async def _fork(self) -> _Link:
        """A new supervisor, forked by the fork server."""
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        ours.setblocking(False)
        try:
            await self._hand_over(theirs.fileno())
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.forks += 1
        link = _Link(self, ours, f"supervisor-{self.forks}")
        self._links.add(link)
        await loop.create_unix_connection(lambda: link, sock=ours)
        return link

    def _rest(self, link: _Link) -> None:
        """``link``'s supervisor cleaned up its run: it waits for the next, for a while."""
        if self._closing or len(self._idle) >= MAX_IDLE:
            link.retire()
            return
        self._idle.append(link)
        if self._rested is not None and not self._rested.done():
            self._rested.set_result(None)
        link.idle_timer = asyncio.get_running_loop().call_later(IDLE_TIMEOUT, self._expire, link)

    def _expire(self, link: _Link) -> None:
        if link in self._idle:
            self._idle.remove(link)
            link.retire()

    def _lost(self, link: _Link) -> None:
        if self._abandon is not None:  # its cage, if it went away leaving it
            self._abandon(link.cage)
        self._links.discard(link)
        if link in self._idle:
            self._idle.remove(link)
        if link.idle_timer is not None:
            link.idle_timer.cancel()

    async def _hand_over(self, fd: int) -> None:
        """Sends a new supervisor's socket to the fork server, starting it if needed, and
        once again if it went away."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            for attempt in (1, 2):
                sock = await self._server()
                try:
                    await _send_fd(sock, fd)
                    return
                except (BrokenPipeError, ConnectionResetError):
                    self._close_socket()
                    if attempt == 2:
                        raise

    async def _server(self) -> socket.socket:
        if self._sock is not None:
            return self._sock
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._transport, self._proc = await loop.subprocess_exec(
                lambda: _ServerProtocol(self),
                *(self._argv or server_argv()),
                stdin=theirs.fileno(),
                stdout=asyncio.subprocess.DEVNULL,
                stderr=None,  # the worker's: what a supervisor says goes to its log
                env={},
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.setblocking(False)
        self._sock = ours
        self.starts += 1
        log.debug("fork server %d started", self._transport.get_pid())
        return ours

    def _server_gone(self, proto: _ServerProtocol) -> None:
        if proto is self._proc:
            if self._transport is not None:
                log.warning(
                    "the fork server (pid %s) exited with %s; a new one starts with the next run",
                    self._transport.get_pid(),
                    self._transport.get_returncode(),
                )
            self._close_socket()

    def _close_socket(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._proc = None
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    async def close(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Waits (up to ``timeout``) for the runs still being cleaned up, ends every
        supervisor (each exits at the EOF of its socket, and is waited for: an idle one
        is in the worker's cgroups), then the fork server."""
        self._closing = True
        if self._live:
            await asyncio.wait([s.gone for s in self._live], timeout=timeout)
        links = list(self._links)
        for link in links:
            link.retire()
        if links:
            await asyncio.wait([link.gone for link in links], timeout=timeout)
        for link in links:
            link.close()
        proc, transport = self._proc, self._transport
        self._proc = None  # its exit, now, is no news
        if self._sock is not None:
            self._sock.close()  # EOF: the server exits
            self._sock = None
        if proc is None or transport is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(proc.exited), timeout)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                transport.kill()
            await proc.exited
        transport.close()
        self._proc = self._transport = None


async def _send_fd(sock: socket.socket, fd: int) -> None:
    """One message carrying ``fd``, waiting while the server's socket is full."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            socket.send_fds(sock, [b"run"], [fd])
            return
        except BlockingIOError:
            writable: asyncio.Future[None] = loop.create_future()
            loop.add_writer(sock, _resolve, writable)
            try:
                await writable
            finally:
                loop.remove_writer(sock)


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
