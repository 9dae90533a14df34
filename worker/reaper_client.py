"""The worker's side of the reaper (see ``reaper``): one helper process per worker.

``Reaper`` starts the helper lazily, when the first command is about to run, and
keeps it told which process groups are live:

* ``prepare()`` before a spawn: starts the helper if needed and issues a key; the
  command gets ``SHARDCRON_REAPER=MARKER:KEY`` in its environment (``env_entry``), so
  that until its registration reaches the helper the helper can still find it;
* ``register(key, pgid, deadline)`` right after the spawn: "+PGID KEY" through a
  non-blocking pipe transport (never blocks the event loop), and "@KEY DEADLINE",
  the run's lease deadline (``time.monotonic()`` seconds);
* ``extend(key, deadline)`` when a renewal moves the lease deadline: "@KEY DEADLINE".
  The helper kills the group when its deadline passes, whatever this process does;
* ``release(key)`` once the group was SIGKILLed (or the spawn failed): "-KEY".

No ``preexec_fn``: it would make every spawn fork() the worker instead of vfork()
(several ms each), and gRPC's fork handlers make such children crash (SIGSEGV) when
the worker's channels are busy.

If the helper cannot be started the worker logs an error and runs commands without
it; it retries after ``retry_after``. If the helper dies, a new one is started and
told about every live group.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import sys
import time
from pathlib import Path

log = logging.getLogger(__name__)

# Not imported from there: ``python -m shardcron.worker.reaper`` would then warn that
# the package import had already loaded it.
ENV_NAME = "SHARDCRON_REAPER"  # == reaper.ENV_NAME
HELPER_PATH = Path(__file__).with_name("reaper.py")
CLOSE_TIMEOUT = 5.0
RESTART_DELAY = 0.1  # after a helper that had run a while went away
MIN_HEALTHY_LIFE = 10.0


def helper_argv(worker_pid: int, marker: str = "") -> list[str]:
    """How to start the helper: by path, isolated and without site (stdlib only)."""
    args = [str(worker_pid)] + ([marker] if marker else [])
    if HELPER_PATH.is_file():
        return [sys.executable, "-I", "-S", str(HELPER_PATH), *args]
    return [sys.executable, "-m", "shardcron.worker.reaper", *args]


class _HelperProtocol(asyncio.SubprocessProtocol):
    def __init__(self, reaper: Reaper, loop: asyncio.AbstractEventLoop) -> None:
        self.reaper = reaper
        self.exited: asyncio.Future[None] = loop.create_future()
        self.transport: asyncio.SubprocessTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 0:
            self.reaper._helper_lost(self)

    def process_exited(self) -> None:
        self.reaper._helper_lost(self)
        if not self.exited.done():
            self.exited.set_result(None)


class Reaper:
    """One reaper helper process for one worker; see the module docstring."""

    def __init__(self, *, argv: list[str] | None = None, retry_after: float = 30.0) -> None:
        self._argv = argv  # None: helper_argv(); tests point it elsewhere
        self.retry_after = retry_after
        self.marker = secrets.token_hex(8)  # tells our commands from other workers'
        self._proto: _HelperProtocol | None = None  # the running helper
        self._stdin: asyncio.WriteTransport | None = None
        self._starting: asyncio.Future[None] | None = None
        self._restart: asyncio.Task[None] | None = None
        self._retry_at = 0.0
        self._started_at = 0.0
        self._seq = 0
        self._pending: set[int] = set()  # keys issued, not yet registered or released
        self._live: dict[bytes, int] = {}  # key -> pgid, registered and not released
        self._deadlines: dict[bytes, float] = {}  # key -> monotonic lease deadline, if any
        self._closed = False
        self.starts = 0
        self.returncode: int | None = None  # of the last helper that exited

    @property
    def pid(self) -> int | None:
        """The running helper's pid, or None."""
        proto = self._proto
        return None if proto is None or proto.transport is None else proto.transport.get_pid()

    @property
    def running(self) -> bool:
        return self._stdin is not None

    @property
    def live(self) -> dict[bytes, int]:
        """Registered groups not yet released, by key (a copy)."""
        return dict(self._live)

    @property
    def deadlines(self) -> dict[bytes, float]:
        """The lease deadline given for each registered group, by key (a copy)."""
        return dict(self._deadlines)

    # -- per command -------------------------------------------------------------------
    async def prepare(self) -> bytes:
        """Start the helper if needed (no wait once it runs); a new key for a spawn."""
        if self._stdin is None and not self._closed:
            await self._ensure_started()
        self._seq += 1
        self._pending.add(self._seq)
        return b"k%d" % self._seq

    def env_entry(self, key: bytes) -> tuple[str, str]:
        """The environment variable that marks the command spawned under ``key``."""
        return ENV_NAME, f"{self.marker}:{key.decode()}"

    def register(self, key: bytes, pgid: int, deadline: float | None = None) -> None:
        """The group spawned under ``key`` is live; the helper kills it at ``deadline``
        (``time.monotonic()`` seconds) unless ``extend`` moves it (None: never)."""
        self._pending.discard(int(key[1:]))
        self._live[key] = pgid
        self._send(b"+%d %s\n" % (pgid, key))
        if deadline is not None:
            self.extend(key, deadline)

    def extend(self, key: bytes, deadline: float) -> None:
        """The group under ``key`` may live until ``deadline`` (a renewal); never earlier
        than a deadline given before."""
        if key not in self._live:
            return
        deadline = max(deadline, self._deadlines.get(key, deadline))
        self._deadlines[key] = deadline
        self._send(b"@%s %.6f\n" % (key, deadline))

    def release(self, key: bytes) -> None:
        """The group is over (killed), or the spawn failed: forget the key."""
        self._pending.discard(int(key[1:]))
        self._live.pop(key, None)
        self._deadlines.pop(key, None)
        self._send(b"-%s\n" % key)

    def _send(self, line: bytes) -> None:
        if self._stdin is not None and not self._stdin.is_closing():
            self._stdin.write(line)

    # -- the helper ----------------------------------------------------------------------
    async def _ensure_started(self) -> None:
        if self._starting is None:
            if time.monotonic() < self._retry_at:
                return  # degraded until the retry time
            self._starting = asyncio.ensure_future(self._start())
        starting = self._starting
        try:
            await asyncio.shield(starting)
        finally:
            if starting.done() and self._starting is starting:
                self._starting = None

    async def _start(self) -> None:
        loop = asyncio.get_running_loop()
        argv = self._argv or helper_argv(os.getpid(), self.marker)
        proto = _HelperProtocol(self, loop)
        try:
            transport, _ = await loop.subprocess_exec(
                lambda: proto,
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=None,
                start_new_session=True,  # a signal to the worker's group spares it
            )
        except Exception as e:
            self._retry_at = time.monotonic() + self.retry_after
            log.error(
                "cannot start the reaper helper (%s: %s): commands will not be killed if "
                "this worker dies; retrying in %gs",
                type(e).__name__,
                e,
                self.retry_after,
            )
            return
        stdin = transport.get_pipe_transport(0)
        if proto.exited.done() or stdin is None or stdin.is_closing():
            self._retry_at = time.monotonic() + self.retry_after
            log.error("the reaper helper exited at once; retrying in %gs", self.retry_after)
            transport.close()
            return
        self._proto, self._stdin = proto, stdin  # type: ignore[assignment]
        self._started_at = time.monotonic()
        self.starts += 1
        # Keys below the oldest pending spawn are settled: a (re)started helper must not
        # take the processes of runs that ended for unregistered ones.
        base = min(self._pending, default=self._seq + 1)
        self._send(b"^%d\n" % base)
        for key, pgid in self._live.items():  # after a restart: the new one knows nothing
            self._send(b"+%d %s\n" % (pgid, key))
        for key, deadline in self._deadlines.items():
            self._send(b"@%s %.6f\n" % (key, deadline))
        log.debug("reaper helper %d started", transport.get_pid())

    def _shut_pipe(self, clean: bool = False) -> None:
        """Close the helper's stdin (buffered lines first): it then sees EOF."""
        if self._stdin is not None:
            stdin, self._stdin = self._stdin, None
            if clean and not stdin.is_closing():
                stdin.write(b".\n")
            stdin.close()

    def _helper_lost(self, proto: _HelperProtocol) -> None:
        """The helper exited (or its pipe broke): stop using it; restart it if needed."""
        if proto.transport is not None and proto.transport.get_returncode() is not None:
            self.returncode = proto.transport.get_returncode()
        if proto is not self._proto:
            return
        self._shut_pipe()
        if self._closed:
            return  # close() waits for it
        self._proto = None
        if proto.transport is not None:
            proto.transport.close()
        # Restart soon, unless it died young (then as after a failed start).
        lived = time.monotonic() - self._started_at
        delay = RESTART_DELAY if lived >= MIN_HEALTHY_LIFE else self.retry_after
        self._retry_at = time.monotonic() + delay
        log.error(
            "the reaper helper (pid %s) went away unexpectedly; a new one in %gs",
            proto.transport.get_pid() if proto.transport is not None else "?",
            delay,
        )
        if self._restart is None:
            self._restart = asyncio.ensure_future(self._restart_helper(delay))

    async def _restart_helper(self, delay: float) -> None:
        try:
            await asyncio.sleep(delay)
            if self._live and not self._closed and self._stdin is None:
                await self._ensure_started()  # else: lazily, at the next command
        finally:
            self._restart = None

    async def close(self, timeout: float = CLOSE_TIMEOUT) -> int | None:
        """Close the pipe and wait for the helper to exit; its returncode, or None if
        none ran. Call it once the runs ended: whatever is still registered is killed
        by the helper (which then exits with 3)."""
        self._closed = True
        if self._restart is not None:
            self._restart.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._restart
        if self._starting is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._starting)
        proto = self._proto
        self._shut_pipe(clean=True)
        if proto is None or proto.transport is None:
            return self.returncode
        try:
            await asyncio.wait_for(asyncio.shield(proto.exited), timeout)
        except TimeoutError:
            log.error("the reaper helper did not exit %gs after its pipe closed: killed", timeout)
            with contextlib.suppress(ProcessLookupError):
                proto.transport.kill()
            await proto.exited
        self.returncode = proto.transport.get_returncode()
        proto.transport.close()
        self._proto = None
        if self.returncode == 3:
            log.warning("runs were still going at stop: the reaper helper killed them")
        elif self.returncode not in (0, None):
            log.warning("the reaper helper exited with %s", self.returncode)
        return self.returncode
