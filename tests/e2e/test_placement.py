"""Placement on a real ``shardcron dev``: runs nobody can take wait aside, saying why,
and never hold up the runs the workers can take."""

from __future__ import annotations

import json
import time

from shardcron.client.types import CommandTask, HandlerTask, JobSpec, RunState
from tests.e2e.harness import DevServer
from tests.support.waiting import wait_until

NOBODY = "nobody-serves-this"
WHY = f"no connected worker serves handler {NOBODY}"


def test_runs_nobody_can_take_never_delay_runs_that_can(dev: DevServer) -> None:
    """100 runs naming a handler no worker serves used to keep another owner's
    ``true`` job PENDING for over 30 s. The victim must now start at once."""
    with dev.client("mallory") as mallory, dev.client("victim") as victim:
        poison = mallory.create_jobs(
            [JobSpec(name=f"p{i}", task=HandlerTask(name=NOBODY), priority=9) for i in range(100)]
        )
        first = poison[0].id
        wait_until(
            lambda: mallory.list_runs(first).items[0].waiting_reason == WHY,
            what="the poison runs due and waiting",
        )
        submitted = time.monotonic()
        job = victim.create_job(JobSpec(name="victim", task=CommandTask(argv=("true",))))
        [run] = victim.wait_job_runs(job.id, count=1, timeout=30)
        lag = time.monotonic() - submitted
        assert run.state == RunState.SUCCEEDED
        assert lag < 5.0, f"the victim started {lag:.1f}s after it was submitted"
        gauge = 'shardcron_waiting_runs{reason="no_worker_for_handler"} 100.0'
        wait_until(lambda: gauge in dev.metrics(), what="the waiting runs counted")
        for j in poison:
            mallory.delete_job(j.id)


def test_a_waiting_run_says_why(dev: DevServer) -> None:
    o = "why"
    job_id = dev.cli(
        "job", "create", "-q", "gpu", "--require-label", "gpu=a100", "--", "true", owner=o
    ).stdout.strip()

    def waiting() -> str:
        [run] = json.loads(dev.cli("--json", "run", "list", job_id, owner=o).stdout)
        return run["waiting_reason"]

    assert wait_until(waiting, what="a waiting reason") == "no worker has label gpu=a100"
    table = dev.cli("run", "list", job_id, owner=o).stdout
    assert "no worker has label gpu=a100" in table
    with dev.client(o) as c:
        [run] = c.list_runs(job_id).items
        assert run.state == RunState.PENDING
        assert c.get_run(run.id).waiting_reason == "no worker has label gpu=a100"
    shown = dev.cli("run", "get", run.id, owner=o).stdout
    assert "no worker has label gpu=a100" in shown
    dev.cli("job", "delete", job_id, owner=o)
