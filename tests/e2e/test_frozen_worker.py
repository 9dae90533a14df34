"""A frozen worker, with real processes: SIGSTOP the whole process group of the
worker running a job's command (the worker and its fork server), and every other
process it started outside a run's cage, for four lease TTLs.

The lease lapses while the worker is frozen and the run is retried on the other
worker. What must hold: the frozen worker's command is killed at its lease deadline
(by the run's supervisor, which is in the run's cage and session, not the worker's
group, on its own clock), before the next attempt starts; the retry goes to the
healthy worker; after SIGCONT nothing of the frozen worker runs again. The commands
record their own executions.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from shardcron.client.types import CommandTask, JobSpec, RetryPolicy, Run, RunReason, RunState
from tests.e2e.harness import DevServer, start_worker
from tests.support.processes import alive, descendants, in_a_run_cage
from tests.support.waiting import wait_until

LEASE_TTL = 2.0
JOBS = 4
COMMAND_SECONDS = 10  # far longer than a lease: only a kill ends it while frozen


@dataclass
class Execution:
    job_id: str
    token: int
    pid: int
    start: float
    end: float | None = None  # None: no end record (killed)


def record_command(records: Path) -> CommandTask:
    fields = "$SHARDCRON_JOB_ID $SHARDCRON_FENCING_TOKEN $$ $(date +%s.%N)"
    script = (
        f'echo "start {fields}" >> {records}; sleep {COMMAND_SECONDS}; '
        f'echo "end {fields}" >> {records}'
    )
    return CommandTask(argv=("sh", "-c", script))


def freeze(worker: int) -> list[int]:
    """SIGSTOPs the worker's process group and every other process it started but those
    in a run's cage (a helper outside the group, as its reaper was, is frozen too: as in
    a worker whose whole cgroup or machine is frozen); the others it stopped."""
    os.killpg(worker, signal.SIGSTOP)
    others = [p for p in descendants(worker) if not in_a_run_cage(p)]
    for pid in others:
        os.kill(pid, signal.SIGSTOP)
    return others


def thaw(worker: int, others: list[int]) -> None:
    for pid in others:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    os.killpg(worker, signal.SIGCONT)


def read_executions(records: Path) -> list[Execution]:
    executions: dict[tuple[str, int], Execution] = {}
    for line in records.read_text().splitlines():
        kind, job_id, token, pid, at = line.split()
        key = (job_id, int(token))
        if kind == "start":
            executions[key] = Execution(job_id, int(token), int(pid), float(at))
        else:
            executions[key].end = float(at)
    return list(executions.values())


def test_a_frozen_worker_never_makes_two_attempts_overlap(tmp_path: Path) -> None:
    """Once: attempts 2 and 3 ran at once after SIGCONT, the retry having gone first to
    the frozen worker (its stream still open), whose leases then counted their TTL from
    when they reached it; and a worker frozen with its reaper (one process group) left
    its commands running past their leases. Now its commands die at their lease
    deadline while it is frozen, its stream is closed, and each job ends SUCCEEDED on
    the healthy worker."""
    server = DevServer(
        tmp_path / "data", extra=["--workers", "0", "--lease-ttl", f"{LEASE_TTL:g}s"]
    ).start()
    records = tmp_path / "records"
    records.touch()
    frozen = start_worker(server.target, tmp_path / "frozen.log", "--id", "frozen", "--slots", "8")
    healthy = None
    frozen_too: list[int] = []
    try:
        with server.client("frozen") as c:
            jobs = [
                c.create_job(
                    JobSpec(
                        name=f"records-{i}",
                        task=record_command(records),
                        retry=RetryPolicy(max_attempts=3),
                    )
                )
                for i in range(JOBS)
            ]
            wait_until(
                lambda: len(read_executions(records)) == JOBS, 30, "every job running on one"
            )
            first = read_executions(records)
            healthy = start_worker(
                server.target, tmp_path / "healthy.log", "--id", "healthy", "--slots", "8"
            )
            wait_until(
                lambda: {w.id for w in c.cluster_status().workers} == {"frozen", "healthy"},
                30,
                "both workers connected",
            )
            frozen_too = freeze(frozen.pid)
            stopped_at = time.time()
            died_at: dict[int, float] = {}
            while len(died_at) < JOBS and time.time() - stopped_at < 3 * LEASE_TTL:
                for e in first:
                    if e.pid not in died_at and not alive(e.pid):
                        died_at[e.pid] = time.time()
                time.sleep(0.01)
            assert len(died_at) == JOBS, "the frozen worker's commands outlived their leases"
            assert max(died_at.values()) - stopped_at < LEASE_TTL + 1.0
            # wake it once the retries are under way on the healthy worker, after 4 TTLs
            wait_until(lambda: len(read_executions(records)) >= 2 * JOBS, 30, "the retries running")
            time.sleep(max(0.0, stopped_at + 4 * LEASE_TTL - time.time()))
            thaw(frozen.pid, frozen_too)

            def succeeded(job_id: str) -> list[Run] | None:
                runs = c.list_runs(job_id).items
                return runs if any(r.state == RunState.SUCCEEDED for r in runs) else None

            finals = {
                job.id: wait_until(lambda j=job.id: succeeded(j), 60, "a success")  # type: ignore[misc]
                for job in jobs
            }
            time.sleep(LEASE_TTL)  # anything the woken worker would still do, it does now
            executions = read_executions(records)
    finally:
        thaw(frozen.pid, frozen_too)
        frozen.stop()
        if healthy is not None:
            healthy.stop()
        server.stop()

    for job in jobs:
        runs = sorted(finals[job.id], key=lambda r: r.attempt)
        lost, done = runs[0], runs[-1]
        assert (lost.state, lost.reason, lost.worker_id) == (
            RunState.FAILED,
            RunReason.WORKER_LOST,
            "frozen",
        )
        assert (done.state, done.worker_id) == (RunState.SUCCEEDED, "healthy"), runs
        assert len(runs) == 2, f"one lost attempt, one success: {runs}"

    overlapping = 0
    for job in jobs:
        spans = sorted(
            (e.start, e.end if e.end is not None else died_at[e.pid])
            for e in executions
            if e.job_id == job.id
        )
        overlapping += sum(
            1 for (_, end), (start, _) in zip(spans, spans[1:], strict=False) if start < end
        )
    killed_after_stop = sorted(at - stopped_at for at in died_at.values())
    print(
        f"overlapping executions: {overlapping} of {len(executions)}; the frozen worker's "
        f"commands died {killed_after_stop[0]:.2f}-{killed_after_stop[-1]:.2f}s after SIGSTOP "
        f"of its process group for {4 * LEASE_TTL:g}s (lease TTL {LEASE_TTL:g}s)"
    )
    assert overlapping == 0
    assert len(executions) == 2 * JOBS
    assert all(e.end is None for e in executions if e.pid in died_at)
    assert not any(alive(e.pid) for e in executions)
