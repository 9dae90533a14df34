"""A run's cage on cgroup v2: one cgroup of its own in the worker's delegated subtree,
holding its supervisor and its command (v2 has one hierarchy, so the supervisor is
frozen together with the command by the cgroup's own freezer).

Limits: ``memory.max`` and ``memory.swap.max`` 0 (no swap), ``cpu.max`` (quota and
period), ``pids.max`` (one more than the run's limit: its supervisor is a process of
the cgroup). What it used: ``memory.peak`` (``memory.current`` on kernels before
5.19, a lower bound), ``usage_usec`` of ``cpu.stat``, ``oom_kill`` of
``memory.events``; the supervisor's own pages after it joined count in them, a few
hundred KiB. ``kill`` moves the supervisor out to ``leave`` (the worker's own cgroup),
then writes ``cgroup.kill``; on kernels before 5.14, which lack it, it freezes the
cgroup (``cgroup.freeze``), SIGKILLs every process listed and thaws it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

from .cage import (
    FREEZE_WAIT,
    PERIOD_US,
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

CONTROLLERS = ("memory", "cpu", "pids")  # enabled in the subtree_control above each run


class CgroupV2Cage:
    """The cage of one run: the cgroup ``path``; ``leave``, the cgroup its supervisor
    moves to before it kills the run."""

    enforced = True
    reusable = False

    def __init__(self, path: str, leave: str) -> None:
        self.path = path
        self.leave = leave

    def create(self, limits: Limits) -> None:
        path = self.path
        with contextlib.suppress(FileExistsError):  # a cage left by a supervisor that died
            os.mkdir(path)
        if limits.memory_bytes:
            write(f"{path}/memory.max", str(limits.memory_bytes))
            if os.path.exists(f"{path}/memory.swap.max"):  # no swap controller: no swap
                write(f"{path}/memory.swap.max", "0")
        if limits.cpu_millis:
            write(f"{path}/cpu.max", f"{cpu_quota_us(limits.cpu_millis)} {PERIOD_US}")
        if limits.pids:
            write(f"{path}/pids.max", str(limits.pids + 1))

    def enter_supervisor(self) -> None:
        write(f"{self.path}/cgroup.procs", str(os.getpid()))

    def enter_command(self) -> None:
        """Nothing: the supervisor is in the run's one cgroup already."""

    def leave_command(self) -> None:
        """Nothing: the supervisor stays in the run's cgroup."""

    def preexec(self) -> None:
        return None

    def pids(self) -> list[int]:
        me = os.getpid()
        return [p for p in read_pids(f"{self.path}/cgroup.procs") if p != me]

    def kill(self) -> None:
        self._leave()
        path = self.path
        if os.path.exists(f"{path}/cgroup.kill"):
            write(f"{path}/cgroup.kill", "1")
            return
        write(f"{path}/cgroup.freeze", "1")
        try:
            deadline = time.monotonic() + FREEZE_WAIT
            while not keyed(read(f"{path}/cgroup.events"), "frozen"):
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.001)
            signal_all(read_pids(f"{path}/cgroup.procs"), signal.SIGKILL)
        finally:
            write(f"{path}/cgroup.freeze", "0")

    def _leave(self) -> None:
        if os.getpid() in read_pids(f"{self.path}/cgroup.procs"):
            write(f"{self.leave}/cgroup.procs", str(os.getpid()))

    def used(self, reaped: Used | None = None) -> Used:
        path = self.path
        peak = f"{path}/memory.peak"
        return Used(
            peak_memory_bytes=int(read(peak if os.path.exists(peak) else f"{path}/memory.current")),
            cpu_seconds=keyed(read(f"{path}/cpu.stat"), "usage_usec") / 1e6,
            oom_kills=keyed(read(f"{path}/memory.events"), "oom_kill"),
        )

    def remove(self) -> None:
        self._leave()
        remove_cgroup(self.path)
