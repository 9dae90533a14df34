"""Which containment a worker uses on this machine, its own subtree there, and the
sweep of what workers that died left behind.

``choose`` tries, unless told which: cgroup v2 (the worker's own cgroup is a
delegated subtree with the memory, cpu and pids controllers: the usual systemd or
container set-up), then cgroup v1 (the memory, cpu, cpuacct, pids and freezer
hierarchies mounted and writable, as root), then the fallback (``process_tree``),
saying why each one it passed over was not usable.

A worker's runs live under a subtree of its own, named by ``worker_subtree``: its id,
then ``@PID.START`` (its process id and start time), so that a sweep tells the
subtree of a live worker from one whose worker died (a new worker with the same id
included) whatever the ids: v1, ``<hierarchy>/shardcron/<subtree>/<run>`` in each
hierarchy; v2, ``<the worker's cgroup>/shardcron/<subtree>/<run>``. ``sweep`` kills
every process left in the subtrees of dead workers and removes them.

A ``Containment`` is described to a supervisor as a small JSON-able dict
(``describe``), from which the supervisor makes its run's cage (``from_description``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from collections.abc import Iterator
from typing import Any

from . import cgroup_v1, cgroup_v2
from .cage import RunCage, read, read_pids, remove_cgroup, write
from .cgroup_v1 import CgroupV1Cage
from .cgroup_v2 import CgroupV2Cage
from .process_tree import ProcessTreeCage

KINDS = ("auto", "cgroup-v2", "cgroup-v1", "none")
SUBTREE = "shardcron"  # the directory every worker's subtree is in
WORKER_LEAF = "shardcron-worker"  # v2: where a worker moves so its cgroup may have children
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


class Unusable(Exception):
    """This kind of containment cannot be used here; the message says why."""


def worker_subtree(worker_id: str, pid: int | None = None) -> str:
    """The name of a worker's subtree: its id (made safe for a path), its pid and the
    start time of that process."""
    pid = os.getpid() if pid is None else pid
    return f"{_UNSAFE.sub('_', worker_id)[:64]}@{pid}.{process_start(pid)}"


def run_name(run_id: str, fencing_token: int) -> str:
    """The name of a run's private directory (and of the run in what its supervisor
    says): one per lease."""
    return f"{_UNSAFE.sub('_', run_id)[:128]}.{fencing_token}"


def process_start(pid: int) -> int:
    """The start time of process ``pid`` (clock ticks after boot); 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return 0


def subtree_worker_alive(name: str) -> bool:
    """The worker that made subtree ``name`` still runs (a name not ours: assumed so)."""
    _, at, owner = name.rpartition("@")
    pid, _, start = owner.partition(".")
    if not at or not pid.isdigit() or not start.isdigit():
        return True
    now = process_start(int(pid))
    return now != 0 and now == int(start)


class Containment:
    """The containment of one worker's runs. Subclasses: one per kind."""

    kind = "none"
    enforced = False

    def __init__(self, subtree: str) -> None:
        self.subtree = subtree

    @property
    def where(self) -> str:
        """Where its runs' cages are, for the worker's start message."""
        return "no cgroup: rlimits and a subreaper per run"

    def prepare(self) -> None:
        """Makes the worker's subtree (and what it needs above it)."""

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "subtree": self.subtree}

    def cage(self, name: str, *, own_user: bool = False, subtree: str = "") -> RunCage:
        """The cage of run ``name`` (in ``subtree``, by default this worker's)."""
        return ProcessTreeCage(own_user=own_user)

    def abandon(self, name: str) -> None:
        """Kills and removes the cage ``name`` from outside it, if it is there (its
        supervisor went away). Without cgroups nothing finds the processes of a
        supervisor that is gone: they were its descendants."""

    def sweep(self) -> list[str]:
        """Kills and removes what dead workers left; the subtrees it removed."""
        return []

    def close(self) -> None:
        """Removes the worker's subtree, once its runs ended (best effort)."""


class _Cgroups(Containment):
    """What both cgroup versions do alike."""

    enforced = True

    def abandon(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):  # none left
            _kill_and_remove(self.cage(name))


class CgroupV1(_Cgroups):
    kind = "cgroup-v1"

    def __init__(self, subtree: str, mounts: dict[str, str]) -> None:
        super().__init__(subtree)
        self.mounts = mounts  # controller -> its hierarchy's mount point

    @property
    def where(self) -> str:
        memory = f"{self.mounts['memory']}/{SUBTREE}/{self.subtree}"
        return f"cgroup v1: a cgroup per run in each of {', '.join(self.mounts)} ({memory}, ...)"

    def _dirs(self) -> list[str]:
        return list(dict.fromkeys(f"{m}/{SUBTREE}/{self.subtree}" for m in self.mounts.values()))

    def prepare(self) -> None:
        for d in self._dirs():
            os.makedirs(d, exist_ok=True)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "mounts": self.mounts}

    def cage(self, name: str, *, own_user: bool = False, subtree: str = "") -> RunCage:
        within = subtree or self.subtree
        return CgroupV1Cage({c: f"{m}/{SUBTREE}/{within}/{name}" for c, m in self.mounts.items()})

    def sweep(self) -> list[str]:
        swept = []
        for name in _dead_subtrees([f"{m}/{SUBTREE}" for m in self.mounts.values()]):
            for run in _children({f"{m}/{SUBTREE}/{name}" for m in self.mounts.values()}):
                with contextlib.suppress(OSError):
                    _kill_and_remove(self.cage(run, subtree=name))
            for m in self.mounts.values():
                with contextlib.suppress(OSError):
                    remove_cgroup(f"{m}/{SUBTREE}/{name}")
            swept.append(name)
        return swept

    def close(self) -> None:
        for d in self._dirs():
            with contextlib.suppress(OSError):
                remove_cgroup(d)


class CgroupV2(_Cgroups):
    kind = "cgroup-v2"

    def __init__(self, subtree: str, base: str, leave: str) -> None:
        super().__init__(subtree)
        self.base = base  # the worker's delegated cgroup
        self.leave = leave  # the worker's own cgroup: where a supervisor goes to kill

    @property
    def where(self) -> str:
        return f"cgroup v2: a cgroup per run in {self.base}/{SUBTREE}/{self.subtree}"

    def prepare(self) -> None:
        enable = " ".join(f"+{c}" for c in cgroup_v2.CONTROLLERS)
        parent = f"{self.base}/{SUBTREE}"
        for d in (parent, f"{parent}/{self.subtree}"):
            with contextlib.suppress(FileExistsError):
                os.mkdir(d)
            write(f"{d}/cgroup.subtree_control", enable)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "base": self.base, "leave": self.leave}

    def cage(self, name: str, *, own_user: bool = False, subtree: str = "") -> RunCage:
        within = subtree or self.subtree
        return CgroupV2Cage(f"{self.base}/{SUBTREE}/{within}/{name}", self.leave)

    def sweep(self) -> list[str]:
        swept = []
        for name in _dead_subtrees([f"{self.base}/{SUBTREE}"]):
            subtree = f"{self.base}/{SUBTREE}/{name}"
            for run in _children({subtree}):
                with contextlib.suppress(OSError):
                    _kill_and_remove(self.cage(run, subtree=name))
            with contextlib.suppress(OSError):
                remove_cgroup(subtree)
            swept.append(name)
        return swept

    def close(self) -> None:
        with contextlib.suppress(OSError):
            remove_cgroup(f"{self.base}/{SUBTREE}/{self.subtree}")


def _kill_and_remove(cage: RunCage) -> None:
    cage.kill()
    cage.remove()


def from_description(d: dict[str, Any]) -> Containment:
    """The containment ``describe`` gave (in a supervisor: its run's cage comes from it)."""
    if d["kind"] == CgroupV1.kind:
        return CgroupV1(d["subtree"], d["mounts"])
    if d["kind"] == CgroupV2.kind:
        return CgroupV2(d["subtree"], d["base"], d["leave"])
    return Containment(d["subtree"])


def _dead_subtrees(parents: list[str]) -> Iterator[str]:
    seen = set()
    for parent in parents:
        for name in _children({parent}):
            if name not in seen and not subtree_worker_alive(name):
                seen.add(name)
                yield name


def _children(dirs: set[str]) -> list[str]:
    """The names of the directories in any of ``dirs`` (none if they are missing)."""
    names: set[str] = set()
    for d in dirs:
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            names.update(e.name for e in os.scandir(d) if e.is_dir(follow_symlinks=False))
    return sorted(names)


# -- choosing ---------------------------------------------------------------------------


def choose(kind: str, subtree: str, proc: str = "/proc") -> tuple[Containment, list[str]]:
    """The containment of ``kind`` (``auto``: the first usable of v2, v1, none), made
    ready (``prepare``), and why each kind passed over was not usable. A kind asked for
    by name that is not usable raises ``Unusable``."""
    if kind not in KINDS:
        raise Unusable(f"unknown containment {kind!r}: one of {', '.join(KINDS)}")
    why: list[str] = []
    for candidate in ("cgroup-v2", "cgroup-v1"):
        if kind not in ("auto", candidate):
            continue
        try:
            found = _v2(subtree, proc) if candidate == "cgroup-v2" else _v1(subtree, proc)
            found.prepare()
            return found, why
        except (Unusable, OSError) as e:
            reason = f"{candidate}: {e}"
            if kind == candidate:
                raise Unusable(reason) from e
            why.append(reason)
    return Containment(subtree), why


def _mounts(proc: str) -> Iterator[tuple[str, str, set[str]]]:
    """(fs type, mount point, super options) of each cgroup mount in ``proc``'s mountinfo."""
    for line in read(f"{proc}/self/mountinfo").splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            point = fields[4].replace("\\040", " ")
            yield tail[0], point, set(tail[2].split(","))


def _v1(subtree: str, proc: str) -> CgroupV1:
    mounts = {}
    for fs, point, options in _mounts(proc):
        if fs == "cgroup":
            for controller in cgroup_v1.CONTROLLERS:
                if controller in options:
                    mounts.setdefault(controller, point)
    missing = [c for c in cgroup_v1.CONTROLLERS if c not in mounts]
    if missing:
        raise Unusable(f"no {', '.join(missing)} hierarchy mounted")
    for point in set(mounts.values()):
        if not os.access(point, os.W_OK):
            raise Unusable(f"{point} is not writable")
    return CgroupV1(subtree, mounts)


def _v2(subtree: str, proc: str) -> CgroupV2:
    points = [point for fs, point, _ in _mounts(proc) if fs == "cgroup2"]
    if not points:
        raise Unusable("no cgroup2 hierarchy mounted")
    own = [line[3:] for line in read(f"{proc}/self/cgroup").splitlines() if line.startswith("0::")]
    if not own:
        raise Unusable("this process is in no cgroup2 cgroup")
    path = own[0].rstrip("/")
    if path.endswith(f"/{WORKER_LEAF}"):  # moved there by another worker of this process
        path = path[: -len(WORKER_LEAF) - 1]
    base = points[0] + path
    present = set(read(f"{base}/cgroup.controllers").split())
    missing = [c for c in cgroup_v2.CONTROLLERS if c not in present]
    if missing:
        raise Unusable(f"{base} does not have the {', '.join(missing)} controller(s)")
    if not os.access(f"{base}/cgroup.subtree_control", os.W_OK):
        raise Unusable(f"{base} is not delegated to this user")
    return CgroupV2(subtree, base, _make_room(base))


def _make_room(base: str) -> str:
    """Lets ``base`` (the worker's cgroup) have children with controllers: a cgroup with
    processes of its own cannot, so this process moves to a leaf of it. Returns the
    cgroup this process is in then."""
    enable = " ".join(f"+{c}" for c in cgroup_v2.CONTROLLERS)
    leaf = f"{base}/{WORKER_LEAF}"
    if os.getpid() in read_pids(f"{leaf}/cgroup.procs"):
        return leaf  # made room already
    try:
        write(f"{base}/cgroup.subtree_control", enable)
        return base  # a root cgroup: it may hold processes and children with controllers
    except OSError as e:
        if e.errno != errno.EBUSY:
            raise
    with contextlib.suppress(FileExistsError):
        os.mkdir(leaf)
    write(f"{leaf}/cgroup.procs", str(os.getpid()))
    try:
        write(f"{base}/cgroup.subtree_control", enable)
    except OSError as e:
        raise Unusable(f"{base} holds processes other than this worker's ({e})") from e
    return leaf
