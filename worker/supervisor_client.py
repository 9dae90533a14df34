"""The worker's side of its runs' supervisors (``containment.supervisor``): the fork
server that forks them (``Supervisors``), and each run's supervisor as the worker sees
it (``Supervised``).

``Supervisors`` starts the fork server when the first command is about to run, in the
worker's process group, and starts it again at the next run if it went away. For each
run, ``launch`` makes the run's control socket and output pipes, hands the fork server
the supervisor's ends of them, and sends the run's configuration over the control
socket. The worker keeps the other ends: the ``Supervised`` protocol reads the
supervisor's reports (started, could not start, ended), and two stream readers the
command's output. Renewals, stops and kills go back over the same socket. Nothing of
a run passes through the fork server but three descriptors: no argv of any process
carries a run's secrets.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import sys
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

CHUNK_SIZE = 64 * 1024  # of a command's output, per read
CLOSE_TIMEOUT = 5.0
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


class Supervised(asyncio.Protocol):
    """One run's supervisor, from the worker's end of its control socket.

    ``started`` gives the command's pid, or raises ``SpawnFailed``; ``ended`` gives the
    supervisor's report of the run's end (a dict: ``containment.supervisor``'s ``R``),
    or None when the supervisor went away without one."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.started: asyncio.Future[int] = loop.create_future()
        self.ended: asyncio.Future[dict[str, Any] | None] = loop.create_future()
        # done once the supervisor exited (its run's cage and directory removed)
        self.gone: asyncio.Future[None] = loop.create_future()
        self.stdout = asyncio.StreamReader(limit=CHUNK_SIZE, loop=loop)
        self.stderr = asyncio.StreamReader(limit=CHUNK_SIZE, loop=loop)
        self._transport: asyncio.Transport | None = None
        self._buf = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        *lines, self._buf = (self._buf + data).split(b"\n")
        for line in lines:
            kind, _, body = line.partition(b" ")
            try:
                fields = json.loads(body)
            except ValueError:
                log.error("a run's supervisor said %r", line[:200])
                continue
            if kind == b"S" and not self.started.done():
                self.started.set_result(int(fields["pid"]))
            elif kind == b"E" and not self.started.done():
                self.started.set_exception(
                    SpawnFailed(fields["stage"], int(fields["errno"]), fields["error"])
                )
            elif kind == b"R" and not self.ended.done():
                self.ended.set_result(fields)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.started.done():
            self.started.set_exception(SpawnFailed("supervise", 0, "its supervisor ended"))
        if not self.ended.done():
            self.ended.set_result(None)
        if not self.gone.done():
            self.gone.set_result(None)
        self._transport = None

    def _send(self, line: bytes) -> None:
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.write(line)

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
        """The worker is done with the run: its supervisor, if still there, kills it."""
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
    """One worker's fork server, and the supervisors it forks (module docstring)."""

    def __init__(self, *, argv: list[str] | None = None) -> None:
        self._argv = argv  # None: server_argv(); tests point it elsewhere
        self._sock: socket.socket | None = None  # our end of the server's socket
        self._proc: _ServerProtocol | None = None
        self._transport: asyncio.SubprocessTransport | None = None
        self._lock: asyncio.Lock | None = None
        self._live: set[Supervised] = set()  # whose supervisor has not exited yet
        self.starts = 0

    @property
    def server_pid(self) -> int | None:
        return None if self._transport is None else self._transport.get_pid()

    async def launch(self, config: dict[str, Any]) -> Supervised:
        """Starts the supervisor of one run, sent ``config``; raises OSError when it
        cannot (no fork server)."""
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        ours.setblocking(False)
        # Written before the hand-over: the supervisor finds it waiting as it starts
        # (what the socket's buffer does not take goes once the transport is made).
        line = json.dumps(config, separators=(",", ":")).encode() + b"\n"
        sent = ours.send(line)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            await self._hand_over((theirs.fileno(), out_w, err_w))
        except BaseException:
            ours.close()
            os.close(out_r)
            os.close(err_r)
            raise
        finally:
            theirs.close()
            os.close(out_w)
            os.close(err_w)
        supervised = Supervised(loop)
        self._live.add(supervised)
        supervised.gone.add_done_callback(lambda _: self._live.discard(supervised))
        await loop.create_unix_connection(lambda: supervised, sock=ours)
        if sent < len(line):
            supervised._send(line[sent:])
        for fd, reader in ((out_r, supervised.stdout), (err_r, supervised.stderr)):
            pipe = os.fdopen(fd, "rb", buffering=0)
            await loop.connect_read_pipe(
                lambda r=reader: asyncio.StreamReaderProtocol(r, loop=loop), pipe
            )
        return supervised

    async def _hand_over(self, fds: tuple[int, int, int]) -> None:
        """Sends one run's descriptors to the fork server, starting it if needed, and
        once again if it went away."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            for attempt in (1, 2):
                sock = await self._server()
                try:
                    await _send_fds(sock, fds)
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
        """Waits (up to ``timeout``) for the supervisors still finishing (their runs are
        over: they remove their cages), then ends the fork server."""
        if self._live:
            await asyncio.wait([s.gone for s in self._live], timeout=timeout)
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


async def _send_fds(sock: socket.socket, fds: tuple[int, int, int]) -> None:
    """One message carrying ``fds``, waiting while the server's socket is full."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            socket.send_fds(sock, [b"run"], list(fds))
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
