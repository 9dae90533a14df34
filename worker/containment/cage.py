"""``RunCage``: one run's containment, the interface its kinds implement, and what
crosses it: the run's ``Limits`` in, what the run ``Used`` out.

A cage is made and used by the run's supervisor (``supervisor``): ``create`` it with
the limits, ``enter_supervisor`` (the supervisor joins it where it freezes with its
command), ``enter_command`` just before spawning the command (the supervisor joins
the rest, so that its child is born in the cage: no code of the cage's need run in
the child, which can then be spawned without copying the supervisor), and
``leave_command`` right after; when the run ends, ``kill`` every process of the
command, read what it ``used`` and ``remove`` the cage, or keep it for the
supervisor's next run if it is ``reusable``.
The worker makes the same cage from its name only to kill and remove it when a
supervisor went away without doing so.

Also the small helpers the kinds share: writing and reading a control file, a CPU
quota, removing a cgroup, and signalling a list of processes.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Limits:
    """What a run may use; 0: no limit."""

    memory_bytes: int = 0  # swap is off for the run: memory and swap together
    cpu_millis: int = 0  # thousandths of a CPU, as a quota per period
    pids: int = 0  # processes (and threads) at once


@dataclass(frozen=True, slots=True)
class Used:
    """What a run used, read from its cage's own counters when it ended."""

    peak_memory_bytes: int
    cpu_seconds: float
    oom_kills: int  # processes the kernel killed at the memory limit


class RunCage(Protocol):
    """One run's containment (module docstring)."""

    # True: the limits hold and every process is accounted (a cgroup); False: rlimits at
    # best, the figures estimates (the fallback)
    enforced: bool
    # True: once a run ended, ``create`` makes it ready for another (limits set again,
    # counters started over), and it is removed only when no run will use it again;
    # False: made and removed for each run
    reusable: bool

    def create(self, limits: Limits) -> None:
        """Makes the cage, with its limits; raises OSError when it cannot."""
        ...

    def enter_supervisor(self) -> None:
        """The calling supervisor joins the cage as far as it must to be frozen (stopped)
        together with its command."""
        ...

    def enter_command(self) -> None:
        """The calling supervisor joins the cage wholly, to spawn its command in it."""
        ...

    def leave_command(self) -> None:
        """The calling supervisor, its command spawned, goes back to where it was after
        ``enter_supervisor``."""
        ...

    def preexec(self) -> Callable[[], None] | None:
        """What the command's child must run before exec (the fallback's rlimits), or
        None: nothing, so the spawn needs no Python in the child."""
        ...

    def pids(self) -> list[int]:
        """The command's processes now (not its supervisor)."""
        ...

    def kill(self) -> None:
        """SIGKILLs every process of the command, including any that left its process
        group or session; returns once they are dying (a supervisor reaps them)."""
        ...

    def used(self, reaped: Used | None = None) -> Used:
        """What the command used, from the cage's counters; ``reaped``: what the
        processes its supervisor reaped used, by their own counts (where a cage has no
        counters of its own, its figures)."""
        ...

    def remove(self) -> None:
        """Removes the cage (its processes are gone); raises OSError when it cannot."""
        ...


def write(path: str, text: str) -> None:
    """Writes a control file in one write (cgroup files take one value per write)."""
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def read(path: str) -> str:
    with open(path, encoding="ascii") as f:
        return f.read()


def read_pids(path: str) -> list[int]:
    """The pids listed in a ``cgroup.procs`` file; none if it is gone."""
    try:
        return [int(line) for line in read(path).split()]
    except FileNotFoundError:
        return []


def keyed(text: str, key: str) -> int:
    """The number after ``key`` in a flat-keyed file (``oom_kill 2``, ``usage_usec 5``);
    0 when the key is missing."""
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return int(value)
    return 0


def signal_all(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


# -- what both cgroup versions share

PERIOD_US = 100_000  # cpu.cfs_period_us's default: the quota is per this period
MIN_QUOTA_US = 1000  # the kernel refuses a smaller cpu.cfs_quota_us
FREEZE_WAIT = 2.0  # seconds a freeze may take (a task in an uninterruptible sleep)
REMOVE_WAIT = 2.0  # seconds a cgroup whose tasks are exiting may stay busy


def cpu_quota_us(millis: int) -> int:
    return max(MIN_QUOTA_US, millis * PERIOD_US // 1000)


def remove_cgroup(path: str, wait: float = REMOVE_WAIT) -> None:
    """rmdir a cgroup, waiting while it is busy (its last tasks are still exiting); one
    already gone is fine."""
    deadline = time.monotonic() + wait
    while True:
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError as e:
            if e.errno != errno.EBUSY or time.monotonic() >= deadline:
                raise
        time.sleep(0.002)
