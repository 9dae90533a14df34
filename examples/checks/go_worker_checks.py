"""Live checks of the Go worker, driven through the Python SDK.

    python go_worker_checks.py --target HOST:PORT --worker-id ID --lease-ttl SECONDS CHECK

CHECK is one of the names in CHECKS. Exits 0 when the check passes, 1 otherwise,
printing what it saw. Every job it creates is a handler or command job that only
the Go worker can serve (no other worker is connected during the checks).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Callable
from datetime import timedelta

from shardcron.client import Client
from shardcron.client.types import (
    CommandTask,
    HandlerTask,
    JobSpec,
    RetryPolicy,
    Run,
    RunReason,
    RunState,
)

# For jobs whose failure is what a check expects: their retries (3 attempts by
# default) would run during the checks after it, on the one Go worker; one leased as
# the worker is frozen or killed is lost, and its next attempt lands on the restarted
# worker while the drain check counts what it holds.
ONE_ATTEMPT = RetryPolicy(max_attempts=1)


class CheckFailed(Exception):
    pass


def expect(cond: bool, what: str) -> None:
    if not cond:
        raise CheckFailed(what)


def first_run(c: Client, job_id: str) -> Run:
    runs = c.list_runs(job_id).items
    expect(len(runs) == 1, f"job {job_id} lists {len(runs)} runs, want 1")
    return runs[0]


def output_of(c: Client, run_id: str) -> bytes:
    return b"".join(ch.data for ch in c.read_output(run_id))


def wait_state(c: Client, run_id: str, state: RunState, timeout: float) -> Run:
    deadline = time.monotonic() + timeout
    while True:
        run = c.get_run(run_id)
        if run.state == state:
            return run
        expect(
            not run.is_final,
            f"run {run_id} ended {run.state} ({run.reason}: {run.error}) before {state}",
        )
        expect(
            time.monotonic() < deadline,
            f"run {run_id} still {run.state} after {timeout}s, want {state}",
        )
        time.sleep(0.05)


def show(run: Run, output: bytes) -> None:
    took = (
        (run.ended_at - run.started_at).total_seconds()
        if run.ended_at and run.started_at
        else float("nan")
    )
    print(
        f"  run {run.id}: {run.state} reason={run.reason or '-'} exit={run.exit_code} "
        f"worker={run.worker_id} token={run.lease_token:#x} ran {took:.2f}s error={run.error!r}"
    )
    print(f"  output: {output!r}")


def check_upper(c: Client, a: argparse.Namespace) -> None:
    """A handler job served by the Go worker ends SUCCEEDED with the handler's output."""
    job = c.create_job(
        JobSpec(name="go-upper", task=HandlerTask(name="upper", payload=b"shardcron"))
    )
    run = c.wait_run(first_run(c, job.id).id, timeout=30)
    out = output_of(c, run.id)
    show(run, out)
    expect(run.state == RunState.SUCCEEDED, f"state {run.state}, want SUCCEEDED")
    expect(out == b"SHARDCRON", f"output {out!r}, want b'SHARDCRON'")
    expect(run.worker_id == a.worker_id, f"ran on {run.worker_id!r}, want {a.worker_id!r}")
    expect(run.started_at is not None and run.ended_at is not None, "no start/end time")


def check_cancel(c: Client, a: argparse.Namespace) -> None:
    """Cancelling a running `sleep` handler run ends it CANCELLED at once."""
    job = c.create_job(JobSpec(name="go-cancel", task=HandlerTask(name="sleep", payload=b"60")))
    run = wait_state(c, first_run(c, job.id).id, RunState.RUNNING, 30)
    time.sleep(0.3)
    t0 = time.monotonic()
    final = c.cancel_run(run.id)  # returns once the worker has reported the run
    took = time.monotonic() - t0
    if not final.is_final:
        final = c.wait_run(run.id, timeout=15)
    out = output_of(c, run.id)
    show(final, out)
    print(f"  cancel answered in {took:.2f}s")
    expect(final.state == RunState.CANCELLED, f"state {final.state}, want CANCELLED")
    expect(
        final.reason == RunReason.CANCELLED_BY_USER,
        f"reason {final.reason}, want CANCELLED_BY_USER",
    )
    expect(took < 5, f"cancel took {took:.1f}s")
    expect(b"interrupted" in out, "the handler did not see its context cancelled")


def check_renew(c: Client, a: argparse.Namespace) -> None:
    """A handler running 2.5 lease TTLs keeps its lease by heartbeats and succeeds."""
    secs = 2.5 * a.lease_ttl
    job = c.create_job(
        JobSpec(name="go-renew", task=HandlerTask(name="sleep", payload=str(secs).encode()))
    )
    run = c.wait_run(first_run(c, job.id).id, timeout=secs + 30)
    out = output_of(c, run.id)
    show(run, out)
    expect(
        run.state == RunState.SUCCEEDED,
        f"state {run.state} ({run.reason}: {run.error}), want SUCCEEDED",
    )
    expect(run.attempt == 1, f"attempt {run.attempt}")
    expect(b"slept" in out, f"output {out!r}")


def check_fail(c: Client, a: argparse.Namespace) -> None:
    """A handler error ends the run FAILED (HANDLER_ERROR) with the error message."""
    job = c.create_job(
        JobSpec(name="go-fail", task=HandlerTask(name="fail", payload=b"boom"), retry=ONE_ATTEMPT)
    )
    run = c.wait_run(first_run(c, job.id).id, timeout=30)
    out = output_of(c, run.id)
    show(run, out)
    expect(run.state == RunState.FAILED, f"state {run.state}, want FAILED")
    expect(run.reason == RunReason.HANDLER_ERROR, f"reason {run.reason}, want HANDLER_ERROR")
    expect(run.error == "boom", f"error {run.error!r}, want 'boom'")


def check_command_timeout(c: Client, a: argparse.Namespace) -> None:
    """A command past its timeout is terminated (SIGTERM to its group): TIMED_OUT."""
    spec = JobSpec(
        name="go-timeout",
        task=CommandTask(argv=("sh", "-c", "echo started $SHARDCRON_ATTEMPT; sleep 30")),
        timeout=timedelta(seconds=1),
        retry=ONE_ATTEMPT,
    )
    job = c.create_job(spec)
    run = c.wait_run(first_run(c, job.id).id, timeout=30)
    out = output_of(c, run.id)
    show(run, out)
    expect(run.state == RunState.TIMED_OUT, f"state {run.state}, want TIMED_OUT")
    expect(run.reason == RunReason.TIMEOUT, f"reason {run.reason}, want TIMEOUT")
    expect(run.exit_code == -15, f"exit code {run.exit_code}, want -15 (SIGTERM)")
    expect(out == b"started 1\n", f"output {out!r}")


def check_cluster(c: Client, a: argparse.Namespace) -> None:
    """The poller lists the Go worker with its slots and handlers."""
    status = c.cluster_status()
    workers = {w.id: w for w in status.workers}
    expect(a.worker_id in workers, f"workers {sorted(workers)} lack {a.worker_id}")
    w = workers[a.worker_id]
    print(f"  worker {w.id}: slots {w.slots_used}/{w.slots_total} handlers {list(w.handlers)}")
    expect({"upper", "sleep"} <= set(w.handlers), f"handlers {w.handlers}")


def _alive(pid: int) -> bool:
    """Whether the process is running (a zombie, exited but not reaped, is not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _start_sleeping_command(c: Client, a: argparse.Namespace, name: str) -> tuple[str, Run, int]:
    """A command job whose `sleep 60` runs on the Go worker: (job id, run, its pid)."""
    expect(a.worker_pid > 0 and a.scratch, "--worker-pid and --scratch are required")
    pidfile = os.path.join(a.scratch, f"{name}.pid")
    script = f"echo $$ > {pidfile}.tmp && mv {pidfile}.tmp {pidfile} && exec sleep 60"
    job = c.create_job(JobSpec(name=name, task=CommandTask(argv=("sh", "-c", script))))
    run = wait_state(c, first_run(c, job.id).id, RunState.RUNNING, 30)
    deadline = time.monotonic() + 10
    while not os.path.exists(pidfile):
        expect(time.monotonic() < deadline, "the command never wrote its pid")
        time.sleep(0.05)
    with open(pidfile) as f:
        pid = int(f.read())
    expect(_alive(pid), f"command {pid} is not running")
    return job.id, run, pid


def _wait_dead(pid: int, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while _alive(pid):
        expect(time.monotonic() < deadline, f"command {pid} outlived {what} by {within}s")
        time.sleep(0.05)


def check_freeze(c: Client, a: argparse.Namespace) -> None:
    """SIGSTOP of the Go worker: its reaper kills the running command at the lease's
    deadline (the frozen worker cannot), before the poller takes the lease back; the
    run ends FAILED (WORKER_LOST) and no result of it comes after SIGCONT."""
    job_id, run, pid = _start_sleeping_command(c, a, "go-freeze")
    os.kill(a.worker_pid, signal.SIGSTOP)
    try:
        frozen = time.monotonic()
        _wait_dead(pid, a.lease_ttl + 1, "its lease with the worker frozen")
        print(f"  command {pid} killed {time.monotonic() - frozen:.2f}s after the freeze")
        final = c.wait_run(run.id, timeout=4 * a.lease_ttl + 10)
    finally:
        os.kill(a.worker_pid, signal.SIGCONT)
    show(final, output_of(c, run.id))
    expect(final.state == RunState.FAILED, f"state {final.state}, want FAILED")
    expect(final.reason == RunReason.WORKER_LOST, f"reason {final.reason}, want WORKER_LOST")
    _delete_and_settle(c, job_id, run.id)


def check_crash(c: Client, a: argparse.Namespace) -> None:
    """SIGKILL of the Go worker: its reaper kills the running command's process group
    at once, and the poller ends the run FAILED (WORKER_LOST) when the lease expires.
    (Kills the worker: the caller starts it again.)"""
    job_id, run, pid = _start_sleeping_command(c, a, "go-crash")
    os.kill(a.worker_pid, signal.SIGKILL)
    _wait_dead(pid, 3, "the killed worker")
    print(f"  command {pid} was killed with the worker")
    final = c.wait_run(run.id, timeout=4 * a.lease_ttl + 10)
    show(final, output_of(c, run.id))
    expect(final.state == RunState.FAILED, f"state {final.state}, want FAILED")
    expect(final.reason == RunReason.WORKER_LOST, f"reason {final.reason}, want WORKER_LOST")
    _delete_and_settle(c, job_id, run.id)


def _delete_and_settle(c: Client, job_id: str, lost_run_id: str) -> None:
    # A run lost with its worker is tried again whatever the job's retry policy
    # (coordinator/poller/fires.py WORKER_LOST_ATTEMPTS): left alone, attempt 2 (another
    # `sleep 60`) would be leased to the restarted worker and hold up the checks
    # after this one (a drain waits for it). Delete the job, cancelling what is left.
    c.delete_job(job_id, cancel_running=True)
    deadline = time.monotonic() + 10
    while True:
        runs = c.list_runs(job_id).items
        if all(r.is_final for r in runs):
            break
        expect(time.monotonic() < deadline, f"runs of the deleted job not final: {runs}")
        time.sleep(0.05)
    for r in runs:
        if r.id != lost_run_id:
            print(f"  attempt {r.attempt} ({r.id}) after the delete: {r.state} {r.reason or '-'}")


def _slots_used(c: Client, worker_id: str) -> int:
    return sum(w.slots_used for w in c.cluster_status().workers if w.id == worker_id)


def check_drain(c: Client, a: argparse.Namespace) -> None:
    """SIGTERM drains the Go worker: Credits 0, the running run finishes and is
    reported, then the worker exits and takes no new lease. (Stops the worker: run it last.)"""
    expect(a.worker_pid > 0, "--worker-pid is required")
    job = c.create_job(JobSpec(name="go-drain", task=HandlerTask(name="sleep", payload=b"1.5")))
    run = wait_state(c, first_run(c, job.id).id, RunState.RUNNING, 30)
    # The drain waits for every run the worker holds: it must hold this one only.
    used = _slots_used(c, a.worker_id)
    expect(used == 1, f"the worker holds {used} slots before the drain, want 1 (this run)")
    os.kill(a.worker_pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    while _alive(a.worker_pid):
        if time.monotonic() >= deadline:
            now = c.get_run(run.id)
            raise CheckFailed(
                f"the worker did not exit within 20s of SIGTERM (run {run.id} is {now.state}; "
                f"the worker holds {_slots_used(c, a.worker_id)} slots)"
            )
        time.sleep(0.05)
    final = c.get_run(run.id)
    show(final, output_of(c, run.id))
    expect(
        final.state == RunState.SUCCEEDED, f"state {final.state} ({final.reason}), want SUCCEEDED"
    )
    later = c.create_job(
        JobSpec(name="go-after-drain", task=HandlerTask(name="upper", payload=b"x"))
    )
    time.sleep(1.0)
    left = c.get_run(first_run(c, later.id).id)
    expect(
        left.state == RunState.PENDING,
        f"a job created after the drain is {left.state}, want PENDING",
    )
    c.delete_job(later.id)


CHECKS: dict[str, Callable[[Client, argparse.Namespace], None]] = {
    "cluster": check_cluster,
    "upper": check_upper,
    "cancel": check_cancel,
    "renew": check_renew,
    "fail": check_fail,
    "command-timeout": check_command_timeout,
    "freeze": check_freeze,
    "crash": check_crash,
    "drain": check_drain,
}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--target", required=True)
    p.add_argument("--worker-id", required=True)
    p.add_argument("--lease-ttl", type=float, default=10.0)
    p.add_argument(
        "--worker-pid", type=int, default=0, help="for the freeze, crash and drain checks"
    )
    p.add_argument(
        "--scratch", default="", help="a writable directory, for the freeze and crash checks"
    )
    p.add_argument("check", choices=sorted(CHECKS))
    a = p.parse_args()
    with Client(a.target, timeout=30) as c:
        try:
            CHECKS[a.check](c, a)
        except CheckFailed as e:
            print(f"  FAILED: {e}")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
