"""A worker's supervisors take one run after another (``containment.supervisor``,
``worker.supervisor_client``): what a run changes of its supervisor (directory, OOM
score, usage counts, cgroups) never reaches the next run, words meant for a run that
ended never touch the next, and a supervisor with no run goes away."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from shardcron.client.types import CommandTask, Resources, RunReason, RunState
from shardcron.worker import CommandExecutor, RunContext, supervisor_client
from shardcron.worker.sandbox import Sandbox, SandboxConfig
from tests.support.containment import CGROUP_KIND, needs_cgroups, needs_root
from tests.support.processes import alive
from tests.support.waiting import until

MIB = 1 << 20
# a command that touches this many MiB of memory
HOG = f"exec {sys.executable} -I -S -c 'b = bytearray({{mib}} << 20); b[::4096] = b\"x\" * (len(b) // 4096)'"
KINDS = [pytest.param(CGROUP_KIND or "cgroup", marks=needs_cgroups, id="cgroup"), "none"]
Executors = Callable[..., CommandExecutor]


@pytest.fixture
async def executors() -> AsyncIterator[Executors]:
    made: list[CommandExecutor] = []

    def make(kind: str = "auto", **config: Any) -> CommandExecutor:
        sandbox = Sandbox(
            SandboxConfig(containment=kind, **config), f"reuse-{uuid.uuid4().hex[:6]}"
        )
        made.append(CommandExecutor(sandbox=sandbox))
        return made[-1]

    yield make
    for executor in made:
        await executor.sandbox.close()


class Out:
    def __init__(self) -> None:
        self.data: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}

    def __call__(self, stream: str, data: bytes) -> None:
        self.data[stream] += data

    @property
    def stdout(self) -> str:
        return self.data["stdout"].decode()


def run_of(script: str, out: Out | None = None, **task: Any) -> RunContext:
    resources = task.pop("resources", None)
    owner = task.pop("owner", "")
    return RunContext(
        owner=owner,
        run_id=f"r-{uuid.uuid4().hex[:8]}",
        task=CommandTask(argv=("sh", "-c", script), **task),
        on_output=out,
        resources=resources,
        fencing_token=1,
    )


@pytest.mark.parametrize("kind", KINDS)
async def test_runs_one_after_another_take_one_supervisor_and_many_at_once_one_each(
    executors: Executors, kind: str
) -> None:
    executor = executors(kind)
    supervisors = executor.sandbox.supervisors
    for _ in range(10):
        assert (await executor.execute(run_of("true"))).state == RunState.SUCCEEDED
    assert supervisors.forks == 1
    results = await asyncio.gather(*(executor.execute(run_of("sleep 0.3")) for _ in range(6)))
    assert {r.state for r in results} == {RunState.SUCCEEDED}
    assert supervisors.forks == 6  # the one from before, and five more
    await until(lambda: supervisors.idle == 6, 5.0, "every supervisor waiting again")


@pytest.mark.parametrize("kind", KINDS)
async def test_a_run_starts_where_its_own_job_says_not_where_the_last_run_did(
    executors: Executors, kind: str, tmp_path: Path
) -> None:
    executor = executors(kind)
    first = Out()
    await executor.execute(run_of("pwd", first, cwd=str(tmp_path)))
    assert first.stdout.strip() == str(tmp_path)
    second = Out()
    await executor.execute(run_of("pwd", second))
    assert second.stdout.strip() == os.getcwd()  # the worker's, as for the first run
    assert executor.sandbox.supervisors.forks == 1


def _can_lower_oom_scores() -> bool:
    """Whether this host lets root lower an OOM score (a container may not)."""
    probe = "import os; os.write(os.open('/proc/self/oom_score_adj', os.O_WRONLY), b'-1000')"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0


@needs_root
async def test_every_command_gets_the_workers_oom_score_and_its_supervisor_keeps_its_own(
    executors: Executors,
) -> None:
    executor = executors("none")
    mine = Path("/proc/self/oom_score_adj").read_text().strip()
    protected = "-1000" if _can_lower_oom_scores() else mine
    for _ in range(3):  # the first run on a new supervisor, and runs after it
        out = Out()
        await executor.execute(run_of("cat /proc/self/oom_score_adj; echo $PPID", out))
        score, supervisor = out.stdout.split()
        assert score == mine
        assert Path(f"/proc/{supervisor}/oom_score_adj").read_text().strip() == protected
        await until(lambda: executor.sandbox.supervisors.idle == 1, 5.0, "idle again")
    assert executor.sandbox.supervisors.forks == 1


@pytest.mark.parametrize("kind", KINDS)
async def test_a_runs_usage_is_its_own(executors: Executors, kind: str) -> None:
    """A small run after a large one on the same supervisor reports its own peak memory
    and CPU: the cgroup's counters start over (the memory the last run left reclaimed),
    and the fallback counts what it reaps, run by run."""
    executor = executors(kind)
    large = await executor.execute(run_of(HOG.format(mib=96)))
    small = await executor.execute(run_of("true"))
    assert large.usage is not None and small.usage is not None
    assert large.usage.peak_memory_bytes >= 96 * MIB
    assert small.usage.peak_memory_bytes < 32 * MIB
    assert small.usage.cpu_seconds < large.usage.cpu_seconds
    assert executor.sandbox.supervisors.forks == 1


@needs_cgroups
async def test_each_run_on_a_kept_cgroup_has_its_own_limits(executors: Executors) -> None:
    """One supervisor's cgroup, kept from run to run, takes each run's limits whether
    they rise, fall or go: 200 MiB is killed under 64, fits in 512, is killed under 64
    again and fits with no limit; each kill is its run's own."""
    executor = executors()
    hog = HOG.format(mib=200)
    expected = [(64, RunState.FAILED), (512, RunState.SUCCEEDED), (64, RunState.FAILED)]
    expected.append((0, RunState.SUCCEEDED))
    for memory_mb, state in expected:
        result = await executor.execute(run_of(hog, resources=Resources(memory_mb=memory_mb)))
        assert result.state == state, (memory_mb, result.error)
        if state == RunState.FAILED:
            assert result.reason == RunReason.OOM_KILLED
            assert f"memory limit of {memory_mb} MiB" in result.error
        await until(lambda: executor.sandbox.supervisors.idle == 1, 5.0, "idle again")
    assert executor.sandbox.supervisors.forks == 1


@needs_cgroups
async def test_a_supervisors_cgroups_go_with_it(executors: Executors) -> None:
    """A supervisor's cgroups are removed when it exits, and by the worker when it dies
    (SIGKILL while it waits for a run): nothing is left once the sandbox closes."""
    executor = executors()
    sandbox = executor.sandbox
    out = Out()
    await executor.execute(run_of("echo $PPID", out))
    supervisor = int(out.stdout)
    await until(lambda: sandbox.supervisors.idle == 1, 5.0, "idle")
    (link,) = sandbox.supervisors._idle
    assert sandbox.containment is not None
    cage = sandbox.containment.cage(link.cage)
    dirs = list(cage.dirs.values()) if hasattr(cage, "dirs") else [cage.path]
    assert all(os.path.isdir(d) for d in dirs)
    os.kill(supervisor, signal.SIGKILL)
    await until(lambda: not any(os.path.exists(d) for d in dirs), 5.0, "its cgroups removed")
    await executor.execute(run_of("true"))
    subtrees = {os.path.dirname(d) for d in dirs}
    await sandbox.close()
    assert not any(os.path.exists(d) for d in subtrees)


async def test_words_for_a_run_that_ended_never_reach_the_next(executors: Executors) -> None:
    """A kill written to the supervisor after its run was cleaned up (a worker's word
    late for its run) is dropped: the next run on it is not killed."""
    executor = executors("none")
    sandbox = executor.sandbox
    await executor.execute(run_of("true"))
    await until(lambda: sandbox.supervisors.idle == 1, 5.0, "the supervisor idle")
    (link,) = sandbox.supervisors._idle
    link.write(b"K\nT\n@1\n")  # for a run it no longer has
    out = Out()
    result = await executor.execute(run_of("sleep 0.3; echo alive", out))
    assert result.state == RunState.SUCCEEDED and out.stdout == "alive\n"
    assert sandbox.supervisors.forks == 1


async def test_a_supervisor_with_no_run_exits_after_a_while(
    executors: Executors, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(supervisor_client, "IDLE_TIMEOUT", 0.3)
    executor = executors("none")
    out = Out()
    await executor.execute(run_of("echo $PPID", out))
    supervisor = int(out.stdout)
    assert alive(supervisor)
    await until(lambda: not alive(supervisor), 5.0, "the idle supervisor gone")
    assert (await executor.execute(run_of("true"))).state == RunState.SUCCEEDED
    assert executor.sandbox.supervisors.forks == 2


async def test_closing_the_sandbox_ends_every_supervisor(executors: Executors) -> None:
    executor = executors("none")
    outs = [Out() for _ in range(3)]
    await asyncio.gather(*(executor.execute(run_of("echo $PPID; sleep 0.2", o)) for o in outs))
    pids = [int(o.stdout) for o in outs]
    assert all(alive(p) for p in pids)
    await executor.sandbox.close()
    await until(lambda: not any(alive(p) for p in pids), 5.0, "supervisors gone")


async def test_a_run_finds_its_directory_empty_whatever_the_last_run_left(
    executors: Executors, tmp_path: Path
) -> None:
    """The last run's directory, kept for the next, is emptied however it was left:
    files, a directory it may not enter, a link out, its ``tmp`` swapped for a link to
    another directory (which is left alone)."""
    executor = executors("none")
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("mine")
    messy = (
        'stat -c %i "$(dirname "$TMPDIR")"; touch "$TMPDIR/a"; mkdir "$TMPDIR/d"; touch "$TMPDIR/d/f"; chmod 000 "$TMPDIR/d"; '
        'ln -s / "$TMPDIR/root"; h=$(dirname "$TMPDIR"); touch "$h/top"; chmod 777 "$h"; '
        f'rm -rf "$TMPDIR"; ln -s {victim} "$TMPDIR"'
    )
    first = Out()
    assert (await executor.execute(run_of(messy, first))).state == RunState.SUCCEEDED
    await until(lambda: executor.sandbox.supervisors.idle == 1, 5.0, "idle")
    out = Out()
    look = 'test ! -L "$TMPDIR" && test -d "$TMPDIR" && ls -A "$TMPDIR" "$(dirname "$TMPDIR")"; '
    look += 'stat -c %a "$(dirname "$TMPDIR")" "$TMPDIR"; stat -c %i "$(dirname "$TMPDIR")"'
    assert (await executor.execute(run_of(look, out))).state == RunState.SUCCEEDED
    lines = out.stdout.split()
    assert lines.pop() == first.stdout.strip()  # the same directory, renamed
    assert "a" not in lines and "d" not in lines and "root" not in lines and "top" not in lines
    assert lines[-2:] == ["700", "700"]
    assert (victim / "keep").read_text() == "mine"
    assert executor.sandbox.supervisors.forks == 1


@needs_root
async def test_a_kept_directory_is_the_next_owners_alone(executors: Executors) -> None:
    """Runs of two owners on one supervisor: each finds its directory its own uid's,
    0700, with nothing of the other's (its result dir empty, its own too)."""
    executor = executors("none", run_as_range=(231000, 231999))
    seen = []
    for owner in ("a", "b", "a"):
        out = Out()
        script = (
            'touch "$HOME/$(id -u)"; ls -A "$HOME"; ls -A "$SHARDCRON_RESULT_DIR" | wc -l; '
            'stat -c "%u %a" "$HOME" "$TMPDIR" "$SHARDCRON_RESULT_DIR"; id -u'
        )
        result = await executor.execute(run_of(script, out, owner=owner))
        assert result.state == RunState.SUCCEEDED, result.error
        *listing, results, home_u, home_mode, tmp_u, tmp_mode, res_u, res_mode, uid = (
            out.stdout.split()
        )
        assert sorted(listing) == sorted([uid, "results", "tmp"]) and results == "0"
        assert home_u == tmp_u == res_u == uid and home_mode == tmp_mode == res_mode == "700"
        seen.append(uid)
        await until(lambda: executor.sandbox.supervisors.idle == 1, 5.0, "idle")
    assert seen[0] == seen[2] != seen[1]
    assert executor.sandbox.supervisors.forks == 1
