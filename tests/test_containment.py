"""Each command run contained, with real processes and real cgroups: its limits hold,
nothing of it outlives it, and it records what it used.

Every run goes through a ``CommandExecutor`` with a sandbox of its own: the cgroup
containment this host gives (v2 where the worker's cgroup is delegated, else v1; a
test that needs one is skipped, saying why, where there is none), or the fallback
without cgroups (rlimits and a subreaper), which still kills every escapee. The
frozen worker's case is in ``test_frozen_worker.py`` and the users in
``e2e/test_containment.py``.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from shardcron.client.types import CommandTask, Resources, RunReason, RunState
from shardcron.worker import CommandExecutor, RunContext
from shardcron.worker.containment.cage import Limits, write
from shardcron.worker.containment.hosts import choose, from_description, worker_subtree
from shardcron.worker.sandbox import Sandbox, SandboxConfig
from tests.support.containment import CGROUP_KIND, escapees, needs_cgroups, read_pids
from tests.support.processes import alive
from tests.support.waiting import until

MIB = 1 << 20
Executors = Callable[..., CommandExecutor]
# the containments a test of escapees runs under: this host's cgroups, and the fallback
KINDS = [pytest.param(CGROUP_KIND or "cgroup", marks=needs_cgroups, id="cgroup"), "none"]


@pytest.fixture
async def executors() -> AsyncIterator[Executors]:
    """Makes command executors of a containment kind (``auto`` by default), each with a
    sandbox of its own, closed after the test."""
    made: list[CommandExecutor] = []

    def make(kind: str = "auto", **kw: Any) -> CommandExecutor:
        sandbox = Sandbox(SandboxConfig(containment=kind), f"test-{uuid.uuid4().hex[:6]}")
        made.append(CommandExecutor(sandbox=sandbox, **kw))
        return made[-1]

    yield make
    for executor in made:
        await executor.sandbox.close()


def run_of(script: str, *, resources: Resources | None = None, **kw: Any) -> RunContext:
    return RunContext(
        run_id=f"r-{uuid.uuid4().hex[:8]}",
        task=CommandTask(argv=("sh", "-c", script)),
        resources=resources,
        **kw,
    )


def python(code: str) -> str:
    return f"exec {sys.executable} -I -S -c '{code}'"


# -- memory ---------------------------------------------------------------------------


@needs_cgroups
async def test_a_command_past_its_memory_limit_ends_oom_killed_and_the_others_go_on(
    executors: Executors,
) -> None:
    """Once an OOM kill read as a plain non-zero exit (and nothing held the memory)."""
    executor = executors()
    hog = run_of(python("b = bytearray(200 << 20)"), resources=Resources(memory_mb=64))
    beside = run_of("sleep 0.5; echo still here", resources=Resources(memory_mb=64))
    killed, fine = await asyncio.gather(executor.execute(hog), executor.execute(beside))
    print(f"OOM: {killed.state.value} {killed.reason.value}: {killed.error}")
    assert (killed.state, killed.reason) == (RunState.FAILED, RunReason.OOM_KILLED)
    assert "memory limit of 64 MiB" in killed.error
    assert killed.usage is not None and killed.usage.limits_enforced
    assert 32 * MIB < killed.usage.peak_memory_bytes <= 64 * MIB
    assert fine.state == RunState.SUCCEEDED
    after = await executor.execute(run_of("true"))  # the executor goes on
    assert after.state == RunState.SUCCEEDED


# -- processes -----------------------------------------------------------------------


@needs_cgroups
async def test_a_fork_bomb_ends_within_its_pids_limit_and_spares_another_run(
    executors: Executors,
) -> None:
    """Every process of the bomb forks for ever, retrying each fork its cgroup's pids
    limit refuses, until its timeout ends it with every process it made; a run beside
    it forks as it pleases meanwhile."""
    executor = executors(kill_grace=0.5)
    marker = f"bomb-{uuid.uuid4().hex[:8]}"
    bomb = RunContext(
        run_id=f"r-{marker}",
        task=CommandTask(argv=(sys.executable, "-I", "-S", "-c", FORK_BOMB, marker)),
        resources=Resources(pids_limit=32),
        timeout=3.0,
    )
    forks = "for i in $(seq 20); do sh -c true; done; echo forked"
    beside = run_of(f"sleep 1; {forks}")
    seen: list[int] = []

    async def count() -> None:
        while True:
            seen.append(len(_with_marker(marker)))
            await asyncio.sleep(0.05)

    counting = asyncio.create_task(count())
    out: list[bytes] = []
    beside.on_output = lambda stream, data: out.append(data)
    try:
        ended, fine = await asyncio.gather(executor.execute(bomb), executor.execute(beside))
    finally:
        counting.cancel()
    print(f"fork bomb: at most {max(seen)} processes seen at once (limit 32); {ended.state.value}")
    assert ended.state == RunState.TIMED_OUT
    assert 16 <= max(seen) <= 32  # it reached the limit, and no further
    assert fine.state == RunState.SUCCEEDED and b"forked" in b"".join(out)
    assert await until(lambda: not _with_marker(marker), 5, "the bomb's processes gone")


FORK_BOMB = """
import os, time
while True:
    try:
        os.fork()
    except OSError:
        time.sleep(0.01)
"""


def _with_marker(marker: str) -> list[int]:
    """Live processes whose command line holds ``marker``."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline and alive(int(name)):
                found.append(int(name))
    return found


# -- CPU ------------------------------------------------------------------------------


@needs_cgroups
async def test_a_cpu_bound_command_given_half_a_cpu_uses_about_half_a_core(
    executors: Executors,
) -> None:
    """Its cgroup's CPU counter, over four seconds of spinning: about half of them."""
    executor = executors(kill_grace=0.2)
    spin = run_of("while :; do :; done", resources=Resources(cpu_millis=500), timeout=4.0)
    result = await executor.execute(spin)
    assert result.state == RunState.TIMED_OUT and result.usage is not None
    assert result.started_at is not None and result.ended_at is not None
    wall = (result.ended_at - result.started_at).total_seconds()
    cores = result.usage.cpu_seconds / wall
    print(f"CPU: {result.usage.cpu_seconds:.2f}s in {wall:.2f}s: {cores:.2f} of a core")
    assert 0.3 <= cores <= 0.7


# -- what a run used ------------------------------------------------------------------


@needs_cgroups
async def test_peak_memory_and_cpu_seconds_are_what_the_command_did(
    executors: Executors,
) -> None:
    """The command holds 96 MiB and spins one second of its own CPU time."""
    code = (
        "import time; b = bytearray(96 << 20); t = time.process_time()\n"
        "while time.process_time() - t < 1.0: pass"
    )
    result = await executors().execute(run_of(python(code)))
    assert result.state == RunState.SUCCEEDED and result.usage is not None
    used = result.usage
    print(f"used: peak {used.peak_memory_bytes / MIB:.1f} MiB, {used.cpu_seconds:.2f} s CPU")
    assert 96 * MIB <= used.peak_memory_bytes <= 96 * MIB + 32 * MIB
    assert 1.0 <= used.cpu_seconds <= 2.0
    assert used.limits_enforced


async def test_the_fallback_records_that_its_limits_were_not_enforced(
    executors: Executors,
) -> None:
    result = await executors("none").execute(run_of("true", resources=Resources(memory_mb=64)))
    assert result.state == RunState.SUCCEEDED and result.usage is not None
    assert not result.usage.limits_enforced


# -- nothing escapes ------------------------------------------------------------------

# How a run may end while its escapees live: what its context gets, what is done to it
# once they run, and the (state, reason) it ends with. A lost lease is one whose
# deadline passed unrenewed, as while its worker is frozen: its supervisor acts alone.
ENDINGS: dict[str, tuple[Callable[[], dict[str, Any]], Callable[[RunContext], None], Any]] = {
    "TIMED_OUT": (
        lambda: {"timeout": 1.5},
        lambda run: None,
        (RunState.TIMED_OUT, RunReason.TIMEOUT),
    ),
    "CANCELLED": (
        lambda: {},
        lambda run: run.cancel(RunReason.CANCELLED_BY_USER),
        (RunState.CANCELLED, RunReason.CANCELLED_BY_USER),
    ),
    "a lost lease": (
        lambda: {"lease_deadline": time.monotonic() + 2.0},
        lambda run: None,
        (RunState.CANCELLED, RunReason.WORKER_LOST),
    ),
}


@pytest.mark.parametrize("ending", list(ENDINGS))
@pytest.mark.parametrize("kind", KINDS)
async def test_escapees_are_gone_however_the_run_ends(
    executors: Executors, kind: str, ending: str, tmp_path: Path
) -> None:
    """``setsid`` and a double fork leave the process group the worker used to kill:
    each is gone, checked by its pid, once the run ended."""
    context, act, ended_as = ENDINGS[ending]
    pidfile = tmp_path / "pids"
    run = run_of(escapees(pidfile), **context())
    task = asyncio.create_task(executors(kind, kill_grace=0.5).execute(run))
    pids = await until(lambda: read_pids(pidfile, 2), 10, "the escapees' pids")
    assert all(alive(p) for p in pids)
    act(run)
    result = await asyncio.wait_for(task, 10)
    assert (result.state, result.reason) == ended_as
    await _gone(pids, ending)


@pytest.mark.parametrize("kind", KINDS)
async def test_escapees_are_gone_when_the_command_itself_succeeded(
    executors: Executors, kind: str, tmp_path: Path
) -> None:
    pidfile = tmp_path / "pids"
    script = escapees(pidfile).rsplit(";", 1)[0] + "; sleep 0.5; echo done"
    result = await asyncio.wait_for(executors(kind).execute(run_of(script)), 10)
    pids = read_pids(pidfile, 2)
    assert result.state == RunState.SUCCEEDED and pids is not None
    await _gone(pids, "SUCCEEDED")


async def _gone(pids: list[int], what: str) -> None:
    if any(alive(p) for p in pids):
        await until(lambda: not any(alive(p) for p in pids), 5, f"escapees gone after {what}")
    print(f"escapees left after {what}: 0 of {len(pids)}")


# -- what a worker that died left ------------------------------------------------------


@needs_cgroups
def test_a_worker_starting_sweeps_what_a_dead_worker_left_in_its_cgroups() -> None:
    """A worker killed with its supervisors left a run's cgroup and a process in it: the
    next worker to start kills the process and removes the cgroups; a live worker's
    subtree is left alone."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    containment, _ = choose(CGROUP_KIND or "auto", worker_subtree("sweeper"))
    dead = from_description({**containment.describe(), "subtree": f"dead@{gone.pid}.12345"})
    dead.prepare()
    cage = dead.cage("run.1")
    cage.create(Limits(pids=8))
    left = subprocess.Popen(["sleep", "600"])
    try:
        for d in _cgroup_dirs(cage):
            write(f"{d}/cgroup.procs", str(left.pid))
        assert containment.sweep() == [dead.subtree]
        assert left.wait(5) == -9
        assert not any(os.path.exists(d) for d in _cgroup_dirs(cage))
        assert os.path.isdir(_cgroup_dirs(containment.cage("any"))[0].rsplit("/", 1)[0])
    finally:
        left.kill()
        left.wait()
        containment.close()


def _cgroup_dirs(cage: Any) -> list[str]:
    return list(cage.dirs.values()) if hasattr(cage, "dirs") else [cage.path]
