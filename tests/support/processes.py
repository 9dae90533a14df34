"""Looking at real processes from a test: whether one is alive, who is in a process
group, who descends from a process, whether one is in a run's cgroup, a pid a command
wrote to a file, and killing a group left behind."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

from tests.support.waiting import wait_until


def stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat after the command name: [state, ppid, pgrp, ...], or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return stat.rsplit(")", 1)[1].split()


def alive(pid: int) -> bool:
    """True while the process exists and is not a zombie (PID 1 here may not reap)."""
    fields = stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group ``pgid``."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = stat_fields(int(entry))
            if fields is not None and fields[0] != "Z" and int(fields[2]) == pgid:
                members.append(int(entry))
    return members


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid``."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = stat_fields(int(entry))
            if fields is not None and fields[0] != "Z":
                children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], list(children.get(pid, ()))
    while todo:
        found.append(todo.pop())
        todo.extend(children.get(found[-1], ()))
    return found


def in_a_run_cage(pid: int) -> bool:
    """The process is in a run's cgroup (a worker's ``shardcron`` subtree)."""
    try:
        return "/shardcron/" in Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return False


def read_int(path: Path, timeout: float = 10.0) -> int:
    wait_until(lambda: path.exists() and path.read_text().strip(), timeout, str(path))
    return int(path.read_text())


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
