"""Policies end to end: queueing, starting deadlines, auto-pause, resources and labels."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from shardcron.client.types import (
    CommandTask,
    ConcurrencyPolicy,
    HandlerTask,
    JobSpec,
    JobState,
    OverlapPolicy,
    Resources,
    RunReason,
    RunState,
    Schedule,
)
from tests.e2e.harness import DevServer, start_worker
from tests.support.waiting import wait_until


def sh(script: str, **kw: object) -> JobSpec:
    return JobSpec(name="sh", task=CommandTask(argv=("sh", "-c", script)), **kw)  # type: ignore[arg-type]


def test_queue_waits_for_the_running_fire_and_skips_none(client) -> None:  # type: ignore[no-untyped-def]
    spec = sh(
        "sleep 1.5",
        schedule=Schedule.cron_expr("* * * * * *"),
        concurrency=ConcurrencyPolicy(max_concurrent=1, overlap=OverlapPolicy.QUEUE),
    )
    job = client.create_job(spec)
    runs = client.wait_job_runs(job.id, count=3, timeout=30)
    client.delete_job(job.id, cancel_running=True)
    done = sorted((r.started_at, r.ended_at) for r in runs if r.state == RunState.SUCCEEDED)
    assert len(done) >= 3
    for (_, end), (start, _) in zip(done, done[1:], strict=False):
        assert start >= end
    assert not [r for r in runs if r.state == RunState.SKIPPED]


def test_auto_pause_after_consecutive_failures(client) -> None:  # type: ignore[no-untyped-def]
    job = client.create_job(
        sh("exit 1", schedule=Schedule.cron_expr("* * * * * *"), pause_after_failures=2)
    )
    paused = wait_until(
        lambda: (j := client.get_job(job.id)).state == JobState.PAUSED and j, what="auto-pause"
    )
    assert "2 consecutive" in paused.pause_reason
    assert paused.consecutive_failures >= 2
    resumed = client.resume_job(job.id)
    assert resumed.state == JobState.ACTIVE and resumed.consecutive_failures == 0
    client.delete_job(job.id)


def test_a_run_that_cannot_start_before_its_deadline_is_missed(tmp_path: Path) -> None:
    server = DevServer(tmp_path / "data", extra=["--workers", "1", "--slots", "1"]).start()
    try:
        with server.client() as c:
            blocker = c.create_job(sh("sleep 3"))
            wait_until(
                lambda: c.list_runs(blocker.id).items[0].state == RunState.RUNNING, what="blocker"
            )
            late = c.create_job(sh("true", starting_deadline=timedelta(seconds=1)))
            [run] = c.wait_job_runs(late.id, count=1, timeout=20)
            assert (run.state, run.reason) == (RunState.MISSED, RunReason.DEADLINE)
            assert run.started_at is None
    finally:
        server.stop()


def test_runs_go_only_to_workers_that_fit(tmp_path: Path) -> None:
    server = DevServer(tmp_path / "data", extra=["--workers", "0"]).start()
    small = start_worker(
        server.target, tmp_path / "a.log", "--id", "small", "--slots", "1", "--label", "zone=a"
    )
    big = start_worker(
        server.target,
        tmp_path / "b.log",
        "--id",
        "big",
        "--slots",
        "4",
        "--label",
        "zone=b",
        "--memory",
        "4096",
    )
    try:
        with server.client() as c:
            wait_until(lambda: len(c.cluster_status().workers) == 2, what="two workers")
            zone_a = c.create_job(
                JobSpec(
                    name="a",
                    task=HandlerTask(name="noop"),
                    resources=Resources(labels={"zone": "a"}),
                )
            )
            memory = c.create_job(
                JobSpec(
                    name="m", task=HandlerTask(name="noop"), resources=Resources(memory_mb=2048)
                )
            )
            wide = c.create_job(
                JobSpec(name="w", task=HandlerTask(name="noop"), resources=Resources(slots=3))
            )
            nowhere = c.create_job(
                JobSpec(
                    name="x",
                    task=HandlerTask(name="noop"),
                    resources=Resources(labels={"zone": "c"}),
                )
            )
            assert c.wait_job_runs(zone_a.id, count=1, timeout=20)[0].worker_id == "small"
            assert c.wait_job_runs(memory.id, count=1, timeout=20)[0].worker_id == "big"
            assert c.wait_job_runs(wide.id, count=1, timeout=20)[0].worker_id == "big"
            # no worker carries zone=c: the run waits, it is not leased anywhere
            [waiting] = c.list_runs(nowhere.id).items
            assert waiting.state == RunState.PENDING
            status = c.cluster_status()
            assert sum(w.slots_used for w in status.workers) == 0  # every slot given back
    finally:
        small.stop()
        big.stop()
        server.stop()
