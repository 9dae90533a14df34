"""Late/missed fire reasons on a real ``shardcron dev`` (one in-process worker, one
slot): a run whose worker pool is full, whose job is paused, and whose previous run
still runs says why it did not run on time, through the SDK, the HTTP JSON and
``shardcron run get``/``run list``."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from shardcron.client.sdk import Client
from shardcron.client.types import (
    FINAL_RUN_STATES,
    CommandTask,
    ConcurrencyPolicy,
    JobSpec,
    LateReason,
    OverlapPolicy,
    Run,
    RunReason,
    RunState,
    Schedule,
)
from tests.e2e.harness import DevServer
from tests.support.http_client import HttpApi
from tests.support.waiting import wait_until

EVERY_SECOND = Schedule.cron_expr("* * * * * *")


def sh(script: str, **kw: object) -> JobSpec:
    return JobSpec(name="sh", task=CommandTask(argv=("sh", "-c", script)), **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    server = DevServer(
        tmp_path_factory.mktemp("late") / "data", extra=["--workers", "1", "--slots", "1"]
    ).start()
    yield server
    server.stop()


def final_run_where(c: Client, job_id: str, what: str, pred: object) -> Run:
    def found() -> Run | None:
        return next((r for r in c.iter_runs(job_id, states=FINAL_RUN_STATES) if pred(r)), None)  # type: ignore[operator]

    return wait_until(found, timeout=60, what=what)


def test_a_run_whose_worker_pool_is_full_says_it_waited_for_a_free_slot(
    dev: DevServer, tmp_path: Path
) -> None:
    owner = "late-pool"
    with dev.client(owner) as c:
        blocker = c.create_job(sh("sleep 4"))
        wait_until(
            lambda: c.list_runs(blocker.id).items[0].state == RunState.RUNNING, what="blocker"
        )
        late = c.create_job(sh("true"))
        [run] = c.wait_job_runs(late.id, count=1, timeout=60)
        c.delete_job(blocker.id, cancel_running=True)
    assert run.state == RunState.SUCCEEDED
    lateness = run.lateness
    assert lateness is not None, run
    assert lateness.reason == LateReason.NO_FREE_SLOT
    assert lateness.text.startswith("leased ")
    assert "waiting for a free slot for " in lateness.text
    assert timedelta(0) < lateness.waited
    assert run.started_at is not None and run.started_at - run.due_at >= lateness.waited

    status, body = HttpApi(dev.http_url, owner=owner).call("GET", f"/v1/runs/{run.id}")
    assert status == 200
    assert body["lateness"]["reason"] == "LATE_REASON_NO_FREE_SLOT"
    assert body["lateness"]["text"] == lateness.text
    shown = dev.cli("run", "get", run.id, owner=owner).stdout
    assert f"{lateness.text} [NO_FREE_SLOT]" in shown
    listed = dev.cli("run", "list", late.id, owner=owner).stdout
    assert "late: NO_FREE_SLOT" in listed


def test_a_fire_of_a_paused_job_is_skipped_and_says_paused(dev: DevServer) -> None:
    owner = "late-paused"
    with dev.client(owner) as c:
        job = c.create_job(sh("true", schedule=EVERY_SECOND))
        c.pause_job(job.id)
        run = final_run_where(
            c, job.id, "a fire skipped as paused", lambda r: r.reason == RunReason.PAUSED
        )
        c.delete_job(job.id)
    assert run.state == RunState.SKIPPED
    assert run.lateness is not None
    assert (run.lateness.reason, run.lateness.text) == (LateReason.PAUSED, "paused")
    status, body = HttpApi(dev.http_url, owner=owner).call("GET", f"/v1/runs/{run.id}")
    assert status == 200 and body["lateness"]["reason"] == "LATE_REASON_PAUSED"


def test_a_fire_whose_previous_run_still_runs_says_so(dev: DevServer) -> None:
    """FORBID skips the fire, naming the run still going; QUEUE starts it late, after
    it, and says what it waited for."""
    owner = "late-overlap"
    with dev.client(owner) as c:
        forbid = c.create_job(
            sh(
                "sleep 3",
                schedule=EVERY_SECOND,
                concurrency=ConcurrencyPolicy(overlap=OverlapPolicy.FORBID),
            )
        )
        skipped = final_run_where(
            c, forbid.id, "a fire skipped for overlap", lambda r: r.reason == RunReason.OVERLAP
        )
        c.delete_job(forbid.id, cancel_running=True)
        runs = {r.id for r in c.iter_runs(forbid.id)}
        queue = c.create_job(
            sh(
                "sleep 2.5",
                schedule=EVERY_SECOND,
                concurrency=ConcurrencyPolicy(max_concurrent=1, overlap=OverlapPolicy.QUEUE),
            )
        )
        queued = final_run_where(
            c,
            queue.id,
            "a queued run that ran late",
            lambda r: r.state == RunState.SUCCEEDED and r.lateness is not None,
        )
        c.delete_job(queue.id, cancel_running=True)
    assert skipped.state == RunState.SKIPPED and skipped.lateness is not None
    assert skipped.lateness.reason == LateReason.OVERLAP
    text = skipped.lateness.text
    assert text.startswith("overlap: previous run ") and text.endswith(" still running (FORBID)")
    previous = text.removeprefix("overlap: previous run ").removesuffix(" still running (FORBID)")
    assert previous in runs and previous != skipped.id

    assert queued.lateness is not None
    assert queued.lateness.reason == LateReason.OVERLAP
    assert " still running (QUEUE) for " in queued.lateness.text
