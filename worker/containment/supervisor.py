"""A supervisor of runs: for each run it is given, it makes the run's cage and private
directory, starts the command in them as the run's user, enforces the lease deadline,
kills whatever is left of the command when the run ends, reports, and removes the
cage and directory; then it waits for the next run.

The worker's fork server (``forkserver``) forks supervisors as the worker needs them,
each in a session of its own with one descriptor: a stream socket to the worker
(``ctl``). A supervisor runs one run at a time, and the worker gives it another once
it said the last one is cleaned up, so that a run costs no process but its command's.

Over ``ctl`` the worker starts a run with the byte ``F``, sent with two descriptors
(the write ends of the command's stdout and stderr pipes), then one line::

    C {config}    the run's configuration (``Config`` below)

then, while it runs, any of::

    @T    the lease now ends at T (CLOCK_MONOTONIC seconds); only a later T counts
    T     stop: SIGTERM every process of the command
    K     kill: SIGKILL every process of the command

Lines that come when no run is supervised are late words about the last one, and are
dropped. EOF (the worker closed the socket, or died) kills the run being supervised,
and ends the supervisor once it cleaned up. The supervisor answers with lines of a
letter and a JSON object::

    S {"pid": N}                                the command started
    E {"stage": S, "errno": N, "error": TEXT}   it could not start: nothing runs
    R {"status": N, "peak_memory_bytes": N, "cpu_seconds": F, "oom_kills": N,
       "enforced": B, "killed": TEXT, "results": {...}}
                                                the run ended; none of it is left
    D {}                                        its cage and directory are removed

``status`` is ``waitpid``'s status of the command; ``killed`` says why the supervisor
killed the run on its own ("" when it did not); ``results`` the files the command left
in ``home/results``, copied out for the worker (``results.collect``: ``dir``, ``files``,
``notes``), when the config asks for them. After ``D`` the supervisor takes the
next run, unless this one could not be cleaned up wholly (a process that would not
die, a cage it could not remove): then it exits, and the worker's socket reaches EOF.

Why a supervisor in the cage: the lease deadline must hold whatever happens to the
worker. The supervisor kills the whole cage at the deadline unless a renewal moved
it, on its own clock, and at once when the worker's socket ends. While a run lasts it
is in the run's freezer cgroup (v1) or cgroup (v2), so nothing freezes or stops it
apart from its command: whatever stops it stops the command too. It is a child
subreaper, so every orphan of the command becomes its child (reaped here, and found
by the fallback's kill), and, as root, the kernel's OOM killer never picks it
(``oom_score_adj`` -1000 but for the moment it spawns a command, which keeps the
value the worker had). The command is spawned with ``posix_spawn`` (a vfork) where
it runs as the worker's user, else by a fork whose child only becomes the run's user
and execs.

Config (JSON): ``argv``, ``env``, ``cwd`` ("": the run's directory when it has a user
of its own, else the worker's), ``uid`` and ``gid`` (null: the worker's own user),
``home`` (the run's private directory: made 0700 here, or the last run's emptied and
renamed, with ``tmp`` for ``TMPDIR`` and the secret files, given to the run's user,
emptied and kept for the next run, or removed, at the end), ``artifact`` (the path
of an archive to unpack into ``home/work`` before the command, as its user:
``unpack``; null: none), ``secrets``
(files to write, 0400, in ``home/secrets``: name -> text), ``containment``
(``hosts.Containment.describe``), ``name`` (the run's, for its directory and what the
supervisor says), ``cage`` (the name of this supervisor's cage: the same for each of
its runs, made again for each where its kind is not ``reusable``), ``limits``
(``cage.Limits``), ``deadline`` (CLOCK_MONOTONIC seconds, or null), ``results`` (the
bounds of its result files: files, bytes each, bytes in all; absent: none are taken).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import select
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

from .cage import Limits, RunCage, Used, signal_all, write
from .hosts import from_description
from .results import collect
from .run_home import SpareHome, make_home, remove_tree
from .unpack import unpack

PR_SET_CHILD_SUBREAPER = 36
DRAIN_WAIT = 5.0  # seconds the killed processes of a run may take to be gone
OOM_PROTECTED = "-1000"
# set back to their default in the command: an ignored signal stays ignored across exec
# (Python ignores SIGPIPE and SIGXFSZ), and a caught one the spawn must not run
DEFAULT_SIGNALS = (
    signal.SIGPIPE,
    signal.SIGXFSZ,
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGCHLD,
)
LIBC = ctypes.CDLL(None, use_errno=True)  # loaded once, in the fork server


def run(ctl_fd: int) -> int:
    """Supervises the runs the worker gives over ``ctl_fd``, one after another, until
    its socket ends (the module docstring); the exit status."""
    os.setsid()
    ctl = Channel(socket.socket(fileno=ctl_fd))
    wake = _catch_signals()
    _set_subreaper()
    origin = Origin()
    spare = SpareHome()
    cage: RunCage | None = None  # kept from one run to the next, where it may be
    while True:
        given = ctl.next_run()
        if given is None:  # the worker is done, or gone
            break
        config, out_fd, err_fd = given
        if cage is None or not cage.reusable:
            cage = from_description(config["containment"]).cage(
                config["cage"], own_user=config.get("uid") is not None
            )
        clean = Supervisor(ctl, config, cage, spare, out_fd, err_fd, wake, origin).run()
        ctl.send("D")
        if not clean or ctl.eof:
            break
    if cage is not None and cage.reusable:
        _remove_cage(cage, config["cage"])
    spare.remove()
    return 0


def _remove_cage(cage: RunCage, name: str) -> None:
    """Removes a cage this supervisor kept (killing what may be left in it)."""
    try:
        if cage.pids():
            cage.kill()
        cage.remove()
    except OSError as e:
        _say(f"cannot remove cage {name}: {e}")


class Channel:
    """The supervisor's end of its socket to the worker: lines in, with the descriptors
    that come with them, and reports out."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(True)
        self.sock = sock
        self.buf = b""
        self.fds: list[int] = []  # received, not yet given to a run
        self.eof = False

    def fileno(self) -> int:
        return self.sock.fileno()

    def receive(self) -> bool:
        """Reads what came (with any descriptors); False at EOF."""
        if self.eof:
            return False
        try:
            data, fds, _, _ = socket.recv_fds(self.sock, 1 << 16, 8, socket.MSG_CMSG_CLOEXEC)
        except OSError:
            data, fds = b"", []
        self.fds += fds
        if not data:
            self.eof = True
            return False
        self.buf += data
        return True

    def controls(self) -> list[bytes]:
        """The whole control lines received, up to the next run's configuration, if one
        came (left for ``next_run``)."""
        lines = []
        while b"\n" in self.buf and not self.buf.startswith((b"C ", b"FC ")):
            line, _, self.buf = self.buf.partition(b"\n")
            lines.append(line)
        return lines

    def next_run(self) -> tuple[dict[str, Any], int, int] | None:
        """Waits for the next run: its configuration and the command's stdout and stderr;
        None once the worker's socket ended."""
        while True:
            self.controls()  # late words about the last run
            if self.buf.startswith(b"F"):
                self.buf = self.buf[1:]
            if self.buf.startswith(b"C ") and b"\n" in self.buf:
                line, _, self.buf = self.buf.partition(b"\n")
                if len(self.fds) >= 2:
                    out_fd, err_fd = self.fds[:2]
                    del self.fds[:2]
                    return json.loads(line[2:]), out_fd, err_fd
                self.send("E", stage="supervise", errno=0, error="no output pipes came")
                self.send("D")
                continue
            if not self.receive():
                for fd in self.fds:
                    os.close(fd)
                self.fds = []
                return None

    def send(self, kind: str, **fields: Any) -> None:
        with contextlib.suppress(OSError):  # a worker that is gone reads nothing
            self.sock.sendall(f"{kind} {json.dumps(fields)}\n".encode())


class Origin:
    """What a supervisor's runs change of it for a moment, as it was when it started:
    its working directory, and its OOM score (a command inherits both)."""

    def __init__(self) -> None:
        self.cwd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self.protect = os.geteuid() == 0  # root only: an unprivileged one cannot lower it
        self.oom_score = _read_oom_score() if self.protect else ""
        self.protected()

    def unprotected(self) -> None:
        """Before a spawn: the command gets the OOM score the worker had."""
        if self.protect:
            _write_oom_score(self.oom_score)

    def protected(self) -> None:
        """The OOM killer never picks this supervisor."""
        if self.protect:
            _write_oom_score(OOM_PROTECTED)

    def back(self) -> None:
        """After a spawn: back in the supervisor's own directory."""
        os.fchdir(self.cwd)


class Supervisor:
    """The supervision of one run (module docstring)."""

    def __init__(
        self,
        ctl: Channel,
        config: dict[str, Any],
        cage: RunCage,
        spare: SpareHome,
        out_fd: int,
        err_fd: int,
        wake: int,
        origin: Origin,
    ) -> None:
        self.ctl = ctl
        self.config = config
        self.out_fd, self.err_fd = out_fd, err_fd
        self.wake = wake  # readable after a signal (SIGCHLD)
        self.origin = origin
        self.deadline: float | None = config.get("deadline")
        self.uid: int | None = config.get("uid")
        self.home: str = config["home"]
        self.cage = cage
        self.spare = spare
        self.killed = ""  # why this supervisor killed the run, if it did
        self.status: int | None = None  # the command's, once reaped
        # what the processes reaped used (wait4): the fallback's figures
        self.reaped = Used(peak_memory_bytes=0, cpu_seconds=0.0, oom_kills=0)
        self.clean = True  # nothing of the run is left: this supervisor takes another

    def run(self) -> bool:
        """Supervises the run to its end and cleans up; True when nothing of it is left."""
        try:
            self.cage.create(Limits(**self.config["limits"]))
            self.cage.enter_supervisor()
            self._make_home()
        except OSError as e:
            os.close(self.out_fd)
            os.close(self.err_fd)
            self.ctl.send("E", stage="contain", errno=e.errno or 0, error=str(e))
            self._clean_up()
            return False  # it may be in a cage it could not finish making
        if self.config.get("artifact"):
            try:
                unpack(self.config["artifact"], self.home, self.uid, self.config.get("gid"))
            except OSError as e:
                os.close(self.out_fd)
                os.close(self.err_fd)
                self.ctl.send("E", stage="artifact", errno=e.errno or 0, error=e.strerror or str(e))
                self._clean_up()
                return self.clean
        pid, failure = self._spawn(self.config["env"])
        os.close(self.out_fd)  # the command holds them now: EOF comes when it is gone
        os.close(self.err_fd)
        if failure is not None:
            self.ctl.send("E", **failure)
            self._clean_up()
            return self.clean
        self.ctl.send("S", pid=pid)
        status = self._watch(pid)
        if self.cage.pids():  # nothing of the run outlives it
            self._kill("")
        self._drain()
        try:
            used = self.cage.used(self.reaped)
        except OSError as e:
            _say(f"cannot read what run {self.config['name']} used: {e}")
            used = Used(peak_memory_bytes=0, cpu_seconds=0.0, oom_kills=0)
        results = self._results()
        self.ctl.send(
            "R",
            status=status,
            peak_memory_bytes=used.peak_memory_bytes,
            cpu_seconds=used.cpu_seconds,
            oom_kills=used.oom_kills,
            enforced=self.cage.enforced,
            killed=self.killed,
            **results,
        )
        self._clean_up()
        return self.clean

    def _results(self) -> dict[str, Any]:
        """The run's result files, copied out of its directory (nothing of it runs)."""
        bounds = self.config.get("results")
        if bounds is None:
            return {}
        try:
            return {"results": collect(self.home, self.uid, bounds)}
        except OSError as e:  # a fault here fails the files, never the report
            return {"results": {"dir": "", "files": [], "notes": [f"not taken: {e}"]}}

    # -- the run -------------------------------------------------------------------------

    def _watch(self, pid: int) -> int:
        """Until the command exits: renewals, stops and kills from the worker, the lease
        deadline, and the worker's going away. Its wait status."""
        wake = self.wake
        readers: list[Any] = [self.ctl, wake]
        self._control()
        while True:
            status = self._reap(pid)
            if status is not None:
                return status
            timeout = 1.0  # reaps again even if a wake-up were lost
            if self.deadline is not None and not self.killed:
                left = self.deadline - time.monotonic()
                if left <= 0:
                    self._kill("the lease deadline passed without renewal")
                    continue
                timeout = min(timeout, left)
            if self.ctl.eof:
                readers = [wake]
            ready, _, _ = select.select(readers, [], [], timeout)
            if wake in ready:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake, 512)
            if self.ctl in ready:
                if self.ctl.receive():
                    self._control()
                else:
                    self._kill("its worker is gone")

    def _control(self) -> None:
        for line in self.ctl.controls():
            if line.startswith(b"@"):
                with contextlib.suppress(ValueError):
                    at = float(line[1:])
                    self.deadline = at if self.deadline is None else max(self.deadline, at)
            elif line == b"T":
                signal_all(self.cage.pids(), signal.SIGTERM)
            elif line == b"K":
                self._kill("")

    def _kill(self, why: str) -> None:
        if why and not self.killed:
            self.killed = why
            _say(f"run {self.config['name']}: {why}; killing every process of it")
        try:
            self.cage.kill()
        except OSError as e:  # a cage that cannot freeze: its processes one by one
            _say(f"run {self.config['name']}: kill through its cage failed ({e})")
            signal_all(self.cage.pids(), signal.SIGKILL)

    def _reap(self, pid: int) -> int | None:
        """Reaps every child that ended (orphans of the command come here too), adding
        what each used; the command's wait status once it ended."""
        while True:
            try:
                child, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if child == 0:
                break
            reaped = self.reaped
            self.reaped = Used(
                peak_memory_bytes=max(reaped.peak_memory_bytes, usage.ru_maxrss * 1024),
                cpu_seconds=reaped.cpu_seconds + usage.ru_utime + usage.ru_stime,
                oom_kills=0,
            )
            if child == pid:
                self.status = status
        return self.status

    def _drain(self) -> None:
        """Waits until the killed processes are gone (reaping them), for a while; one
        left then makes this supervisor's last run."""
        deadline = time.monotonic() + DRAIN_WAIT
        while self.cage.pids() and time.monotonic() < deadline:
            self._reap(-1)
            time.sleep(0.001)
        self._reap(-1)
        if self.cage.pids():
            _say(f"run {self.config['name']}: processes of it would not die")
            self.clean = False

    # -- starting the command ------------------------------------------------------------

    def _make_home(self) -> None:
        make_home(
            self.home, self.uid, self.config.get("gid"), self.config.get("secrets"), self.spare
        )

    def _spawn(self, env: dict[str, str]) -> tuple[int, dict[str, Any] | None]:
        """Starts the command in the cage, as the run's user: (pid, None), or (0, why it
        did not start). Its own user's command is spawned with ``posix_spawn`` (a vfork:
        nothing of this process is copied); one that switches users, or must set the
        fallback's rlimits, by a fork whose child only does that and execs."""
        config = self.config
        argv = config["argv"]
        cwd = config["cwd"] or (self.home if self.uid is not None else "")
        stage = "cwd"
        try:
            if cwd:
                os.chdir(cwd)  # back to its own once the command is spawned
            stage = "exec"
            program = _which(argv[0], env)
            stage = "contain"
            self.cage.enter_command()
        except OSError as e:
            self._back()
            return 0, {"stage": stage, "errno": e.errno or 0, "error": e.strerror or str(e)}
        preexec = self.cage.preexec()
        self.origin.unprotected()
        try:
            if self.uid is None and preexec is None:
                pid = os.posix_spawn(
                    program,
                    argv,
                    env,
                    file_actions=[
                        (os.POSIX_SPAWN_DUP2, self.out_fd, 1),
                        (os.POSIX_SPAWN_DUP2, self.err_fd, 2),
                    ],
                    setsigdef=DEFAULT_SIGNALS,
                )
            else:
                pid = self._fork_exec(program, argv, env, preexec)
        except _Failed as e:
            return 0, e.failure
        except OSError as e:
            return 0, {"stage": "exec", "errno": e.errno or 0, "error": e.strerror or str(e)}
        finally:
            self.origin.protected()
            self._back()
        return pid, None

    def _back(self) -> None:
        """Out of the command's cgroups and directory, to where ``enter_supervisor`` left
        this supervisor; one that cannot go back supervises no other run."""
        try:
            self.cage.leave_command()
            self.origin.back()
        except OSError as e:
            _say(f"run {self.config['name']}: cannot leave its command's cgroups: {e}")
            self.clean = False

    def _fork_exec(
        self,
        program: str,
        argv: list[str],
        env: dict[str, str],
        preexec: Callable[[], None] | None,
    ) -> int:
        """Forks a child that sets the rlimits, becomes the run's user and execs; its
        pid, or ``_Failed`` saying which step failed."""
        r, w = os.pipe()  # close-on-exec: EOF at the exec, or the report of a failure
        pid = os.fork()
        if pid == 0:
            stage = "start"
            try:
                os.close(r)
                for sig in DEFAULT_SIGNALS:
                    signal.signal(sig, signal.SIG_DFL)
                os.dup2(self.out_fd, 1)
                os.dup2(self.err_fd, 2)
                stage = "contain"
                if preexec is not None:
                    preexec()
                stage = "user"
                if self.uid is not None:
                    os.setgroups([])
                    os.setgid(self.config["gid"])
                    os.setuid(self.uid)
                stage = "exec"
                os.execve(program, argv, env)
            except OSError as e:
                os.write(w, f"{stage}:{e.errno or 0}:{e.strerror or e}".encode())
            finally:
                os._exit(127)
        os.close(w)
        with os.fdopen(r, "rb") as f:
            report = f.read()
        if not report:
            return pid
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        stage, errno, error = report.decode(errors="replace").split(":", 2)
        raise _Failed({"stage": stage, "errno": int(errno), "error": error})

    # -- reports and the end -------------------------------------------------------------

    def _clean_up(self) -> None:
        try:
            if os.path.lexists(self.home) and not (
                self.clean and self.spare.keep(self.home, self.config["cage"])
            ):
                remove_tree(self.home)
        except OSError as e:
            _say(f"cannot remove {self.home}: {e}")
        if self.cage.reusable and self.clean:
            return  # kept for the next run
        try:
            self.cage.remove()
        except OSError as e:
            _say(f"cannot remove the cage of run {self.config['name']}: {e}")
            self.clean = False


class _Failed(Exception):
    """A spawn failed; ``failure``: the ``E`` report saying where and why."""

    def __init__(self, failure: dict[str, Any]) -> None:
        super().__init__(failure["error"])
        self.failure = failure


def _which(name: str, env: dict[str, str]) -> str:
    """The program ``name`` names, found as ``execvp`` would with the command's own
    ``PATH``; FileNotFoundError when no directory of it holds one."""
    if "/" in name:
        return name
    for directory in os.get_exec_path(env):
        path = os.path.join(directory, name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), name)


def _catch_signals() -> int:
    """SIGCHLD wakes the loop (through a pipe); SIGINT, SIGTERM and SIGHUP are caught
    and do nothing: only the worker, or the end of its socket, ends a run. (Caught, not
    ignored: an ignored signal would stay ignored in the command across its exec.) The
    pipe's read end."""
    r, w = os.pipe()
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    signal.set_wakeup_fd(w)
    for sig in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _nothing)
    return r


def _nothing(signum: int, frame: Any) -> None:
    """A signal handler that does nothing (the signal still wakes the loop)."""


def _set_subreaper() -> None:
    LIBC.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _read_oom_score() -> str:
    try:
        with open("/proc/self/oom_score_adj") as f:
            return f.read().strip()
    except OSError:
        return ""


def _write_oom_score(value: str) -> None:
    if value:
        with contextlib.suppress(OSError):
            write("/proc/self/oom_score_adj", value)


def _say(text: str) -> None:
    print(f"shardcron supervisor {os.getpid()}: {text}", file=sys.stderr, flush=True)
