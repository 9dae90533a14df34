"""A run's cage where no cgroup hierarchy is writable: the process tree below its
supervisor. Its limits are not enforced as a cgroup's are (``enforced`` False), and
every run records that.

The supervisor is a child subreaper (``PR_SET_CHILD_SUBREAPER``, set for every kind),
so every descendant of the command stays below it, even one that left its session
with ``setsid`` or a double fork: ``kill`` stops every descendant it finds (a stopped
process forks no more), looks again until it finds no new one, and SIGKILLs them all.

Limits, as rlimits set in the command's child before it execs (so its spawn runs
Python in the child: the fallback is slower): ``RLIMIT_AS`` for memory (the
address space, not the memory used: a program that reserves far more than it touches
fails early) and ``RLIMIT_NPROC`` for processes, only when the run has a user of its
own (the limit counts every process of its uid). No CPU quota. What it used comes
from the rusage of the descendants its supervisor reaped: the peak resident size of the
largest one, and their CPU time (``wait4``'s, counted by the supervisor as it reaps
them, run by run).
"""

from __future__ import annotations

import os
import resource
import signal
from collections.abc import Callable

from .cage import Limits, Used, signal_all

KILL_ROUNDS = 50  # a fork bomb outruns one listing; each round stops what it finds


class ProcessTreeCage:
    """The descendants of the calling supervisor. ``own_user``: the run has a uid of its
    own, so ``RLIMIT_NPROC`` counts only its processes (and the owner's other runs')."""

    enforced = False
    reusable = False

    def __init__(self, *, own_user: bool = False) -> None:
        self.own_user = own_user
        self.limits = Limits()

    def create(self, limits: Limits) -> None:
        self.limits = limits

    def enter_supervisor(self) -> None:
        """Nothing: the supervisor is the subreaper of its tree already."""

    def enter_command(self) -> None:
        """Nothing: the command's rlimits are set in its child (``preexec``)."""

    def leave_command(self) -> None:
        """Nothing."""

    def preexec(self) -> Callable[[], None] | None:
        limits, own_user = self.limits, self.own_user
        if not limits.memory_bytes and not (limits.pids and own_user):
            return None

        def set_rlimits() -> None:
            if limits.memory_bytes:
                resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
            if limits.pids and own_user:
                resource.setrlimit(resource.RLIMIT_NPROC, (limits.pids, limits.pids))

        return set_rlimits

    def pids(self) -> list[int]:
        return descendants(os.getpid())

    def kill(self) -> None:
        stopped: set[int] = set()
        for _ in range(KILL_ROUNDS):
            found = set(descendants(os.getpid())) - stopped
            if not found:
                break
            signal_all(found, signal.SIGSTOP)
            stopped |= found
        signal_all(stopped, signal.SIGKILL)
        signal_all(stopped, signal.SIGCONT)

    def used(self, reaped: Used | None = None) -> Used:
        return reaped or Used(peak_memory_bytes=0, cpu_seconds=0.0, oom_kills=0)

    def remove(self) -> None:
        """Nothing to remove."""


def descendants(root: int) -> list[int]:
    """Every live process below ``root``, from the parent each one names in /proc (none,
    without reading them all, when ``root`` has no child: the usual end of a run)."""
    if not _children_of(root):
        return []
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # gone
        fields = stat.rsplit(b")", 1)[1].split()
        if fields[0] != b"Z":  # a zombie is dead already: its parent reaps it
            children.setdefault(int(fields[1]), []).append(int(name))
    found, todo = [], list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return found


def _children_of(pid: int) -> bool:
    """Whether ``pid`` has a child (a zombie too); True when the kernel cannot say."""
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                if f.read().strip():
                    return True
    except OSError:
        return True
    return False
