"""cgroup v2 as the kernel documents its files, against a directory tree standing in
for a delegated subtree (this machine's v2 hierarchy has none of the memory, cpu and
pids controllers; its v1 hierarchies are what the real-cgroup tests use).

What is checked is what the worker writes and reads: the choice of v2 from
/proc/self/mountinfo and /proc/self/cgroup, the controllers enabled on the way down
to a worker's subtree, a run's limits (``memory.max``, ``memory.swap.max``,
``cpu.max``, ``pids.max``), the kill (``cgroup.kill``, the supervisor moved out first)
and what a run used (``memory.peak``, ``cpu.stat``, ``memory.events``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shardcron.worker.containment import hosts
from shardcron.worker.containment.cage import Limits
from shardcron.worker.containment.cgroup_v2 import CgroupV2Cage

MOUNTINFO = (
    "24 1 0:22 / /sys rw - sysfs sysfs rw\n"
    "31 24 0:27 / {mount} rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate\n"
)


def fake_cgroup(path: Path, *, controllers: str = "memory cpu pids", procs: str = "") -> Path:
    """A cgroup directory with the files the kernel would give it."""
    path.mkdir(parents=True, exist_ok=True)
    for name, text in {
        "cgroup.controllers": controllers,
        "cgroup.subtree_control": "",
        "cgroup.procs": procs,
        "cgroup.kill": "",
        "cgroup.events": "populated 0\nfrozen 0\n",
        "memory.max": "max",
        "memory.swap.max": "max",
        "memory.peak": "0",
        "memory.events": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n",
        "cpu.max": "max 100000",
        "cpu.stat": "usage_usec 0\nuser_usec 0\nsystem_usec 0\n",
        "pids.max": "max",
    }.items():
        (path / name).write_text(text)
    return path


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    """A fake /proc naming a cgroup2 mount and this process's cgroup in it, and that
    cgroup (delegated: writable, the three controllers available), holding this
    process: (the fake /proc, the worker's cgroup)."""
    mount, proc = tmp_path / "cgroup", tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "mountinfo").write_text(MOUNTINFO.format(mount=mount))
    (proc / "self" / "cgroup").write_text("0::/system.slice/worker.service\n")
    own = fake_cgroup(mount / "system.slice" / "worker.service", procs=f"{os.getpid()}\n")
    return proc, own


def test_v2_is_chosen_for_a_delegated_cgroup_and_its_subtree_made_below_it(
    tree: tuple[Path, Path],
) -> None:
    proc, own = tree
    for below in ("shardcron", "shardcron/w1@1.2"):  # what the kernel's mkdir would make
        fake_cgroup(own / below)
    found, passed_over = hosts.choose("auto", "w1@1.2", proc=str(proc))
    assert isinstance(found, hosts.CgroupV2) and passed_over == []
    assert found.base == str(own) and found.enforced
    # a cgroup whose subtree_control took the controllers holds no process here, so the
    # worker stayed where it was; its subtree has the controllers enabled on the way down
    for d in (own, own / "shardcron", own / "shardcron" / "w1@1.2"):
        assert (d / "cgroup.subtree_control").read_text() == "+memory +cpu +pids", d
    assert found.describe() == {
        "kind": "cgroup-v2",
        "subtree": "w1@1.2",
        "base": str(own),
        "leave": str(own),
    }


def test_v2_is_passed_over_without_the_controllers_saying_why(tmp_path: Path) -> None:
    mount, proc = tmp_path / "cgroup", tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "mountinfo").write_text(MOUNTINFO.format(mount=mount))
    (proc / "self" / "cgroup").write_text("0::/\n")
    fake_cgroup(mount, controllers="hugetlb")
    with pytest.raises(hosts.Unusable, match="does not have the memory, cpu, pids controller"):
        hosts.choose("cgroup-v2", "w@1.2", proc=str(proc))
    found, passed_over = hosts.choose("auto", "w@1.2", proc=str(proc))
    assert found.kind in ("cgroup-v1", "none")  # whatever else this host gives
    assert passed_over[0].startswith("cgroup-v2: ") and "hugetlb" not in passed_over[0]


def test_a_v2_run_gets_its_limits_in_the_kernels_formats(tmp_path: Path) -> None:
    run = tmp_path / "run"
    fake_cgroup(run)
    cage = CgroupV2Cage(str(run), leave=str(tmp_path))
    cage.create(Limits(memory_bytes=64 << 20, cpu_millis=500, pids=32))
    assert (run / "memory.max").read_text() == str(64 << 20)
    assert (run / "memory.swap.max").read_text() == "0"  # no swap for the run
    assert (run / "cpu.max").read_text() == "50000 100000"  # half of each 100 ms period
    assert (run / "pids.max").read_text() == "33"  # its supervisor is one of its processes


def test_a_v2_run_without_limits_writes_none(tmp_path: Path) -> None:
    run = tmp_path / "run"
    fake_cgroup(run)
    CgroupV2Cage(str(run), leave=str(tmp_path)).create(Limits())
    assert (run / "memory.max").read_text() == "max" and (run / "cpu.max").read_text() == (
        "max 100000"
    )


def test_a_v2_kill_moves_the_supervisor_out_first_then_kills_the_cgroup(tmp_path: Path) -> None:
    run, worker = tmp_path / "run", tmp_path / "worker"
    fake_cgroup(run, procs=f"{os.getpid()}\n")
    fake_cgroup(worker)
    CgroupV2Cage(str(run), leave=str(worker)).kill()
    assert (worker / "cgroup.procs").read_text() == str(os.getpid())
    assert (run / "cgroup.kill").read_text() == "1"


def test_what_a_v2_run_used_is_read_from_its_counters(tmp_path: Path) -> None:
    run = tmp_path / "run"
    fake_cgroup(run)
    (run / "memory.peak").write_text("70254592\n")
    (run / "cpu.stat").write_text("usage_usec 1250000\nuser_usec 1000000\nsystem_usec 250000\n")
    (run / "memory.events").write_text("low 0\nhigh 0\nmax 7\noom 1\noom_kill 1\n")
    used = CgroupV2Cage(str(run), leave=str(tmp_path)).used()
    assert (used.peak_memory_bytes, used.cpu_seconds, used.oom_kills) == (70254592, 1.25, 1)
    (run / "memory.peak").unlink()  # a kernel before 5.19: the current figure, at least
    (run / "memory.current").write_text("4096\n")
    assert CgroupV2Cage(str(run), leave=str(tmp_path)).used().peak_memory_bytes == 4096
