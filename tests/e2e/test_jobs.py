"""End to end through the SDK against ``shardcron dev`` started as a real process.

Each test has an owner of its own on one shared dev server (2 in-process
workers, 8 slots each, 3 s leases).
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from shardcron.client.errors import FailedPrecondition, InvalidArgument, NotFound, VersionConflict
from shardcron.client.types import (
    CommandTask,
    ConcurrencyPolicy,
    HandlerTask,
    JobSpec,
    JobState,
    OverlapPolicy,
    RetryPolicy,
    RunReason,
    RunState,
    Schedule,
)
from tests.support.containment import shared_dir
from tests.support.waiting import wait_until


def now() -> datetime:
    return datetime.now(UTC)


def sh(script: str, **kw: object) -> JobSpec:
    return JobSpec(name="sh", task=CommandTask(argv=("sh", "-c", script)), **kw)  # type: ignore[arg-type]


def output_of(client, run_id: str) -> bytes:  # type: ignore[no-untyped-def]
    return b"".join(c.data for c in client.read_output(run_id))


def test_immediate_command_runs_with_its_environment(client) -> None:  # type: ignore[no-untyped-def]
    job = client.create_job(
        sh('echo "run=$SHARDCRON_RUN_ID attempt=$SHARDCRON_ATTEMPT token=$SHARDCRON_FENCING_TOKEN"')
    )
    [run] = client.wait_job_runs(job.id, count=1, timeout=20)
    assert run.state == RunState.SUCCEEDED
    assert run.exit_code == 0
    text = output_of(client, run.id).decode()
    assert f"run={run.id} attempt=1 token={run.lease_token}" in text
    assert run.lease_token > 0
    assert wait_until(
        lambda: client.get_job(job.id).state == JobState.COMPLETED, what="job COMPLETED"
    )


def test_handler_job_echoes_its_payload(client) -> None:  # type: ignore[no-untyped-def]
    job = client.create_job(
        JobSpec(name="echo", task=HandlerTask(name="echo", payload=b"hello handler"))
    )
    [run] = client.wait_job_runs(job.id, count=1, timeout=20)
    assert run.state == RunState.SUCCEEDED
    assert output_of(client, run.id) == b"hello handler"


def test_at_job_waits_for_its_time(client) -> None:  # type: ignore[no-untyped-def]
    at = now() + timedelta(seconds=2)
    job = client.create_job(sh("true", schedule=Schedule.once_at(at)))
    time.sleep(1)
    assert client.list_runs(job.id).items[0].state == RunState.PENDING
    [run] = client.wait_job_runs(job.id, count=1, timeout=20)
    assert run.state == RunState.SUCCEEDED
    assert run.started_at is not None and run.started_at >= at


def test_cron_with_seconds_fires_every_second(client) -> None:  # type: ignore[no-untyped-def]
    job = client.create_job(sh("true", schedule=Schedule.cron_expr("* * * * * *")))
    runs = client.wait_job_runs(job.id, count=3, timeout=20)
    fires = sorted(r.fire_at for r in runs)
    assert all(f.microsecond == 0 for f in fires)
    assert len(set(fires)) == len(fires)  # never twice for one fire
    client.delete_job(job.id)


def test_interval_fires_from_its_anchor(client) -> None:  # type: ignore[no-untyped-def]
    anchor = now().replace(microsecond=0) + timedelta(seconds=1)
    job = client.create_job(
        sh("true", schedule=Schedule.every(timedelta(seconds=2), anchor=anchor))
    )
    runs = client.wait_job_runs(job.id, count=2, timeout=20)
    for r in runs:
        assert (r.fire_at - anchor).total_seconds() % 2 == 0
    client.delete_job(job.id)


def test_retries_back_off_then_dead_letter_and_replay(client) -> None:  # type: ignore[no-untyped-def]
    retry = RetryPolicy(max_attempts=3, initial_backoff=timedelta(seconds=1), multiplier=2.0)
    job = client.create_job(sh("exit 3", retry=retry))
    runs = sorted(client.wait_job_runs(job.id, count=3, timeout=30), key=lambda r: r.attempt)
    assert [r.attempt for r in runs] == [1, 2, 3]
    assert all(
        r.state == RunState.FAILED and r.reason == RunReason.NON_ZERO_EXIT and r.exit_code == 3
        for r in runs
    )
    assert runs[1].due_at - runs[0].ended_at >= timedelta(seconds=1)  # type: ignore[operator]
    assert runs[2].due_at - runs[1].ended_at >= timedelta(seconds=2)  # type: ignore[operator]
    assert [r.dead_letter for r in runs] == [False, False, True]
    dead = client.list_dead_letters(job_id=job.id).items
    assert [r.id for r in dead] == [runs[2].id]
    [replay] = client.replay_dead_letters(run_ids=[runs[2].id])
    assert replay.replayed_from == runs[2].id
    assert client.wait_run(replay.id, timeout=20).state == RunState.FAILED
    # the replay gets the retry policy afresh: its last attempt is the new dead letter
    [again] = wait_until(
        lambda: client.list_dead_letters(job_id=job.id).items, timeout=30, what="new dead letter"
    )
    assert again.id != runs[2].id and again.replayed_from == runs[2].id and again.attempt == 3


def test_timeout_kills_the_command_and_its_grandchildren(client) -> None:  # type: ignore[no-untyped-def]
    # the command runs as its owner's user (dev as root): it writes the pid where it may
    with shared_dir() as shared:
        pidfile = shared / "grandchild.pid"
        job = client.create_job(
            sh(f"sleep 300 & echo $! > {pidfile}; sleep 300", timeout=timedelta(seconds=1))
        )
        [run] = client.wait_job_runs(job.id, count=1, timeout=30)
        assert run.state == RunState.TIMED_OUT
        assert run.reason == RunReason.TIMEOUT
        pid = int(pidfile.read_text())
    assert wait_until(lambda: not _alive(pid), timeout=10, what="grandchild gone")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead too
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_cancel_a_running_run(client) -> None:  # type: ignore[no-untyped-def]
    job = client.create_job(sh("echo started; sleep 60"))
    run = wait_until(
        lambda: next(
            (r for r in client.list_runs(job.id).items if r.state == RunState.RUNNING), None
        ),
        what="RUNNING",
    )
    client.cancel_run(run.id)
    final = client.wait_run(run.id, timeout=20)
    assert final.state == RunState.CANCELLED
    assert final.reason == RunReason.CANCELLED_BY_USER
    with pytest.raises(FailedPrecondition):
        client.cancel_run(run.id)


def test_cancel_a_pending_run(client) -> None:  # type: ignore[no-untyped-def]
    job = client.create_job(sh("true", schedule=Schedule.once_at(now() + timedelta(hours=1))))
    [run] = client.list_runs(job.id).items
    cancelled = client.cancel_run(run.id)
    assert cancelled.state == RunState.CANCELLED
    assert client.get_run(run.id).state == RunState.CANCELLED


def test_forbid_skips_fires_while_one_runs(client) -> None:  # type: ignore[no-untyped-def]
    spec = sh(
        "sleep 2.5",
        schedule=Schedule.cron_expr("* * * * * *"),
        concurrency=ConcurrencyPolicy(max_concurrent=1, overlap=OverlapPolicy.FORBID),
    )
    job = client.create_job(spec)
    runs = client.wait_job_runs(job.id, count=6, timeout=30)
    client.delete_job(job.id, cancel_running=True)
    skipped = [r for r in runs if r.state == RunState.SKIPPED]
    done = [r for r in runs if r.state == RunState.SUCCEEDED]
    assert skipped and all(r.reason == RunReason.OVERLAP for r in skipped)
    assert done
    intervals = sorted((r.started_at, r.ended_at) for r in done)
    for (_, end), (start, _) in zip(intervals, intervals[1:], strict=False):
        assert start >= end  # never two at once


def test_replace_cancels_the_running_one(client) -> None:  # type: ignore[no-untyped-def]
    spec = sh(
        "sleep 30",
        schedule=Schedule.cron_expr("* * * * * */2"),
        concurrency=ConcurrencyPolicy(max_concurrent=1, overlap=OverlapPolicy.REPLACE),
    )
    job = client.create_job(spec)
    runs = client.wait_job_runs(job.id, count=2, timeout=30)
    client.delete_job(job.id, cancel_running=True)
    assert any(r.state == RunState.CANCELLED and r.reason == RunReason.REPLACED for r in runs)


def test_pause_skips_fires_and_resume_continues(client) -> None:  # type: ignore[no-untyped-def]
    job = client.create_job(sh("true", schedule=Schedule.cron_expr("* * * * * *")))
    client.wait_job_runs(job.id, count=1, timeout=20)
    paused = client.pause_job(job.id)
    assert paused.state == JobState.PAUSED
    time.sleep(2.5)
    runs = client.list_runs(job.id, page_size=100).items
    assert any(r.state == RunState.SKIPPED and r.reason == RunReason.PAUSED for r in runs)
    client.resume_job(job.id)
    before = {r.id for r in runs}
    wait_until(
        lambda: any(
            r.state == RunState.SUCCEEDED and r.id not in before
            for r in client.list_runs(job.id).items
        ),
        what="a run after resume",
    )
    client.delete_job(job.id)


def test_paused_one_off_job_runs_after_resume(client) -> None:  # type: ignore[no-untyped-def]
    job = client.create_job(sh("true", schedule=Schedule.once_at(now() + timedelta(seconds=1))))
    client.pause_job(job.id)
    time.sleep(2)
    [run] = client.list_runs(job.id).items
    assert run.state == RunState.PENDING
    client.resume_job(job.id)
    assert client.wait_run(run.id, timeout=20).state == RunState.SUCCEEDED


def test_update_with_expected_version_reschedules(client) -> None:  # type: ignore[no-untyped-def]
    job = client.create_job(sh("true", schedule=Schedule.once_at(now() + timedelta(hours=1))))
    with pytest.raises(VersionConflict):
        client.update_job(job.id, job.spec, expected_version=job.version + 5)
    soon = job.spec.replace(schedule=Schedule.once_at(now() + timedelta(seconds=1)))
    updated = client.update_job(job.id, soon, expected_version=job.version)
    assert updated.version == job.version + 1
    runs = client.wait_job_runs(job.id, count=2, timeout=20)
    states = sorted((r.state, r.reason) for r in runs)
    assert (RunState.SUCCEEDED, RunReason.NONE) in states
    assert (RunState.CANCELLED, RunReason.SUPERSEDED) in states


def test_run_now_and_delete(client) -> None:  # type: ignore[no-untyped-def]
    job = client.create_job(sh("true", schedule=Schedule.cron_expr("0 0 1 1 *")))
    run = client.run_job_now(job.id)
    assert client.wait_run(run.id, timeout=20).state == RunState.SUCCEEDED
    deleted = client.delete_job(job.id)
    assert deleted.state == JobState.DELETED
    assert job.id not in {j.id for j in client.list_jobs().items}
    with pytest.raises(FailedPrecondition):
        client.run_job_now(job.id)


def test_follow_output_streams_until_the_run_ends(client) -> None:  # type: ignore[no-untyped-def]
    job = client.create_job(sh("for i in 1 2 3; do echo line$i; sleep 0.3; done"))
    run = wait_until(lambda: next(iter(client.list_runs(job.id).items), None), what="run")
    chunks = list(client.read_output(run.id, follow=True))
    assert chunks[-1].eof
    assert b"".join(c.data for c in chunks) == b"line1\nline2\nline3\n"


def test_idempotent_create_returns_the_same_job(client) -> None:  # type: ignore[no-untyped-def]
    first, created = client.create_job_ex(sh("true"), idempotency_key="order-42")
    again, created_again = client.create_job_ex(sh("true"), idempotency_key="order-42")
    assert created and not created_again
    assert again.id == first.id
    client.wait_job_runs(first.id, count=1, timeout=20)
    assert len(client.list_runs(first.id).items) == 1


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (JobSpec(name="x", task=CommandTask(argv=())), "spec.task.command.argv"),
        (sh("true", schedule=Schedule.cron_expr("61 * * * *")), "spec.schedule.cron"),
        (
            sh("true", schedule=Schedule.cron_expr("0 9 * * *", timezone="Mars/Olympus")),
            "spec.schedule.timezone",
        ),
        (sh("true", schedule=Schedule.every(timedelta(seconds=-5))), "spec.schedule.interval"),
        (sh("true", timeout=timedelta(seconds=-1)), "spec.timeout"),
        (
            JobSpec(name="x", task=HandlerTask(name="echo", payload=b"x" * (2 << 20))),
            "spec.task.handler.payload",
        ),
        (sh("true", retry=RetryPolicy(max_attempts=-1)), "spec.retry.max_attempts"),
        (JobSpec(name="", task=CommandTask(argv=("true",))), "spec.name"),
    ],
)
def test_bad_input_is_rejected_naming_the_field(client, spec: JobSpec, field: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidArgument) as err:
        client.create_job(spec)
    assert err.value.field == field
    assert err.value.reason
    assert client.list_jobs().items == []  # nothing was written


def test_bad_page_token_and_unknown_ids(client) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidArgument) as err:
        client.list_jobs(page_token="garbage!")
    assert err.value.field == "page_token"
    with pytest.raises(NotFound):
        client.get_job("0190f0f0-0000-7000-8000-000000000000")
    with pytest.raises(NotFound):
        client.get_run("0190f0f0-0000-8000-8000-000000000000")


def test_owners_do_not_see_each_other(dev) -> None:  # type: ignore[no-untyped-def]
    with dev.client("alice") as alice, dev.client("bob") as bob:
        job = alice.create_job(sh("true", schedule=Schedule.once_at(now() + timedelta(hours=1))))
        with pytest.raises(NotFound):
            bob.get_job(job.id)
        assert job.id not in {j.id for j in bob.list_jobs().items}
        with pytest.raises(NotFound):
            bob.delete_job(job.id)


def test_priority_orders_due_runs_when_workers_are_saturated(tmp_path: Path) -> None:
    from tests.e2e.harness import DevServer

    server = DevServer(tmp_path / "data", extra=["--workers", "1", "--slots", "1"]).start()
    try:
        with server.client() as c:
            blocker = c.create_job(sh("sleep 2"))
            wait_until(
                lambda: c.list_runs(blocker.id).items[0].state == RunState.RUNNING,
                what="blocker running",
            )
            jobs = [c.create_job(sh("true", priority=p)) for p in (1, 5, 3, 9, 7)]
            started = []
            for job in jobs:
                [run] = c.wait_job_runs(job.id, count=1, timeout=30)
                started.append((run.started_at, job.spec.priority))
            assert [p for _, p in sorted(started)] == [9, 7, 5, 3, 1]
    finally:
        server.stop()


def test_metrics_show_lag_and_final_states(dev, client) -> None:  # type: ignore[no-untyped-def]
    job = client.create_job(sh("true"))
    client.wait_job_runs(job.id, count=1, timeout=20)
    text = dev.metrics()
    assert "shardcron_schedule_lag_seconds_count" in text
    assert 'shardcron_runs_final_total{reason="NONE",state="SUCCEEDED"}' in text
    assert "shardcron_worker_slots" in text
    assert 'shardcron_worker_runs_total{outcome="SUCCEEDED"}' in text  # its in-process worker
