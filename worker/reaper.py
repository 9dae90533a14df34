"""The reaper: a helper process that kills a worker's commands when the worker dies.

Commands run in their own sessions, so a worker killed with SIGKILL would leave them
running while the scheduler re-leases their runs elsewhere ("twice at once"). Each
worker starts one reaper (``reaper_client.Reaper``) with a pipe on its stdin and tells
it, one ASCII line each::

    +PGID [KEY]   process group PGID is live, under KEY (default: PGID itself)
    @KEY T        KEY's group must be dead by T (CLOCK_MONOTONIC seconds): its lease
                  deadline, sent at start and again at each renewal (T only grows)
    -KEY          KEY's group has ended (the worker killed it): forget it
    ^N            keys k1 .. k(N-1) were all issued before (sent after a restart)
    .             a clean close follows: the worker's runs have ended

A group whose deadline passes is SIGKILLed at once and forgotten, on the reaper's
own clock: a worker that is frozen (SIGSTOP, a stalled machine) cannot renew the
lease, and the scheduler will run the job again elsewhere, so the command must not
outlive its lease ("never twice at once"). CLOCK_MONOTONIC is one clock for every
process of a machine, so the worker and the reaper read the same time.

When stdin reaches EOF - the worker closed the pipe, or died and the kernel closed it
- the reaper SIGKILLs every group still registered and exits: 0 if there was nothing
to kill, 3 if there was. It ignores SIGINT, SIGTERM and SIGHUP: only EOF ends it, so
a Ctrl-C does not take it down before the worker has cleaned up.

The worker registers a group right after spawning it, a few milliseconds after the
command started. To cover that window without a ``preexec_fn`` (which would make the
worker fork() instead of vfork(), slow, and crash-prone under gRPC's fork handlers),
each command gets ``SHARDCRON_REAPER=MARKER:kN`` in its environment, MARKER being
given on our command line. Unless the close was clean (``.``) the reaper also scans
/proc for processes carrying the marker with a key that is registered or was never
seen (spawned, not yet registered) and kills those too (and the groups they lead);
the processes of runs that ended (key released) are left alone.

Belt and braces on Linux: PR_SET_PDEATHSIG delivers SIGUSR1 when the worker dies; if
it is really gone (our parent changed) the reaper drains what is buffered and ends as
on EOF, even if something else (a forked, never exec'ed child) still holds the pipe.

Standard library only, so the worker can start it light: ``python -I -S reaper.py
WORKER_PID [MARKER]`` (``-S`` skips site-packages, where this package may live, so it
runs by path). ``python -m shardcron.worker.reaper`` works too, with a heavier start.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time

ENV_NAME = "SHARDCRON_REAPER"
EXIT_NOTHING_LEFT = 0
EXIT_KILLED = 3
SCAN_ROUNDS = 5


class State:
    """Registered groups, and which ``kN`` keys were seen (registered or released)."""

    def __init__(self) -> None:
        self.groups: dict[bytes, int] = {}  # key -> pgid
        self.deadlines: dict[bytes, float] = {}  # key -> CLOCK_MONOTONIC kill time
        self.low = 1  # every key below was seen
        self.seen_above: set[int] = set()
        self.clean = False  # "." arrived
        self.buf = b""

    def seen(self, n: int) -> bool:
        return n < self.low or n in self.seen_above

    def _mark(self, key: bytes) -> None:
        if key[:1] == b"k" and key[1:].isdigit():
            n = int(key[1:])
            if n >= self.low:
                self.seen_above.add(n)
                while self.low in self.seen_above:
                    self.seen_above.remove(self.low)
                    self.low += 1

    def line(self, line: bytes) -> None:
        line = line.strip()
        op, rest = line[:1], line[1:]
        if op == b"+":
            fields = rest.split()
            if not fields or len(fields) > 2 or not fields[0].isdigit():
                return
            pgid = int(fields[0])
            if pgid > 1 and pgid != os.getpgrp():  # never init, "all" or our own group
                self.groups[fields[-1]] = pgid
                self._mark(fields[-1])
        elif op == b"@":
            fields = rest.split()
            if len(fields) == 2:
                try:
                    at = float(fields[1])
                except ValueError:
                    return
                key = fields[0]
                self.deadlines[key] = max(at, self.deadlines.get(key, at))
        elif op == b"-" and rest:
            self.groups.pop(rest, None)
            self.deadlines.pop(rest, None)
            self._mark(rest)
        elif op == b"^" and rest.isdigit():
            self.low = max(self.low, int(rest))
            self.seen_above = {n for n in self.seen_above if n >= self.low}
        elif op == b"." and not rest:
            self.clean = True

    def feed(self, data: bytes) -> None:
        """Apply the complete lines; keep an incomplete last one for later."""
        *lines, self.buf = (self.buf + data).split(b"\n")
        for line in lines:
            self.line(line)

    def next_deadline(self) -> float | None:
        """The earliest deadline of a registered group, or None."""
        return min((at for key, at in self.deadlines.items() if key in self.groups), default=None)

    def due(self, now: float) -> list[tuple[bytes, int]]:
        """(key, pgid) of the registered groups whose deadline is at or before ``now``,
        forgotten: the caller kills them."""
        out = [
            (key, self.groups.pop(key))
            for key, at in list(self.deadlines.items())
            if at <= now and key in self.groups
        ]
        for key, _ in out:
            del self.deadlines[key]
        return out

    def drain(self, fd: int) -> None:
        """Apply whatever is already buffered in the pipe, without waiting for more."""
        os.set_blocking(fd, False)
        while True:
            try:
                data = os.read(fd, 65536)
            except (BlockingIOError, InterruptedError):
                return
            if not data:
                return
            self.feed(data)


def marked(marker: bytes, state: State) -> list[int]:
    """Pids whose environment has ``SHARDCRON_REAPER=MARKER:kN`` with key kN live
    (registered) or never seen (spawned, not yet registered)."""
    needle = b"\0" + ENV_NAME.encode() + b"=" + marker + b":k"
    me, uid = os.getpid(), os.getuid()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in (1, me):
            continue
        try:
            if uid != 0 and os.stat(f"/proc/{name}").st_uid != uid:
                continue
            with open(f"/proc/{name}/environ", "rb") as f:
                env = b"\0" + f.read()
        except OSError:
            continue  # gone, or not ours to read
        at = env.find(needle)
        if at < 0:
            continue
        value = env[at + len(needle) :].split(b"\0", 1)[0]
        if value.isdigit() and (b"k" + value in state.groups or not state.seen(int(value))):
            found.append(int(name))
    return found


def kill_marked(marker: bytes, state: State, killed_groups: set[int]) -> list[int]:
    """Kill the marked processes of live or never-registered keys (and groups they
    lead), but for those in a group already killed; scan again, as they may have
    forked meanwhile, until none are left."""
    killed: list[int] = []
    for _ in range(SCAN_ROUNDS):
        found = False
        for pid in marked(marker, state):
            try:
                pgid = os.getpgid(pid)
                if pgid in killed_groups:
                    continue  # SIGKILLed with its group, not dead yet
                found = True
                if pgid == pid:
                    os.killpg(pgid, signal.SIGKILL)
                    killed_groups.add(pgid)
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                continue
            if pid not in killed:
                killed.append(pid)
        if not found:
            break
    return killed


def kill_expired(state: State) -> None:
    """SIGKILL the groups whose lease deadline passed; say so on stderr."""
    now = time.monotonic()
    for key, pgid in state.due(now):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue  # ended already
        print(
            f"shardcron reaper: lease deadline of {key.decode(errors='replace')} passed "
            f"without renewal; SIGKILLed process group {pgid}",
            file=sys.stderr,
            flush=True,
        )


def _set_pdeathsig(sig: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(1, int(sig), 0, 0, 0) == 0  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return False


def serve(worker_pid: int, marker: bytes = b"", fd: int = 0) -> int:
    """Track groups from ``fd`` until EOF (or the worker's death), then kill them."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGUSR1, lambda signum, frame: None)  # wakes select() below
    _set_pdeathsig(signal.SIGUSR1)
    state = State()
    worker_gone = os.getppid() != worker_pid  # it died before the prctl above
    while not worker_gone:
        kill_expired(state)
        deadline = state.next_deadline()
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready, _, _ = select.select([fd, wake_r], [], [], wait)
        if wake_r in ready:
            os.read(wake_r, 256)
            # SIGUSR1 also comes when just the worker's thread that started us ended.
            worker_gone = os.getppid() != worker_pid
        elif fd in ready:
            data = os.read(fd, 65536)
            if not data:
                break  # EOF: a trailing line without "\n" is ignored (torn write)
            state.feed(data)
    if worker_gone:  # but something still holds the pipe: take what is in it
        state.drain(fd)
    pgids = sorted(set(state.groups.values()))
    for pgid in pgids:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    scanned: list[int] = []
    if marker and (pgids or not state.clean) and os.path.isdir("/proc/self"):
        scanned = kill_marked(marker, state, set(pgids))
    if not pgids and not scanned:
        return EXIT_NOTHING_LEFT
    how = "closed the pipe" if state.clean else "died"
    print(
        f"shardcron reaper: worker {worker_pid} {how} with runs going; SIGKILLed process "
        f"groups {pgids or '[]'} and marked processes {scanned or '[]'}",
        file=sys.stderr,
        flush=True,
    )
    return EXIT_KILLED


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    worker_pid = int(argv[0]) if argv else os.getppid()
    marker = argv[1].encode() if len(argv) > 1 else b""
    return serve(worker_pid, marker)


if __name__ == "__main__":
    sys.exit(main())
