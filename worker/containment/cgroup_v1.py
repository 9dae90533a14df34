"""A run's cage on cgroup v1: a cgroup of its own in each of the memory, cpu,
cpuacct, pids and freezer hierarchies (one directory where two share a mount).

Its supervisor stays in the freezer cgroup, so that freezing the run freezes both; it
joins the others only for the moment it spawns its command, which is born in all of
them, so the supervisor's own memory, CPU and process are neither limited nor counted
as the command's. Limits:
``memory.limit_in_bytes`` and ``memory.memsw.limit_in_bytes`` set alike (no swap),
``cpu.cfs_quota_us`` per ``cpu.cfs_period_us``, ``pids.max``. What it used:
``memory.max_usage_in_bytes``, ``cpuacct.usage``, ``oom_kill`` of
``memory.oom_control``.

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


class CgroupV1Cage:
    """The cage of one run: ``dirs`` maps each of ``CONTROLLERS`` to the run's cgroup
    directory in that controller's hierarchy."""

    enforced = True

    def __init__(self, dirs: dict[str, str]) -> None:
        self.dirs = dirs
        self._all = list(dict.fromkeys(dirs[c] for c in CONTROLLERS))  # co-mounted: once
        self._command_only = [d for d in self._all if d != dirs["freezer"]]
        self._limits = Limits()

    def create(self, limits: Limits) -> None:
        self._limits = limits
        for d in self._all:
            with contextlib.suppress(FileExistsError):  # a cage left by a supervisor that died
                os.mkdir(d)
        memory, cpu, pids = self.dirs["memory"], self.dirs["cpu"], self.dirs["pids"]
        if limits.memory_bytes:
            write(f"{memory}/memory.limit_in_bytes", str(limits.memory_bytes))
            if os.path.exists(f"{memory}/memory.memsw.limit_in_bytes"):  # swap accounted
                write(f"{memory}/memory.memsw.limit_in_bytes", str(limits.memory_bytes))
        if limits.cpu_millis:
            write(f"{cpu}/cpu.cfs_quota_us", str(cpu_quota_us(limits.cpu_millis)))
        if limits.pids:
            write(f"{pids}/pids.max", str(limits.pids))

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
            oom_kills=keyed(read(f"{memory}/memory.oom_control"), "oom_kill"),
        )

    def remove(self) -> None:
        self._leave_freezer()
        for d in self._all:
            remove_cgroup(d)
