"""A run's cage on cgroup v1: a cgroup of its own in each of the memory, cpu,
cpuacct, pids and freezer hierarchies (one directory where two share a mount), made
for a supervisor's first run and made ready again for each of its runs after.

Its supervisor stays in the freezer cgroup, so that freezing the run freezes both; it
joins the others only for the moment it spawns its command, which is born in all of
them, so the supervisor's own memory, CPU and process are neither limited nor counted
as the command's. Limits:
``memory.limit_in_bytes`` and ``memory.memsw.limit_in_bytes`` set alike (no swap),
``cpu.cfs_quota_us`` per ``cpu.cfs_period_us``, ``pids.max``. What it used:
``memory.max_usage_in_bytes`` and ``cpuacct.usage`` (both reset as a run begins; the
memory the last run left charged is reclaimed first unless it is under
``LEFT_CHARGED``), the ``oom_kill`` of ``memory.oom_control`` counted since.

v1 has no ``cgroup.kill``: ``kill`` freezes the freezer cgroup (its supervisor first
moved out of it, to the worker's), SIGKILLs every process listed, and thaws it, so a
process cannot fork or leave between the listing and the kill.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

from .cage import (
    FREEZE_WAIT,
    Limits,
    Used,
    cpu_quota_us,
    keyed,
    read,
    read_pids,
    remove_cgroup,
    signal_all,
    write,
)

CONTROLLERS = ("memory", "cpu", "cpuacct", "pids", "freezer")
# bytes the last run may leave charged to the memory cgroup (page cache) before a run
# that follows has them reclaimed first: up to this much of its peak may be theirs
LEFT_CHARGED = 1 << 20


class CgroupV1Cage:
    """The cage of a supervisor's runs: ``dirs`` maps each of ``CONTROLLERS`` to its
    cgroup directory in that controller's hierarchy. Made at its first run and kept for
    the next (``reusable``): making and removing five cgroups costs more than the spawn
    of a small command."""

    enforced = True
    reusable = True

    def __init__(self, dirs: dict[str, str]) -> None:
        self.dirs = dirs
        self._all = list(dict.fromkeys(dirs[c] for c in CONTROLLERS))  # co-mounted: once
        self._command_only = [d for d in self._all if d != dirs["freezer"]]
        self._limits = Limits()
        self._written: Limits | None = None  # the limits its files hold (None: unknown)
        self._oom_kills = 0  # the memory cgroup's count when this run began

    def create(self, limits: Limits) -> None:
        """Makes the cage, or makes it ready again for another run: the memory the last
        run left charged to it reclaimed, these limits, its counters started over."""
        self._limits = limits
        made = 0
        if self._written is None:  # not made by this cage yet
            for d in self._all:
                with contextlib.suppress(FileExistsError):  # left by one that died
                    os.mkdir(d)
                    made += 1
        memory, cpu, pids = self.dirs["memory"], self.dirs["cpu"], self.dirs["pids"]
        if made == len(self._all):
            self._written = Limits()  # a new cgroup has no limits
        else:
            # what the last run left charged (its page cache), reclaimed when it is more
            # than a little: a reclaim costs about what making the cgroups again does
            if int(read(f"{memory}/memory.usage_in_bytes")) > LEFT_CHARGED:
                with contextlib.suppress(OSError):
                    write(f"{memory}/memory.force_empty", "0")
            write(f"{memory}/memory.max_usage_in_bytes", "0")
            write(f"{self.dirs['cpuacct']}/cpuacct.usage", "0")
        was = self._written or Limits(memory_bytes=-1, cpu_millis=-1, pids=-1)
        self._written = None  # until every write below is done
        if limits.memory_bytes != was.memory_bytes:
            _memory_limit(memory, limits.memory_bytes, was.memory_bytes)
        if limits.cpu_millis != was.cpu_millis:
            quota = cpu_quota_us(limits.cpu_millis) if limits.cpu_millis else -1
            write(f"{cpu}/cpu.cfs_quota_us", str(quota))
        if limits.pids != was.pids:
            write(f"{pids}/pids.max", str(limits.pids) if limits.pids else "max")
        self._written = limits
        self._oom_kills = keyed(read(f"{memory}/memory.oom_control"), "oom_kill")

    def enter_supervisor(self) -> None:
        write(f"{self.dirs['freezer']}/cgroup.procs", str(os.getpid()))

    def enter_command(self) -> None:
        pids = self.dirs["pids"]
        if self._limits.pids:  # the supervisor counts for the moment of the spawn
            write(f"{pids}/pids.max", str(self._limits.pids + 1))
        for d in self._command_only:
            write(f"{d}/cgroup.procs", "0")  # 0: the writing process

    def leave_command(self) -> None:
        for d in self._command_only:
            write(f"{os.path.dirname(d)}/cgroup.procs", "0")
        if self._limits.pids:
            write(f"{self.dirs['pids']}/pids.max", str(self._limits.pids))

    def preexec(self) -> None:
        return None

    def pids(self) -> list[int]:
        return read_pids(f"{self.dirs['pids']}/cgroup.procs")

    def kill(self) -> None:
        freezer = self.dirs["freezer"]
        self._leave_freezer()
        if not read_pids(f"{freezer}/cgroup.procs"):
            return
        state = f"{freezer}/freezer.state"
        write(state, "FROZEN")
        try:
            deadline = time.monotonic() + FREEZE_WAIT
            while read(state).strip() != "FROZEN" and time.monotonic() < deadline:
                time.sleep(0.001)
            signal_all(read_pids(f"{freezer}/cgroup.procs"), signal.SIGKILL)
        finally:
            write(state, "THAWED")  # SIGKILL takes effect once thawed

    def _leave_freezer(self) -> None:
        """The calling process, if it is in the run's freezer cgroup, moves to the
        worker's (the parent), so that freezing the run does not freeze it."""
        freezer = self.dirs["freezer"]
        if os.getpid() in read_pids(f"{freezer}/cgroup.procs"):
            write(f"{os.path.dirname(freezer)}/cgroup.procs", str(os.getpid()))

    def used(self, reaped: Used | None = None) -> Used:
        memory, cpuacct = self.dirs["memory"], self.dirs["cpuacct"]
        return Used(
            peak_memory_bytes=int(read(f"{memory}/memory.max_usage_in_bytes")),
            cpu_seconds=int(read(f"{cpuacct}/cpuacct.usage")) / 1e9,
            oom_kills=keyed(read(f"{memory}/memory.oom_control"), "oom_kill") - self._oom_kills,
        )

    def remove(self) -> None:
        self._written = None  # made again if used again
        self._leave_freezer()
        for d in self._all:
            remove_cgroup(d)


def _memory_limit(memory: str, limit: int, was: int) -> None:
    """Sets the memory limit, and the memory and swap limit alike where swap is accounted
    (no swap): the first may never be above the second, so the lower one goes first
    (``limit`` 0: none; ``was`` 0: none, -1: not known)."""
    value = str(limit) if limit > 0 else "-1"
    files = [f"{memory}/memory.limit_in_bytes"]
    memsw = f"{memory}/memory.memsw.limit_in_bytes"
    if os.path.exists(memsw):
        if was < 0:  # not known: none first, which is never below the memory limit
            write(memsw, "-1")
            was = 0
        lowering = limit > 0 and (was == 0 or limit < was)
        files = [files[0], memsw] if lowering else [memsw, files[0]]
    for file in files:
        write(file, value)
